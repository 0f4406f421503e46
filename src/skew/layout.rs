//! What the skew report and the plan read of the cluster, one function per Kafka request:
//! every partition's replicas, in-sync replicas and leader (Metadata), the reassignments under
//! way (ListPartitionReassignments, on the controller), and how many bytes each replica holds
//! (DescribeLogDirs, per broker).
//!
//! kroute's [`crate::cluster::ClusterView`] knows only leaders, and only of topics clients
//! asked about; a plan needs the replica lists of every topic, so these are asked afresh.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::describe_log_dirs_request::DescribableLogDirTopic;
use kafka_protocol::messages::{
    ApiKey, DescribeLogDirsRequest, DescribeLogDirsResponse, ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse, MetadataRequest, MetadataResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use serde::Serialize;

use crate::ask::{Ask, exchange};
use crate::cluster::METADATA_VERSIONS;

/// One partition's placement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Placement {
    pub partition: i32,
    /// -1 without a leader.
    pub leader: i32,
    /// In preference order: the first is the preferred leader.
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
}

/// The cluster as one Metadata answer shows it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Layout {
    /// Live brokers, ascending.
    pub brokers: Vec<i32>,
    pub controller: i32,
    /// Topics (internal ones left out: the plan never moves them) and their partitions,
    /// ascending by partition.
    pub topics: BTreeMap<String, Vec<Placement>>,
}

impl Layout {
    /// Partitions led per broker (every live broker listed, with 0 if it leads none).
    pub fn leaders_per_broker<'a>(
        &self,
        partitions: impl Iterator<Item = &'a Placement>,
    ) -> BTreeMap<i32, usize> {
        let mut counts: BTreeMap<i32, usize> = self.brokers.iter().map(|b| (*b, 0)).collect();
        for p in partitions.filter(|p| p.leader >= 0) {
            *counts.entry(p.leader).or_default() += 1;
        }
        counts
    }

    /// Every partition, with its topic.
    pub fn partitions(&self) -> impl Iterator<Item = (&str, &Placement)> {
        self.topics
            .iter()
            .flat_map(|(t, ps)| ps.iter().map(move |p| (t.as_str(), p)))
    }
}

/// The layout of every topic, from the broker at `ask`.
pub async fn fetch_layout(ask: &Ask<'_>) -> anyhow::Result<Layout> {
    let request = MetadataRequest::default().with_topics(None);
    let response: MetadataResponse =
        exchange(ask, ApiKey::Metadata, METADATA_VERSIONS, &request).await?;
    Ok(layout_of(&response))
}

/// The layout a Metadata answer describes (topics with an error are left out).
pub fn layout_of(response: &MetadataResponse) -> Layout {
    let mut brokers: Vec<i32> = response.brokers.iter().map(|b| b.node_id.0).collect();
    brokers.sort_unstable();
    let ids = |v: &[kafka_protocol::messages::BrokerId]| v.iter().map(|b| b.0).collect();
    let mut topics = BTreeMap::new();
    for topic in response.topics.iter() {
        let Some(name) = &topic.name else { continue };
        if topic.error_code != 0 || topic.is_internal {
            continue;
        }
        let mut partitions: Vec<Placement> = topic
            .partitions
            .iter()
            .map(|p| Placement {
                partition: p.partition_index,
                leader: p.leader_id.0,
                replicas: ids(&p.replica_nodes),
                isr: ids(&p.isr_nodes),
            })
            .collect();
        partitions.sort_unstable_by_key(|p| p.partition);
        topics.insert(name.to_string(), partitions);
    }
    Layout {
        brokers,
        controller: response.controller_id.0,
        topics,
    }
}

/// The partitions of `topics` being reassigned now (asked of the controller, which in a KRaft
/// cluster is any broker: it forwards).
pub async fn reassigning(
    ask: &Ask<'_>,
    topics: &BTreeSet<String>,
) -> anyhow::Result<BTreeSet<(String, i32)>> {
    let request = ListPartitionReassignmentsRequest::default()
        .with_timeout_ms(10_000)
        .with_topics(None);
    let response: ListPartitionReassignmentsResponse =
        exchange(ask, ApiKey::ListPartitionReassignments, 0..=0, &request).await?;
    anyhow::ensure!(
        response.error_code == 0,
        "ListPartitionReassignments: error {} ({})",
        response.error_code,
        response.error_message.as_deref().unwrap_or("")
    );
    Ok(response
        .topics
        .iter()
        .filter(|t| topics.contains(t.name.as_str()))
        .flat_map(|t| {
            let name = t.name.to_string();
            t.partitions
                .iter()
                .map(move |p| (name.clone(), p.partition_index))
        })
        .collect())
}

/// The size in bytes of each replica of `topics` that the broker at `ask` holds, by
/// (topic, partition): the bytes a move of that partition copies.
pub async fn replica_sizes(
    ask: &Ask<'_>,
    topics: &BTreeMap<String, Vec<i32>>,
) -> anyhow::Result<BTreeMap<(String, i32), i64>> {
    let request = DescribeLogDirsRequest::default().with_topics(Some(
        topics
            .iter()
            .map(|(t, ps)| {
                DescribableLogDirTopic::default()
                    .with_topic(TopicName(StrBytes::from_string(t.clone())))
                    .with_partitions(ps.clone())
            })
            .collect(),
    ));
    let response: DescribeLogDirsResponse =
        exchange(ask, ApiKey::DescribeLogDirs, 1..=4, &request).await?;
    let mut sizes = BTreeMap::new();
    for dir in response.results.iter().filter(|d| d.error_code == 0) {
        for t in &dir.topics {
            for p in t.partitions.iter().filter(|p| !p.is_future_key) {
                let size = sizes
                    .entry((t.name.to_string(), p.partition_index))
                    .or_insert(0);
                *size = p.partition_size.max(*size);
            }
        }
    }
    Ok(sizes)
}
