//! Commits seen passing through kroute: the OffsetCommit requests of watched groups are read
//! on their way to the broker, and recorded from the broker's answer (only what it accepted).
//!
//! The data path's only contact with lag: [`commit_observer`] is asked about each OffsetCommit
//! request, and returns what to do with the broker's answer, or nothing. Requests are forwarded
//! untouched either way.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use tracing::debug;

use super::collect::now_ms;
use super::metrics::LagMetrics;
use super::offset_commit::{TopicRef, read_request, read_response};
use super::store::{LagStore, Source};

/// An observer of the broker's answer to this OffsetCommit request (`payload`, of `version`):
/// given the answer, it records the commits the broker accepted. The caller gives it only a
/// broker's answer, never a failure to get one. `None` when lag is off, the group is not
/// watched, or the request cannot be read (counted: the broker still gets it and has the last
/// word).
pub fn commit_observer(
    lag: Option<&Arc<LagStore>>,
    metrics: &LagMetrics,
    version: i16,
    payload: &Bytes,
) -> Option<impl FnOnce(&Bytes) + Send + 'static> {
    // Commits read from __consumer_offsets need no second copy from the data path.
    let lag = lag.filter(|lag| !lag.commits_from_log())?.clone();
    let request = match read_request(payload, version) {
        Ok(request) => request,
        Err(e) => {
            metrics.commits_unreadable.increment(1);
            debug!(version, "OffsetCommit request not read for lag: {e}");
            return None;
        }
    };
    if !lag.config().watches(&request.group) {
        return None;
    }
    let group = request.group;
    let offsets: HashMap<(TopicRef, i32), i64> = request
        .offsets
        .into_iter()
        .map(|(topic, partition, offset)| ((topic, partition), offset))
        .collect();
    let (observed, unreadable) = (
        metrics.commits_observed.clone(),
        metrics.commits_unreadable.clone(),
    );
    Some(move |answer: &Bytes| match read_response(answer, version) {
        Ok(results) => {
            let recorded = record(&lag, &group, &offsets, results);
            observed.increment(recorded);
        }
        Err(e) => {
            unreadable.increment(1);
            debug!(version, "OffsetCommit response not read for lag: {e}");
        }
    })
}

/// Records the accepted commits; returns how many.
fn record(
    lag: &Arc<LagStore>,
    group: &str,
    offsets: &HashMap<(TopicRef, i32), i64>,
    results: Vec<(TopicRef, i32, i16)>,
) -> u64 {
    let now = now_ms();
    let mut recorded = 0;
    for (topic, partition, error) in results {
        if error != 0 {
            continue;
        }
        let Some(offset) = offsets.get(&(topic.clone(), partition)) else {
            continue;
        };
        let name = match topic {
            TopicRef::Name(name) => name,
            // Named by id (v10): the collector learns the names; until then, the poll sees it.
            TopicRef::Id(id) => match lag.topic_name(&id) {
                Some(name) => name,
                None => continue,
            },
        };
        lag.record_commit(group, (&name, partition), *offset, now, Source::Observed);
        recorded += 1;
    }
    recorded
}
