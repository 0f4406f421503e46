//! Burrow's HTTP API on kroute's admin endpoint, so what reads Burrow (Telegraf's burrow input,
//! dashboards, scripts) reads kroute unchanged:
//!
//! - `GET /v3/kafka`: the cluster list (one: `lag.cluster`);
//! - `GET /v3/kafka/{cluster}`: the cluster's module detail;
//! - `GET /v3/kafka/{cluster}/consumer`: the tracked groups;
//! - `GET /v3/kafka/{cluster}/consumer/{group}/status`: the verdict, with the partitions that
//!   are not OK;
//! - `GET /v3/kafka/{cluster}/consumer/{group}/lag`: the verdict with every partition;
//! - `GET /v3/kafka/{cluster}/topic`: every topic of the cluster;
//! - `GET /v3/kafka/{cluster}/topic/{topic}`: the topic's log-end offsets, by partition.
//!
//! Shapes and messages are Burrow 1.9's (`core/protocol/evaluator.go`, `httpserver/`). An
//! unknown group is Burrow's 404 with `"error":false` and a NOTFOUND status; an unknown cluster
//! in the cluster paths is a 404 `{"error":true,...}`. kroute adds one field Burrow does not have,
//! `time_lag_seconds` (null while unknown), to each partition and to the status.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};

use super::collect::now_ms;
use super::evaluate::{GroupStatus, PartitionStatus};
use super::store::LagStore;
use super::window::CommitEntry;

/// The Burrow routes, for the admin router.
pub fn routes<S>(lag: Arc<LagStore>) -> Router<S> {
    Router::new()
        .route("/v3/kafka", get(clusters))
        .route("/v3/kafka/{cluster}", get(cluster))
        .route("/v3/kafka/{cluster}/consumer", get(consumers))
        .route("/v3/kafka/{cluster}/consumer/{group}/status", get(status))
        .route("/v3/kafka/{cluster}/consumer/{group}/lag", get(lag_detail))
        .route("/v3/kafka/{cluster}/topic", get(topics))
        .route("/v3/kafka/{cluster}/topic/{topic}", get(topic_detail))
        .with_state(lag)
}

async fn clusters(State(lag): State<Arc<LagStore>>, uri: Uri) -> Response {
    let body = json!({
        "error": false,
        "message": "cluster list returned",
        "clusters": [lag.config().cluster],
    });
    reply(StatusCode::OK, body, uri.path())
}

async fn cluster(State(lag): State<Arc<LagStore>>, Path(name): Path<String>, uri: Uri) -> Response {
    if name != lag.config().cluster {
        return not_found("cluster not found", uri.path());
    }
    let body = json!({
        "error": false,
        "message": "cluster module detail returned",
        "module": {
            "class-name": "kroute",
            "offset-refresh": lag.config().poll_interval_ms / 1000,
            "topic-refresh": lag.config().poll_interval_ms / 1000,
        },
    });
    reply(StatusCode::OK, body, uri.path())
}

async fn consumers(
    State(lag): State<Arc<LagStore>>,
    Path(name): Path<String>,
    uri: Uri,
) -> Response {
    if name != lag.config().cluster {
        return not_found("cluster not found", uri.path());
    }
    let body = json!({
        "error": false,
        "message": "consumer list returned",
        "consumers": lag.groups(),
    });
    reply(StatusCode::OK, body, uri.path())
}

async fn topics(State(lag): State<Arc<LagStore>>, Path(name): Path<String>, uri: Uri) -> Response {
    if name != lag.config().cluster {
        return not_found("cluster not found", uri.path());
    }
    let body = json!({
        "error": false,
        "message": "topic list returned",
        "topics": lag.topics(),
    });
    reply(StatusCode::OK, body, uri.path())
}

async fn topic_detail(
    State(lag): State<Arc<LagStore>>,
    Path((name, topic)): Path<(String, String)>,
    uri: Uri,
) -> Response {
    let offsets = (name == lag.config().cluster)
        .then(|| lag.topic_offsets(&topic))
        .flatten();
    let Some(offsets) = offsets else {
        return not_found("cluster or topic not found", uri.path());
    };
    let body = json!({
        "error": false,
        "message": "topic offsets returned",
        "offsets": offsets,
    });
    reply(StatusCode::OK, body, uri.path())
}

async fn status(
    State(lag): State<Arc<LagStore>>,
    Path((name, group)): Path<(String, String)>,
    uri: Uri,
) -> Response {
    verdict(&lag, &name, &group, false, uri.path())
}

async fn lag_detail(
    State(lag): State<Arc<LagStore>>,
    Path((name, group)): Path<(String, String)>,
    uri: Uri,
) -> Response {
    verdict(&lag, &name, &group, true, uri.path())
}

/// `/status` (only the partitions that are not OK) or `/lag` (every partition).
fn verdict(lag: &LagStore, cluster: &str, group: &str, every: bool, path: &str) -> Response {
    let found = (cluster == lag.config().cluster)
        .then(|| lag.status(group, now_ms()))
        .flatten();
    let Some(status) = found else {
        // Burrow's own answer: status 404, yet `"error": false` and the usual message, with a
        // NOTFOUND status (httpserver/coordinator.go, checked against Burrow 1.9.5).
        let body = json!({
            "error": false,
            "message": "consumer status returned",
            "status": group_json(cluster, group, &GroupStatus::not_found(), every),
        });
        return reply(StatusCode::NOT_FOUND, body, path);
    };
    let body = json!({
        "error": false,
        "message": "consumer status returned",
        "status": group_json(cluster, group, &status, every),
    });
    reply(StatusCode::OK, body, path)
}

/// Burrow's `ConsumerGroupStatus`.
fn group_json(cluster: &str, group: &str, status: &GroupStatus, every: bool) -> Value {
    let partitions: Vec<Value> = if every {
        status.partitions.iter().map(partition_json).collect()
    } else {
        status.not_ok().map(partition_json).collect()
    };
    json!({
        "cluster": cluster,
        "group": group,
        "status": status.status.as_str(),
        "complete": status.complete,
        "partitions": partitions,
        "partition_count": status.partitions.len(),
        "maxlag": status.maxlag().map(partition_json),
        "totallag": status.total_lag,
        "time_lag_seconds": status.max_time_lag.seconds(),
    })
}

/// Burrow's `PartitionStatus`.
fn partition_json(p: &PartitionStatus) -> Value {
    json!({
        "topic": p.topic,
        "partition": p.partition,
        "owner": p.owner,
        "client_id": p.client_id,
        "status": p.status.as_str(),
        "start": p.start.as_ref().map(commit_json),
        "end": p.end.as_ref().map(commit_json),
        "current_lag": p.current_lag,
        "complete": p.complete,
        "time_lag_seconds": p.time_lag.seconds(),
    })
}

/// Burrow's `ConsumerOffset`.
fn commit_json(c: &CommitEntry) -> Value {
    json!({
        "offset": c.offset,
        "timestamp": c.timestamp_ms,
        "observedAt": c.observed_ms,
        "lag": c.lag,
    })
}

fn not_found(message: &str, path: &str) -> Response {
    let body = json!({ "error": true, "message": message });
    reply(StatusCode::NOT_FOUND, body, path)
}

/// The body with Burrow's `request` object added.
fn reply(code: StatusCode, mut body: Value, path: &str) -> Response {
    body["request"] = json!({ "url": path, "host": host() });
    let text = serde_json::to_string(&body).unwrap_or_default();
    (code, [(header::CONTENT_TYPE, "application/json")], text).into_response()
}

/// This machine's name, as Burrow reports its own.
fn host() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
        })
        .unwrap_or_else(|| "kroute".into())
}
