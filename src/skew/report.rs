//! The skew report: what the last two samples, the routing scores and the lag collector say
//! about where load sits. Pure: built from plain inputs, so every number is tested exactly.
//!
//! Rates need two samples; with one, the report still shows the layout and leaves rates out
//! (`window_s` is null).

use std::collections::BTreeMap;

use serde::Serialize;

use super::layout::Layout;
use super::sample::Sample;
use super::traffic::{CLASSES, Class, ClassBytes, of};
use crate::lag::evaluate::GroupStatus;

/// What the report is built from.
pub struct Inputs<'a> {
    pub previous: Option<&'a Sample>,
    pub newest: &'a Sample,
    /// Each broker's routing cost (µs), None without recent evidence.
    pub costs_us: BTreeMap<i32, Option<f64>>,
    /// Every watched group's verdict (empty without `[lag]`).
    pub groups: Vec<(String, GroupStatus)>,
    /// `skew.member_margin`.
    pub member_margin: f64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SkewReport {
    /// When the newest sample was taken (ms since the epoch).
    pub sampled_at_ms: i64,
    /// Seconds between the two samples rates are taken over; null with one sample.
    pub window_s: Option<f64>,
    pub brokers: Vec<BrokerReport>,
    pub topics: Vec<TopicReport>,
    pub groups: Vec<GroupReport>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct BrokerReport {
    pub id: i32,
    pub partitions_led: usize,
    pub replicas: usize,
    /// Records/s appended to the partitions it leads, by every producer (the brokers' log
    /// ends); null before two samples.
    pub records_per_s: Option<f64>,
    /// Its share of all records appended.
    pub records_share: Option<f64>,
    /// Produce bytes/s through this kroute, by class ([`Class`] labels).
    pub produce_bytes_per_s: Option<BTreeMap<&'static str, f64>>,
    /// Routing's measured cost of sending to it, ms.
    pub cost_ms: Option<f64>,
    /// Of the bytes clients sent it through kroute that routing looked at, the share that
    /// could not move (keyed or pinned).
    pub unmovable_share: Option<f64>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TopicReport {
    pub topic: String,
    pub partitions: usize,
    /// Partitions led per live broker.
    pub leaders: BTreeMap<i32, usize>,
    /// What an even spread gives each broker.
    pub even: f64,
    /// The most any broker leads, over `even` (1.0: even).
    pub max_over_even: f64,
    pub records_per_s: Option<f64>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct GroupReport {
    pub group: String,
    pub status: String,
    pub members: Vec<MemberReport>,
    pub mean_partitions: f64,
    pub mean_lag: f64,
    /// Whether a member carries more than the margin above the mean.
    pub skewed: bool,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct MemberReport {
    pub owner: String,
    pub client_id: String,
    pub partitions: usize,
    pub lag: u64,
    /// Partitions or lag above the group's mean by more than the margin.
    pub overloaded: bool,
}

/// Builds the report.
pub fn build(inputs: &Inputs<'_>) -> SkewReport {
    let newest = inputs.newest;
    let measured = window_rates(inputs.previous, newest);
    let window_s = measured.as_ref().map(|(w, _)| *w);
    let rates = measured.as_ref().map(|(_, r)| r);
    SkewReport {
        sampled_at_ms: newest.at_ms,
        window_s,
        brokers: brokers(inputs, rates, window_s),
        topics: topics(newest, rates),
        groups: inputs
            .groups
            .iter()
            .map(|(g, s)| {
                let owned = s.partitions.iter().map(|p| {
                    let member = (p.owner.as_str(), p.client_id.as_str());
                    (member, p.current_lag)
                });
                group(g, &s.status.to_string(), owned, inputs.member_margin)
            })
            .collect(),
    }
}

/// Records/s by (topic, partition).
pub type Rates = BTreeMap<(String, i32), f64>;

/// Records/s per partition from `previous` to `newest`, and the seconds between them; None
/// without an earlier sample.
pub fn window_rates(previous: Option<&Sample>, newest: &Sample) -> Option<(f64, Rates)> {
    let previous = previous?;
    let window_s = (newest.at_ms - previous.at_ms) as f64 / 1000.0;
    (window_s > 0.0).then(|| (window_s, partition_rates(previous, newest, window_s)))
}

/// Records/s per partition between two samples (partitions read in both only; a log end
/// that went backwards, a recreated topic, counts as 0).
fn partition_rates(previous: &Sample, newest: &Sample, window_s: f64) -> Rates {
    newest
        .log_ends
        .iter()
        .filter_map(|(tp, end)| {
            let before = previous.log_ends.get(tp)?;
            Some((tp.clone(), (end - before).max(0) as f64 / window_s))
        })
        .collect()
}

/// Per broker, in one pass over the partitions: records/s appended to those it leads
/// (where measured) and replicas it holds.
fn per_broker(
    layout: &Layout,
    rates: Option<&Rates>,
) -> (BTreeMap<i32, f64>, BTreeMap<i32, usize>) {
    let (mut led_rates, mut replicas) = (BTreeMap::new(), BTreeMap::new());
    for (topic, p) in layout.partitions() {
        for r in &p.replicas {
            *replicas.entry(*r).or_insert(0) += 1;
        }
        if let Some(rate) = rates.and_then(|r| r.get(&(topic.to_string(), p.partition))) {
            *led_rates.entry(p.leader).or_insert(0.0) += rate;
        }
    }
    (led_rates, replicas)
}

fn brokers(inputs: &Inputs<'_>, rates: Option<&Rates>, window_s: Option<f64>) -> Vec<BrokerReport> {
    let layout = &inputs.newest.layout;
    let led = layout.leaders_per_broker(layout.partitions().map(|(_, p)| p));
    let (led_rates, replicas) = per_broker(layout, rates);
    let total_records: Option<f64> = rates.map(|r| r.values().sum());
    layout
        .brokers
        .iter()
        .map(|&id| {
            let records_per_s = rates.map(|_| led_rates.get(&id).copied().unwrap_or(0.0));
            let bytes = window_s.and_then(|w| traffic_rates(inputs, id, w));
            BrokerReport {
                id,
                partitions_led: led.get(&id).copied().unwrap_or(0),
                replicas: replicas.get(&id).copied().unwrap_or(0),
                records_per_s,
                records_share: records_per_s
                    .zip(total_records)
                    .filter(|(_, t)| *t > 0.0)
                    .map(|(r, t)| r / t),
                unmovable_share: bytes.as_ref().and_then(unmovable_share),
                produce_bytes_per_s: bytes.map(|b| {
                    Class::ALL
                        .iter()
                        .map(|c| (c.label(), b[c.index()]))
                        .collect()
                }),
                cost_ms: inputs.costs_us.get(&id).copied().flatten().map(|c| c / 1e3),
            }
        })
        .collect()
}

/// Bytes/s by class through kroute to broker `id`.
fn traffic_rates(inputs: &Inputs<'_>, id: i32, window_s: f64) -> Option<[f64; CLASSES]> {
    let zero: ClassBytes = [0; CLASSES];
    let newest = inputs.newest.traffic.get(&id).unwrap_or(&zero);
    let previous = inputs.previous?.traffic.get(&id).unwrap_or(&zero);
    let mut rates = [0.0; CLASSES];
    for c in Class::ALL {
        rates[c.index()] = of(newest, c).saturating_sub(of(previous, c)) as f64 / window_s;
    }
    Some(rates)
}

fn unmovable_share(rates: &[f64; CLASSES]) -> Option<f64> {
    let rate = |c: Class| rates[c.index()];
    let unmovable = rate(Class::Keyed) + rate(Class::Pinned);
    let looked_at = unmovable + rate(Class::Kept) + rate(Class::MovedOut);
    (looked_at > 0.0).then(|| unmovable / looked_at)
}

fn topics(newest: &Sample, rates: Option<&Rates>) -> Vec<TopicReport> {
    let layout = &newest.layout;
    layout
        .topics
        .iter()
        .map(|(topic, partitions)| {
            let leaders = layout.leaders_per_broker(partitions.iter());
            let even = partitions.len() as f64 / layout.brokers.len().max(1) as f64;
            let most = leaders.values().copied().max().unwrap_or(0) as f64;
            TopicReport {
                topic: topic.clone(),
                partitions: partitions.len(),
                leaders,
                even,
                max_over_even: if even > 0.0 { most / even } else { 0.0 },
                records_per_s: rates.map(|r| {
                    partitions
                        .iter()
                        .filter_map(|p| r.get(&(topic.clone(), p.partition)))
                        .sum()
                }),
            }
        })
        .collect()
}

/// Partitions and lag per member of one group. A partition nobody owns (no member listed
/// for it) counts for no member.
fn group<'a>(
    name: &str,
    status: &str,
    partitions: impl Iterator<Item = ((&'a str, &'a str), u64)>,
    margin: f64,
) -> GroupReport {
    let mut members: BTreeMap<(String, String), (usize, u64)> = BTreeMap::new();
    for ((owner, client_id), lag) in partitions.filter(|p| !p.0.0.is_empty()) {
        let m = members
            .entry((owner.to_string(), client_id.to_string()))
            .or_default();
        m.0 += 1;
        m.1 += lag;
    }
    let n = members.len().max(1) as f64;
    let mean_partitions = members.values().map(|m| m.0 as f64).sum::<f64>() / n;
    let mean_lag = members.values().map(|m| m.1 as f64).sum::<f64>() / n;
    let above = |value: f64, mean: f64| mean > 0.0 && value > mean * (1.0 + margin);
    let members: Vec<MemberReport> = members
        .into_iter()
        .map(|((owner, client_id), (partitions, lag))| MemberReport {
            overloaded: above(partitions as f64, mean_partitions) || above(lag as f64, mean_lag),
            owner,
            client_id,
            partitions,
            lag,
        })
        .collect();
    GroupReport {
        group: name.to_string(),
        status: status.to_string(),
        skewed: members.iter().any(|m| m.overloaded),
        members,
        mean_partitions,
        mean_lag,
    }
}

#[cfg(test)]
mod tests;
