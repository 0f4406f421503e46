use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{
    ProduceRequest, ProduceResponse, RequestHeader, TopicName, TransactionalId,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kafka_protocol::records::{Compression, RecordBatchDecoder};

use bytes::BufMut;
use kafka_protocol::messages::ApiKey;

use super::*;
use crate::cluster::TopicLayout;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::protocol::header::produce_head;
use crate::proxy::Proxy;
use crate::route::batch::tests::batch;
use crate::route::producers::{OwnedProducer, ProducerState};
use crate::route::sequence::code::{self, UNANSWERED};
use crate::route::sequence::{BatchKey, Lookup};
use crate::security::Permit;
use crate::upstream::PendingReply;
use crate::upstream::Reply;
use crate::upstream::UpstreamGone;
use silent_broker::SilentBroker;

const VERSION: i16 = 11;

fn topic(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}

/// [`super::plan`] for a test's proxy, as routing sees it.
fn plan(
    p: &Arc<Proxy>,
    home: i32,
    permit: &Permit,
    head: &RequestHead,
    produce: &ProduceHead,
    frame: &Bytes,
) -> Plan {
    let routing: Arc<dyn Context> = p.clone();
    super::plan(&routing, home, permit, head, produce, frame)
}

/// [`super::waiting::release`] for a test's proxy.
fn release(
    p: &Arc<Proxy>,
    owner: &Arc<OwnedProducer>,
    state: &mut ProducerState,
    at: Instant,
    unsent: &mut Vec<PendingReply>,
) {
    let routing: Arc<dyn Context> = p.clone();
    super::waiting::release(&routing, owner, state, at, unsent);
}

/// A proxy routing topics "t*", where topic "t" has partitions 0-5 led by 1,1,2,2,3,3.
fn proxy(strategy: &str) -> Arc<Proxy> {
    proxy_with(strategy, "")
}

/// [`proxy`] with more lines for its `[routing]` table.
fn proxy_with(strategy: &str, routing: &str) -> Arc<Proxy> {
    let text = format!(
        "[upstream]\nbootstrap_servers = [\"127.0.0.1:1\"]\n[routing]\nstrategy = \"{strategy}\"\ninclude = [\"t*\"]\n{routing}\n"
    );
    let p = Proxy::new(Config::parse(&text, "t").unwrap(), Metrics::new()).unwrap();
    p.cluster.observe_topics(vec![(
        "t".into(),
        Some(TopicLayout::new([
            (0, 1),
            (1, 1),
            (2, 2),
            (3, 2),
            (4, 3),
            (5, 3),
        ])),
    )]);
    p
}

/// [`proxy_with`] whose brokers are one [`SilentBroker`]: requests are written and stay
/// unanswered until the test cuts them off.
async fn silent_proxy(routing: &str) -> (Arc<Proxy>, SilentBroker) {
    let p = proxy_with("strict-cost", routing);
    let broker = SilentBroker::serve(p.as_ref()).await;
    (p, broker)
}

/// Makes broker `slow` answer in 40 ms and the others in 2 ms, as seen by the scores.
fn slow_broker(p: &Proxy, slow: i32) {
    let now = Instant::now();
    for node in 1..=3 {
        let rtt = Duration::from_millis(if node == slow { 40 } else { 2 });
        let score = p.router.scores.broker(node);
        score.sent(now, 1000);
        score.answered(now, now, now + rtt, 1000, &p.router.scores.config);
    }
}

fn request(
    entries: &[(&str, i32, Bytes)],
    acks: i16,
    txn: Option<&str>,
) -> (RequestHead, ProduceHead, Bytes) {
    let mut topics: Vec<TopicProduceData> = Vec::new();
    for (name, partition, records) in entries {
        if topics.last().is_none_or(|t| t.name.as_str() != *name) {
            topics.push(TopicProduceData::default().with_name(topic(name)));
        }
        topics.last_mut().unwrap().partition_data.push(
            PartitionProduceData::default()
                .with_index(*partition)
                .with_records(Some(records.clone())),
        );
    }
    let body = ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(5000)
        .with_transactional_id(txn.map(|t| TransactionalId(StrBytes::from_string(t.into()))))
        .with_topic_data(topics);
    let header = RequestHeader::default()
        .with_request_api_key(0)
        .with_request_api_version(VERSION)
        .with_correlation_id(42)
        .with_client_id(Some(StrBytes::from_static_str("c")));
    let mut frame = BytesMut::new();
    header
        .encode(&mut frame, ApiKey::Produce.request_header_version(VERSION))
        .unwrap();
    body.encode(&mut frame, VERSION).unwrap();
    let frame = frame.freeze();
    let head = RequestHead::parse(&frame).unwrap();
    let produce = produce_head(&frame, VERSION).unwrap();
    (head, produce, frame)
}

fn keyless() -> Bytes {
    batch(&[None, None], Compression::None, -1, false)
}

fn keyed() -> Bytes {
    batch(&[Some("j"), Some("k")], Compression::Lz4, -1, false)
}

/// Keyed and keyless records in one entry (kafka-protocol's encoder writes one batch per
/// record here: see `crate::route::divide`'s tests for batches divided within).
fn mixed() -> Bytes {
    batch(&[None, Some("k"), None], Compression::Lz4, -1, false)
}

/// Decodes a part's frame back into (topic, partition, records) entries.
fn entries(frame: &Bytes) -> Vec<(String, i32, Bytes)> {
    let head = produce_head(frame, VERSION).unwrap();
    let req = ProduceRequest::decode(&mut frame.slice(head.body_offset..), VERSION).unwrap();
    req.topic_data
        .iter()
        .flat_map(|t| {
            t.partition_data
                .iter()
                .map(|p| (t.name.to_string(), p.index, p.records.clone().unwrap()))
        })
        .collect()
}

#[tokio::test]
async fn a_producer_kroute_did_not_see_start_waits_until_the_brokers_state_is_read() {
    let p = proxy("strict-cost");
    let (head, produce, frame) = request(&[("t", 0, numbered_from(7))], -1, None);
    let s = split(plan(&p, 1, &Permit::Any, &head, &produce, &frame));
    assert!(
        s.parts.is_empty(),
        "nothing is sent before the state is read"
    );
    let merged = s.merge.unwrap().merge(vec![]);
    let header_version = ApiKey::Produce.response_header_version(VERSION);
    let (_, mut body) = crate::protocol::header::split_response(&merged, header_version).unwrap();
    let r = ProduceResponse::decode(&mut body, VERSION).unwrap();
    let p0 = &r.responses[0].partition_responses[0];
    assert_eq!(p0.error_code, code::REQUEST_TIMED_OUT, "retriable");

    // Once read, the same batch is numbered afresh above the epochs the brokers hold.
    p.router.recovery.settle(Some(HashMap::from([(5, 2)])));
    let (head, produce, frame) = request(&[("t", 0, numbered_from(7))], -1, None);
    let s = split(plan(&p, 1, &Permit::Any, &head, &produce, &frame));
    assert_eq!(s.parts.len(), 1);
    let sent = entries(&s.parts[0].frame);
    let info = RecordBatchDecoder::decode_batch_info(&mut sent[0].2.clone()).unwrap();
    let upstream_epoch = 3 + crate::route::recovery::EPOCH_GAP;
    assert_eq!(
        (info[0].producer_epoch, info[0].base_sequence),
        (upstream_epoch, 0),
        "a new epoch above the brokers' 2, numbered from 0"
    );
}

#[tokio::test]
async fn an_idempotent_producer_kroute_did_not_see_start_resets_then_passes_untouched() {
    let p = proxy("strict-cost");
    // The brokers' state could not be read: adopted.
    p.router.recovery.settle(None);
    slow_broker(&p, 1);
    let old_epoch = batch(&[None, None], Compression::None, 5, false);
    let (head, produce, frame) = request(&[("t", 0, old_epoch)], -1, None);
    let s = split(plan(&p, 1, &Permit::Any, &head, &produce, &frame));
    assert!(
        s.parts.is_empty(),
        "nothing of the epoch kroute first saw is sent"
    );
    let merged = s.merge.unwrap().merge(vec![]);
    let header_version = ApiKey::Produce.response_header_version(VERSION);
    let (_, mut body) = crate::protocol::header::split_response(&merged, header_version).unwrap();
    let r = ProduceResponse::decode(&mut body, VERSION).unwrap();
    let p0 = &r.responses[0].partition_responses[0];
    assert_eq!((p0.index, p0.error_code), (0, 45));

    // The client's next epoch passes untouched, where the client put it.
    let mut next_epoch = batch(&[None, None], Compression::None, 5, false).to_vec();
    next_epoch[51..53].copy_from_slice(&1i16.to_be_bytes());
    let crc = crc32c::crc32c(&next_epoch[21..]);
    next_epoch[17..21].copy_from_slice(&crc.to_be_bytes());
    let next_epoch = Bytes::from(next_epoch);
    let (head, produce, frame) = request(&[("t", 0, next_epoch.clone())], -1, None);
    let s = split(plan(&p, 1, &Permit::Any, &head, &produce, &frame));
    assert_eq!(s.parts.len(), 1);
    assert_eq!(s.parts[0].node_id, 1);
    assert_eq!(
        entries(&s.parts[0].frame),
        vec![("t".into(), 0, next_epoch)]
    );
}

/// A broker's encoded answer (header v1, correlation id 42) for one partition of topic "t".
fn part_answer(partition: i32, error: i16, offset: i64, throttle: i32) -> Reply {
    let resp = ProduceResponse::default()
        .with_throttle_time_ms(throttle)
        .with_responses(vec![
            TopicProduceResponse::default()
                .with_name(topic("t"))
                .with_partition_responses(vec![
                    PartitionProduceResponse::default()
                        .with_index(partition)
                        .with_error_code(error)
                        .with_base_offset(offset),
                ]),
        ]);
    let mut out = BytesMut::new();
    out.put_i32(42);
    out.put_u8(0);
    resp.encode(&mut out, VERSION).unwrap();
    Ok(out.freeze())
}

fn split(plan: Plan) -> Split {
    match plan {
        Plan::Split(s) => s,
        Plan::Forward => panic!("expected a split, got Forward"),
        Plan::ForwardNoReply => panic!("expected a split, got ForwardNoReply"),
        Plan::Answer(_) => panic!("expected a split, got Answer"),
    }
}

#[test]
fn keyless_batches_leave_a_slow_broker() {
    let p = proxy("strict-cost");
    slow_broker(&p, 1);
    let (head, produce, frame) = request(&[("t", 0, keyless()), ("t", 1, keyless())], -1, None);
    let s = split(plan(&p, 1, &Permit::Any, &head, &produce, &frame));
    assert_eq!(s.parts.len(), 1, "everything moved to one fast broker");
    let part = &s.parts[0];
    assert!(part.node_id == 2 || part.node_id == 3);
    let moved = entries(&part.frame);
    assert_eq!(moved.len(), 2);
    for (name, partition, records) in &moved {
        assert_eq!(name, "t");
        let leader = p.cluster.topic("t").unwrap().leader_of(*partition);
        assert_eq!(
            leader,
            Some(part.node_id),
            "target partition is led by the target broker"
        );
        assert_eq!(records, &keyless(), "record bytes unchanged");
    }
    assert_ne!(
        moved[0].1, moved[1].1,
        "one partition at most once per request"
    );
    // The request header (client id, correlation id) is the client's own.
    assert_eq!(
        &part.frame[..produce.body_offset],
        &frame[..produce.body_offset]
    );
}

#[test]
fn keyed_idempotent_transactional_and_unlisted_topics_stay_untouched() {
    let p = proxy("strict-cost");
    slow_broker(&p, 1);
    for entries in [
        vec![("t", 0, keyed())],
        vec![("other", 0, keyless())],
        vec![("tunknown", 0, keyless())],
    ] {
        let (head, produce, frame) = request(&entries, -1, None);
        assert!(matches!(
            plan(&p, 1, &Permit::Any, &head, &produce, &frame),
            Plan::Forward
        ));
    }
    let txn = batch(&[None], Compression::None, 5, true);
    let (head, produce, frame) = request(&[("t", 0, txn)], -1, Some("tx"));
    assert!(matches!(
        plan(&p, 1, &Permit::Any, &head, &produce, &frame),
        Plan::Forward
    ));
    // An idempotent producer kroute does not own, with `idempotent = false`: left alone.
    let text = "[upstream]\nbootstrap_servers = [\"127.0.0.1:1\"]\n[routing]\ninclude = [\"t*\"]\nidempotent = false\n";
    let no_idempotent = Proxy::new(Config::parse(text, "t").unwrap(), Metrics::new()).unwrap();
    let idempotent = batch(&[None], Compression::None, 5, false);
    let (head, produce, frame) = request(&[("t", 0, idempotent)], -1, None);
    assert!(matches!(
        plan(&no_idempotent, 1, &Permit::Any, &head, &produce, &frame),
        Plan::Forward
    ));
    // Strategy off: nothing moves.
    let off = proxy("off");
    slow_broker(&off, 1);
    let (head, produce, frame) = request(&[("t", 0, keyless())], -1, None);
    assert!(matches!(
        plan(&off, 1, &Permit::Any, &head, &produce, &frame),
        Plan::Forward
    ));
}

#[test]
fn mixed_request_splits_and_merges_back_into_client_partitions() {
    let p = proxy("strict-cost");
    slow_broker(&p, 1);
    let (head, produce, frame) = request(&[("t", 0, keyed()), ("t", 1, keyless())], -1, None);
    let s = split(plan(&p, 1, &Permit::Any, &head, &produce, &frame));
    assert_eq!(s.parts.len(), 2);
    assert_eq!(s.parts[0].node_id, 1, "home part first");
    assert_eq!(
        entries(&s.parts[0].frame),
        vec![("t".into(), 0, keyed())],
        "keyed batch stays, byte-identical"
    );
    let (_, target, _) = entries(&s.parts[1].frame)[0].clone();

    // Answers: home succeeds at offset 100 with throttle 5; the moved part fails with
    // NOT_LEADER_OR_FOLLOWER and throttle 9.
    let merged = s.merge.unwrap().merge(vec![
        part_answer(0, 0, 100, 5),
        part_answer(target, 6, 7, 9),
    ]);
    assert_eq!(&merged[..4], &42i32.to_be_bytes());
    let resp = ProduceResponse::decode(&mut merged.slice(5..), VERSION).unwrap();
    assert_eq!(resp.throttle_time_ms, 9);
    let parts: Vec<(i32, i16, i64)> = resp.responses[0]
        .partition_responses
        .iter()
        .map(|p| (p.index, p.error_code, p.base_offset))
        .collect();
    assert_eq!(
        parts,
        vec![(0, 0, 100), (1, 6, -1)],
        "client's partitions, target's errors, moved offset unknown"
    );
}

#[test]
fn a_mixed_batch_is_divided_and_answered_as_one() {
    let p = proxy("strict-cost");
    slow_broker(&p, 1);
    let (head, produce, frame) = request(&[("t", 0, mixed())], -1, None);
    let divided = crate::route::divide::divide(&mixed(), &mut InspectBudget::per_request());
    let divided = divided.unwrap();
    let answer = |stayed: (i16, i64), moved: (i16, i64)| {
        let s = split(plan(&p, 1, &Permit::Any, &head, &produce, &frame));
        assert_eq!(s.parts.len(), 2);
        assert_eq!(s.parts[0].node_id, 1);
        assert_eq!(
            entries(&s.parts[0].frame),
            vec![("t".into(), 0, divided.keyed.clone())],
            "the keyed records stay on the client's partition"
        );
        let (_, target, records) = entries(&s.parts[1].frame)[0].clone();
        assert_ne!(s.parts[1].node_id, 1);
        assert_eq!(records, divided.keyless);
        let merged = s.merge.unwrap().merge(vec![
            part_answer(0, stayed.0, stayed.1, 0),
            part_answer(target, moved.0, moved.1, 0),
        ]);
        let resp = ProduceResponse::decode(&mut merged.slice(5..), VERSION).unwrap();
        let p = &resp.responses[0].partition_responses;
        assert_eq!(p.len(), 1, "one answer for the client's one batch");
        (p[0].index, p[0].error_code, p[0].base_offset)
    };
    assert_eq!(
        answer((0, 100), (0, 7)),
        (0, 0, 100),
        "the base offset of the part that stayed"
    );
    assert_eq!(
        answer((0, 100), (6, -1)),
        (0, 6, -1),
        "the moved part's error"
    );
    assert_eq!(
        answer((6, -1), (0, 7)),
        (0, 6, -1),
        "the stayed part's error"
    );
}

#[test]
fn a_lost_part_is_a_retriable_error_for_its_partitions_only() {
    let p = proxy("strict-cost");
    slow_broker(&p, 1);
    let (head, produce, frame) = request(&[("t", 0, keyed()), ("t", 1, keyless())], -1, None);
    let s = split(plan(&p, 1, &Permit::Any, &head, &produce, &frame));
    let merged = s
        .merge
        .unwrap()
        .merge(vec![part_answer(0, 0, 3, 0), Err(UpstreamGone::Unanswered)]);
    let resp = ProduceResponse::decode(&mut merged.slice(5..), VERSION).unwrap();
    let errors: Vec<(i32, i16)> = resp.responses[0]
        .partition_responses
        .iter()
        .map(|p| (p.index, p.error_code))
        .collect();
    assert_eq!(errors, vec![(0, 0), (1, UNANSWERED)]);
}

#[test]
fn a_topic_named_twice_is_left_alone() {
    let p = proxy("strict-cost");
    slow_broker(&p, 1);
    let (head, produce, frame) = request(
        &[
            ("t", 0, keyless()),
            ("t2", 0, keyless()),
            ("t", 1, keyless()),
        ],
        -1,
        None,
    );
    assert!(matches!(
        plan(&p, 1, &Permit::Any, &head, &produce, &frame),
        Plan::Forward
    ));
}

#[test]
fn acks_zero_splits_without_a_merge() {
    let p = proxy("strict-cost");
    slow_broker(&p, 1);
    let (head, produce, frame) = request(&[("t", 0, keyless())], 0, None);
    let s = split(plan(&p, 1, &Permit::Any, &head, &produce, &frame));
    assert!(s.merge.is_none());
    assert_eq!(s.parts.len(), 1);
    assert_ne!(s.parts[0].node_id, 1);
}

#[test]
fn a_batch_already_on_the_chosen_broker_stays() {
    let p = proxy("strict-cost");
    slow_broker(&p, 2);
    // Equal-ish 1 and 3: over several requests from home 1, some stay (chosen home), some move
    // to 3, none to the slow broker 2 within a short run.
    let mut stayed = 0;
    for _ in 0..10 {
        let (head, produce, frame) = request(&[("t", 0, keyless())], -1, None);
        match plan(&p, 1, &Permit::Any, &head, &produce, &frame) {
            Plan::Forward => stayed += 1,
            Plan::Split(s) => assert!(s.parts.iter().all(|part| part.node_id != 2 || stayed > 100)),
            _ => panic!("unexpected plan"),
        }
    }
    assert!(stayed > 0 && stayed < 10, "stayed {stayed} of 10");
}

#[test]
fn batches_overflow_to_the_next_broker_when_partitions_run_out() {
    let p = proxy("strict-cost");
    // Broker 3 leads one partition of "tx", broker 2 two; broker 1 (slow) three.
    p.cluster.observe_topics(vec![(
        "tx".into(),
        Some(TopicLayout::new([
            (0, 1),
            (1, 1),
            (2, 1),
            (3, 3),
            (4, 2),
            (5, 2),
        ])),
    )]);
    slow_broker(&p, 1);
    let (head, produce, frame) = request(
        &[
            ("tx", 0, keyless()),
            ("tx", 1, keyless()),
            ("tx", 2, keyless()),
        ],
        -1,
        None,
    );
    let s = split(plan(&p, 1, &Permit::Any, &head, &produce, &frame));
    let mut targets: Vec<i32> = s
        .parts
        .iter()
        .flat_map(|part| entries(&part.frame))
        .map(|e| e.1)
        .collect();
    targets.sort_unstable();
    assert_eq!(
        targets,
        vec![3, 4, 5],
        "every batch left the slow broker, to distinct free partitions"
    );
    assert!(s.parts.iter().all(|part| part.node_id != 1));
}

#[tokio::test]
async fn an_owned_producers_retry_goes_where_its_first_attempt_went_with_the_same_numbers() {
    let (p, broker) = silent_proxy("").await;
    slow_broker(&p, 1);
    p.router.producers.own(5, Instant::now());
    // The client numbered it from 1000 on partition 0.
    let client_numbers = batch(&[None, None], Compression::None, 5, false);
    let idempotent = crate::route::batch::renumber(&client_numbers, 0, 1000).unwrap();
    let (head, produce, frame) = request(&[("t", 0, idempotent)], -1, None);

    let first = split(plan(&p, 1, &Permit::Any, &head, &produce, &frame));
    assert_eq!(first.parts.len(), 1);
    let sent = entries(&first.parts[0].frame);
    let (_, target, records) = sent[0].clone();
    assert!(target >= 2, "moved off the slow broker 1: {target}");
    assert_eq!(
        &records[53..57],
        &0i32.to_be_bytes(),
        "kroute's numbering of partition {target}"
    );
    // The broker read it, and its connection ended before it answered: no answer came...
    broker.cut_after(1).await;
    let part = first.parts.into_iter().next().unwrap();
    assert!(part.sent.unwrap().await.unwrap().is_err());

    // ...so the client's retry goes to the same partition with the same numbers.
    let retry = split(plan(&p, 1, &Permit::Any, &head, &produce, &frame));
    assert_eq!(entries(&retry.parts[0].frame), sent);
    assert!(
        retry
            .parts
            .into_iter()
            .next()
            .unwrap()
            .sent
            .unwrap()
            .await
            .unwrap()
            .is_err()
    );
}

/// An owned producer's batch mixing keyed and keyless records is numbered as two client
/// batches: the keyed records on the client's partition, the keyless ones moved; the client's
/// retry of the batch is divided the same way and each part goes where it went first, with
/// the same numbers.
#[tokio::test]
async fn an_owned_producers_mixed_batch_is_divided_and_its_retry_follows_both_parts() {
    let (p, broker) = silent_proxy("").await;
    slow_broker(&p, 1);
    p.router.producers.own(5, Instant::now());
    let keys = [None, Some("k"), None, Some("k"), None];
    let client_numbers = batch(&keys, Compression::None, 5, false);
    let mixed = crate::route::batch::renumber(&client_numbers, 0, 1000).unwrap();
    let (head, produce, frame) = request(&[("t", 0, mixed)], -1, None);

    let mut first = Vec::new();
    for attempt in ["first", "retry"] {
        let s = split(plan(&p, 1, &Permit::Any, &head, &produce, &frame));
        assert_eq!(s.parts.len(), 2, "{attempt}");
        let sent: Vec<(i32, (String, i32, Bytes))> = s
            .parts
            .iter()
            .flat_map(|part| entries(&part.frame).into_iter().map(|e| (part.node_id, e)))
            .collect();
        let (node, (_, partition, keyed)) = &sent[0];
        assert_eq!((*node, *partition), (1, 0), "{attempt}: keyed records stay");
        let (node, (_, partition, keyless)) = &sent[1];
        assert!(
            *node != 1 && *partition != 0,
            "{attempt}: keyless records move"
        );
        for (part, count) in [(keyed, 2), (keyless, 3)] {
            let records = RecordBatchDecoder::decode(&mut part.clone())
                .unwrap()
                .records;
            assert_eq!(records.len(), count, "{attempt}");
            assert!(records.iter().all(|r| r.key.is_some() == (count == 2)));
            assert_eq!(
                &part[53..57],
                &0i32.to_be_bytes(),
                "each lane's first number"
            );
        }
        if attempt == "first" {
            first = sent;
        } else {
            assert_eq!(sent, first, "the retry goes where the first attempt went");
        }
        // The broker read both parts, and its connections ended before it answered: no
        // answer came, and the client retries.
        broker.cut_after(2).await;
        for part in s.parts {
            assert!(part.sent.unwrap().await.unwrap().is_err());
        }
    }
}

/// A client whose metadata is stale sends its partition to the wrong broker's address (kroute
/// told it REQUEST_TIMED_OUT, which makes no client refresh): kroute sends the batch to the
/// leader it knows, the first attempt and the retry alike.
#[tokio::test]
async fn an_owned_producers_batch_for_its_partition_goes_to_the_leader_kroute_knows() {
    let p = proxy("strict-cost");
    p.router.producers.own(5, Instant::now());
    let client_numbers = batch(&[Some("j"), Some("k")], Compression::None, 5, false);
    let keyed = crate::route::batch::renumber(&client_numbers, 0, 0).unwrap();
    // Partition 4 is led by broker 3 in kroute's view; the client sent it to broker 1.
    let (head, produce, frame) = request(&[("t", 4, keyed)], -1, None);
    for attempt in ["first", "retry"] {
        let s = split(plan(&p, 1, &Permit::Any, &head, &produce, &frame));
        assert_eq!(s.parts.len(), 1);
        assert_eq!(s.parts[0].node_id, 3, "{attempt}");
        assert_eq!(
            entries(&s.parts[0].frame)[0].1,
            4,
            "{attempt}: kept on its partition"
        );
        // (No broker here: "none came", and the client retries.)
        let part = s.parts.into_iter().next().unwrap();
        assert!(part.sent.unwrap().await.unwrap().is_err());
    }
}

/// A batch of owned producer 5, numbered by the client from `base`.
fn numbered_from(base: i32) -> Bytes {
    let b = batch(&[None, None], Compression::None, 5, false);
    crate::route::batch::renumber(&b, 0, base).unwrap()
}

/// The leader of partition `partition` of topic "t" in [`proxy`]'s layout.
fn leader(partition: i32) -> i32 {
    partition / 2 + 1
}

/// The (partition, error) pairs of a merged answer.
fn merged_errors(merged: &Bytes) -> Vec<(i32, i16)> {
    let header_version = ApiKey::Produce.response_header_version(VERSION);
    let (_, mut body) = crate::protocol::header::split_response(merged, header_version).unwrap();
    let r = ProduceResponse::decode(&mut body, VERSION).unwrap();
    r.responses[0]
        .partition_responses
        .iter()
        .map(|p| (p.index, p.error_code))
        .collect()
}

/// Fills all six lanes of producer 5 with a first batch each (a lane's first batch goes alone
/// until acknowledged; the proxy's [`SilentBroker`] never answers, so each stays in flight);
/// returns the (client partition, lane) of each.
fn fill_every_lane(p: &Arc<Proxy>) -> Vec<(i32, i32)> {
    p.router.producers.own(5, Instant::now());
    let mut lanes = Vec::new();
    for partition in 0..6 {
        let (head, produce, frame) = request(&[("t", partition, numbered_from(0))], -1, None);
        let s = split(plan(
            p,
            leader(partition),
            &Permit::Any,
            &head,
            &produce,
            &frame,
        ));
        let (_, target, _) = entries(&s.parts[0].frame)[0].clone();
        lanes.push((partition, target));
    }
    let mut targets: Vec<i32> = lanes.iter().map(|l| l.1).collect();
    targets.sort_unstable();
    assert_eq!(targets, vec![0, 1, 2, 3, 4, 5], "one first batch per lane");
    lanes
}

fn key(partition: i32, base: i32) -> BatchKey {
    BatchKey {
        topic: Bytes::from_static(b"t"),
        partition,
        epoch: 0,
        base,
        records: 2,
        content: (partition as u32) << 20 ^ base as u32,
    }
}

#[tokio::test]
async fn a_batch_no_lane_takes_waits_in_kroute_and_goes_when_an_answer_frees_one() {
    let (p, broker) = silent_proxy("").await;
    let lanes = fill_every_lane(&p);
    let owner = p.router.producers.get(5).unwrap();

    let (head, produce, frame) = request(&[("t", 0, numbered_from(2))], -1, None);
    let mut s = split(plan(&p, leader(0), &Permit::Any, &head, &produce, &frame));
    assert_eq!(s.parts.len(), 1);
    assert!(s.parts[0].frame.is_empty(), "nothing sent yet");
    let mut answer = s.parts[0].sent.take().unwrap();
    assert!(answer.try_recv().is_err(), "no answer while it waits");
    assert_eq!(owner.lock().sequences.lookup(&key(0, 2)), Lookup::Fresh);

    // The first batch of client partition 3 is acknowledged: its lane takes more now.
    let (_, freed) = lanes[3];
    let mut unsent = Vec::new();
    {
        let mut state = owner.lock();
        state.sequences.resolve(&key(3, 0), freed, 0, code::NONE);
        release(&p, &owner, &mut state, Instant::now(), &mut unsent);
        // Numbered on the freed lane, right after the acknowledged batch.
        assert_eq!(state.sequences.lookup(&key(0, 2)), Lookup::StillInFlight);
    }
    drop(unsent);
    // The broker read the six first batches and this one; its connections end unanswered.
    broker.cut_after(7).await;
    let answers = vec![answer.await.unwrap()];
    assert_eq!(
        merged_errors(&s.merge.unwrap().merge(answers)),
        vec![(0, UNANSWERED)]
    );
    assert_eq!(
        owner.lock().sequences.lookup(&key(0, 2)),
        Lookup::Resend {
            target: freed,
            seq: 2
        }
    );
}

#[tokio::test]
async fn a_waiting_batch_is_answered_retriable_at_its_deadline_and_later_ones_follow_it() {
    let (p, _broker) = silent_proxy("").await;
    fill_every_lane(&p);
    let owner = p.router.producers.get(5).unwrap();
    let mut waiting = Vec::new();
    for base in [2, 4] {
        let (head, produce, frame) = request(&[("t", 0, numbered_from(base))], -1, None);
        let mut s = split(plan(&p, leader(0), &Permit::Any, &head, &produce, &frame));
        assert!(s.parts[0].frame.is_empty(), "batch {base} waits");
        let answer = s.parts[0].sent.take().unwrap();
        waiting.push((s.merge.unwrap(), answer));
    }
    let late = Instant::now() + super::waiting::wait_limit(i32::MAX) + Duration::from_millis(1);
    let mut unsent = Vec::new();
    release(&p, &owner, &mut owner.lock(), late, &mut unsent);
    for (merge, answer) in waiting {
        let merged = merge.merge(vec![answer.await.unwrap()]);
        assert_eq!(merged_errors(&merged), vec![(0, code::REQUEST_TIMED_OUT)]);
    }
    // Neither got a number: the client's retries are fresh batches.
    let mut state = owner.lock();
    assert_eq!(state.sequences.lookup(&key(0, 2)), Lookup::Fresh);
    assert_eq!(state.sequences.lookup(&key(0, 4)), Lookup::Fresh);
}

#[test]
fn a_waiting_batch_is_answered_under_the_client_partition_wherever_it_went() {
    let merge_of = |answer: Reply| {
        let merge = merge::ProduceMerge {
            version: VERSION,
            correlation_id: 42,
            topics: vec![topic("t")],
            original: vec![vec![0, 1]],
            routes: vec![vec![
                merge::Route::Waiting { part: 1 },
                merge::Route::Part {
                    part: 0,
                    partition: 1,
                    moved: false,
                },
            ]],
            withhold: None,
        };
        let merged = Box::new(merge).merge(vec![part_answer(1, 0, 50, 0), answer]);
        let resp = ProduceResponse::decode(&mut merged.slice(5..), VERSION).unwrap();
        resp.responses[0]
            .partition_responses
            .iter()
            .map(|p| (p.index, p.error_code, p.base_offset))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        merge_of(part_answer(4, 0, 77, 0)),
        vec![(0, 0, -1), (1, 0, 50)],
        "placed on another partition: its offset is not the client's"
    );
    assert_eq!(
        merge_of(part_answer(0, 0, 77, 0)),
        vec![(0, 0, 77), (1, 0, 50)],
        "placed on the client's own partition: offsets are kept"
    );
    assert_eq!(
        merge_of(Err(UpstreamGone::Unanswered)),
        vec![(0, UNANSWERED, -1), (1, 0, 50)]
    );
}

#[test]
fn a_success_is_merged_as_retriable_while_an_earlier_batch_of_its_partition_waits() {
    let p = proxy("strict-cost");
    p.router.producers.own(5, Instant::now());
    let owner = p.router.producers.get(5).unwrap();
    let (a, b) = (key(0, 0), key(0, 2));
    {
        // A on lane 0 and B on lane 2, each lane's first batch; A fails, B is appended.
        let sequences = &mut owner.lock().sequences;
        for (k, lane) in [(&a, 0), (&b, 2)] {
            assert_eq!(sequences.lookup(k), Lookup::Fresh);
            assert_eq!(sequences.assign(k, lane), Some(0));
        }
        sequences.resolve(&a, 0, 0, code::UNANSWERED);
        sequences.resolve(&b, 2, 0, code::NONE);
    }
    // B's answer, as the client's request for partition 0 gets it (B moved to partition 2).
    let merge_b = |route: merge::Route, answers: Vec<Reply>| {
        let merge = merge::ProduceMerge {
            version: VERSION,
            correlation_id: 42,
            topics: vec![topic("t")],
            original: vec![vec![0]],
            routes: vec![vec![route]],
            withhold: None,
        }
        .withholding(merge::Withhold {
            owner: owner.clone(),
            batches: vec![vec![vec![b.clone()]]],
            withheld: p.metrics.sequencing.success_withheld.clone(),
        });
        merged_errors(&Box::new(merge).merge(answers))
    };
    let moved = || merge::Route::Part {
        part: 0,
        partition: 2,
        moved: true,
    };
    let retriable = vec![(0, code::REQUEST_TIMED_OUT)];
    assert_eq!(merge_b(moved(), vec![part_answer(2, 0, 7, 0)]), retriable);
    // B's retry is answered from memory: still withheld while A waits.
    assert_eq!(owner.lock().sequences.lookup(&b), Lookup::Acknowledged);
    let from_memory = merge::Route::Local { error: code::NONE };
    assert_eq!(merge_b(from_memory.clone(), vec![]), retriable);
    // Errors pass as they are.
    const NOT_ENOUGH_REPLICAS: i16 = 19;
    let refused = part_answer(2, NOT_ENOUGH_REPLICAS, 7, 0);
    assert_eq!(
        merge_b(moved(), vec![refused]),
        vec![(0, NOT_ENOUGH_REPLICAS)]
    );
    // A's retry is appended: B's success goes through.
    assert_eq!(
        owner.lock().sequences.lookup(&a),
        Lookup::Resend { target: 0, seq: 0 }
    );
    owner.lock().sequences.resolve(&a, 0, 0, code::NONE);
    assert_eq!(merge_b(from_memory, vec![]), vec![(0, code::NONE)]);
}

#[tokio::test]
async fn a_busy_lane_spills_to_an_idle_partition_of_a_slower_broker() {
    // (With joining off: a batch that cannot be joined queues deep, see the end.)
    let (p, _broker) = silent_proxy("lane_spill_depth = 1\njoin_max_bytes = 0").await;
    slow_broker(&p, 1);
    let lanes = fill_every_lane(&p);
    let owner = p.router.producers.get(5).unwrap();
    // Every lane's first batch acknowledged: all six lanes take batches, none holds any.
    for (partition, lane) in lanes {
        owner
            .lock()
            .sequences
            .resolve(&key(partition, 0), lane, 0, code::NONE);
    }
    let send = |partition: i32, base: i32| {
        let (head, produce, frame) = request(&[("t", partition, numbered_from(base))], -1, None);
        let s = split(plan(
            &p,
            leader(partition),
            &Permit::Any,
            &head,
            &produce,
            &frame,
        ));
        entries(&s.parts[0].frame)[0].1
    };
    // Six batches, none answered: each takes a lane of its own, so the fast brokers' four
    // lanes fill first and the last two go to the slow broker's idle ones.
    let mut lanes: Vec<i32> = (0..6).map(|partition| send(partition, 2)).collect();
    let fast_first: Vec<i32> = lanes.iter().take(4).map(|l| leader(*l)).collect();
    assert!(
        fast_first.iter().all(|b| *b != 1),
        "fast brokers' lanes first: {lanes:?}"
    );
    lanes.sort_unstable();
    assert_eq!(
        lanes,
        vec![0, 1, 2, 3, 4, 5],
        "one unresolved batch per lane"
    );
    // No lane is idle now: the next batch queues on a fast broker's lane.
    let deep = send(0, 4);
    assert_ne!(
        leader(deep),
        1,
        "queued on the slow broker: partition {deep}"
    );
}

#[tokio::test]
async fn batches_waiting_for_a_busy_lane_go_out_joined_when_it_frees() {
    let (p, broker) = silent_proxy("").await;
    let lanes = fill_every_lane(&p);
    let owner = p.router.producers.get(5).unwrap();
    // Every lane carries its first batch: these three wait (two of client partition 0).
    let mut waiting = Vec::new();
    for (partition, base) in [(0, 2), (1, 2), (0, 4)] {
        let (head, produce, frame) = request(&[("t", partition, numbered_from(base))], -1, None);
        let mut s = split(plan(
            &p,
            leader(partition),
            &Permit::Any,
            &head,
            &produce,
            &frame,
        ));
        assert!(s.parts[0].frame.is_empty(), "{partition}/{base} waits");
        let answer = s.parts[0].sent.take().unwrap();
        waiting.push((s.merge.unwrap(), answer));
    }
    let (_, freed) = lanes[3];
    let mut unsent = Vec::new();
    {
        let mut state = owner.lock();
        state.sequences.resolve(&key(3, 0), freed, 0, code::NONE);
        release(&p, &owner, &mut state, Instant::now(), &mut unsent);
        // All three went out on the freed lane, as one batch.
        for (partition, base) in [(0, 2), (1, 2), (0, 4)] {
            assert_eq!(
                state.sequences.lookup(&key(partition, base)),
                Lookup::StillInFlight
            );
        }
        assert!(state.waiting.is_empty());
    }
    drop(unsent);
    // The broker read the six first batches and the joined one; its connections end
    // unanswered: "none came", to each batch's request.
    broker.cut_after(7).await;
    for ((merge, answer), partition) in waiting.into_iter().zip([0, 1, 0]) {
        let merged = merge.merge(vec![answer.await.unwrap()]);
        assert_eq!(merged_errors(&merged), vec![(partition, UNANSWERED)]);
    }
    // A retry of any of them resends the joined batch whole, with the same numbers.
    let Lookup::ResendJoined(joined) = owner.lock().sequences.lookup(&key(1, 2)) else {
        panic!("the joined batch is resent");
    };
    assert_eq!(joined.target, freed);
    let members: Vec<(i32, i32, i32)> = joined
        .members
        .iter()
        .map(|(k, seq)| (k.partition, k.base, *seq))
        .collect();
    assert_eq!(members, vec![(0, 2, 2), (1, 2, 4), (0, 4, 6)]);
    let batches = RecordBatchDecoder::decode_all(&mut joined.records.clone()).unwrap();
    assert_eq!(batches.len(), 1);
    let sequences: Vec<i32> = batches[0].records.iter().map(|r| r.sequence).collect();
    assert_eq!(sequences, vec![2, 3, 4, 5, 6, 7]);
    // The others are in flight again with it.
    assert_eq!(
        owner.lock().sequences.lookup(&key(0, 4)),
        Lookup::StillInFlight
    );
}

#[tokio::test]
async fn batches_of_one_request_beyond_the_fast_brokers_partitions_join_its_batches_there() {
    let (p, broker) = silent_proxy("").await;
    p.cluster.observe_topics(vec![(
        "tj".into(),
        Some(TopicLayout::new([
            (0, 1),
            (1, 1),
            (2, 1),
            (3, 1),
            (4, 2),
            (5, 2),
            (6, 3),
        ])),
    )]);
    // Broker 2 is the fast one.
    let now = Instant::now();
    for (node, ms) in [(1, 40), (2, 2), (3, 40)] {
        let score = p.router.scores.broker(node);
        score.sent(now, 1000);
        score.answered(
            now,
            now,
            now + Duration::from_millis(ms),
            1000,
            &p.router.scores.config,
        );
    }
    p.router.producers.own(5, Instant::now());
    let entries_in: Vec<(&str, i32, Bytes)> = (0..4)
        .map(|partition| ("tj", partition, numbered_from(0)))
        .collect();
    let (head, produce, frame) = request(&entries_in, -1, None);
    let mut s = split(plan(&p, 1, &Permit::Any, &head, &produce, &frame));
    assert!(
        s.parts.iter().all(|part| part.node_id == 2),
        "all to the fast broker"
    );
    // Broker 2 leads two partitions: the four batches went out as two joined batches (one
    // request per partition: they use different connections of the producer).
    let sent: Vec<(String, i32, Bytes)> = s.parts.iter().flat_map(|p| entries(&p.frame)).collect();
    let mut targets: Vec<i32> = sent.iter().map(|e| e.1).collect();
    targets.sort_unstable();
    assert_eq!(targets, vec![4, 5]);
    for (_, target, records) in &sent {
        let batches = RecordBatchDecoder::decode_all(&mut records.clone()).unwrap();
        assert_eq!(batches.len(), 1, "one batch per partition");
        let sequences: Vec<i32> = batches[0].records.iter().map(|r| r.sequence).collect();
        assert_eq!(sequences, vec![0, 1, 2, 3], "partition {target}");
    }
    // The broker read both requests; its connections end unanswered: "none came", for each
    // client partition.
    broker.cut_after(s.parts.len()).await;
    let mut answers = Vec::new();
    for part in s.parts.iter_mut() {
        answers.push(part.sent.take().unwrap().await.unwrap());
    }
    let merged = s.merge.take().unwrap().merge(answers);
    assert_eq!(
        merged_errors(&merged),
        (0..4).map(|p| (p, UNANSWERED)).collect::<Vec<_>>()
    );
    // A retry of the batch that joined resends the joined batch whole.
    let owner = p.router.producers.get(5).unwrap();
    let joiner = BatchKey {
        topic: Bytes::from_static(b"tj"),
        ..key(2, 0)
    };
    let Lookup::ResendJoined(joined) = owner.lock().sequences.lookup(&joiner) else {
        panic!("resent whole");
    };
    let members: Vec<(i32, i32)> = joined
        .members
        .iter()
        .map(|(k, s)| (k.partition, *s))
        .collect();
    assert_eq!(members, vec![(0, 0), (2, 2)]);
    assert!([4, 5].contains(&joined.target));
}
