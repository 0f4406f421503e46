//! Recording a broker's answer to renumbered batches in their producer's sequence state.
//!
//! Each part carrying renumbered batches has a hook on its pending reply ([`AnswerHook`]): the
//! producer connection's reader runs it when the broker's answer arrives (or when the request
//! is dropped unanswered), in the order the broker answered, and it records every batch's
//! outcome under the producer's lock before the answer goes on towards the client. So a
//! batch's state follows what happened on the wire even if the client connection that sent it
//! is gone (a batch is "in flight" exactly while a copy of it is unanswered), and outcomes on
//! one connection are recorded in the order the broker decided them.
//!
//! Recording may change the error code the client sees: an OUT_OF_ORDER_SEQUENCE_NUMBER that
//! kroute's numbering caused becomes REQUEST_TIMED_OUT ([`crate::route::sequence`]).

use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use kafka_protocol::messages::produce_response::LeaderIdAndEpoch;
use kafka_protocol::messages::{ApiKey, ProduceResponse, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable};
use tracing::{debug, warn};

use super::waiting::release;
use crate::metrics::SequenceMetrics;
use crate::protocol::header::split_response;
use crate::route::Context;
use crate::route::producers::OwnedProducer;
use crate::route::sequence::{BatchKey, Producer, code};
use crate::upstream::{AnswerHook, Reply, UpstreamGone};

/// How kroute numbered one client batch of a part.
#[derive(Debug, Clone)]
pub struct Numbered {
    pub topic: TopicName,
    pub key: BatchKey,
    pub target: i32,
    pub seq: i32,
}

impl Numbered {
    /// The members of a joined batch resent on partition `target` of `topic`.
    pub fn members(topic: &TopicName, target: i32, members: Vec<(BatchKey, i32)>) -> Vec<Self> {
        members
            .into_iter()
            .map(|(key, seq)| Numbered {
                topic: topic.clone(),
                key,
                target,
                seq,
            })
            .collect()
    }
}

/// The hook that records a part's answer for its renumbered `batches`, then places the
/// producer's waiting batches that the answer lets in ([`super::waiting`]). This is the one
/// place where the path turns back: an answer frees lanes, and the batches waiting for one go
/// through place, number and send again, under the same lock.
pub fn recorder(
    ctx: Arc<dyn Context>,
    owner: Arc<OwnedProducer>,
    version: i16,
    batches: Vec<Numbered>,
) -> AnswerHook {
    Box::new(move |answer| {
        let mut unsent = Vec::new();
        let answer = {
            let mut state = owner.lock();
            let metrics = &ctx.metrics().sequencing;
            let recorded = record(&mut state.sequences, metrics, version, &batches, answer);
            // kroute chose these batches' brokers from its view: without this, its resends
            // would go to the old leader until the next periodic refresh (the client may not
            // refresh either: a retriable error kroute reports makes none of them ask). Where
            // the broker named the new leader (Produce v10+, KIP-951), the batches `release`
            // places next go there at once; the refresh confirms it and finds other moves.
            if !recorded.moved.is_empty() {
                for (topic, partition, named) in &recorded.moved {
                    ctx.cluster().leader_moved(
                        topic,
                        *partition,
                        named.leader_id.0,
                        named.leader_epoch,
                    );
                }
                ctx.cluster().stale();
            }
            release(&ctx, &owner, &mut state, Instant::now(), &mut unsent);
            recorded.answer
        };
        // Dropping an unsent request records its outcome, under the producer's lock.
        drop(unsent);
        answer
    })
}

/// What [`record`] made of a part's answer.
pub struct Recorded {
    /// The answer to pass on, with error codes as the client must see them.
    pub answer: Reply,
    /// The partitions whose broker said it does not lead them, with the leader it named
    /// instead (Produce v10+; leader -1 if none): kroute's view of them is out of date.
    pub moved: Vec<(TopicName, i32, LeaderIdAndEpoch)>,
}

/// Records one part's answer for its renumbered `batches`.
pub fn record(
    sequences: &mut Producer,
    metrics: &SequenceMetrics,
    version: i16,
    batches: &[Numbered],
    answer: Reply,
) -> Recorded {
    let header_version = ApiKey::Produce.response_header_version(version);
    let decoded = answer.as_ref().ok().and_then(|payload| {
        let (header, mut body) = split_response(payload, header_version).ok()?;
        Some((header, ProduceResponse::decode(&mut body, version).ok()?))
    });
    let Some((header, mut response)) = decoded else {
        // No answer (or none kroute can read): each batch may or may not be appended, unless
        // this request never left kroute.
        let (said, gone) = match answer {
            Err(UpstreamGone::NeverSent) => (code::NEVER_SENT, UpstreamGone::NeverSent),
            _ => (code::UNANSWERED, UpstreamGone::Unanswered),
        };
        for b in batches {
            sequences.resolve(&b.key, b.target, b.seq, said);
            tracing::trace!(key = ?b.key, b.target, b.seq, said, "unanswered");
        }
        return Recorded {
            answer: Err(gone),
            moved: Vec::new(),
        };
    };
    let mut moved = Vec::new();
    // What the broker said per partition, before it is rewritten for the client: the batches
    // of a joined batch share one partition answer.
    let mut said_for: Vec<(&TopicName, i32, i16)> = Vec::new();
    for b in batches {
        let found = response
            .responses
            .iter_mut()
            .filter(|t| t.name == b.topic)
            .flat_map(|t| t.partition_responses.iter_mut())
            .find(|p| p.index == b.target);
        let Some(p) = found else {
            sequences.resolve(&b.key, b.target, b.seq, code::UNANSWERED);
            continue;
        };
        // A broker's code never reads as kroute's own "never sent" (a broken broker could
        // send -32768): that would make an appended batch a hole, and its retry a duplicate.
        let broker_code = match p.error_code {
            code::NEVER_SENT => code::UNKNOWN_SERVER_ERROR,
            error => error,
        };
        let said = match said_for.iter().find(|s| *s.0 == b.topic && s.1 == b.target) {
            Some(s) => s.2,
            None => {
                said_for.push((&b.topic, b.target, broker_code));
                if code::leader_moved(broker_code) {
                    moved.push((b.topic.clone(), b.target, p.current_leader.clone()));
                }
                broker_code
            }
        };
        let reported = sequences.resolve(&b.key, b.target, b.seq, said);
        tracing::trace!(key = ?b.key, b.target, b.seq, said, reported, "answered");
        if said == code::OUT_OF_ORDER_SEQUENCE_NUMBER {
            count_out_of_order(metrics, b, reported == said);
        }
        if reported != said {
            p.error_code = reported;
            p.error_message = None;
            p.base_offset = -1;
            p.log_append_time_ms = -1;
            p.log_start_offset = -1;
            p.record_errors.clear();
        }
    }
    let mut out = BytesMut::with_capacity(header.len() + 64);
    out.extend_from_slice(&header);
    let answer = match response.encode(&mut out, version) {
        Ok(()) => Ok(out.freeze()),
        Err(_) => Err(UpstreamGone::Unanswered),
    };
    Recorded { answer, moved }
}

/// Counts an OUT_OF_ORDER_SEQUENCE_NUMBER for batch `b`: `passed` to the client where
/// kroute's numbering did not cause it (the client then resets its producer state, worth a
/// warning), hidden as retriable where it did.
fn count_out_of_order(metrics: &SequenceMetrics, b: &Numbered, passed: bool) {
    if passed {
        metrics.sequence_errors_passed.increment(1);
        warn!(
            topic = %b.topic.as_str(),
            partition = b.target,
            sequence = b.seq,
            epoch = b.key.epoch,
            "a broker refused kroute's numbering where nothing was missing before it; \
             the client resets its producer state"
        );
    } else {
        debug!(key = ?b.key, target = b.target, seq = b.seq, "kroute's out-of-order hidden");
        metrics.sequence_errors_hidden.increment(1);
    }
}

/// An answer for tests: one topic, (partition, error) pairs.
#[cfg(test)]
pub fn answer_for_tests(version: i16, topic: &TopicName, partitions: &[(i32, i16)]) -> Reply {
    use bytes::{BufMut, Bytes};
    use kafka_protocol::messages::produce_response::{
        PartitionProduceResponse, TopicProduceResponse,
    };
    let response = ProduceResponse::default().with_responses(vec![
        TopicProduceResponse::default()
            .with_name(topic.clone())
            .with_partition_responses(
                partitions
                    .iter()
                    .map(|(i, e)| {
                        PartitionProduceResponse::default()
                            .with_index(*i)
                            .with_error_code(*e)
                    })
                    .collect(),
            ),
    ]);
    let mut out = BytesMut::new();
    out.put_i32(7);
    if ApiKey::Produce.response_header_version(version) >= 1 {
        out.put_u8(0);
    }
    response
        .encode(&mut out, version)
        .map_err(|_| UpstreamGone::Unanswered)?;
    Ok::<Bytes, UpstreamGone>(out.freeze())
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use kafka_protocol::protocol::StrBytes;

    use super::*;
    use crate::metrics::Metrics;
    use crate::route::sequence::Lookup;

    const VERSION: i16 = 11;

    fn topic() -> TopicName {
        TopicName(StrBytes::from_static_str("t"))
    }

    fn key(partition: i32, base: i32) -> BatchKey {
        BatchKey {
            topic: Bytes::from_static(b"t"),
            partition,
            epoch: 0,
            base,
            records: 2,
            content: base as u32,
        }
    }

    fn numbered(p: &mut Producer, k: &BatchKey, target: i32) -> Numbered {
        assert_eq!(p.lookup(k), Lookup::Fresh);
        let seq = p.assign(k, target).expect("lane takes it");
        Numbered {
            topic: topic(),
            key: k.clone(),
            target,
            seq,
        }
    }

    fn errors(answer: &Reply) -> Vec<(i32, i16)> {
        let header_version = ApiKey::Produce.response_header_version(VERSION);
        let payload = answer.as_ref().expect("an answer");
        let (_, mut body) = split_response(payload, header_version).expect("header");
        let r = ProduceResponse::decode(&mut body, VERSION).expect("body");
        r.responses[0]
            .partition_responses
            .iter()
            .map(|p| (p.index, p.error_code))
            .collect()
    }

    #[test]
    fn an_overtaking_batch_is_reported_retriable_and_an_appended_one_as_it_was() {
        let metrics = Metrics::new().sequencing;
        let mut p = Producer::default();
        // The lane's first batch goes alone; once acknowledged, two more share the lane.
        let first = numbered(&mut p, &key(0, 0), 0);
        let ok = answer_for_tests(VERSION, &topic(), &[(0, 0)]);
        assert!(
            record(&mut p, &metrics, VERSION, &[first], ok)
                .answer
                .is_ok()
        );
        let a = numbered(&mut p, &key(0, 2), 0);
        let b = numbered(&mut p, &key(1, 0), 0);
        // b overtook a (different parts): the broker refuses b's numbers for now.
        let answer = answer_for_tests(
            VERSION,
            &topic(),
            &[(0, code::OUT_OF_ORDER_SEQUENCE_NUMBER)],
        );
        let passed = record(&mut p, &metrics, VERSION, std::slice::from_ref(&b), answer).answer;
        assert_eq!(errors(&passed), vec![(0, code::REQUEST_TIMED_OUT)]);
        let answer = answer_for_tests(VERSION, &topic(), &[(0, 0)]);
        assert_eq!(
            errors(&record(&mut p, &metrics, VERSION, &[a], answer).answer),
            vec![(0, 0)]
        );
        // b's retry goes out again with the same numbers.
        assert_eq!(
            p.lookup(&b.key),
            Lookup::Resend {
                target: 0,
                seq: b.seq
            }
        );
    }

    #[test]
    fn a_broker_code_equal_to_never_sent_is_an_unknown_error_not_a_hole() {
        let metrics = Metrics::new().sequencing;
        let mut p = Producer::default();
        let first = numbered(&mut p, &key(0, 0), 0);
        let odd = answer_for_tests(VERSION, &topic(), &[(0, code::NEVER_SENT)]);
        let passed = record(&mut p, &metrics, VERSION, std::slice::from_ref(&first), odd).answer;
        // The client hears what the broker said; kroute takes it as an unknown error: perhaps
        // appended, so the retry goes where the batch went, with the same numbers.
        assert_eq!(errors(&passed), vec![(0, code::NEVER_SENT)]);
        assert_eq!(
            p.lookup(&first.key),
            Lookup::Resend {
                target: 0,
                seq: first.seq
            }
        );
    }

    #[test]
    fn every_batch_of_a_joined_batch_is_judged_by_what_the_broker_said() {
        let metrics = Metrics::new().sequencing;
        let mut p = Producer::default();
        let first = numbered(&mut p, &key(0, 0), 0);
        let ok = answer_for_tests(VERSION, &topic(), &[(0, 0)]);
        assert!(
            record(&mut p, &metrics, VERSION, &[first], ok)
                .answer
                .is_ok()
        );
        let head = numbered(&mut p, &key(0, 2), 0);
        let other = key(1, 0);
        assert_eq!(p.lookup(&other), Lookup::Fresh);
        let seq = p.join(&other, 0, head.seq).expect("joined");
        p.set_joined(&other.topic, 0, 0, head.seq, &Bytes::from_static(b"joined"));
        let joiner = Numbered {
            topic: topic(),
            key: other.clone(),
            target: 0,
            seq,
        };
        // A batch numbered behind it keeps the lane from being rewound when both are
        // resolved, so each member's state is what its own resolution made of it.
        let _behind = numbered(&mut p, &key(2, 0), 0);
        // One partition answer for both; the first batch's rewrite (REQUEST_TIMED_OUT, which
        // would leave the second pending as if the broker might have appended it) must not
        // decide the second's outcome.
        let refused = answer_for_tests(VERSION, &topic(), &[(0, code::MESSAGE_TOO_LARGE)]);
        let passed = record(&mut p, &metrics, VERSION, &[head.clone(), joiner], refused).answer;
        assert_eq!(errors(&passed), vec![(0, code::REQUEST_TIMED_OUT)]);
        // Both are to be retried alone, renumbered.
        assert_eq!(p.lookup(&head.key), Lookup::Fresh);
        assert_eq!(p.lookup(&other), Lookup::Fresh);
        assert!(!p.joins(&other.topic));
    }

    #[test]
    fn a_not_leader_answer_says_the_view_of_leaders_is_out_of_date_and_a_success_does_not() {
        let metrics = Metrics::new().sequencing;
        let moved = |said: i16| {
            let mut p = Producer::default();
            let b = numbered(&mut p, &key(0, 0), 0);
            let answer = answer_for_tests(VERSION, &topic(), &[(0, said)]);
            let recorded = record(&mut p, &metrics, VERSION, &[b], answer);
            // The client hears what the broker said.
            assert_eq!(errors(&recorded.answer), vec![(0, said)]);
            !recorded.moved.is_empty()
        };
        assert!(moved(code::NOT_LEADER_OR_FOLLOWER));
        assert!(moved(code::LEADER_NOT_AVAILABLE));
        assert!(moved(code::UNKNOWN_TOPIC_OR_PARTITION));
        assert!(!moved(code::NONE));
        assert!(!moved(code::MESSAGE_TOO_LARGE));
        assert!(!moved(code::OUT_OF_ORDER_SEQUENCE_NUMBER));
    }

    #[test]
    fn the_new_leader_a_not_leader_answer_names_is_passed_on() {
        use kafka_protocol::messages::BrokerId;
        use kafka_protocol::messages::produce_response::{
            PartitionProduceResponse, TopicProduceResponse,
        };
        let metrics = Metrics::new().sequencing;
        let mut p = Producer::default();
        let b = numbered(&mut p, &key(0, 0), 2);
        let named = LeaderIdAndEpoch::default()
            .with_leader_id(BrokerId(3))
            .with_leader_epoch(9);
        let response = ProduceResponse::default().with_responses(vec![
            TopicProduceResponse::default()
                .with_name(topic())
                .with_partition_responses(vec![
                    PartitionProduceResponse::default()
                        .with_index(2)
                        .with_error_code(code::NOT_LEADER_OR_FOLLOWER)
                        .with_current_leader(named.clone()),
                ]),
        ]);
        let mut out = BytesMut::new();
        out.extend_from_slice(&[0, 0, 0, 7, 0]);
        response.encode(&mut out, VERSION).expect("encodes");
        let recorded = record(&mut p, &metrics, VERSION, &[b], Ok(out.freeze()));
        assert_eq!(recorded.moved, vec![(topic(), 2, named)]);
        // Without a named leader (older versions, or none elected yet): leader -1.
        let b = numbered(&mut p, &key(0, 2), 1);
        let moved = answer_for_tests(VERSION, &topic(), &[(1, code::NOT_LEADER_OR_FOLLOWER)]);
        let recorded = record(&mut p, &metrics, VERSION, &[b], moved);
        let none = LeaderIdAndEpoch::default();
        assert_eq!((none.leader_id.0, none.leader_epoch), (-1, -1));
        assert_eq!(recorded.moved, vec![(topic(), 1, none)]);
    }

    #[test]
    fn a_lost_answer_leaves_every_batch_of_the_part_to_be_resent() {
        let metrics = Metrics::new().sequencing;
        let mut p = Producer::default();
        let a = numbered(&mut p, &key(0, 0), 0);
        let b = numbered(&mut p, &key(1, 0), 1);
        assert!(
            record(
                &mut p,
                &metrics,
                VERSION,
                &[a.clone(), b.clone()],
                Err(UpstreamGone::Unanswered)
            )
            .answer
            .is_err()
        );
        for n in [a, b] {
            let resend = Lookup::Resend {
                target: n.target,
                seq: n.seq,
            };
            assert_eq!(p.lookup(&n.key), resend);
        }
    }
}
