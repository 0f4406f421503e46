//! Re-partitioning keyless batches away from a slow broker, with real clients and the real
//! cluster.
//!
//! The slow broker is broker 2 behind its delaying relay ([`common::slow`]).

use std::collections::HashMap;

mod common;

use common::librdkafka::{Keys, Produce, assert_exactly_once, produce};
use common::slow::*;
use common::*;

fn ids(acked: &[(String, i32)]) -> impl Iterator<Item = &str> {
    acked.iter().map(|a| a.0.as_str())
}

fn rd_acks(acked: Vec<common::librdkafka::Acked>) -> Vec<(String, i32)> {
    acked.into_iter().map(|a| (a.id, a.partition)).collect()
}

#[test]
fn librdkafka_keyless_bytes_leave_a_slow_broker_and_come_back() {
    let world = slow_world();
    let kroute = &world.kroute;
    let topic = unique("route-rd");
    create_topic_two_per_broker(&topic);

    // 3000 records/s of 1 KiB for 5 s per phase.
    fn paced(prefix: &str) -> Produce<'_> {
        Produce {
            prefix,
            per_second: Some(3000),
            ..Default::default()
        }
    }
    // Each broker's share of the produce bytes of one phase.
    let phase = |count: usize, prefix: &str| {
        let before = produce_bytes(kroute);
        let acked = produce(&kroute.bootstrap, &topic, count, paced(prefix));
        (acked, shares(before, produce_bytes(kroute)))
    };
    // Rounds of 1 s until `done` holds of a round's shares, at most `most`: the shares walk a
    // bounded step per lease, so a change takes a few seconds to show.
    let rounds_until = |prefix: &str, most: usize, done: &dyn Fn([f64; 3]) -> bool| {
        let (mut acked, mut rounds) = (Vec::new(), Vec::<[f64; 3]>::new());
        while !rounds.last().is_some_and(|s| done(*s)) {
            assert!(
                rounds.len() < most,
                "broker 2 did not get there within {most} rounds ({prefix}): {rounds:.3?}"
            );
            let (more, round) = phase(3_000, &format!("{prefix}{}-", rounds.len()));
            acked.extend(more);
            rounds.push(round);
        }
        (acked, rounds)
    };
    // Broker 2 is back when it is no longer singled out: it gets at least `part` of what the
    // less favoured of the other two gets in the same seconds, and more than 0.1 (while slow
    // it gets 0.01-0.02, the rule's floor; healthy brokers other than the favourite got
    // 0.13-0.20 in runs of 2026-12-06). Not "its healthy share again": with every broker
    // healthy, one of the three (which one is chance) takes most of the bytes on this
    // machine, because the busiest broker answers fastest when four JVMs share 2 cores
    // (docs/fleet.md, part 4); when broker 2 was that one before its slow spell, another has
    // taken its place by the time it recovers.
    let not_singled_out = |s: [f64; 3], part: f64| s[1] > 0.1 && s[1] >= part * s[0].min(s[2]);

    SlowBroker::set(0);
    let (healthy_phase, healthy) = phase(15_000, "healthy-");
    let healthy_share = healthy[1];
    // Broker 2 turns slow: it leaves (a round below half its healthy share within 10 s), then
    // the slow phase.
    SlowBroker::set(SLOW_MS);
    let (leaving, left) = rounds_until("leave", 10, &|s| s[1] < 0.5 * healthy_share);
    let (slow_phase, slow) = phase(15_000, "slow-");
    let slow_share = slow[1];
    // Broker 2 recovers: it comes back (a round in which it is not singled out, within 20 s),
    // then 5 s more.
    SlowBroker::set(0);
    let (warm, rounds) = rounds_until("warm", 20, &|s| not_singled_out(s, 0.75));
    let (fast_phase, recovered) = phase(15_000, "fast-");
    eprintln!(
        "shares of produce bytes, brokers 1/2/3: healthy {healthy:.3?}, 1 s rounds after broker 2 \
         slowed {left:.3?}, then {slow:.3?}, 1 s rounds after its recovery {rounds:.3?}, then \
         {recovered:.3?}"
    );

    // Equal would be 0.33. Shares are noisy on a loaded 2-core machine: the bounds leave room
    // for that and still fail if routing does not react, or does not give the traffic back.
    assert!(
        healthy_share > 0.12,
        "healthy broker 2 got only {healthy_share:.3} of the bytes"
    );
    assert_slow_broker_avoided(kroute, slow_share, "librdkafka");
    // Once a healthy broker slowed, the starved climb brings it back to half an equal share at
    // once and the equalizing step further if its cost allows (docs/fleet.md).
    assert!(
        not_singled_out(recovered, 0.5) && recovered[1] > slow_share,
        "recovered broker 2 is still singled out: shares {recovered:.3?} (healthy: {healthy:.3?}, slow: {slow:.3?})"
    );
    assert!(kroute.metric("kroute_batches_moved_total", &["from=\"2\""]) > 0.0);

    let acked = rd_acks([healthy_phase, leaving, slow_phase, warm, fast_phase].concat());
    assert_exactly_once(&kroute.bootstrap, &topic, ids(&acked));
    kroute.assert_clean_logs(&[]);
}

#[test]
fn java_non_idempotent_keyless_producer_avoids_the_slow_broker() {
    let world = slow_world();
    let kroute = &world.kroute;
    let topic = unique("route-java");
    create_topic_two_per_broker(&topic);

    let before = produce_bytes(kroute);
    let run = java_on(
        "produce",
        &kroute.bootstrap,
        &topic,
        &[
            "--count",
            "20000",
            "--record-size",
            "1024",
            "--idempotent",
            "false",
            "--acks",
            "all",
            "--id-prefix",
            "jv-",
        ],
    );
    let share = share_of_broker_2(before, produce_bytes(kroute));
    assert_slow_broker_avoided(kroute, share, "Java");
    assert_eq!(run.count("errors"), 0);

    let acked = run.acks();
    assert_exactly_once(&kroute.bootstrap, &topic, ids(&acked));
    kroute.assert_clean_logs(&[]);
}

#[test]
fn keyed_and_transactional_batches_stay_where_the_client_put_them() {
    let world = slow_world();
    let kroute = &world.kroute;

    // Keyed (Java, murmur2; librdkafka, CRC32): every record is where the client computed.
    let keyed = unique("route-keyed");
    create_topic_two_per_broker(&keyed);
    let java = java_on(
        "produce",
        &kroute.bootstrap,
        &keyed,
        &[
            "--count",
            "3000",
            "--keyed",
            "--idempotent",
            "false",
            "--id-prefix",
            "jk-",
        ],
    );
    let keyed_rd = Produce {
        prefix: "rk-",
        codec: "lz4",
        keys: Keys::All,
        ..Default::default()
    };
    let mut acked = java.acks();
    acked.extend(rd_acks(produce(&kroute.bootstrap, &keyed, 3000, keyed_rd)));

    // Transactional (Java): batches byte-identical and where the client put them.
    let txn_topic = unique("route-txn");
    create_topic_two_per_broker(&txn_topic);
    let txn_id = unique("rtx");
    let txn = java_on(
        "produce",
        &kroute.bootstrap,
        &txn_topic,
        &[
            "--count",
            "2000",
            "--transactional-id",
            &txn_id,
            "--id-prefix",
            "tx-",
        ],
    );

    for (topic, acked) in [(&keyed, acked), (&txn_topic, txn.acks())] {
        let consumed = assert_exactly_once(&kroute.bootstrap, topic, ids(&acked));
        for (id, partition) in &acked {
            assert_eq!(
                consumed[id][0].0, *partition,
                "record {id} of {topic} moved"
            );
        }
    }
    assert_eq!(
        kroute.metric("kroute_batches_moved_total", &[]),
        0.0,
        "nothing here may move"
    );
    assert!(kroute.metric("kroute_batches_kept_total", &["reason=\"keyed\""]) > 0.0);
    assert!(kroute.metric("kroute_batches_kept_total", &["reason=\"transactional\""]) > 0.0);
    // Their bytes are counted too: at least a v2 batch header (61 bytes) per batch.
    for reason in ["reason=\"keyed\"", "reason=\"transactional\""] {
        let batches = kroute.metric("kroute_batches_kept_total", &[reason]);
        let bytes = kroute.metric("kroute_kept_bytes_total", &[reason]);
        assert!(
            bytes >= 61.0 * batches,
            "{reason}: {bytes} bytes in {batches} batches"
        );
    }
    kroute.assert_clean_logs(&[]);
}

#[test]
fn mixed_batches_are_divided_keyed_records_stay_keyless_ones_move() {
    let world = slow_world();
    let kroute = &world.kroute;
    // Re-framing alone, and the two codecs whose framing kroute writes itself (xerial snappy,
    // Kafka's lz4 frame); gzip and zstd are checked against an independent decoder in
    // src/route/divide.rs.
    for codec in ["none", "snappy", "lz4"] {
        let topic = unique(&format!("route-mixed-{codec}"));
        create_topic_two_per_broker(&topic);
        // Records alternating keyed/keyless, all sent to partition 2 (led by the slow broker
        // 2): every batch mixes both. Paced over a second, so there are many batches.
        let mixed = Produce {
            prefix: "mx-",
            codec,
            keys: Keys::Alternate,
            partition: Some(2),
            per_second: Some(2000),
            ..Default::default()
        };
        let acked = produce(&kroute.bootstrap, &topic, 1000, mixed);
        let consumed = assert_exactly_once(&kroute.bootstrap, &topic, acked.iter().map(|a| &*a.id));
        // Every keyed record is on the client's partition, each key's records in the order
        // they were produced (ids count up).
        let mut last_of_key: HashMap<&str, (i64, &str)> = HashMap::new();
        let mut keyless_moved = 0;
        for a in &acked {
            let (partition, offset) = consumed[&a.id][0];
            let Some(key) = a.key.as_deref() else {
                keyless_moved += usize::from(partition != 2);
                continue;
            };
            assert_eq!(partition, 2, "{codec}: keyed record {} moved", a.id);
            if let Some((before, id)) = last_of_key.insert(key, (offset, &a.id)) {
                assert!(before < offset, "{codec}: {id} after {} in {key}", a.id);
            }
        }
        let keyless = acked.len() / 2;
        eprintln!("{codec}: {keyless_moved} of {keyless} keyless records moved");
        // (Unless divided, none would move. How many do is the strategy's: the slow broker
        // keeps some share, tested with keyless batches above; 57-86% moved in 10 runs here.)
        assert!(
            keyless_moved * 4 > keyless,
            "{codec}: {keyless_moved} of {keyless} keyless records left the slow broker"
        );
    }
    assert!(kroute.metric("kroute_batches_moved_total", &[]) > 0.0);
    assert!(kroute.metric("kroute_kept_bytes_total", &["reason=\"keyed\""]) > 0.0);
    assert_eq!(
        kroute.metric("kroute_batches_kept_total", &["reason=\"unsplittable\""]),
        0.0
    );
    kroute.assert_clean_logs(&[]);
}

#[test]
fn compressed_keyless_batches_move_in_every_codec() {
    let world = slow_world();
    let kroute = &world.kroute;
    for codec in ["gzip", "snappy", "lz4", "zstd"] {
        let topic = unique(&format!("route-{codec}"));
        create_topic_two_per_broker(&topic);
        let moved = || {
            kroute.metric(
                "kroute_batches_moved_total",
                &[&format!("topic=\"{topic}\"")],
            )
        };
        let before = moved();
        let how = Produce {
            prefix: codec,
            codec,
            ..Default::default()
        };
        let acked = rd_acks(produce(&kroute.bootstrap, &topic, 4000, how));
        assert!(moved() > before, "{codec}: no batch moved");
        assert_exactly_once(&kroute.bootstrap, &topic, ids(&acked));
    }
    assert_eq!(
        kroute.metric("kroute_batches_kept_total", &["reason=\"uninspectable\""]),
        0.0
    );
    assert_eq!(
        kroute.metric("kroute_batches_kept_total", &["reason=\"malformed\""]),
        0.0
    );
    kroute.assert_clean_logs(&[]);
}
