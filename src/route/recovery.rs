//! Routing idempotent producers again after a kroute restart.
//!
//! A producer kroute did not see start may have been renumbered by the kroute process before
//! this one: the brokers hold, per partition, the last numbers of that process's lanes, which
//! neither the client nor this process knows. Numbering the producer's batches afresh within
//! an epoch the brokers already hold could repeat a batch's numbers, and a broker answers such
//! a batch as a duplicate without appending it. But numbering restarts at 0 with every new
//! producer epoch, on every partition, and a broker takes a higher epoch at sequence 0 from an
//! idempotent producer at any time. So kroute writes a recovered producer's batches under a
//! producer epoch *above every epoch the brokers hold for it*: the client's epoch plus a shift
//! ([`Origin::Numbered`]). The client never sees that epoch (Produce answers do not carry it).
//!
//! Which epochs the brokers hold is read once at start: kroute asks every broker
//! (DescribeProducers, API key 61) for the producers active on the partitions it leads, for
//! every topic enabled for routing. [`EPOCH_GAP`] more epochs are skipped for batches a crashed
//! kroute may still have had on their way to a broker with an epoch not yet seen there.
//!
//! A producer seen before that read is done waits (its batches are answered with a retriable
//! error). If the brokers cannot be asked, or a producer turns up later than any producer kroute
//! numbered itself could have been forgotten (`routing.producer_expiry_ms` after start), it is
//! adopted as before ([`super::producers`]): reset once, then passed through untouched.

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use kafka_protocol::messages::describe_producers_request::TopicRequest;
use kafka_protocol::messages::{
    ApiKey, DescribeProducersRequest, DescribeProducersResponse, MetadataRequest, MetadataResponse,
};
use metrics::{Counter, counter};
use tracing::{info, warn};

use super::producers::Origin;
use crate::ask::exchange;
use crate::cluster::METADATA_VERSIONS;
use crate::route::Context;

/// Epochs skipped above the highest one the brokers hold: a kroute that crashed may have had
/// batches on their way under an epoch one or two above it (its client had just reset), and a
/// broker that appends one of those after kroute read its state must not see the same epoch
/// and numbers from this process.
pub const EPOCH_GAP: i16 = 4;

/// Client epoch bumps a recovered producer may still make before its shifted epoch overflows:
/// a producer with less room is adopted instead.
const EPOCH_HEADROOM: i16 = 1024;

const DESCRIBE_PRODUCERS_VERSIONS: std::ops::RangeInclusive<i16> = 0..=0;
const ATTEMPTS: u32 = 5;

/// The producer epochs the brokers held when kroute started, per producer id; None when they
/// could not be read.
type Held = Option<HashMap<i64, i16>>;

/// What kroute read of the brokers' producer state at start.
pub struct Recovery {
    held: OnceLock<Held>,
    started: Instant,
    /// After this long, a producer kroute numbered itself may have been forgotten: what the
    /// brokers held at start no longer tells everything.
    valid_for: Duration,
    recovered: Counter,
}

impl Recovery {
    pub fn new(producer_expiry: Duration) -> Self {
        Self {
            held: OnceLock::new(),
            started: Instant::now(),
            valid_for: producer_expiry,
            recovered: counter!("kroute_idempotent_producers_recovered_total"),
        }
    }

    /// What to make of producer `producer_id`, first seen at client epoch `epoch`: None until
    /// the brokers' state is read.
    pub fn origin(&self, producer_id: i64, epoch: i16, now: Instant) -> Option<Origin> {
        let held = self.held.get()?;
        let fresh = now.saturating_duration_since(self.started) < self.valid_for;
        let origin = origin_after_restart(held.as_ref().filter(|_| fresh), producer_id, epoch);
        if matches!(origin, Origin::Numbered { .. }) {
            self.recovered.increment(1);
        }
        Some(origin)
    }

    /// Records what was read; only the first call counts.
    pub fn settle(&self, held: Held) {
        let _ = self.held.set(held);
    }
}

/// The origin of a producer kroute did not see start, from the epochs the brokers hold (None:
/// unknown). Pure, for testing.
pub fn origin_after_restart(
    held: Option<&HashMap<i64, i16>>,
    producer_id: i64,
    epoch: i16,
) -> Origin {
    let adopted = Origin::Adopted {
        passes_from: epoch.saturating_add(1),
    };
    let Some(held) = held else {
        return adopted;
    };
    let above = match held.get(&producer_id) {
        Some(h) => h.checked_add(1).map(|next| next.max(epoch)),
        None => Some(epoch),
    };
    match above.and_then(|a| a.checked_add(EPOCH_GAP)) {
        Some(first) if first <= i16::MAX - EPOCH_HEADROOM && epoch >= 0 => Origin::Numbered {
            epoch_shift: first - epoch,
        },
        _ => adopted,
    }
}

/// Reads the brokers' producer state once the cluster is known, then settles `recovery`.
pub async fn read_held_epochs(ctx: std::sync::Arc<dyn Context>) {
    let recovery = &ctx.router().recovery;
    let routing = &ctx.config().routing;
    if !routing.routes_idempotent() || ctx.security().learns_brokers_from_clients() {
        recovery.settle(None);
        return;
    }
    let mut changes = ctx.cluster().subscribe();
    while ctx.cluster().node_ids().is_empty() {
        if changes.changed().await.is_err() {
            return;
        }
    }
    let began = Instant::now();
    let mut last_error = String::new();
    for attempt in 1..=ATTEMPTS {
        match held_epochs(ctx.as_ref()).await {
            Ok((held, partitions)) => {
                info!(
                    producers = held.len(),
                    partitions,
                    elapsed_ms = began.elapsed().as_millis() as u64,
                    "read the idempotent producers the brokers hold: producers kroute did not see start are routed again"
                );
                recovery.settle(Some(held));
                return;
            }
            Err(e) => last_error = format!("{e:#}"),
        }
        tokio::time::sleep(Duration::from_millis(200) * attempt).await;
    }
    warn!(
        "cannot read the idempotent producers the brokers hold ({last_error}): producers kroute did not see start are passed through, not routed"
    );
    recovery.settle(None);
}

/// The highest epoch per producer id over every partition of the routed topics, and how many
/// partitions were read.
async fn held_epochs(ctx: &dyn Context) -> anyhow::Result<(HashMap<i64, i16>, usize)> {
    let leaders = routed_partitions_by_leader(ctx).await?;
    let mut held: HashMap<i64, i16> = HashMap::new();
    let mut partitions = 0;
    for (leader, topics) in leaders {
        let addr = ctx
            .cluster()
            .address(leader)
            .ok_or_else(|| anyhow::anyhow!("broker {leader} has no known address"))?;
        let request = DescribeProducersRequest::default().with_topics(topics);
        let response: DescribeProducersResponse = exchange(
            &ctx.ask(&addr),
            ApiKey::DescribeProducers,
            DESCRIBE_PRODUCERS_VERSIONS,
            &request,
        )
        .await?;
        for topic in response.topics {
            for partition in topic.partitions {
                anyhow::ensure!(
                    partition.error_code == 0,
                    "DescribeProducers {}-{} on broker {leader}: error {}",
                    topic.name.as_str(),
                    partition.partition_index,
                    partition.error_code
                );
                partitions += 1;
                for p in partition.active_producers {
                    let epoch = i16::try_from(p.producer_epoch).unwrap_or(i16::MAX);
                    let entry = held.entry(p.producer_id.0).or_insert(epoch);
                    *entry = (*entry).max(epoch);
                }
            }
        }
    }
    Ok((held, partitions))
}

/// The partitions of every topic enabled for routing, grouped by their leader.
async fn routed_partitions_by_leader(
    ctx: &dyn Context,
) -> anyhow::Result<HashMap<i32, Vec<TopicRequest>>> {
    let mut last_error = anyhow::anyhow!("no broker to ask");
    for addr in ctx
        .cluster()
        .bootstrap_candidates(&ctx.config().upstream.bootstrap_servers)
    {
        let request = MetadataRequest::default().with_topics(None);
        let response: MetadataResponse = match exchange(
            &ctx.ask(&addr),
            ApiKey::Metadata,
            METADATA_VERSIONS,
            &request,
        )
        .await
        {
            Ok(r) => r,
            Err(e) => {
                last_error = e;
                continue;
            }
        };
        let mut by_leader: HashMap<i32, Vec<TopicRequest>> = HashMap::new();
        for topic in response.topics {
            let Some(name) = topic
                .name
                .filter(|n| ctx.config().routing.routes_topic(n.as_str()))
            else {
                continue;
            };
            anyhow::ensure!(
                topic.error_code == 0,
                "metadata of topic {}: error {}",
                name.as_str(),
                topic.error_code
            );
            for partition in topic.partitions {
                let requests = by_leader.entry(partition.leader_id.0).or_default();
                match requests.iter_mut().find(|t| t.name == name) {
                    Some(t) => t.partition_indexes.push(partition.partition_index),
                    None => requests.push(
                        TopicRequest::default()
                            .with_name(name.clone())
                            .with_partition_indexes(vec![partition.partition_index]),
                    ),
                }
            }
        }
        anyhow::ensure!(
            !by_leader.contains_key(&-1),
            "a partition of a routed topic has no leader"
        );
        return Ok(by_leader);
    }
    Err(last_error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recovered_producer_is_written_above_every_epoch_the_brokers_hold() {
        let held = HashMap::from([(7, 12), (8, 2)]);
        // Held at 12 while the client is at 3 (an earlier kroute shifted it): above 12.
        assert_eq!(
            origin_after_restart(Some(&held), 7, 3),
            Origin::Numbered {
                epoch_shift: 13 + EPOCH_GAP - 3
            }
        );
        // Held at 2, the client already at 5: above the client's own epoch.
        assert_eq!(
            origin_after_restart(Some(&held), 8, 5),
            Origin::Numbered {
                epoch_shift: EPOCH_GAP
            }
        );
        // Held nowhere: still a gap, for batches a crashed kroute had on their way.
        assert_eq!(
            origin_after_restart(Some(&held), 9, 0),
            Origin::Numbered {
                epoch_shift: EPOCH_GAP
            }
        );
    }

    #[test]
    fn without_the_brokers_state_or_room_for_epochs_a_producer_is_adopted() {
        assert_eq!(
            origin_after_restart(None, 7, 3),
            Origin::Adopted { passes_from: 4 }
        );
        let held = HashMap::from([(7, i16::MAX - 10)]);
        assert_eq!(
            origin_after_restart(Some(&held), 7, 3),
            Origin::Adopted { passes_from: 4 }
        );
        assert_eq!(
            origin_after_restart(Some(&HashMap::from([(7, i16::MAX)])), 7, i16::MAX),
            Origin::Adopted {
                passes_from: i16::MAX
            }
        );
    }

    #[test]
    fn the_brokers_state_is_trusted_only_while_no_owned_producer_can_have_been_forgotten() {
        let recovery = Recovery::new(Duration::from_secs(60));
        let t0 = recovery.started;
        assert_eq!(recovery.origin(7, 0, t0), None, "not read yet: wait");
        recovery.settle(Some(HashMap::new()));
        assert_eq!(
            recovery.origin(7, 0, t0 + Duration::from_secs(1)),
            Some(Origin::Numbered {
                epoch_shift: EPOCH_GAP
            })
        );
        assert_eq!(
            recovery.origin(7, 0, t0 + Duration::from_secs(61)),
            Some(Origin::Adopted { passes_from: 1 })
        );
    }
}
