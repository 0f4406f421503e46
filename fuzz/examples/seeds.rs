//! Writes the seed corpora: fuzz/corpus/<target>/seed-*, in each target's input format
//! (a selector byte, or a few parameter bytes, then the decoder's bytes; see the targets).
//!
//! The messages are written with kafka-protocol's encoders (an implementation independent of
//! kroute's readers), shaped as the clients kroute serves send them: the client ids, versions,
//! acks, compression codecs and idempotence defaults of the Java client (3.x/4.x), librdkafka,
//! franz-go and kafka-python, and the answers of a 3-broker Kafka 4.1 cluster. They are not
//! captured bytes (docs/hardening.md says what a capture would add).
//!
//!     cd fuzz && cargo run --example seeds

use std::fs;
use std::path::Path;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Encodable, Message, StrBytes};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

thread_local! {
    /// Set when a message did not encode in a version (a field it does not have): the seed
    /// that would hold it is skipped.
    static FAILED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn enc<T: Encodable>(m: &T, version: i16) -> Vec<u8> {
    let mut out = BytesMut::new();
    if let Err(e) = m.encode(&mut out, version) {
        eprintln!("v{version}: {e}");
        FAILED.with(|f| f.set(true));
    }
    out.to_vec()
}

fn write(target: &str, name: &str, bytes: &[u8]) {
    if FAILED.with(|f| f.replace(false)) {
        eprintln!("skipped {target}/seed-{name}");
        return;
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target);
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join(format!("seed-{name}")), bytes).unwrap();
}

fn with_selector(selector: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![selector];
    out.extend_from_slice(body);
    out
}

/// One record batch: `n` records, keyed or not, of a producer (-1: not idempotent).
fn batch(n: usize, keyed: bool, compression: Compression, producer_id: i64, base: i32) -> Bytes {
    let records: Vec<Record> = (0..n)
        .map(|i| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id,
            producer_epoch: if producer_id < 0 { -1 } else { 0 },
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: if producer_id < 0 { -1 } else { base + i as i32 },
            timestamp: 1_764_600_000_000 + i as i64,
            key: keyed.then(|| Bytes::from(format!("key-{i}"))),
            value: Some(Bytes::from(format!(
                "{{\"n\":{i},\"pad\":\"{}\"}}",
                "x".repeat(40)
            ))),
            headers: Default::default(),
        })
        .collect();
    let mut out = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut out,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression,
        },
    )
    .unwrap();
    out.freeze()
}

/// A client's Produce request: (name, client id, version, acks, transactional id, codec,
/// idempotent).
type Client = (
    &'static str,
    &'static str,
    i16,
    i16,
    Option<&'static str>,
    Compression,
    bool,
);

const CLIENTS: [Client; 7] = [
    // Java 3.x/4.x defaults: idempotent, acks=all, no compression; Produce v11 (3.7+) / v12 (4.x).
    ("java", "producer-1", 12, -1, None, Compression::None, true),
    (
        "java-lz4",
        "producer-2",
        11,
        -1,
        None,
        Compression::Lz4,
        true,
    ),
    (
        "java-txn",
        "producer-txn",
        12,
        -1,
        Some("txn-app-1"),
        Compression::Zstd,
        true,
    ),
    // librdkafka: acks=all, idempotence off by default, snappy/gzip often configured; v9 (2.x).
    (
        "librdkafka",
        "rdkafka",
        9,
        -1,
        None,
        Compression::Snappy,
        false,
    ),
    // franz-go: idempotent and snappy by default.
    ("franz-go", "kgo", 11, -1, None, Compression::Snappy, true),
    // kafka-python 2.x: Produce v7, acks=1, gzip configured here.
    (
        "kafka-python",
        "kafka-python-producer-1",
        7,
        1,
        None,
        Compression::Gzip,
        true,
    ),
    ("acks0", "perf", 3, 0, None, Compression::None, false),
];

fn produce_request(c: &Client) -> (Vec<u8>, Vec<u8>) {
    let (_, client_id, version, acks, txn, compression, idempotent) = *c;
    let producer = if idempotent { 4001 } else { -1 };
    let topic = |name: &str, parts: &[(i32, bool)]| {
        produce_request::TopicProduceData::default()
            .with_name(TopicName(s(name)))
            .with_partition_data(
                parts
                    .iter()
                    .map(|(p, keyed)| {
                        produce_request::PartitionProduceData::default()
                            .with_index(*p)
                            .with_records(Some(batch(3, *keyed, compression, producer, 0)))
                    })
                    .collect(),
            )
    };
    let body = ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(30_000)
        .with_transactional_id(txn.map(|t| TransactionalId(s(t))))
        .with_topic_data(vec![
            topic("orders", &[(0, false), (3, false)]),
            topic("clicks", &[(1, true)]),
        ]);
    let header = RequestHeader::default()
        .with_request_api_key(ApiKey::Produce as i16)
        .with_request_api_version(version)
        .with_correlation_id(17)
        .with_client_id(Some(s(client_id)));
    let mut frame = enc(&header, ApiKey::Produce.request_header_version(version));
    let body = enc(&body, version);
    frame.extend_from_slice(&body);
    (frame, body)
}

fn seeds_requests() {
    let mut stream = Vec::new();
    for c in &CLIENTS {
        let (frame, body) = produce_request(c);
        write("request_header", &format!("produce-{}", c.0), &frame);
        write(
            "produce_body",
            &format!("{}-v{}", c.0, c.2),
            &with_selector((c.2 - 3) as u8, &body),
        );
        stream.extend_from_slice(&(frame.len() as i32).to_be_bytes());
        stream.extend_from_slice(&frame);
    }
    // Other requests a client opens with: ApiVersions v3 (flexible, header v2), Metadata v12.
    let api_versions = ApiVersionsRequest::default()
        .with_client_software_name(s("apache-kafka-java"))
        .with_client_software_version(s("4.1.0"));
    let header = RequestHeader::default()
        .with_request_api_key(ApiKey::ApiVersions as i16)
        .with_request_api_version(3)
        .with_correlation_id(0)
        .with_client_id(Some(s("producer-1")));
    let mut frame = enc(&header, ApiKey::ApiVersions.request_header_version(3));
    frame.extend(enc(&api_versions, 3));
    write("request_header", "api-versions-v3", &frame);
    // Requests that wait by design, for the deadline reader: CreateTopics v7, JoinGroup v9.
    let create = CreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![
            create_topics_request::CreatableTopic::default()
                .with_name(TopicName(s("orders")))
                .with_num_partitions(6)
                .with_replication_factor(3),
        ]);
    let join = JoinGroupRequest::default()
        .with_group_id(GroupId(s("orders-consumers")))
        .with_session_timeout_ms(45_000)
        .with_rebalance_timeout_ms(300_000)
        .with_protocol_type(s("consumer"));
    for (name, key, version, body) in [
        ("create-topics-v7", ApiKey::CreateTopics, 7, enc(&create, 7)),
        ("join-group-v9", ApiKey::JoinGroup, 9, enc(&join, 9)),
    ] {
        let header = RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_correlation_id(3)
            .with_client_id(Some(s("adminclient-1")));
        let mut frame = enc(&header, key.request_header_version(version));
        frame.extend(body);
        write("request_deadline", name, &frame);
    }
    let mut framed = (frame.len() as i32).to_be_bytes().to_vec();
    framed.extend_from_slice(&frame);
    framed.extend_from_slice(&stream);
    // max 1 MiB, 7-byte chunks
    write(
        "frame_codec",
        "clients",
        &[&[20u8, 6][..], &framed].concat(),
    );
    write(
        "frame_codec",
        "oversize",
        &[&[4u8, 63][..], &framed].concat(),
    );
    write(
        "frame_codec",
        "truncated",
        &[&[24u8, 0][..], &framed[..framed.len() - 5]].concat(),
    );
    // A response header v1 (tagged fields) and v0.
    write(
        "request_header",
        "response-header",
        &[0, 0, 0, 17, 1, 0, 2, 0xaa, 0xbb, 0],
    );
}

fn seeds_batches() {
    let codecs = [
        ("none", Compression::None),
        ("gzip", Compression::Gzip),
        ("snappy", Compression::Snappy),
        ("lz4", Compression::Lz4),
        ("zstd", Compression::Zstd),
    ];
    // Budget 64 KiB: selector bytes 0x00 0x3f.
    let budget = [0u8, 0x3f];
    for (name, c) in codecs {
        write(
            "batch_inspect",
            &format!("keyless-{name}"),
            &[&budget[..], &batch(5, false, c, -1, 0)].concat(),
        );
        write(
            "batch_inspect",
            &format!("keyed-{name}"),
            &[&budget[..], &batch(5, true, c, -1, 0)].concat(),
        );
        write(
            "batch_inspect",
            &format!("idempotent-{name}"),
            &[&budget[..], &batch(5, false, c, 4001, 10)].concat(),
        );
        let two = [
            batch(2, false, c, 4001, 0),
            batch(3, false, Compression::None, 4001, 2),
        ]
        .concat();
        write(
            "batch_inspect",
            &format!("two-{name}"),
            &[&budget[..], &two].concat(),
        );
        // Renumber to epoch 2, sequence 100.
        let params = [0u8, 2, 0, 0, 0, 100];
        write(
            "batch_renumber_join",
            &format!("one-{name}"),
            &[&params[..], &batch(4, false, c, 4001, 0)].concat(),
        );
    }
    // Decompression bombs: one record of zeros, far more than the 64 KiB budget.
    for (name, c, size) in [
        ("gzip", Compression::Gzip, 1 << 20),
        ("zstd", Compression::Zstd, 1 << 20),
        ("lz4", Compression::Lz4, 1 << 20),
        ("snappy", Compression::Snappy, 128 << 10),
    ] {
        write(
            "batch_inspect",
            &format!("bomb-{name}"),
            &[&budget[..], &zeros(size, c)].concat(),
        );
    }
    // Three uncompressed batches of one producer, contiguous: joinable.
    let three = [
        batch(2, false, Compression::None, 4001, 0),
        batch(1, false, Compression::None, 4001, 2),
        batch(5, false, Compression::None, 4001, 3),
    ]
    .concat();
    write(
        "batch_renumber_join",
        "three-plain",
        &[&[0u8, 0, 0x7f, 0xff, 0xff, 0xfe][..], &three].concat(),
    );
}

/// A batch of one keyless record whose value is `size` zero bytes.
fn zeros(size: usize, compression: Compression) -> Bytes {
    let record = Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: -1,
        timestamp: 1_764_600_000_000,
        key: None,
        value: Some(Bytes::from(vec![0u8; size])),
        headers: Default::default(),
    };
    let mut out = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression,
    };
    RecordBatchEncoder::encode(&mut out, [record].iter(), &options).unwrap();
    out.freeze()
}

/// The three brokers of the local cluster, as a 4.1 broker describes them.
const BROKERS: [(i32, &str, i32); 3] = [
    (1, "127.0.0.1", 19092),
    (2, "127.0.0.1", 19093),
    (3, "127.0.0.1", 19094),
];

fn seeds_responses() {
    // Metadata: brokers, a 6-partition topic with replicas on all three, an errored topic.
    let mut m = MetadataResponse::default();
    m.cluster_id = Some(s("kroute-local-cluster"));
    m.controller_id = BrokerId(1);
    for (id, host, port) in BROKERS {
        let mut b = metadata_response::MetadataResponseBroker::default();
        b.node_id = BrokerId(id);
        b.host = s(host);
        b.port = port;
        m.brokers.push(b);
    }
    let mut t = metadata_response::MetadataResponseTopic::default();
    t.name = Some(TopicName(s("orders")));
    for p in 0..6 {
        let mut part = metadata_response::MetadataResponsePartition::default();
        part.partition_index = p;
        part.leader_id = BrokerId(p % 3 + 1);
        part.replica_nodes = vec![BrokerId(1), BrokerId(2), BrokerId(3)];
        part.isr_nodes = part.replica_nodes.clone();
        t.partitions.push(part);
    }
    m.topics.push(t);
    let mut missing = metadata_response::MetadataResponseTopic::default();
    missing.name = Some(TopicName(s("missing")));
    missing.error_code = 3;
    m.topics.push(missing);
    for v in [0, 1, 4, 7, 9, 10, 12, 13] {
        write(
            "rewrite_metadata",
            &format!("v{v}"),
            &with_selector(v as u8, &enc(&m, v)),
        );
    }

    let mut fc = FindCoordinatorResponse::default();
    fc.node_id = BrokerId(2);
    fc.host = s("127.0.0.1");
    fc.port = 19093;
    for v in 0..=3 {
        write(
            "rewrite_find_coordinator",
            &format!("v{v}"),
            &with_selector(v as u8, &enc(&fc, v)),
        );
    }
    let mut fc = FindCoordinatorResponse::default();
    for (key, id) in [("group-a", 2), ("txn-app-1", -1)] {
        let mut c = find_coordinator_response::Coordinator::default();
        c.key = s(key);
        c.node_id = BrokerId(id);
        if id >= 0 {
            c.host = s("127.0.0.1");
            c.port = 19093;
        } else {
            c.error_code = 15;
        }
        fc.coordinators.push(c);
    }
    for v in 4..=6 {
        write(
            "rewrite_find_coordinator",
            &format!("v{v}"),
            &with_selector(v as u8, &enc(&fc, v)),
        );
    }

    let mut dc = DescribeClusterResponse::default();
    dc.cluster_id = s("kroute-local-cluster");
    dc.controller_id = BrokerId(1);
    for (id, host, port) in BROKERS {
        let mut b = describe_cluster_response::DescribeClusterBroker::default();
        b.broker_id = BrokerId(id);
        b.host = s(host);
        b.port = port;
        dc.brokers.push(b);
    }
    for v in 0..=2 {
        write(
            "rewrite_describe_cluster",
            &format!("v{v}"),
            &with_selector(v as u8, &enc(&dc, v)),
        );
    }

    let mut dq = DescribeQuorumResponse::default();
    let mut topic = describe_quorum_response::TopicData::default();
    topic.topic_name = TopicName(s("__cluster_metadata"));
    let mut part = describe_quorum_response::PartitionData::default();
    part.leader_id = BrokerId(0);
    part.leader_epoch = 3;
    part.high_watermark = 4242;
    let mut voter = describe_quorum_response::ReplicaState::default();
    voter.replica_id = BrokerId(0);
    voter.log_end_offset = 4242;
    part.current_voters.push(voter);
    topic.partitions.push(part);
    dq.topics.push(topic);
    let mut node = describe_quorum_response::Node::default();
    node.node_id = BrokerId(0);
    let mut l = describe_quorum_response::Listener::default();
    l.name = s("CONTROLLER");
    l.host = s("127.0.0.1");
    l.port = 19091;
    node.listeners.push(l);
    dq.nodes.push(node);
    for v in 0..=2 {
        let mut dq = dq.clone();
        if v < 2 {
            dq.nodes.clear(); // listeners arrived in v2
        }
        write(
            "rewrite_describe_quorum",
            &format!("v{v}"),
            &with_selector(v as u8, &enc(&dq, v)),
        );
    }

    let mut pr = ProduceResponse::default();
    let mut tr = produce_response::TopicProduceResponse::default();
    tr.name = TopicName(s("orders"));
    let mut ok = produce_response::PartitionProduceResponse::default();
    ok.index = 0;
    ok.base_offset = 1200;
    let mut moved = produce_response::PartitionProduceResponse::default();
    moved.index = 3;
    moved.error_code = 6; // NOT_LEADER_OR_FOLLOWER, with the new leader
    moved.base_offset = -1;
    moved.current_leader.leader_id = BrokerId(2);
    moved.current_leader.leader_epoch = 5;
    tr.partition_responses = vec![ok, moved];
    pr.responses.push(tr);
    let mut ne = produce_response::NodeEndpoint::default();
    ne.node_id = BrokerId(2);
    ne.host = s("127.0.0.1");
    ne.port = 19093;
    pr.node_endpoints.push(ne);
    for v in 10..=12 {
        write(
            "rewrite_produce",
            &format!("v{v}"),
            &with_selector((v - 10) as u8, &enc(&pr, v)),
        );
    }
    pr.node_endpoints.clear();
    write(
        "rewrite_produce",
        "v12-no-endpoints",
        &with_selector(2, &enc(&pr, 12)),
    );

    let mut fr = FetchResponse::default();
    let mut ft = fetch_response::FetchableTopicResponse::default();
    let mut fp = fetch_response::PartitionData::default();
    fp.high_watermark = 15;
    fp.records = Some(batch(3, false, Compression::Lz4, -1, 0));
    ft.partitions.push(fp);
    let mut lead = fetch_response::PartitionData::default();
    lead.partition_index = 1;
    lead.error_code = 6;
    lead.current_leader.leader_id = BrokerId(3);
    ft.partitions.push(lead);
    fr.responses.push(ft);
    let mut ne = fetch_response::NodeEndpoint::default();
    ne.node_id = BrokerId(3);
    ne.host = s("127.0.0.1");
    ne.port = 19094;
    fr.node_endpoints.push(ne);
    for v in 16..=18 {
        write(
            "rewrite_fetch",
            &format!("v{v}"),
            &with_selector((v - 16) as u8, &enc(&fr, v)),
        );
    }

    let mut sf = ShareFetchResponse::default();
    let mut st = share_fetch_response::ShareFetchableTopicResponse::default();
    let mut sp = share_fetch_response::PartitionData::default();
    sp.records = Some(batch(2, false, Compression::None, -1, 0));
    let mut acquired = share_fetch_response::AcquiredRecords::default();
    acquired.last_offset = 1;
    acquired.delivery_count = 1;
    sp.acquired_records.push(acquired);
    st.partitions.push(sp);
    sf.responses.push(st);
    let mut ne = share_fetch_response::NodeEndpoint::default();
    ne.node_id = BrokerId(1);
    ne.host = s("127.0.0.1");
    ne.port = 19092;
    sf.node_endpoints.push(ne);
    write(
        "rewrite_share",
        "share-fetch-v1",
        &with_selector(0, &with_selector(0, &enc(&sf, 1))),
    );
    let mut sa = ShareAcknowledgeResponse::default();
    let mut at = share_acknowledge_response::ShareAcknowledgeTopicResponse::default();
    at.partitions
        .push(share_acknowledge_response::PartitionData::default());
    sa.responses.push(at);
    let mut ne = share_acknowledge_response::NodeEndpoint::default();
    ne.node_id = BrokerId(1);
    ne.host = s("127.0.0.1");
    ne.port = 19092;
    sa.node_endpoints.push(ne);
    write(
        "rewrite_share",
        "share-acknowledge-v1",
        &with_selector(1, &with_selector(0, &enc(&sa, 1))),
    );

    // ApiVersions as a 4.1 broker answers: every API kafka-protocol knows, its full range.
    let mut av = ApiVersionsResponse::default();
    for key in ApiKey::iter() {
        let (min, max) = api_range(key);
        av.api_keys.push(
            api_versions_response::ApiVersion::default()
                .with_api_key(key as i16)
                .with_min_version(min)
                .with_max_version(max),
        );
    }
    for v in 0..=4 {
        write(
            "api_versions_clamp",
            &format!("v{v}"),
            &with_selector(v as u8, &enc(&av, v)),
        );
    }
    let error = kroute::protocol::versions::unsupported_api_versions_body();
    write(
        "api_versions_clamp",
        "unsupported",
        &with_selector(3, &error),
    );
}

fn api_range(key: ApiKey) -> (i16, i16) {
    macro_rules! range {
        ($($k:ident => $t:ty),* $(,)?) => {
            match key {
                $(ApiKey::$k => (<$t>::VERSIONS.min, <$t>::VERSIONS.max),)*
                _ => (0, 3),
            }
        };
    }
    range!(
        Produce => ProduceRequest,
        Fetch => FetchRequest,
        Metadata => MetadataRequest,
        FindCoordinator => FindCoordinatorRequest,
        ApiVersions => ApiVersionsRequest,
        DescribeCluster => DescribeClusterRequest,
        DescribeQuorum => DescribeQuorumRequest,
        ShareFetch => ShareFetchRequest,
        ShareAcknowledge => ShareAcknowledgeRequest,
        OffsetCommit => OffsetCommitRequest,
    )
}

fn seeds_lag() {
    let topic = |name: &str, parts: &[(i32, i64)]| {
        offset_commit_request::OffsetCommitRequestTopic::default()
            .with_name(TopicName(s(name)))
            .with_partitions(
                parts
                    .iter()
                    .map(|(p, o)| {
                        offset_commit_request::OffsetCommitRequestPartition::default()
                            .with_partition_index(*p)
                            .with_committed_offset(*o)
                            .with_committed_metadata(Some(s("")))
                    })
                    .collect(),
            )
    };
    let mut body = OffsetCommitRequest::default()
        .with_group_id(GroupId(s("orders-consumers")))
        .with_generation_id_or_member_epoch(7)
        .with_member_id(s("consumer-orders-consumers-1-5d0c4f9e"))
        .with_topics(vec![
            topic("orders", &[(0, 1200), (3, 88)]),
            topic("clicks", &[(1, 5)]),
        ]);
    for v in 2..=10i16 {
        if v == 10 {
            for t in &mut body.topics {
                t.name = TopicName(s(""));
            }
        }
        let header = RequestHeader::default()
            .with_request_api_key(ApiKey::OffsetCommit as i16)
            .with_request_api_version(v)
            .with_correlation_id(9)
            .with_client_id(Some(s("consumer-orders-consumers-1")));
        let mut frame = enc(&header, ApiKey::OffsetCommit.request_header_version(v));
        frame.extend(enc(&body, v));
        write(
            "lag_offset_commit",
            &format!("request-v{v}"),
            &with_selector(((v - 2) * 2) as u8, &frame),
        );

        let mut answer = OffsetCommitResponse::default();
        let mut t = offset_commit_response::OffsetCommitResponseTopic::default();
        if v < 10 {
            t.name = TopicName(s("orders"));
        }
        let mut p = offset_commit_response::OffsetCommitResponsePartition::default();
        p.partition_index = 0;
        t.partitions.push(p);
        let mut p = offset_commit_response::OffsetCommitResponsePartition::default();
        p.partition_index = 3;
        p.error_code = 27; // REBALANCE_IN_PROGRESS
        t.partitions.push(p);
        answer.topics.push(t);
        let mut out = BytesMut::new();
        out.put_i32(9);
        if ApiKey::OffsetCommit.response_header_version(v) >= 1 {
            out.put_u8(0);
        }
        out.extend(enc(&answer, v));
        write(
            "lag_offset_commit",
            &format!("response-v{v}"),
            &with_selector(((v - 2) * 2 + 1) as u8, &out),
        );
    }

    for v in 0..=3i16 {
        let assignment = ConsumerProtocolAssignment::default().with_assigned_partitions(vec![
            consumer_protocol_assignment::TopicPartition::default()
                .with_topic(TopicName(s("orders")))
                .with_partitions(vec![0, 3]),
            consumer_protocol_assignment::TopicPartition::default()
                .with_topic(TopicName(s("clicks")))
                .with_partitions(vec![1]),
        ]);
        let mut out = BytesMut::new();
        out.put_i16(v);
        assignment.encode(&mut out, v).unwrap();
        write("lag_assignment", &format!("v{v}"), &out);
    }
}

fn main() {
    seeds_requests();
    seeds_batches();
    seeds_responses();
    seeds_lag();
    println!("seeds written under {}/corpus", env!("CARGO_MANIFEST_DIR"));
}
