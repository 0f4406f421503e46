//! A broker whose responses announce arrays far larger than their bytes (K1 in
//! docs/hardening.md): kroute must refuse them before allocating, stay up, keep its memory,
//! and go on serving once the broker answers sanely again.
//!
//! The broker is a fake one in this process ([`FakeBroker`]) standing for nodes 1-3: it answers
//! ApiVersions and Metadata, correctly until it is armed, then with Metadata bodies whose
//! broker array claims 2^31 - 1 entries in a few bytes. kroute meets those on both of its
//! paths: a client's Metadata, which it decodes to rewrite the addresses, and its own metadata
//! refresh. kafka-protocol 0.18 as released sizes the array from the count before reading it
//! (about 170 GB here), the allocator refuses, and Rust aborts the whole process.

mod common;

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use common::*;
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::metadata_response::MetadataResponseBroker;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, BrokerId, MetadataRequest, MetadataResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

/// The line kroute logs when its own metadata refresh fails.
const REFRESH_FAILED: &str = "metadata refresh failed on every known broker";
/// The line kroute logs when it cannot rewrite a response for a client.
const CANNOT_REWRITE: &str = "cannot rewrite Metadata";

/// A broker in this process, for nodes 1-3 at one address.
struct FakeBroker {
    addr: String,
    /// Answer Metadata with a hostile body.
    hostile: Arc<AtomicBool>,
    /// Hostile answers sent so far.
    hostile_sent: Arc<AtomicU32>,
}

impl FakeBroker {
    fn start() -> FakeBroker {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind fake broker");
        let addr = listener
            .local_addr()
            .expect("fake broker address")
            .to_string();
        let hostile = Arc::new(AtomicBool::new(false));
        let hostile_sent = Arc::new(AtomicU32::new(0));
        let (h, sent, own) = (hostile.clone(), hostile_sent.clone(), addr.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().map_while(Result::ok) {
                let (h, sent, own) = (h.clone(), sent.clone(), own.clone());
                std::thread::spawn(move || serve(stream, &own, &h, &sent));
            }
        });
        FakeBroker {
            addr,
            hostile,
            hostile_sent,
        }
    }
}

/// Answers requests on one connection until the peer goes or asks something unexpected.
fn serve(mut stream: TcpStream, own: &str, hostile: &AtomicBool, hostile_sent: &AtomicU32) {
    while let Some(payload) = read_frame(&mut stream) {
        if payload.len() < 8 {
            return;
        }
        let api_key = i16::from_be_bytes([payload[0], payload[1]]);
        let version = i16::from_be_bytes([payload[2], payload[3]]);
        let correlation_id = i32::from_be_bytes([payload[4], payload[5], payload[6], payload[7]]);
        let Ok(api) = ApiKey::try_from(api_key) else {
            return;
        };
        let body = match api {
            ApiKey::ApiVersions => api_versions(version),
            ApiKey::Metadata if hostile.load(Ordering::SeqCst) => {
                hostile_sent.fetch_add(1, Ordering::SeqCst);
                hostile_metadata(version)
            }
            ApiKey::Metadata => metadata(own, version),
            _ => return,
        };
        let mut frame = BytesMut::new();
        frame.put_i32(0); // size, set below
        frame.put_i32(correlation_id);
        if api.response_header_version(version) >= 1 {
            frame.put_u8(0); // no tagged fields
        }
        frame.extend_from_slice(&body);
        let size = (frame.len() - 4) as i32;
        frame[..4].copy_from_slice(&size.to_be_bytes());
        if stream.write_all(&frame).is_err() {
            return;
        }
    }
}

fn encode<T: Encodable>(message: &T, version: i16) -> Bytes {
    let mut out = BytesMut::new();
    message.encode(&mut out, version).expect("encode");
    out.freeze()
}

fn api_versions(version: i16) -> Bytes {
    let key = |api: ApiKey, max: i16| {
        ApiVersion::default()
            .with_api_key(api as i16)
            .with_min_version(0)
            .with_max_version(max)
    };
    let response = ApiVersionsResponse::default()
        .with_api_keys(vec![key(ApiKey::ApiVersions, 3), key(ApiKey::Metadata, 12)]);
    encode(&response, version.min(3))
}

/// A correct answer: nodes 1-3, all at this broker's address, no topics.
fn metadata(own: &str, version: i16) -> Bytes {
    let (host, port) = own.rsplit_once(':').expect("host:port");
    let brokers = (1..=3)
        .map(|id| {
            MetadataResponseBroker::default()
                .with_node_id(BrokerId(id))
                .with_host(StrBytes::from_string(host.to_string()))
                .with_port(port.parse().expect("port"))
        })
        .collect();
    let response = MetadataResponse::default()
        .with_brokers(brokers)
        .with_controller_id(BrokerId(1))
        .with_cluster_id(Some(StrBytes::from_static_str("fake")));
    encode(&response, version)
}

/// A Metadata body whose broker array claims 2^31 - 1 entries, followed by 16 bytes.
fn hostile_metadata(version: i16) -> Bytes {
    let mut body = BytesMut::new();
    if version >= 3 {
        body.put_i32(0); // throttle_time_ms
    }
    if version >= 9 {
        // Compact array: unsigned varint of count + 1 = 2^31.
        body.extend_from_slice(&[0x80, 0x80, 0x80, 0x80, 0x08]);
    } else {
        body.put_i32(i32::MAX);
    }
    body.extend_from_slice(&[1; 16]);
    body.freeze()
}

/// Sends Metadata v1 for no topics through kroute; the brokers it answers, or None if
/// kroute closed the connection instead.
fn client_metadata(kroute: &Kroute) -> Option<Vec<(i32, String, i32)>> {
    let mut s = TcpStream::connect(&kroute.bootstrap).expect("connect to kroute");
    s.set_read_timeout(Some(Duration::from_secs(30))).ok();
    let request = MetadataRequest::default().with_topics(Some(vec![]));
    s.write_all(&request_frame(ApiKey::Metadata, 1, 7, &request))
        .ok()?;
    let payload = read_frame(&mut s)?;
    assert_eq!(&payload[..4], &7i32.to_be_bytes(), "correlation id");
    let response = MetadataResponse::decode(&mut Bytes::copy_from_slice(&payload[4..]), 1)
        .expect("kroute's Metadata answer decodes");
    Some(
        response
            .brokers
            .iter()
            .map(|b| (b.node_id.0, b.host.to_string(), b.port))
            .collect(),
    )
}

#[test]
fn array_counts_beyond_the_bytes_are_refused_without_allocating() {
    let broker = FakeBroker::start();
    let mut kroute = Kroute::start_with(KrouteOptions {
        bootstrap_servers: Some(broker.addr.clone()),
        ..Default::default()
    });
    let kroute_ports: Vec<i32> = (1..=3).map(|n| i32::from(kroute.port_base) + n).collect();

    // Sane first: the client sees kroute's addresses.
    let brokers = client_metadata(&kroute).expect("an answer while the broker is sane");
    assert_eq!(
        brokers.iter().map(|b| b.2).collect::<Vec<_>>(),
        kroute_ports
    );
    let rss_before = rss_bytes(kroute.pid());

    broker.hostile.store(true, Ordering::SeqCst);
    // A client's Metadata: kroute cannot rewrite the answer, so the client's connection ends
    // (there is nothing true to tell it) and kroute counts and logs it.
    for _ in 0..5 {
        assert_eq!(
            client_metadata(&kroute),
            None,
            "a hostile answer reached the client"
        );
    }
    kroute.wait_for_log(&[CANNOT_REWRITE, "exceeds"], Duration::from_secs(10));
    assert!(kroute.metric("kroute_rewrite_errors_total", &[]) >= 5.0);
    // kroute's own refresh (every second in tests) meets the same answer.
    kroute.wait_for_log(&[REFRESH_FAILED, "exceeds"], Duration::from_secs(15));
    wait_for(
        "kroute's refresh to meet hostile answers",
        Duration::from_secs(15),
        || (broker.hostile_sent.load(Ordering::SeqCst) >= 8).then_some(()),
    );
    assert!(kroute.is_running(), "kroute died on a hostile response");
    let rss_after = rss_bytes(kroute.pid());
    // Each hostile answer would ask for 2^31 entries (tens of GB); a few MiB of growth is the
    // connections and log lines.
    assert!(
        rss_after < rss_before + (64 << 20),
        "RSS grew from {rss_before} to {rss_after} bytes"
    );

    broker.hostile.store(false, Ordering::SeqCst);
    let brokers = client_metadata(&kroute).expect("an answer once the broker is sane again");
    assert_eq!(
        brokers.iter().map(|b| b.2).collect::<Vec<_>>(),
        kroute_ports
    );
    kroute.wait_for_log(&["metadata refresh works again"], Duration::from_secs(15));
    kroute.assert_clean_logs(&[CANNOT_REWRITE, REFRESH_FAILED]);
}
