//! The plan: the fewest changes that even out the load the brokers lead, as files Kafka's own
//! tools apply (kafka-reassign-partitions' `--reassignment-json-file`, kafka-leader-election's
//! `--path-to-json-file`). kroute never applies it.
//!
//! Each step takes the change that lowers the spread of load over the brokers most (the sum of
//! squared loads: a change from broker `h` to broker `c` of a partition with load `w` lowers
//! it exactly when `load(c) + w < load(h)`), and stops once the most loaded broker is within
//! `tolerance` of the mean (half of it for changes that copy nothing) or nothing helps.
//! Changes that copy no data come first:
//! 1. a leader change, to a live in-sync replica: the replica list is reordered so that broker
//!    comes first (a reassignment that copies nothing) and a preferred-leader election makes
//!    it the leader; where it is already first (leadership moved on a failure and never came
//!    back), the election alone does it;
//! 2. only when no leader change helps, a replica move: the loaded leader's replica is
//!    replaced by a replica on the least loaded broker, which then leads; among the partitions
//!    that fit, the one whose load best halves the gap, then the smallest to copy.
//!
//! Load is what the brokers appended per partition (records/s between the last two samples);
//! before any load is measured, every partition weighs the same. A partition with a replica
//! on a broker that is not alive is never changed (the plan never names such a broker), and a
//! topic being reassigned is refused.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::layout::{Layout, Placement};

/// What a plan is asked for.
pub struct Request<'a> {
    pub layout: &'a Layout,
    pub topics: &'a BTreeSet<String>,
    /// Records/s per partition; None: every partition weighs the same.
    pub load: Option<&'a BTreeMap<(String, i32), f64>>,
    /// The seconds `load` was measured over.
    pub load_window_s: Option<f64>,
    /// Bytes a move of each partition copies (DescribeLogDirs), where known.
    pub sizes: &'a BTreeMap<(String, i32), i64>,
    /// Partitions being reassigned now.
    pub reassigning: &'a BTreeSet<(String, i32)>,
    /// Replica moves stop once the most loaded broker is within this fraction of the mean;
    /// leader changes go on to half of it.
    pub tolerance: f64,
}

/// Why no plan can be made.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    #[error("no topics named: give topics=a,b")]
    NoTopics,
    #[error("topic {0} does not exist (or is internal)")]
    UnknownTopic(String),
    #[error(
        "topic {topic} is being reassigned (partitions {partitions:?}): wait until kafka-reassign-partitions --verify says it is done"
    )]
    Reassigning { topic: String, partitions: Vec<i32> },
    #[error("no live broker in the cluster's metadata")]
    NoBrokers,
}

/// One partition's new replica list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reassignment {
    pub topic: String,
    pub partition: i32,
    pub replicas: Vec<i32>,
}

/// A partition whose preferred replica should be elected leader.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, PartialOrd, Ord)]
pub struct Election {
    pub topic: String,
    pub partition: i32,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// "records/s" or "partition count" (no load measured yet).
    pub weighted_by: &'static str,
    /// The seconds the records/s were measured over.
    pub load_window_s: Option<f64>,
    pub partitions: usize,
    pub leader_changes: usize,
    /// Partitions whose replica set changes (each copies one replica).
    pub replica_moves: usize,
    /// Bytes those moves copy (sizes unknown count as 0; see `sizes_known`).
    pub bytes_to_copy: i64,
    pub sizes_known: bool,
    pub leaders_before: BTreeMap<i32, usize>,
    pub leaders_after: BTreeMap<i32, usize>,
    pub load_before: BTreeMap<i32, f64>,
    pub load_after: BTreeMap<i32, f64>,
    /// Most loaded broker over the mean, before and after (1.0: even).
    pub max_over_mean_before: f64,
    pub max_over_mean_after: f64,
    /// Partitions left as they are because a replica is on a broker that is not alive.
    pub skipped: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    pub reassignments: Vec<Reassignment>,
    pub elections: Vec<Election>,
    pub summary: Summary,
}

/// The working state of one partition.
struct Part {
    topic: String,
    placement: Placement,
    load: f64,
    /// Leader and replicas as planned.
    leader: i32,
    replicas: Vec<i32>,
    movable: bool,
}

/// Makes the plan.
pub fn make(request: &Request<'_>) -> Result<Plan, PlanError> {
    let mut parts = parts(request)?;
    let brokers = &request.layout.brokers;
    let load_before = loads(&parts, brokers);
    let leaders_before = leader_counts(&parts, brokers);
    // Leader changes copy nothing: they go on to half the tolerance. Replica moves copy a
    // partition each: only while the load is outside the tolerance.
    while !within(&loads(&parts, brokers), request.tolerance / 2.0) {
        let loads = loads(&parts, brokers);
        let copy_allowed = !within(&loads, request.tolerance);
        let change = best_leader_change(&parts, &loads).or_else(|| {
            copy_allowed
                .then(|| best_replica_move(&parts, &loads, request.sizes))
                .flatten()
        });
        let Some((i, to, replaced)) = change else {
            break;
        };
        let part = &mut parts[i];
        if let Some(slot) = replaced.and_then(|r| part.replicas.iter().position(|b| *b == r)) {
            part.replicas.remove(slot);
        }
        part.replicas.retain(|b| *b != to);
        part.replicas.insert(0, to);
        part.leader = to;
    }
    Ok(finish(parts, brokers, request, load_before, leaders_before))
}

fn parts(request: &Request<'_>) -> Result<Vec<Part>, PlanError> {
    let layout = request.layout;
    if request.topics.is_empty() {
        return Err(PlanError::NoTopics);
    }
    if layout.brokers.is_empty() {
        return Err(PlanError::NoBrokers);
    }
    let mut parts = Vec::new();
    for topic in request.topics {
        let placements = layout
            .topics
            .get(topic)
            .ok_or_else(|| PlanError::UnknownTopic(topic.clone()))?;
        let moving: Vec<i32> = placements
            .iter()
            .map(|p| p.partition)
            .filter(|p| request.reassigning.contains(&(topic.clone(), *p)))
            .collect();
        if !moving.is_empty() {
            return Err(PlanError::Reassigning {
                topic: topic.clone(),
                partitions: moving,
            });
        }
        for p in placements {
            let load = match request.load {
                Some(load) => load.get(&(topic.clone(), p.partition)).copied(),
                None => Some(1.0),
            };
            let alive = p.replicas.iter().all(|r| layout.brokers.contains(r));
            parts.push(Part {
                topic: topic.clone(),
                load: load.unwrap_or(0.0),
                leader: p.leader,
                replicas: p.replicas.clone(),
                movable: alive && p.leader >= 0,
                placement: p.clone(),
            });
        }
    }
    Ok(parts)
}

fn loads(parts: &[Part], brokers: &[i32]) -> BTreeMap<i32, f64> {
    let mut loads: BTreeMap<i32, f64> = brokers.iter().map(|b| (*b, 0.0)).collect();
    for p in parts.iter().filter(|p| p.leader >= 0) {
        *loads.entry(p.leader).or_default() += p.load;
    }
    loads
}

fn leader_counts(parts: &[Part], brokers: &[i32]) -> BTreeMap<i32, usize> {
    let mut counts: BTreeMap<i32, usize> = brokers.iter().map(|b| (*b, 0)).collect();
    for p in parts.iter().filter(|p| p.leader >= 0) {
        *counts.entry(p.leader).or_default() += 1;
    }
    counts
}

fn max_over_mean(loads: &BTreeMap<i32, f64>) -> f64 {
    let mean = loads.values().sum::<f64>() / loads.len().max(1) as f64;
    let max = loads.values().copied().fold(0.0, f64::max);
    if mean > 0.0 { max / mean } else { 1.0 }
}

fn within(loads: &BTreeMap<i32, f64>, tolerance: f64) -> bool {
    max_over_mean(loads) <= 1.0 + tolerance
}

/// How much moving load `w` from `from` to `to` lowers the sum of squared loads (> 0: better).
fn gain(loads: &BTreeMap<i32, f64>, from: i32, to: i32, w: f64) -> f64 {
    let (h, c) = (loads[&from], loads.get(&to).copied().unwrap_or(0.0));
    2.0 * w * (h - c - w)
}

/// The leader change that helps most: (partition index, new leader, no replica replaced).
fn best_leader_change(
    parts: &[Part],
    loads: &BTreeMap<i32, f64>,
) -> Option<(usize, i32, Option<i32>)> {
    let mut best: Option<(f64, usize, i32)> = None;
    for (i, p) in parts.iter().enumerate().filter(|(_, p)| p.movable) {
        for &to in p.placement.isr.iter().filter(|r| **r != p.leader) {
            if !p.replicas.contains(&to) || !loads.contains_key(&to) {
                continue;
            }
            let g = gain(loads, p.leader, to, p.load);
            if g > 1e-9 && best.is_none_or(|b| g > b.0) {
                best = Some((g, i, to));
            }
        }
    }
    best.map(|(_, i, to)| (i, to, None))
}

/// The replica move that helps most: the hottest broker's replica of one of its partitions
/// goes to the coldest broker, which leads it. Prefers the load that best halves their gap,
/// then the fewest bytes to copy.
fn best_replica_move(
    parts: &[Part],
    loads: &BTreeMap<i32, f64>,
    sizes: &BTreeMap<(String, i32), i64>,
) -> Option<(usize, i32, Option<i32>)> {
    let by_load = |a: &(&i32, &f64), b: &(&i32, &f64)| a.1.total_cmp(b.1);
    let (&hot, &h) = loads.iter().max_by(by_load)?;
    let (&cold, &c) = loads.iter().min_by(by_load)?;
    let half_gap = (h - c) / 2.0;
    let size = |p: &Part| {
        sizes
            .get(&(p.topic.clone(), p.placement.partition))
            .copied()
            .unwrap_or(0)
    };
    parts
        .iter()
        .enumerate()
        .filter(|(_, p)| p.movable && p.leader == hot && !p.replicas.contains(&cold))
        .filter(|(_, p)| gain(loads, hot, cold, p.load) > 1e-9)
        .min_by(|(_, a), (_, b)| {
            let fit = |p: &Part| (p.load - half_gap).abs();
            fit(a).total_cmp(&fit(b)).then(size(a).cmp(&size(b)))
        })
        .map(|(i, _)| (i, cold, Some(hot)))
}

fn finish(
    parts: Vec<Part>,
    brokers: &[i32],
    request: &Request<'_>,
    load_before: BTreeMap<i32, f64>,
    leaders_before: BTreeMap<i32, usize>,
) -> Plan {
    let load_after = loads(&parts, brokers);
    let mut reassignments = Vec::new();
    let mut elections = Vec::new();
    let (mut leader_changes, mut replica_moves, mut bytes) = (0, 0, 0);
    let mut sizes_known = true;
    let mut skipped = Vec::new();
    for p in &parts {
        if !p.movable {
            skipped.push(why_left_alone(p, brokers));
            continue;
        }
        let before: BTreeSet<i32> = p.placement.replicas.iter().copied().collect();
        let after: BTreeSet<i32> = p.replicas.iter().copied().collect();
        if before != after {
            replica_moves += 1;
            match request.sizes.get(&(p.topic.clone(), p.placement.partition)) {
                Some(s) => bytes += s,
                None => sizes_known = false,
            }
        }
        if p.replicas != p.placement.replicas {
            reassignments.push(Reassignment {
                topic: p.topic.clone(),
                partition: p.placement.partition,
                replicas: p.replicas.clone(),
            });
        }
        if p.leader != p.placement.leader {
            leader_changes += 1;
            elections.push(Election {
                topic: p.topic.clone(),
                partition: p.placement.partition,
            });
        }
    }
    Plan {
        summary: Summary {
            weighted_by: if request.load.is_some() {
                "records/s"
            } else {
                "partition count"
            },
            load_window_s: request.load.and(request.load_window_s),
            partitions: parts.len(),
            leader_changes,
            replica_moves,
            bytes_to_copy: bytes,
            sizes_known,
            leaders_before,
            leaders_after: leader_counts(&parts, brokers),
            max_over_mean_before: max_over_mean(&load_before),
            max_over_mean_after: max_over_mean(&load_after),
            load_before,
            load_after,
            skipped,
        },
        reassignments,
        elections,
    }
}

/// "topic-partition: why", for a partition the plan may not change.
fn why_left_alone(p: &Part, brokers: &[i32]) -> String {
    let name = format!("{}-{}", p.topic, p.placement.partition);
    let gone: Vec<String> = p
        .placement
        .replicas
        .iter()
        .filter(|r| !brokers.contains(r))
        .map(|r| r.to_string())
        .collect();
    if gone.is_empty() {
        format!("{name}: no leader")
    } else {
        format!(
            "{name}: replica on broker {}, which is not alive",
            gone.join(", ")
        )
    }
}

/// kafka-reassign-partitions' `--reassignment-json-file`.
pub fn reassignment_json(plan: &Plan) -> serde_json::Value {
    serde_json::json!({ "version": 1, "partitions": plan.reassignments })
}

/// kafka-leader-election's `--path-to-json-file`.
pub fn election_json(plan: &Plan) -> serde_json::Value {
    serde_json::json!({ "partitions": plan.elections })
}

#[cfg(test)]
mod tests;
