//! kroute at the byte level, against the real cluster: pipelining and ordering, malformed input,
//! ApiVersions clamping, and a capture of every byte clients receive.

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse,
};
use kafka_protocol::protocol::{Decodable, StrBytes};
use kroute::protocol::versions::decodable_max;

fn api_versions_request(version: i16, correlation_id: i32) -> Bytes {
    let body = ApiVersionsRequest::default()
        .with_client_software_name(StrBytes::from_static_str("kroute-test"))
        .with_client_software_version(StrBytes::from_static_str("1"));
    request_frame(ApiKey::ApiVersions, version, correlation_id, &body)
}

/// Metadata v9 (flexible): served by every Kafka kroute fronts, 2.8 (v11 at most) included.
const METADATA_VERSION: i16 = 9;

fn metadata_request(correlation_id: i32) -> Bytes {
    request_frame(
        ApiKey::Metadata,
        METADATA_VERSION,
        correlation_id,
        &MetadataRequest::default().with_topics(None),
    )
}

fn api_versions(addr: &str) -> ApiVersionsResponse {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(&api_versions_request(3, 7)).unwrap();
    let payload = read_frame(&mut s).expect("ApiVersions response");
    assert_eq!(&payload[..4], &7i32.to_be_bytes());
    ApiVersionsResponse::decode(&mut Bytes::copy_from_slice(&payload[4..]), 3).unwrap()
}

#[test]
fn many_requests_in_flight_on_one_connection_are_answered_in_order() {
    let kroute = Kroute::start();
    let mut s = TcpStream::connect(&kroute.bootstrap).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    // 400 requests of two APIs, written in one go before reading anything.
    let mut all = Vec::new();
    for id in 0..400 {
        let frame = if id % 2 == 0 {
            metadata_request(id)
        } else {
            api_versions_request(3, id)
        };
        all.extend_from_slice(&frame);
    }
    s.write_all(&all).unwrap();
    for id in 0..400 {
        let payload =
            read_frame(&mut s).unwrap_or_else(|| panic!("connection ended at response {id}"));
        let got = i32::from_be_bytes(payload[..4].try_into().unwrap());
        assert_eq!(got, id, "responses out of order");
        if id % 2 == 0 {
            // Metadata response header v1 has one tagged-field byte before the body.
            let meta = MetadataResponse::decode(
                &mut Bytes::copy_from_slice(&payload[5..]),
                METADATA_VERSION,
            )
            .unwrap();
            assert_eq!(meta.brokers.len(), 3);
            assert!(
                meta.brokers
                    .iter()
                    .all(|b| b.port == i32::from(kroute.port_base) + b.node_id.0)
            );
        }
    }
    assert!(kroute.metric("kroute_requests_total", &["api=\"Metadata\""]) >= 200.0);
    kroute.assert_clean_logs(&[]);
}

#[test]
fn api_versions_are_clamped_to_what_kroute_decodes() {
    let kroute = Kroute::start();
    let direct = api_versions(cluster_bootstrap().split(',').next().unwrap());
    let proxied = api_versions(&kroute.bootstrap);
    assert_eq!(direct.api_keys.len(), proxied.api_keys.len());
    for (d, p) in direct.api_keys.iter().zip(&proxied.api_keys) {
        assert_eq!(d.api_key, p.api_key);
        assert_eq!(
            d.min_version, p.min_version,
            "min of api {} changed",
            d.api_key
        );
        let expected = match decodable_max(d.api_key) {
            Some(ours) => d.max_version.min(ours).max(d.min_version),
            None => d.max_version,
        };
        assert_eq!(p.max_version, expected, "max of api {}", d.api_key);
    }
    // Produce v13 names topics by id (Kafka 4.1+): kroute, which must read topic names to route,
    // offers at most v12 (older brokers offer less themselves).
    let produce = |r: &ApiVersionsResponse| {
        r.api_keys
            .iter()
            .find(|a| a.api_key == 0)
            .unwrap()
            .max_version
    };
    assert_eq!(produce(&proxied), produce(&direct).min(12));
    assert_eq!(decodable_max(0), Some(12));

    // A version kroute cannot decode gets UNSUPPORTED_VERSION in a v0 body, like a broker's.
    let mut s = TcpStream::connect(&kroute.bootstrap).unwrap();
    s.write_all(&api_versions_request(4, 1)).unwrap();
    read_frame(&mut s).unwrap();
    let mut future = api_versions_request(4, 2).to_vec();
    future[6..8].copy_from_slice(&99i16.to_be_bytes());
    s.write_all(&future).unwrap();
    let payload = read_frame(&mut s).unwrap();
    assert_eq!(&payload[..4], &2i32.to_be_bytes());
    let v0 = ApiVersionsResponse::decode(&mut Bytes::copy_from_slice(&payload[4..]), 0).unwrap();
    assert_eq!(v0.error_code, 35);
    kroute.assert_clean_logs(&[]);
}

#[test]
fn malformed_input_closes_only_that_connection() {
    let kroute = Kroute::start();
    let mut healthy = TcpStream::connect(&kroute.bootstrap).unwrap();
    healthy
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    healthy.write_all(&metadata_request(1)).unwrap();
    assert!(read_frame(&mut healthy).is_some());

    let mut unknown_api = metadata_request(5).to_vec();
    unknown_api[4..6].copy_from_slice(&9999i16.to_be_bytes());
    let cases: Vec<(&str, Vec<u8>, bool)> = vec![
        ("negative length", (-1i32).to_be_bytes().to_vec(), false),
        (
            "oversize length",
            (200 * 1024 * 1024i32).to_be_bytes().to_vec(),
            false,
        ),
        (
            "garbage",
            b"GET / HTTP/1.1\r\nHost: kafka\r\n\r\n".to_vec(),
            false,
        ),
        (
            "header shorter than 8 bytes",
            vec![0, 0, 0, 3, 1, 2, 3],
            false,
        ),
        (
            "truncated frame",
            [&100i32.to_be_bytes()[..], &[0u8; 10]].concat(),
            true,
        ),
        ("unknown api key", unknown_api, false),
    ];
    for (name, bytes, half_close) in cases {
        let mut bad = TcpStream::connect(&kroute.bootstrap).unwrap();
        bad.write_all(&bytes).unwrap();
        if half_close {
            bad.shutdown(Shutdown::Write).unwrap();
        }
        assert!(
            closed_within(&mut bad, Duration::from_secs(10)),
            "{name}: connection left open"
        );
        // Everyone else is still served, on an old and on a new connection.
        healthy.write_all(&metadata_request(2)).unwrap();
        assert!(
            read_frame(&mut healthy).is_some(),
            "{name}: healthy connection broken"
        );
        let mut fresh = TcpStream::connect(&kroute.bootstrap).unwrap();
        fresh.write_all(&metadata_request(3)).unwrap();
        assert!(
            read_frame(&mut fresh).is_some(),
            "{name}: kroute stopped serving"
        );
    }
    for reason in ["negative_size", "oversize", "truncated", "bad_header"] {
        let n = kroute.metric(
            "kroute_client_protocol_errors_total",
            &[&format!("reason=\"{reason}\"")],
        );
        assert!(n >= 1.0, "no {reason} error counted");
    }
    assert!(kroute.metric("kroute_requests_total", &["api=\"unknown\""]) >= 1.0);
    kroute.assert_clean_logs(&[
        "closing client connection",
        "upstream connection ended with requests in flight",
    ]);
}

/// A TCP relay that records every byte its upstream sends back to clients.
struct CaptureRelay {
    addr: String,
    downstream: Arc<Mutex<Vec<u8>>>,
}

impl CaptureRelay {
    fn start(listen: &str, target: String, downstream: Arc<Mutex<Vec<u8>>>) -> CaptureRelay {
        let listener =
            TcpListener::bind(listen).unwrap_or_else(|e| panic!("relay bind {listen}: {e}"));
        let addr = listener.local_addr().unwrap().to_string();
        let sink = downstream.clone();
        thread::spawn(move || {
            for client in listener.incoming().map_while(Result::ok) {
                let Ok(server) = TcpStream::connect(&target) else {
                    continue;
                };
                let (mut c_read, mut s_write) =
                    (client.try_clone().unwrap(), server.try_clone().unwrap());
                thread::spawn(move || {
                    let _ = std::io::copy(&mut c_read, &mut s_write);
                    let _ = s_write.shutdown(Shutdown::Write);
                });
                let (mut s_read, mut c_write) = (server, client);
                let sink = sink.clone();
                thread::spawn(move || {
                    let mut buf = [0u8; 64 * 1024];
                    while let Ok(n) = s_read.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        // Recorded before it is forwarded: once a client has read a reply,
                        // the capture already holds it (the control check relies on that).
                        sink.lock().unwrap().extend_from_slice(&buf[..n]);
                        if c_write.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = c_write.shutdown(Shutdown::Both);
                });
            }
        });
        CaptureRelay { addr, downstream }
    }

    /// Which of `ports` appear as a big-endian int32 (how Kafka encodes ports) in the capture.
    fn ports_seen(&self, ports: &[u16]) -> Vec<u16> {
        let bytes = self.downstream.lock().unwrap();
        ports
            .iter()
            .copied()
            .filter(|p| bytes.windows(4).any(|w| w == i32::from(*p).to_be_bytes()))
            .collect()
    }

    fn len(&self) -> usize {
        self.downstream.lock().unwrap().len()
    }
}

#[test]
fn no_real_broker_address_reaches_a_client() {
    // kroute listens on 127.0.0.2 but tells clients 127.0.0.1; a recording relay on 127.0.0.1
    // stands in front of each kroute port, so every byte any client receives is captured.
    let kroute = Kroute::start_with(KrouteOptions {
        bind_host: "127.0.0.2".into(),
        advertised_host: "127.0.0.1".into(),
        ..Default::default()
    });
    let captured = Arc::new(Mutex::new(Vec::new()));
    let mut relays = Vec::new();
    for port in [
        kroute.bootstrap_port,
        kroute.port_base + 1,
        kroute.port_base + 2,
        kroute.port_base + 3,
    ] {
        relays.push(CaptureRelay::start(
            &format!("127.0.0.1:{port}"),
            format!("127.0.0.2:{port}"),
            captured.clone(),
        ));
    }
    let topic = unique("capture");
    let bootstrap = format!("127.0.0.1:{}", kroute.bootstrap_port);
    java_on(
        "admin-create",
        &bootstrap,
        &topic,
        &["--partitions", "3", "--replication-factor", "3"],
    );
    java_on("produce", &bootstrap, &topic, &["--count", "200"]);
    java_on(
        "produce",
        &bootstrap,
        &topic,
        &["--count", "50", "--transactional-id", &unique("cap-txn")],
    );
    java_on(
        "group-consume",
        &bootstrap,
        &topic,
        &[
            "--group",
            &unique("cap"),
            "--members",
            "2",
            "--expect",
            "250",
        ],
    );
    let describe = java_on("admin-describe", &bootstrap, &topic, &[]);
    assert_eq!(describe.records("node").len(), 3);

    assert!(relays[0].len() > 10_000, "capture saw too little traffic");
    let leaked = relays[0].ports_seen(&cluster_ports());
    assert!(
        leaked.is_empty(),
        "real broker ports reached a client: {leaked:?}"
    );
    let kroute_ports: Vec<u16> = (1..=3).map(|n| kroute.port_base + n).collect();
    assert_eq!(
        relays[0].ports_seen(&kroute_ports),
        kroute_ports,
        "kroute ports must be what clients see"
    );

    // Control: the same detector on a relay in front of the real cluster does see real ports.
    let direct = Arc::new(Mutex::new(Vec::new()));
    let control = CaptureRelay::start(
        "127.0.0.1:0",
        cluster_bootstrap().split(',').next().unwrap().to_string(),
        direct,
    );
    let mut s = TcpStream::connect(&control.addr).unwrap();
    s.write_all(&metadata_request(1)).unwrap();
    read_frame(&mut s).unwrap();
    assert_eq!(control.ports_seen(&cluster_ports()), cluster_ports());
    kroute.assert_clean_logs(&[]);
}
