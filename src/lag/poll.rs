//! The requests kroute's lag collector sends, one function per question, each answering with
//! plain data: which groups a broker coordinates, who owns their partitions, what they
//! committed, where partitions are led and where their logs end.
//!
//! Every request goes over kroute's own connection to the broker ([`crate::ask`]),
//! secured as kroute's upstream connections are, at the newest version both sides know
//! ([`crate::ask`]), so brokers from Kafka 2.8 on answer: ListGroups tells classic
//! groups from KIP-848 consumer groups from v5 (3.8; before, every group is classic); OffsetFetch
//! asks for many groups at once from v8 (3.0; before, one request per group).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestGroup;
use kafka_protocol::messages::{
    ApiKey, BrokerId, ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse,
    DescribeGroupsRequest, DescribeGroupsResponse, GroupId, ListGroupsRequest, ListGroupsResponse,
    ListOffsetsRequest, ListOffsetsResponse, MetadataRequest, MetadataResponse, OffsetFetchRequest,
    OffsetFetchResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::store::{Owner, TopicPartition};
use crate::ask::{Ask, Session, exchange};
use crate::cluster::METADATA_VERSIONS;
use crate::protocol::header::{Malformed, WireReader};

/// A group as ListGroups names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub group: String,
    /// KIP-848 `consumer` group (ConsumerGroupDescribe) rather than `classic` (DescribeGroups).
    pub consumer_protocol: bool,
}

/// The groups broker `ask` coordinates, but share groups (they commit no offsets). Before v5 the
/// answer has no group type (an empty one): all groups are classic then.
pub async fn list_groups(ask: &Ask<'_>) -> anyhow::Result<Vec<Listed>> {
    let response: ListGroupsResponse = exchange(
        ask,
        ApiKey::ListGroups,
        1..=5,
        &ListGroupsRequest::default(),
    )
    .await?;
    anyhow::ensure!(
        response.error_code == 0,
        "ListGroups error {}",
        response.error_code
    );
    Ok(response
        .groups
        .into_iter()
        .filter(|g| g.group_type.as_str() != "share")
        .map(|g| Listed {
            group: g.group_id.0.to_string(),
            consumer_protocol: g.group_type.as_str() == "consumer",
        })
        .collect())
}

/// Who owns each assigned partition of classic `groups`, from their members' assignments.
pub async fn classic_owners(
    ask: &Ask<'_>,
    groups: &[String],
) -> anyhow::Result<HashMap<String, HashMap<TopicPartition, Owner>>> {
    let request = DescribeGroupsRequest::default().with_groups(group_ids(groups));
    let response: DescribeGroupsResponse =
        exchange(ask, ApiKey::DescribeGroups, 1..=5, &request).await?;
    let mut out = HashMap::new();
    for group in response.groups.into_iter().filter(|g| g.error_code == 0) {
        let mut owners = HashMap::new();
        for member in group.members {
            let owner = Owner {
                host: member.client_host.to_string(),
                client_id: member.client_id.to_string(),
            };
            for (topic, partition) in assigned(member.member_assignment) {
                owners.insert((topic, partition), owner.clone());
            }
        }
        out.insert(group.group_id.0.to_string(), owners);
    }
    Ok(out)
}

/// The partitions in a consumer-protocol assignment (a version, then the topics and their
/// partitions); none if it cannot be read (another protocol's assignment, e.g. Connect's).
///
/// Read by hand, not with kafka-protocol: the assignment is bytes a client wrote (the group
/// leader's SyncGroup), and kafka-protocol sizes arrays from the counts on the wire before it
/// reads them, so a bad count would make kroute allocate without bound. Every count here is
/// checked against the bytes present. All versions (0 to 3) start with the same fields.
fn assigned(bytes: bytes::Bytes) -> Vec<TopicPartition> {
    read_assignment(&bytes).unwrap_or_default()
}

/// The partitions of a consumer-protocol assignment, each count checked against the bytes
/// present (public for the fuzz targets).
pub fn read_assignment(bytes: &[u8]) -> Result<Vec<TopicPartition>, Malformed> {
    const WHAT: &str = "consumer protocol assignment";
    let mut r = WireReader::new(bytes);
    r.i16(WHAT)?; // version
    let mut out = Vec::new();
    // A topic takes at least its name length and its partition count.
    for _ in 0..r.array_len(false, 6, WHAT)?.unwrap_or(0) {
        // Each partition gets its own copy of the name: capped at Kafka's longest.
        let topic = r
            .nullable_string(false, WHAT)?
            .filter(|t| t.len() <= super::offset_commit::MAX_TOPIC_NAME)
            .ok_or(Malformed { what: WHAT })?;
        for _ in 0..r.array_len(false, 4, WHAT)?.unwrap_or(0) {
            out.push((topic.to_owned(), r.i32(WHAT)?));
        }
    }
    Ok(out)
}

/// Who owns each assigned partition of KIP-848 consumer `groups`.
pub async fn consumer_owners(
    ask: &Ask<'_>,
    groups: &[String],
) -> anyhow::Result<HashMap<String, HashMap<TopicPartition, Owner>>> {
    let request = ConsumerGroupDescribeRequest::default().with_group_ids(group_ids(groups));
    let response: ConsumerGroupDescribeResponse =
        exchange(ask, ApiKey::ConsumerGroupDescribe, 0..=0, &request).await?;
    let mut out = HashMap::new();
    for group in response.groups.into_iter().filter(|g| g.error_code == 0) {
        let mut owners = HashMap::new();
        for member in group.members {
            let owner = Owner {
                host: member.client_host.to_string(),
                client_id: member.client_id.to_string(),
            };
            for t in member.assignment.topic_partitions {
                for p in t.partitions {
                    owners.insert((t.topic_name.0.to_string(), p), owner.clone());
                }
            }
        }
        out.insert(group.group_id.0.to_string(), owners);
    }
    Ok(out)
}

/// The committed offsets of `groups` (all their partitions), per group.
pub async fn committed(
    ask: &Ask<'_>,
    groups: &[String],
) -> anyhow::Result<HashMap<String, Vec<(TopicPartition, i64)>>> {
    let mut session = Session::open(ask).await?;
    match session.version(ApiKey::OffsetFetch, 8..=8) {
        Ok(version) => committed_together(&mut session, version, groups).await,
        Err(_) => committed_one_by_one(&mut session, groups).await,
    }
}

/// The committed offsets of `groups`, one OffsetFetch each: brokers before Kafka 3.0 (v2+: no
/// topic list means all partitions).
async fn committed_one_by_one(
    session: &mut Session,
    groups: &[String],
) -> anyhow::Result<HashMap<String, Vec<(TopicPartition, i64)>>> {
    let version = session.version(ApiKey::OffsetFetch, 2..=7)?;
    let mut out = HashMap::new();
    for group in groups {
        let request = OffsetFetchRequest::default()
            .with_group_id(group_id(group))
            .with_topics(None);
        let response: OffsetFetchResponse =
            session.call(ApiKey::OffsetFetch, version, &request).await?;
        if response.error_code != 0 {
            continue;
        }
        let topics = response.topics.into_iter().map(|t| {
            let partitions = t.partitions.into_iter();
            (
                t.name,
                partitions.map(|p| (p.partition_index, p.error_code, p.committed_offset)),
            )
        });
        out.insert(group.clone(), offsets(topics));
    }
    Ok(out)
}

/// The committed offsets of `groups`, asked in one OffsetFetch v8+.
async fn committed_together(
    session: &mut Session,
    version: i16,
    groups: &[String],
) -> anyhow::Result<HashMap<String, Vec<(TopicPartition, i64)>>> {
    let request = OffsetFetchRequest::default().with_groups(
        groups
            .iter()
            .map(|g| {
                // No topic list: every partition the group committed.
                OffsetFetchRequestGroup::default()
                    .with_group_id(group_id(g))
                    .with_topics(None)
            })
            .collect(),
    );
    let response: OffsetFetchResponse =
        session.call(ApiKey::OffsetFetch, version, &request).await?;
    Ok(response
        .groups
        .into_iter()
        .filter(|g| g.error_code == 0)
        .map(|group| {
            let topics = group.topics.into_iter().map(|t| {
                let partitions = t.partitions.into_iter();
                (
                    t.name,
                    partitions.map(|p| (p.partition_index, p.error_code, p.committed_offset)),
                )
            });
            (group.group_id.0.to_string(), offsets(topics))
        })
        .collect())
}

/// The committed offsets among `(topic, [(partition, error, offset)])`: those without error.
fn offsets<P: Iterator<Item = (i32, i16, i64)>>(
    topics: impl Iterator<Item = (TopicName, P)>,
) -> Vec<(TopicPartition, i64)> {
    topics
        .flat_map(|(name, partitions)| {
            let topic = name.0.to_string();
            partitions
                .filter(|&(_, error, offset)| error == 0 && offset >= 0)
                .map(move |(partition, _, offset)| ((topic.clone(), partition), offset))
        })
        .collect()
}

/// Where the partitions of `topics` are led, and the topics' ids.
pub struct Leaders {
    pub leaders: BTreeMap<TopicPartition, i32>,
    pub topic_ids: Vec<([u8; 16], String)>,
}

pub async fn leaders(ask: &Ask<'_>, topics: &BTreeSet<String>) -> anyhow::Result<Leaders> {
    leaders_of(
        ask,
        Some(
            topics
                .iter()
                .map(|t| MetadataRequestTopic::default().with_name(Some(topic_name(t))))
                .collect(),
        ),
    )
    .await
}

/// Where every partition of every topic is led (what Burrow's topic endpoints list).
pub async fn all_leaders(ask: &Ask<'_>) -> anyhow::Result<Leaders> {
    leaders_of(ask, None).await
}

async fn leaders_of(
    ask: &Ask<'_>,
    topics: Option<Vec<MetadataRequestTopic>>,
) -> anyhow::Result<Leaders> {
    let request = MetadataRequest::default().with_topics(topics);
    let response: MetadataResponse =
        exchange(ask, ApiKey::Metadata, METADATA_VERSIONS, &request).await?;
    let mut out = Leaders {
        leaders: BTreeMap::new(),
        topic_ids: Vec::new(),
    };
    for topic in response.topics.into_iter().filter(|t| t.error_code == 0) {
        let Some(name) = topic.name.map(|n| n.0.to_string()) else {
            continue;
        };
        out.topic_ids
            .push((*topic.topic_id.as_bytes(), name.clone()));
        for p in topic.partitions.into_iter().filter(|p| p.leader_id.0 >= 0) {
            out.leaders
                .insert((name.clone(), p.partition_index), p.leader_id.0);
        }
    }
    Ok(out)
}

/// The log-end offsets (high watermarks) of `partitions`, all led by broker `ask`.
pub async fn log_ends(
    ask: &Ask<'_>,
    partitions: &[TopicPartition],
) -> anyhow::Result<Vec<(TopicPartition, i64)>> {
    list_offsets(ask, partitions, LATEST).await
}

/// The log-start offsets of `partitions` (the oldest offset still kept), all led by `ask`.
pub async fn log_starts(
    ask: &Ask<'_>,
    partitions: &[TopicPartition],
) -> anyhow::Result<Vec<(TopicPartition, i64)>> {
    list_offsets(ask, partitions, EARLIEST).await
}

/// ListOffsets' special timestamps.
const LATEST: i64 = -1;
const EARLIEST: i64 = -2;

async fn list_offsets(
    ask: &Ask<'_>,
    partitions: &[TopicPartition],
    timestamp: i64,
) -> anyhow::Result<Vec<(TopicPartition, i64)>> {
    let mut topics: BTreeMap<&str, Vec<ListOffsetsPartition>> = BTreeMap::new();
    for (topic, partition) in partitions {
        topics.entry(topic).or_default().push(
            ListOffsetsPartition::default()
                .with_partition_index(*partition)
                .with_current_leader_epoch(-1)
                .with_timestamp(timestamp),
        );
    }
    let request = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(
            topics
                .into_iter()
                .map(|(t, p)| {
                    ListOffsetsTopic::default()
                        .with_name(topic_name(t))
                        .with_partitions(p)
                })
                .collect(),
        );
    let response: ListOffsetsResponse = exchange(ask, ApiKey::ListOffsets, 4..=7, &request).await?;
    Ok(response
        .topics
        .into_iter()
        .flat_map(|t| {
            let topic = t.name.0.to_string();
            t.partitions
                .into_iter()
                .filter(|p| p.error_code == 0 && p.offset >= 0)
                .map(move |p| ((topic.clone(), p.partition_index), p.offset))
        })
        .collect())
}

fn group_id(group: &str) -> GroupId {
    GroupId(StrBytes::from_string(group.to_owned()))
}

fn group_ids(groups: &[String]) -> Vec<GroupId> {
    groups.iter().map(|g| group_id(g)).collect()
}

fn topic_name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_owned()))
}

#[cfg(test)]
mod tests {
    use bytes::{BufMut, BytesMut};
    use kafka_protocol::messages::ConsumerProtocolAssignment;
    use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition as Assigned;
    use kafka_protocol::protocol::Encodable;

    use super::*;

    #[test]
    fn reads_a_consumer_assignment_and_ignores_other_protocols() {
        let assignment = ConsumerProtocolAssignment::default().with_assigned_partitions(vec![
            Assigned::default()
                .with_topic(topic_name("t"))
                .with_partitions(vec![0, 2]),
        ]);
        let mut bytes = BytesMut::new();
        bytes.put_i16(3);
        assignment.encode(&mut bytes, 3).unwrap();
        assert_eq!(
            assigned(bytes.freeze()),
            vec![("t".to_string(), 0), ("t".to_string(), 2)]
        );
        assert!(assigned(bytes::Bytes::from_static(b"\x00\x01garbage")).is_empty());
        // A count far beyond the bytes present is refused, not allocated.
        assert!(assigned(bytes::Bytes::from_static(b"\x00\x00\x7f\xff\xff\xff")).is_empty());
        assert!(assigned(bytes::Bytes::new()).is_empty());
    }

    /// 16 KiB of assignment naming a 16 000-byte topic with 100 partitions held 1.6 MB of
    /// copies of the name before names were capped at Kafka's 249 bytes.
    #[test]
    fn topic_names_longer_than_kafka_allows_are_refused() {
        let bytes = |name: &str, partitions: i32| {
            let assignment = ConsumerProtocolAssignment::default().with_assigned_partitions(vec![
                Assigned::default()
                    .with_topic(topic_name(name))
                    .with_partitions((0..partitions).collect()),
            ]);
            let mut out = BytesMut::new();
            out.put_i16(0);
            assignment.encode(&mut out, 0).unwrap();
            out.freeze()
        };
        let longest = "t".repeat(super::super::offset_commit::MAX_TOPIC_NAME);
        assert_eq!(read_assignment(&bytes(&longest, 2)).unwrap().len(), 2);
        assert!(read_assignment(&bytes(&format!("{longest}t"), 2)).is_err());
        assert!(read_assignment(&bytes(&"t".repeat(16_000), 100)).is_err());
    }
}
