use super::*;
use proptest::prelude::*;

fn placement(partition: i32, replicas: &[i32]) -> Placement {
    Placement {
        partition,
        leader: replicas[0],
        replicas: replicas.to_vec(),
        isr: replicas.to_vec(),
    }
}

/// `leaders[b]` partitions led by broker b+1, replicas `rf` brokers from the leader on.
fn skewed(leaders: &[usize], rf: usize) -> Layout {
    let n = leaders.len() as i32;
    let mut partitions = Vec::new();
    for (b, count) in leaders.iter().enumerate() {
        for _ in 0..*count {
            let p = partitions.len() as i32;
            let replicas: Vec<i32> = (0..rf as i32).map(|k| (b as i32 + k) % n + 1).collect();
            partitions.push(placement(p, &replicas));
        }
    }
    Layout {
        brokers: (1..=n).collect(),
        controller: 1,
        topics: BTreeMap::from([("t".to_string(), partitions)]),
    }
}

fn plan_of(
    layout: &Layout,
    load: Option<&BTreeMap<(String, i32), f64>>,
) -> Result<Plan, PlanError> {
    make(&Request {
        layout,
        topics: &BTreeSet::from(["t".to_string()]),
        load,
        load_window_s: Some(60.0),
        sizes: &BTreeMap::new(),
        reassigning: &BTreeSet::new(),
        tolerance: 0.1,
    })
}

#[test]
fn seed_000s_22_10_4_with_three_replicas_needs_leader_changes_only() {
    let plan = plan_of(&skewed(&[22, 10, 4], 3), None).unwrap();
    let s = &plan.summary;
    assert_eq!(s.replica_moves, 0);
    assert_eq!(s.bytes_to_copy, 0);
    assert_eq!(s.leaders_before, BTreeMap::from([(1, 22), (2, 10), (3, 4)]));
    assert!(s.max_over_mean_after <= 1.1, "{s:?}");
    // 10 off broker 1 is the least that reaches 12/12/12 within 10%.
    assert!(s.leader_changes <= 10, "{s:?}");
    assert_eq!(plan.elections.len(), s.leader_changes);
    for r in &plan.reassignments {
        let mut sorted = r.replicas.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, vec![1, 2, 3], "a reorder, no copy");
    }
}

#[test]
fn a_broker_without_replicas_gets_some_by_replica_moves() {
    // Replication factor 2 over brokers 1 and 2 only: broker 3 was added later.
    let mut layout = skewed(&[18, 18], 2);
    layout.brokers.push(3);
    let sizes = BTreeMap::from([(("t".to_string(), 0), 100), (("t".to_string(), 1), 5)]);
    let plan = make(&Request {
        layout: &layout,
        topics: &BTreeSet::from(["t".to_string()]),
        load: None,
        load_window_s: None,
        sizes: &sizes,
        reassigning: &BTreeSet::new(),
        tolerance: 0.1,
    })
    .unwrap();
    let s = &plan.summary;
    // 13/13/10 is within 10% of the mean: no copy more than that.
    assert_eq!(s.leaders_after, BTreeMap::from([(1, 13), (2, 13), (3, 10)]));
    assert_eq!(s.replica_moves, 10, "one copy per partition broker 3 leads");
    assert_eq!(s.leader_changes, 10);
    assert!(!s.sizes_known, "most sizes are unknown");
    for r in &plan.reassignments {
        assert_eq!(r.replicas[0], 3);
        assert_eq!(r.replicas.len(), 2);
    }
}

#[test]
fn load_weighs_more_than_partition_counts() {
    // Even counts, but broker 1's four partitions carry 10x the records of the others.
    let layout = skewed(&[4, 4, 4], 3);
    let load: BTreeMap<(String, i32), f64> = (0..12)
        .map(|p| (("t".to_string(), p), if p < 4 { 10.0 } else { 1.0 }))
        .collect();
    let plan = plan_of(&layout, Some(&load)).unwrap();
    let s = &plan.summary;
    assert_eq!(s.weighted_by, "records/s");
    assert!(s.max_over_mean_before > 2.0);
    assert!(
        s.max_over_mean_after < s.max_over_mean_before / 1.5,
        "{s:?}"
    );
    assert!(s.leader_changes > 0 && s.replica_moves == 0, "{s:?}");
}

#[test]
fn an_even_layout_needs_nothing() {
    let plan = plan_of(&skewed(&[12, 12, 12], 2), None).unwrap();
    assert!(plan.reassignments.is_empty() && plan.elections.is_empty());
}

#[test]
fn leadership_that_did_not_come_back_needs_an_election_only() {
    let mut layout = skewed(&[12, 12, 12], 3);
    // A failure of broker 2 moved leadership of its partitions to broker 3, their next replica.
    for p in layout.topics.get_mut("t").unwrap().iter_mut() {
        if p.leader == 2 {
            p.leader = 3;
        }
    }
    let plan = plan_of(&layout, None).unwrap();
    assert!(plan.reassignments.is_empty(), "{:?}", plan.reassignments);
    assert_eq!(plan.elections.len(), plan.summary.leader_changes);
    assert!(plan.summary.leader_changes >= 11);
}

#[test]
fn bad_requests_name_the_topic() {
    let layout = skewed(&[2, 1], 1);
    let request = |topics: &[&str], reassigning: &BTreeSet<(String, i32)>| {
        make(&Request {
            layout: &layout,
            topics: &topics.iter().map(|t| t.to_string()).collect(),
            load: None,
            load_window_s: None,
            sizes: &BTreeMap::new(),
            reassigning,
            tolerance: 0.1,
        })
    };
    let none = BTreeSet::new();
    assert_eq!(request(&[], &none), Err(PlanError::NoTopics));
    assert_eq!(
        request(&["t", "nope"], &none),
        Err(PlanError::UnknownTopic("nope".into()))
    );
    let moving = BTreeSet::from([("t".to_string(), 1)]);
    let err = request(&["t"], &moving).unwrap_err();
    assert!(
        err.to_string().contains("topic t is being reassigned"),
        "{err}"
    );
}

#[test]
fn partitions_with_a_dead_replica_are_left_alone() {
    let mut layout = skewed(&[6, 0, 0], 1);
    layout.topics.get_mut("t").unwrap()[0].replicas = vec![1, 9];
    let plan = plan_of(&layout, None).unwrap();
    assert_eq!(
        plan.summary.skipped,
        vec!["t-0: replica on broker 9, which is not alive".to_string()]
    );
    assert!(plan.reassignments.iter().all(|r| r.partition != 0));
}

#[test]
fn files_have_the_tools_shapes() {
    let plan = plan_of(&skewed(&[3, 0], 1), None).unwrap();
    let r = reassignment_json(&plan);
    assert_eq!(r["version"], 1);
    assert_eq!(r["partitions"][0]["topic"], "t");
    assert!(r["partitions"][0]["replicas"].is_array());
    let e = election_json(&plan);
    assert_eq!(e["partitions"][0]["topic"], "t");
    assert!(e["partitions"][0]["partition"].is_number());
}

proptest! {
    /// Whatever the layout: only live brokers are named, no replica twice, the replication
    /// factor stays, and the most loaded broker never gets worse.
    #[test]
    fn plans_are_safe(
        brokers in 2usize..6,
        rf in 1usize..4,
        leaders in proptest::collection::vec(0usize..6, 1..40),
        loads in proptest::collection::vec(0.0f64..100.0, 40),
    ) {
        let rf = rf.min(brokers);
        let partitions: Vec<Placement> = leaders
            .iter()
            .enumerate()
            .map(|(p, l)| {
                let first = (l % brokers) as i32;
                let replicas: Vec<i32> =
                    (0..rf as i32).map(|k| (first + k) % brokers as i32 + 1).collect();
                placement(p as i32, &replicas)
            })
            .collect();
        let load: BTreeMap<(String, i32), f64> =
            (0..partitions.len()).map(|p| (("t".to_string(), p as i32), loads[p])).collect();
        let layout = Layout {
            brokers: (1..=brokers as i32).collect(),
            controller: 1,
            topics: BTreeMap::from([("t".to_string(), partitions)]),
        };
        let plan = plan_of(&layout, Some(&load)).unwrap();
        for r in &plan.reassignments {
            prop_assert_eq!(r.replicas.len(), rf);
            let set: BTreeSet<i32> = r.replicas.iter().copied().collect();
            prop_assert_eq!(set.len(), rf);
            prop_assert!(r.replicas.iter().all(|b| layout.brokers.contains(b)));
        }
        let max = |m: &BTreeMap<i32, f64>| m.values().copied().fold(0.0, f64::max);
        prop_assert!(max(&plan.summary.load_after) <= max(&plan.summary.load_before) + 1e-9);
    }
}
