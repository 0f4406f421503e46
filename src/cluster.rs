//! kroute's view of the real cluster: which brokers exist and where they really are.
//!
//! Two sources feed it. kroute's own periodic Metadata request is authoritative: brokers it no
//! longer lists are dropped. Addresses seen in responses relayed to clients only add or update
//! brokers, so a broker that joins gets a listener as soon as any client learns of it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use dashmap::DashMap;
use dashmap::mapref::entry::Entry;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{ApiKey, MetadataRequest, MetadataResponse, TopicName};
use tokio::sync::{Notify, watch};

use crate::ask::{Ask, exchange};
use crate::balance::scores::Scores;

/// The brokers as kroute knows them (where they are, how fast they answer) and a way to ask one
/// of them something on kroute's own connection. All that kroute's background work (consumer
/// lag) gets of the proxy, and the base of what the skew report, broker connections and routing
/// get ([`crate::skew::Sources`], [`crate::upstream::Context`], [`crate::route::Context`]).
pub trait Brokers: Send + Sync {
    fn cluster(&self) -> &ClusterView;
    /// Every broker's live score: round trips feed it, routing reads it.
    fn scores(&self) -> &Scores;
    /// How kroute's own requests to the broker at `addr` are made ([`crate::ask`]).
    fn ask<'a>(&'a self, addr: &'a str) -> Ask<'a>;
}

/// A real broker address seen in a response: (node id, host, port).
pub type SeenBroker = (i32, String, i32);

/// Where the partitions of one topic are led.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicLayout {
    /// (partition, leader node id or -1, leader epoch or -1), ascending by partition. The
    /// epoch (KIP-320) is -1 where the answer carried none.
    partitions: Vec<(i32, i32, i32)>,
    /// Brokers that lead at least one partition, ascending.
    leaders: Vec<i32>,
    /// The topic's id (Metadata v10+; 0 if the answer carried none): a topic deleted and
    /// created again under the same name has a new one, and its leader epochs start over.
    id: u128,
}

impl TopicLayout {
    /// A layout from (partition, leader) pairs, without leader epochs.
    pub fn new(partitions: impl IntoIterator<Item = (i32, i32)>) -> Self {
        Self::with_epochs(partitions.into_iter().map(|(p, l)| (p, l, -1)))
    }

    /// A layout from (partition, leader, leader epoch) triples.
    pub fn with_epochs(partitions: impl IntoIterator<Item = (i32, i32, i32)>) -> Self {
        let mut partitions: Vec<(i32, i32, i32)> = partitions.into_iter().collect();
        partitions.sort_unstable();
        partitions.dedup_by_key(|p| p.0);
        let mut leaders: Vec<i32> = partitions.iter().map(|p| p.1).filter(|l| *l >= 0).collect();
        leaders.sort_unstable();
        leaders.dedup();
        Self {
            partitions,
            leaders,
            id: 0,
        }
    }

    /// The same layout, of the topic with id `id`.
    pub fn with_id(self, id: u128) -> Self {
        Self { id, ..self }
    }

    /// The (partition, leader, epoch) entry of `partition`.
    fn entry(&self, partition: i32) -> Option<(i32, i32, i32)> {
        let i = self
            .partitions
            .binary_search_by_key(&partition, |p| p.0)
            .ok()?;
        Some(self.partitions[i])
    }

    /// This layout after a broker said it does not lead `partition` and named `leader` at
    /// `epoch` (-1 if none): the named leader if its epoch is later than the one known, else
    /// the same leader with no epoch, so that the next Metadata answer is taken for it
    /// whatever epoch it carries (the known one may be wrong: a topic created again, a broken
    /// broker's answer). None if it has no such partition.
    fn after_not_leader(&self, partition: i32, leader: i32, epoch: i32) -> Option<TopicLayout> {
        let (_, _, known_epoch) = self.entry(partition)?;
        let named = leader >= 0 && epoch >= 0 && epoch > known_epoch;
        let moved = |&(p, l, e): &(i32, i32, i32)| match p == partition {
            true if named => (p, leader, epoch),
            true => (p, l, -1),
            false => (p, l, e),
        };
        Some(TopicLayout::with_epochs(self.partitions.iter().map(moved)).with_id(self.id))
    }

    /// This layout, except where `known` names a later leader epoch for a partition: an answer
    /// from a broker that has not yet heard of an election must not roll its leader back
    /// (KIP-320). Where either side has no epoch, this layout's leader stands.
    /// A layout of another topic of the same name (its id differs) is taken as it is.
    fn unless_older_than(self, known: &TopicLayout) -> TopicLayout {
        if self.id != 0 && known.id != 0 && self.id != known.id {
            return self;
        }
        let id = if self.id != 0 { self.id } else { known.id };
        // The known entry of a partition this answer says less recent things of.
        let later = |&(p, _, epoch): &(i32, i32, i32)| {
            known
                .entry(p)
                .filter(|&(_, _, known_epoch)| epoch >= 0 && known_epoch > epoch)
        };
        // Most answers are not behind: taken as they are, without a rebuild.
        if !self.partitions.iter().any(|p| later(p).is_some()) {
            return self.with_id(id);
        }
        let merged = self.partitions.iter().map(|p| later(p).unwrap_or(*p));
        TopicLayout::with_epochs(merged).with_id(id)
    }

    /// Brokers leading at least one partition, ascending.
    pub fn leaders(&self) -> &[i32] {
        &self.leaders
    }

    /// The leader of `partition`, if known.
    pub fn leader_of(&self, partition: i32) -> Option<i32> {
        self.entry(partition).map(|p| p.1).filter(|l| *l >= 0)
    }

    /// The partitions `node` leads, ascending.
    pub fn led_by(&self, node: i32) -> impl Iterator<Item = i32> + '_ {
        self.partitions
            .iter()
            .filter(move |p| p.1 == node)
            .map(|p| p.0)
    }
}

/// Shared, concurrently readable map of node id to real `host:port`, and topic layouts.
pub struct ClusterView {
    brokers: DashMap<i32, String>,
    topics: DashMap<String, Arc<TopicLayout>>,
    changes: watch::Sender<u64>,
    refreshed_once: AtomicBool,
    next_bootstrap: AtomicUsize,
    /// Wakes kroute's own metadata refresh early ([`ClusterView::stale`]).
    stale: Notify,
}

impl Default for ClusterView {
    fn default() -> Self {
        Self::new()
    }
}

impl ClusterView {
    pub fn new() -> Self {
        Self {
            brokers: DashMap::new(),
            topics: DashMap::new(),
            changes: watch::channel(0).0,
            refreshed_once: AtomicBool::new(false),
            next_bootstrap: AtomicUsize::new(0),
            stale: Notify::new(),
        }
    }

    /// Says the view may be out of date (a broker went away with requests of kroute's own in
    /// flight, or a partition kroute resends to has no known leader): kroute's metadata
    /// refresh runs soon rather than at its next period. kroute cannot count on clients to
    /// refresh for it: an error kroute reports them (REQUEST_TIMED_OUT) makes none of them ask.
    /// (Without a metadata refresh of its own, with SASL passthrough and no credentials,
    /// layouts come from clients' Metadata answers alone and this does nothing.)
    pub fn stale(&self) {
        self.stale.notify_one();
    }

    /// Resolves when [`ClusterView::stale`] was called since the last time.
    pub async fn went_stale(&self) {
        self.stale.notified().await;
    }

    /// The topics whose layouts kroute knows (learnt from clients' Metadata answers), to keep
    /// them current itself.
    pub fn topic_names(&self) -> Vec<String> {
        self.topics.iter().map(|t| t.key().clone()).collect()
    }

    /// The real address of broker `node_id`.
    pub fn address(&self, node_id: i32) -> Option<String> {
        self.brokers.get(&node_id).map(|a| a.clone())
    }

    /// The node id whose real address is `addr`, if any.
    pub fn node_id_of(&self, addr: &str) -> Option<i32> {
        self.brokers
            .iter()
            .find(|e| e.value() == addr)
            .map(|e| *e.key())
    }

    /// Known node ids, ascending.
    pub fn node_ids(&self) -> Vec<i32> {
        let mut ids: Vec<i32> = self.brokers.iter().map(|e| *e.key()).collect();
        ids.sort_unstable();
        ids
    }

    /// True once kroute's own metadata request has succeeded.
    pub fn is_ready(&self) -> bool {
        self.refreshed_once.load(Ordering::Relaxed)
    }

    /// Ready without a metadata request of kroute's own (see
    /// [`crate::security::UpstreamSecurity::learns_brokers_from_clients`]).
    pub fn assume_ready(&self) {
        self.refreshed_once.store(true, Ordering::Relaxed);
    }

    /// Wakes whenever the set of brokers or their addresses change.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    fn changed(&self) {
        self.changes.send_modify(|v| *v += 1);
    }

    /// Adds or updates brokers seen in a relayed response.
    pub fn observe(&self, seen: &[SeenBroker]) {
        let mut changed = false;
        for (id, host, port) in seen {
            let addr = join_host_port(host, *port);
            if self.brokers.get(id).is_some_and(|a| *a == addr) {
                continue;
            }
            self.brokers.insert(*id, addr);
            changed = true;
        }
        if changed {
            self.changed();
        }
    }

    /// Records topic layouts from a Metadata response (a client's, or kroute's own).
    pub fn observe_topics(&self, topics: Vec<(String, Option<TopicLayout>)>) {
        for (name, layout) in topics {
            match layout {
                Some(layout) => {
                    // Compared under a read lock: most answers change nothing, and Produce
                    // requests read layouts meanwhile.
                    let known = self.topics.get(&name).map(|k| k.clone());
                    let layout = match &known {
                        Some(known) => layout.unless_older_than(known),
                        None => layout,
                    };
                    if known.as_deref() == Some(&layout) {
                        continue;
                    }
                    // Merged again with what is known by then, under the write lock.
                    match self.topics.entry(name) {
                        Entry::Occupied(mut known) => {
                            let layout = layout.unless_older_than(known.get());
                            if **known.get() != layout {
                                known.insert(Arc::new(layout));
                            }
                        }
                        Entry::Vacant(place) => {
                            place.insert(Arc::new(layout));
                        }
                    }
                }
                None => {
                    self.topics.remove(&name);
                }
            }
        }
    }

    /// Records that the broker kroute sent `partition` of `topic` to said it does not lead it,
    /// naming `leader` at leader epoch `epoch` instead (Produce v10+, KIP-951; -1 if none).
    /// See [`TopicLayout::after_not_leader`].
    pub fn leader_moved(&self, topic: &str, partition: i32, leader: i32, epoch: i32) {
        if let Some(mut known) = self.topics.get_mut(topic)
            && let Some(layout) = known.after_not_leader(partition, leader, epoch)
        {
            *known = Arc::new(layout);
        }
    }

    /// The partition leaders of `topic`, as last seen in a Metadata response.
    pub fn topic(&self, topic: &str) -> Option<Arc<TopicLayout>> {
        self.topics.get(topic).map(|t| t.clone())
    }

    /// Replaces the whole broker set with the result of kroute's own metadata request.
    pub fn replace(&self, brokers: BTreeMap<i32, String>) {
        let current: BTreeMap<i32, String> = self
            .brokers
            .iter()
            .map(|e| (*e.key(), e.value().clone()))
            .collect();
        self.refreshed_once.store(true, Ordering::Relaxed);
        if current == brokers {
            return;
        }
        self.brokers.retain(|id, _| brokers.contains_key(id));
        for (id, addr) in brokers {
            self.brokers.insert(id, addr);
        }
        self.changed();
    }

    /// Upstream addresses to try for a bootstrap connection, rotating the starting point so
    /// bootstrap traffic spreads over the brokers. Configured servers come last as a fallback.
    pub fn bootstrap_candidates(&self, configured: &[String]) -> Vec<String> {
        let mut known: Vec<String> = self
            .node_ids()
            .into_iter()
            .filter_map(|id| self.address(id))
            .collect();
        if !known.is_empty() {
            let start = self.next_bootstrap.fetch_add(1, Ordering::Relaxed) % known.len();
            known.rotate_left(start);
        }
        for c in configured {
            if !known.contains(c) {
                known.push(c.clone());
            }
        }
        known
    }
}

fn join_host_port(host: &str, port: i32) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// More brokers than any real cluster has (the largest run a few thousand): an answer that
/// lists more is refused, before kroute copies any of it or opens a listener for each.
pub const MAX_BROKERS: usize = 10_000;
/// The longest host name DNS allows (RFC 1035: 253 characters written out).
pub const MAX_HOST_LEN: usize = 253;

/// A broker answer that describes no real cluster.
#[derive(Debug, thiserror::Error)]
pub enum AbsurdCluster {
    #[error("the answer lists {0} brokers, more than any real cluster (at most {MAX_BROKERS})")]
    TooManyBrokers(usize),
    #[error("the answer gives broker {0} a host name of {1} bytes (DNS allows {MAX_HOST_LEN})")]
    HostTooLong(i32, usize),
}

/// Refuses a broker list (node id, host) no real cluster answers with.
pub fn check_brokers<'a>(
    brokers: impl ExactSizeIterator<Item = (i32, &'a str)>,
) -> Result<(), AbsurdCluster> {
    if brokers.len() > MAX_BROKERS {
        return Err(AbsurdCluster::TooManyBrokers(brokers.len()));
    }
    for (node_id, host) in brokers {
        if host.len() > MAX_HOST_LEN {
            return Err(AbsurdCluster::HostTooLong(node_id, host.len()));
        }
    }
    Ok(())
}

/// The Metadata versions kroute can ask with: from v10 (Kafka 2.8) the topics carry their ids;
/// v13 (4.0) adds only a top-level error, which kroute's own requests do not need.
pub const METADATA_VERSIONS: std::ops::RangeInclusive<i16> = 10..=12;

/// The brokers, and the layouts of the topics asked for, as one broker sees them.
pub struct Fetched {
    pub brokers: BTreeMap<i32, String>,
    pub topics: Vec<(String, Option<TopicLayout>)>,
}

/// Asks one broker for the broker list and the layouts of `topics`, over a connection secured
/// as kroute's own.
pub async fn fetch_metadata(ask: &Ask<'_>, topics: Vec<String>) -> anyhow::Result<Fetched> {
    let topics = topics
        .into_iter()
        .map(|name| MetadataRequestTopic::default().with_name(Some(TopicName(name.into()))))
        .collect();
    let request = MetadataRequest::default().with_topics(Some(topics));
    let response: MetadataResponse =
        exchange(ask, ApiKey::Metadata, METADATA_VERSIONS, &request).await?;
    check_brokers(
        response
            .brokers
            .iter()
            .map(|b| (b.node_id.0, b.host.as_str())),
    )?;
    let brokers: BTreeMap<i32, String> = response
        .brokers
        .iter()
        .map(|b| (b.node_id.0, join_host_port(b.host.as_str(), b.port)))
        .collect();
    anyhow::ensure!(!brokers.is_empty(), "metadata lists no brokers");
    Ok(Fetched {
        brokers,
        topics: layouts(&response),
    })
}

/// The layout of each topic a Metadata response names: None for one it reports an error for
/// (e.g. deleted).
pub fn layouts(response: &MetadataResponse) -> Vec<(String, Option<TopicLayout>)> {
    response
        .topics
        .iter()
        .filter_map(|topic| {
            let name = topic.name.as_ref()?;
            let layout = (topic.error_code == 0).then(|| {
                let leaders = topic.partitions.iter();
                TopicLayout::with_epochs(
                    leaders.map(|p| (p.partition_index, p.leader_id.0, p.leader_epoch)),
                )
                .with_id(topic.topic_id.as_u128())
            });
            Some((name.to_string(), layout))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observe_adds_and_replace_removes() {
        let view = ClusterView::new();
        let rx = view.subscribe();
        view.observe(&[(1, "h".into(), 1), (2, "h".into(), 2)]);
        assert_eq!(view.node_ids(), vec![1, 2]);
        assert!(rx.has_changed().unwrap());
        assert!(!view.is_ready());

        let mut rx = view.subscribe();
        view.observe(&[(1, "h".into(), 1)]);
        assert!(!rx.has_changed().unwrap(), "no change, no wake-up");

        view.replace(BTreeMap::from([(2, "h:2".into()), (3, "h:3".into())]));
        assert_eq!(view.node_ids(), vec![2, 3]);
        assert!(view.is_ready());
        assert!(rx.has_changed().unwrap());
        rx.mark_unchanged();
        assert_eq!(view.address(3).as_deref(), Some("h:3"));
    }

    #[test]
    fn bootstrap_candidates_rotate_and_fall_back() {
        let view = ClusterView::new();
        let configured = vec!["seed:1".to_string()];
        assert_eq!(view.bootstrap_candidates(&configured), vec!["seed:1"]);
        view.replace(BTreeMap::from([(1, "a:1".into()), (2, "b:2".into())]));
        let first = view.bootstrap_candidates(&configured);
        let second = view.bootstrap_candidates(&configured);
        assert_ne!(first[0], second[0]);
        assert_eq!(first.last().map(String::as_str), Some("seed:1"));
    }

    /// The leader of partition `p` of topic "t".
    fn leader(view: &ClusterView, p: i32) -> Option<i32> {
        view.topic("t").and_then(|t| t.leader_of(p))
    }

    /// A Metadata answer for topic "t".
    fn seen(view: &ClusterView, layout: TopicLayout) {
        view.observe_topics(vec![("t".into(), Some(layout))]);
    }

    #[test]
    fn an_answer_with_an_older_leader_epoch_does_not_roll_a_leader_back() {
        let view = ClusterView::new();
        seen(&view, TopicLayout::with_epochs([(0, 1, 4), (1, 2, 7)]));
        // Partition 0 moves to broker 3 in epoch 5.
        seen(&view, TopicLayout::with_epochs([(0, 3, 5), (1, 2, 7)]));
        assert_eq!(leader(&view, 0), Some(3));
        // A broker that has not heard of it yet still says broker 1, epoch 4: kept at 3.
        // Partition 1's newer epoch in the same answer is taken.
        seen(&view, TopicLayout::with_epochs([(0, 1, 4), (1, 1, 8)]));
        assert_eq!(leader(&view, 0), Some(3));
        assert_eq!(leader(&view, 1), Some(1));
        assert_eq!(view.topic("t").unwrap().leaders(), &[1, 3]);
        // The same epoch, or an answer without epochs (Metadata before v7): taken as it is.
        seen(&view, TopicLayout::with_epochs([(0, -1, 5), (1, 1, 8)]));
        assert_eq!(leader(&view, 0), None);
        seen(&view, TopicLayout::new([(0, 2), (1, 1)]));
        assert_eq!(leader(&view, 0), Some(2));
        // A partition added later is taken whatever its epoch.
        seen(
            &view,
            TopicLayout::with_epochs([(0, 2, 6), (1, 1, 8), (2, 3, 0)]),
        );
        assert_eq!(leader(&view, 2), Some(3));
    }

    #[test]
    fn a_leader_named_by_a_produce_answer_is_taken_if_its_epoch_is_later() {
        let view = ClusterView::new();
        seen(&view, TopicLayout::with_epochs([(0, 1, 4), (1, 2, 7)]));
        view.leader_moved("t", 0, 3, 5);
        assert_eq!(leader(&view, 0), Some(3));
        assert_eq!(leader(&view, 1), Some(2));
        assert_eq!(view.topic("t").unwrap().leaders(), &[2, 3]);
        // A Metadata answer that has not heard of epoch 5 yet does not undo it.
        seen(&view, TopicLayout::with_epochs([(0, 1, 4), (1, 2, 7)]));
        assert_eq!(leader(&view, 0), Some(3));
        // No leader, unknown partitions and topics: nothing named, nothing taken.
        view.leader_moved("t", 9, 1, 9);
        view.leader_moved("u", 0, 1, 9);
        assert!(view.topic("u").is_none());
        view.leader_moved("t", 1, -1, -1);
        assert_eq!(leader(&view, 1), Some(2));
    }

    #[test]
    fn a_not_leader_answer_unpins_the_known_epoch() {
        let view = ClusterView::new();
        // An epoch no later answer can beat (a broken broker's, say) pins the leader...
        seen(&view, TopicLayout::with_epochs([(0, 1, i32::MAX)]));
        seen(&view, TopicLayout::with_epochs([(0, 3, 5)]));
        assert_eq!(leader(&view, 0), Some(1));
        // ...until broker 1 says it does not lead the partition: the next answer is taken.
        view.leader_moved("t", 0, -1, -1);
        assert_eq!(leader(&view, 0), Some(1));
        seen(&view, TopicLayout::with_epochs([(0, 3, 5)]));
        assert_eq!(leader(&view, 0), Some(3));
        // A leader named with an epoch not later than the one known is not taken either.
        view.leader_moved("t", 0, 2, 4);
        assert_eq!(leader(&view, 0), Some(3));
        seen(&view, TopicLayout::with_epochs([(0, 2, 4)]));
        assert_eq!(leader(&view, 0), Some(2));
    }

    #[test]
    fn a_topic_created_again_under_its_name_is_taken_whatever_its_epochs() {
        let view = ClusterView::new();
        seen(&view, TopicLayout::with_epochs([(0, 1, 10)]).with_id(7));
        // The same topic, an older epoch: not taken; an answer without an id is that topic.
        seen(&view, TopicLayout::with_epochs([(0, 2, 3)]).with_id(7));
        seen(&view, TopicLayout::with_epochs([(0, 2, 3)]));
        assert_eq!(leader(&view, 0), Some(1));
        // Deleted and created again (a new id): its epochs start over.
        seen(&view, TopicLayout::with_epochs([(0, 2, 0)]).with_id(8));
        assert_eq!(leader(&view, 0), Some(2));
    }

    #[test]
    fn topic_layouts() {
        let view = ClusterView::new();
        view.observe_topics(vec![(
            "t".into(),
            Some(TopicLayout::new([(2, 3), (0, 1), (1, 3), (3, -1)])),
        )]);
        let t = view.topic("t").unwrap();
        assert_eq!(t.leaders(), &[1, 3]);
        assert_eq!(t.led_by(3).collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(t.leader_of(3), None);
        assert_eq!(t.leader_of(0), Some(1));
        view.observe_topics(vec![("t".into(), None)]);
        assert!(view.topic("t").is_none());
    }

    #[test]
    fn absurd_broker_lists_are_refused() {
        let host = "h".repeat(MAX_HOST_LEN);
        let many = vec![(1, "a"); MAX_BROKERS];
        assert!(check_brokers(many.iter().copied()).is_ok());
        let too_many = vec![(1, "a"); MAX_BROKERS + 1];
        assert!(matches!(
            check_brokers(too_many.iter().copied()),
            Err(AbsurdCluster::TooManyBrokers(n)) if n == MAX_BROKERS + 1
        ));
        assert!(check_brokers([(7, host.as_str())].into_iter()).is_ok());
        let longer = format!("{host}h");
        assert!(matches!(
            check_brokers([(1, "a"), (7, longer.as_str())].into_iter()),
            Err(AbsurdCluster::HostTooLong(7, 254))
        ));
    }

    #[test]
    fn ipv6_hosts_are_bracketed() {
        assert_eq!(join_host_port("::1", 9), "[::1]:9");
        assert_eq!(join_host_port("a", 9), "a:9");
    }
}
