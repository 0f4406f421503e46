//! `GET /v1/skew` (the report) and `GET /v1/plan?topics=a,b[&tolerance=0.05]` (a plan and the
//! two files Kafka's tools apply), as JSON. Errors are JSON too, `{"error": "..."}`, with a
//! status that says whose move it is: 400 a bad request, 404 an unknown topic, 409 a topic
//! being reassigned, 503 nothing sampled yet or the cluster not answering.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

use super::Sources;
use super::layout::{Layout, reassigning, replica_sizes};
use super::plan::{self, PlanError, Request};
use super::report::{self, Inputs, SkewReport, window_rates};
use super::sample::{Samples, current_layout};
use crate::lag::collect::now_ms;

/// The default `tolerance` of a plan: replica moves until the most loaded broker is within 5%
/// of the mean. Keyed throughput follows the busiest broker's share: in bench/skew.sh, 16/16/4
/// leaders made even to within 10% (13/13/10) gave 1.26-1.29x, where 12/12/12 gives 1.33x,
/// for two more replica copies of 36 partitions.
pub const DEFAULT_TOLERANCE: f64 = 0.05;

/// What the handlers read: kroute's connections and scores, and the sampler's samples.
#[derive(Clone)]
struct Shared {
    sources: Arc<dyn Sources>,
    samples: Arc<Samples>,
}

pub fn routes<S>(sources: Arc<dyn Sources>, samples: Arc<Samples>) -> Router<S> {
    Router::new()
        .route("/v1/skew", get(skew))
        .route("/v1/plan", get(plan))
        .with_state(Shared { sources, samples })
}

/// axum's `Json` needs a feature kroute leaves off; this is all of it that is used.
fn json_answer(status: StatusCode, value: &impl serde::Serialize) -> Response {
    match serde_json::to_string(value) {
        Ok(text) => (status, [(header::CONTENT_TYPE, "application/json")], text).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    json_answer(status, &json!({ "error": message.into() }))
}

fn not_sampled(sources: &dyn Sources) -> Response {
    let why = if !sources.settings().enabled {
        "skew.enabled is off".to_string()
    } else if sources.learns_brokers_from_clients() {
        "kroute has no connection of its own to the cluster (SASL passthrough without kroute's credentials)".to_string()
    } else {
        format!(
            "no sample yet: the first is taken within skew.sample_interval_ms ({} ms) of kroute being ready",
            sources.settings().sample_interval_ms
        )
    };
    error(StatusCode::SERVICE_UNAVAILABLE, why)
}

async fn skew(State(shared): State<Shared>) -> Response {
    match report_now(shared.sources.as_ref(), &shared.samples) {
        Some(report) => json_answer(StatusCode::OK, &report),
        None => not_sampled(shared.sources.as_ref()),
    }
}

/// The report from the last samples, the routing scores now and the lag verdicts now; None
/// before the first sample.
pub fn report_now(sources: &dyn Sources, samples: &Samples) -> Option<SkewReport> {
    let (previous, newest) = samples.window();
    let newest = newest?;
    let now = Instant::now();
    let brokers = &newest.layout.brokers;
    let scores = sources.scores();
    let costs_us = brokers
        .iter()
        .copied()
        .zip(scores.costs(brokers, now))
        .collect();
    let groups = sources
        .lag()
        .map(|lag| lag.statuses(now_ms()))
        .unwrap_or_default();
    let inputs = Inputs {
        previous: previous.as_deref(),
        newest: &newest,
        costs_us,
        groups,
        member_margin: sources.settings().member_margin,
    };
    Some(report::build(&inputs))
}

/// `topics` (comma-separated, repeated or not) and `tolerance` from a query string.
fn query(uri: &Uri) -> Result<(BTreeSet<String>, f64), String> {
    let mut topics = BTreeSet::new();
    let mut tolerance = DEFAULT_TOLERANCE;
    for pair in uri
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
    {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = value.replace("%2C", ",").replace("%2c", ",");
        match key {
            "topics" | "topic" => topics.extend(
                value
                    .split(',')
                    .filter(|t| !t.is_empty())
                    .map(str::to_string),
            ),
            "tolerance" => {
                tolerance = value
                    .parse::<f64>()
                    .ok()
                    .filter(|t| t.is_finite() && *t >= 0.0)
                    .ok_or_else(|| format!("tolerance must be a number >= 0 (got '{value}')"))?;
            }
            other => return Err(format!("unknown parameter '{other}' (topics, tolerance)")),
        }
    }
    Ok((topics, tolerance))
}

async fn plan(State(shared): State<Shared>, uri: Uri) -> Response {
    let sources = shared.sources.as_ref();
    let (topics, tolerance) = match query(&uri) {
        Ok(q) => q,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let (previous, newest) = shared.samples.window();
    if newest.is_none() {
        return not_sampled(sources);
    }
    // The layout now, not at the last sample: a plan made after the previous one was applied
    // must see its result.
    let layout = match current_layout(sources).await {
        Ok(l) => l,
        Err(e) => return error(StatusCode::SERVICE_UNAVAILABLE, format!("{e:#}")),
    };
    let moving = match controller(sources, &layout) {
        Some(addr) => match reassigning(&sources.ask(&addr), &topics).await {
            Ok(m) => m,
            Err(e) => {
                let e = format!("cannot ask the controller for reassignments under way: {e:#}");
                return error(StatusCode::SERVICE_UNAVAILABLE, e);
            }
        },
        None => {
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                "controller address unknown",
            );
        }
    };
    // Rates over the rate window, if the chosen topics took any records in it.
    let measured = previous
        .zip(newest)
        .and_then(|(p, n)| window_rates(Some(&p), &n))
        .filter(|(_, rates)| {
            rates
                .iter()
                .any(|((t, _), rate)| topics.contains(t) && *rate > 0.0)
        });
    let sizes = sizes(sources, &layout, &topics).await;
    let request = Request {
        layout: &layout,
        topics: &topics,
        load: measured.as_ref().map(|(_, rates)| rates),
        load_window_s: measured.as_ref().map(|(window_s, _)| *window_s),
        sizes: &sizes,
        reassigning: &moving,
        tolerance,
    };
    match plan::make(&request) {
        Ok(p) => {
            let answer = json!({
                "plan": p,
                "reassignment_file": plan::reassignment_json(&p),
                "election_file": plan::election_json(&p),
            });
            json_answer(StatusCode::OK, &answer)
        }
        Err(e) => {
            let status = match e {
                PlanError::NoTopics => StatusCode::BAD_REQUEST,
                PlanError::UnknownTopic(_) => StatusCode::NOT_FOUND,
                PlanError::Reassigning { .. } => StatusCode::CONFLICT,
                PlanError::NoBrokers => StatusCode::SERVICE_UNAVAILABLE,
            };
            error(status, e.to_string())
        }
    }
}

fn controller(sources: &dyn Sources, layout: &Layout) -> Option<String> {
    let cluster = sources.cluster();
    cluster.address(layout.controller).or_else(|| {
        let first = layout.brokers.first()?;
        cluster.address(*first)
    })
}

/// The size of every replica of `topics`, asked of each broker holding one; a broker that
/// does not answer leaves its sizes unknown (the plan says so).
async fn sizes(
    sources: &dyn Sources,
    layout: &Layout,
    topics: &BTreeSet<String>,
) -> BTreeMap<(String, i32), i64> {
    let mut by_broker: BTreeMap<i32, BTreeMap<String, Vec<i32>>> = BTreeMap::new();
    for (topic, p) in layout.partitions().filter(|(t, _)| topics.contains(*t)) {
        for r in &p.replicas {
            let wanted = by_broker.entry(*r).or_default();
            wanted
                .entry(topic.to_string())
                .or_default()
                .push(p.partition);
        }
    }
    let mut sizes = BTreeMap::new();
    for (broker, wanted) in by_broker {
        let Some(addr) = sources.cluster().address(broker) else {
            continue;
        };
        if let Ok(found) = replica_sizes(&sources.ask(&addr), &wanted).await {
            for (tp, size) in found {
                let s = sizes.entry(tp).or_insert(0);
                *s = size.max(*s);
            }
        }
    }
    sizes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_reads_topics_and_tolerance() {
        let uri: Uri = "/v1/plan?topics=a,b&topics=c&tolerance=0.2"
            .parse()
            .unwrap();
        let (topics, tolerance) = query(&uri).unwrap();
        assert_eq!(topics.into_iter().collect::<Vec<_>>(), vec!["a", "b", "c"]);
        assert_eq!(tolerance, 0.2);
        let uri: Uri = "/v1/plan?topics=a%2Cb".parse().unwrap();
        assert_eq!(query(&uri).unwrap().0.len(), 2);
        let uri: Uri = "/v1/plan?tolerance=-1".parse().unwrap();
        assert!(query(&uri).unwrap_err().contains("tolerance"));
        let uri: Uri = "/v1/plan?topcs=a".parse().unwrap();
        assert!(query(&uri).unwrap_err().contains("topcs"));
    }
}
