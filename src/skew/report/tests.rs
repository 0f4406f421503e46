use super::*;
use crate::skew::layout::{Layout, Placement};

fn sample(at_ms: i64, ends: &[i64], traffic: &[(i32, ClassBytes)]) -> Sample {
    let partitions = (0..ends.len() as i32)
        .map(|p| Placement {
            partition: p,
            // Partitions 0 and 1 on broker 1, the rest on broker 2.
            leader: if p < 2 { 1 } else { 2 },
            replicas: vec![if p < 2 { 1 } else { 2 }],
            isr: vec![],
        })
        .collect();
    Sample {
        at_ms,
        layout: std::sync::Arc::new(Layout {
            brokers: vec![1, 2, 3],
            controller: 1,
            topics: BTreeMap::from([("t".to_string(), partitions)]),
        }),
        log_ends: ends
            .iter()
            .enumerate()
            .map(|(p, e)| (("t".to_string(), p as i32), *e))
            .collect(),
        traffic: traffic.iter().copied().collect(),
    }
}

fn inputs<'a>(previous: Option<&'a Sample>, newest: &'a Sample) -> Inputs<'a> {
    Inputs {
        previous,
        newest,
        costs_us: BTreeMap::from([(1, Some(2500.0)), (2, None)]),
        groups: Vec::new(),
        member_margin: 0.5,
    }
}

#[test]
fn brokers_and_topics_from_two_samples() {
    let before = sample(0, &[0, 0, 0], &[(1, [0; 6])]);
    // Over 2 s: 100 + 60 records on broker 1's partitions, 40 on broker 2's.
    let after = sample(2000, &[100, 60, 40], &[(1, [300, 100, 0, 200, 400, 0])]);
    let report = build(&inputs(Some(&before), &after));
    assert_eq!(report.window_s, Some(2.0));
    let b1 = &report.brokers[0];
    assert_eq!((b1.id, b1.partitions_led, b1.replicas), (1, 2, 2));
    assert_eq!(b1.records_per_s, Some(80.0));
    assert_eq!(b1.records_share, Some(0.8));
    assert_eq!(b1.cost_ms, Some(2.5));
    let bytes = b1.produce_bytes_per_s.as_ref().unwrap();
    assert_eq!(bytes["keyed"], 150.0);
    assert_eq!(bytes["moved_out"], 200.0);
    // keyed 300 + pinned 100 of 300 + 100 + 200 + 400 looked at.
    assert_eq!(b1.unmovable_share, Some(0.4));
    let b3 = &report.brokers[2];
    assert_eq!((b3.partitions_led, b3.records_per_s), (0, Some(0.0)));
    assert_eq!(b3.unmovable_share, None);
    let t = &report.topics[0];
    assert_eq!(t.leaders, BTreeMap::from([(1, 2), (2, 1), (3, 0)]));
    assert_eq!(t.even, 1.0);
    assert_eq!(t.max_over_even, 2.0);
    assert_eq!(t.records_per_s, Some(100.0));
}

#[test]
fn one_sample_shows_the_layout_without_rates() {
    let only = sample(5, &[10, 0, 0], &[]);
    let report = build(&inputs(None, &only));
    assert_eq!(report.window_s, None);
    assert_eq!(report.brokers[0].records_per_s, None);
    assert_eq!(report.brokers[0].produce_bytes_per_s, None);
    assert_eq!(report.brokers[0].partitions_led, 2);
}

#[test]
fn a_member_with_far_more_partitions_is_flagged() {
    let owned = [
        (("h1", "a"), 0),
        (("h1", "a"), 0),
        (("h1", "a"), 0),
        (("h1", "a"), 0),
        (("h2", "b"), 0),
        (("h3", "c"), 0),
        (("", ""), 50),
    ];
    let g = group("g", "OK", owned.into_iter(), 0.5);
    assert_eq!(g.mean_partitions, 2.0);
    assert!(g.skewed);
    let flagged: Vec<&str> = g
        .members
        .iter()
        .filter(|m| m.overloaded)
        .map(|m| m.client_id.as_str())
        .collect();
    assert_eq!(flagged, vec!["a"]);
    // Within the margin (3 against a mean of 2 is 1.5x): not flagged.
    let even = [
        (("h1", "a"), 0),
        (("h1", "a"), 0),
        (("h1", "a"), 0),
        (("h2", "b"), 0),
    ];
    assert!(!group("g", "OK", even.into_iter(), 0.5).skewed);
}

#[test]
fn a_member_with_far_more_lag_is_flagged() {
    let owned = [(("h1", "a"), 900), (("h2", "b"), 50), (("h3", "c"), 50)];
    let g = group("g", "WARN", owned.into_iter(), 0.5);
    assert_eq!(g.status, "WARN");
    assert!(g.members[0].overloaded && !g.members[1].overloaded);
}
