//! How long a broker may take to answer one request (`upstream.request_timeout_ms`).
//!
//! A broker works on one request of a connection at a time and answers in order, so only the
//! oldest unanswered request of a connection has a deadline that matters: if it is stuck,
//! everything behind it is. Its clock starts once the broker could start on it: when it was
//! sent and the answer before it had come ([`head_deadline`]).
//!
//! Some requests wait in the broker by design before they are answered; they get their own
//! wait on top of the timeout ([`limit`]):
//! - Fetch and ShareFetch: `max_wait_ms` (long polling);
//! - JoinGroup: the rebalance timeout (the broker holds it until the group has rejoined; the
//!   Java consumer waits as long);
//! - requests with a `timeout_ms` the broker may wait out, read where it comes before any
//!   array: AlterPartitionReassignments, ListPartitionReassignments, UpdateFeatures,
//!   AddRaftVoter. CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords, ElectLeaders
//!   and ListOffsets v10+ carry theirs after arrays of topics, which kroute does not walk (a
//!   client's counts must not size anything): they get no limit.
//!
//! A SyncGroup has no limit: a follower's waits for the group leader's assignment, bounded by
//! the group's rebalance timeout, which the request does not carry. Neither has a request whose
//! wait cannot be read (a version kroute cannot decode): kroute never cuts what may be a
//! legitimate wait. A Produce with acks=all may wait its `timeout_ms` for the replicas; it gets
//! no extra time: the timeout is meant to be above what producers wait themselves (Java's
//! `request.timeout.ms`, 30 s by default, is the `timeout_ms` it sends).

use std::time::Duration;

use bytes::{Buf, Bytes};
use kafka_protocol::messages::{
    AddRaftVoterRequest, AlterPartitionReassignmentsRequest, ApiKey, JoinGroupRequest,
    ListPartitionReassignmentsRequest, RequestHeader, ShareFetchRequest, UpdateFeaturesRequest,
};
use kafka_protocol::protocol::{Decodable, Message};

use crate::protocol::header::WireReader;
use tokio::time::Instant;

/// How long the broker may take with one request once it could start on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    Within(Duration),
    /// No limit: the timeout is off, or the request may wait for as long as it likes.
    Unbounded,
}

/// How long a request may wait in the broker by design before it is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Park {
    No,
    For(Duration),
    Unbounded,
}

/// The limit of a request that carries no wait of its own (e.g. kroute's own SASL requests).
pub fn plain(timeout: Option<Duration>) -> Limit {
    timeout.map_or(Limit::Unbounded, Limit::Within)
}

/// The limit of the request `frame` (header included) of API `api_key` version `version`:
/// `timeout` (None: off), plus the request's own wait if it parks by design.
pub fn limit(timeout: Option<Duration>, api_key: i16, version: i16, frame: &Bytes) -> Limit {
    let Some(timeout) = timeout else {
        return Limit::Unbounded;
    };
    match parks(api_key, version, frame) {
        Park::No => Limit::Within(timeout),
        Park::For(wait) => Limit::Within(timeout.saturating_add(wait)),
        Park::Unbounded => Limit::Unbounded,
    }
}

/// When the broker must have answered the oldest unanswered request, sent at `sent`, if the
/// answer before it came at `previous_answer` (or the connection opened then).
pub fn head_deadline(sent: Instant, previous_answer: Instant, limit: Limit) -> Option<Instant> {
    match limit {
        Limit::Within(d) => Some(sent.max(previous_answer) + d),
        Limit::Unbounded => None,
    }
}

fn parks(api_key: i16, version: i16, frame: &Bytes) -> Park {
    let Ok(api) = ApiKey::try_from(api_key) else {
        return Park::No;
    };
    let ms = match api {
        ApiKey::Fetch => fetch_max_wait(frame, version),
        // group_id, member_id, share_session_epoch, then max_wait_ms.
        ApiKey::ShareFetch if known::<ShareFetchRequest>(version) => {
            wait_after(api, frame, version, &[Field::Str, Field::Str, Field::I32])
        }
        // group_id, session_timeout_ms, then (v1+) rebalance_timeout_ms; in v0 the session
        // timeout served as both.
        ApiKey::JoinGroup if known::<JoinGroupRequest>(version) => {
            let before: &[Field] = if version >= 1 {
                &[Field::Str, Field::I32]
            } else {
                &[Field::Str]
            };
            wait_after(api, frame, version, before)
        }
        ApiKey::SyncGroup => return Park::Unbounded,
        // timeout_ms first.
        ApiKey::AlterPartitionReassignments
            if known::<AlterPartitionReassignmentsRequest>(version) =>
        {
            wait_after(api, frame, version, &[])
        }
        ApiKey::ListPartitionReassignments
            if known::<ListPartitionReassignmentsRequest>(version) =>
        {
            wait_after(api, frame, version, &[])
        }
        ApiKey::UpdateFeatures if known::<UpdateFeaturesRequest>(version) => {
            wait_after(api, frame, version, &[])
        }
        // cluster_id, then timeout_ms.
        ApiKey::AddRaftVoter if known::<AddRaftVoterRequest>(version) => {
            wait_after(api, frame, version, &[Field::Str])
        }
        // Their timeout_ms comes after arrays of topics: not read (see [`wait_after`]), so
        // these rare admin requests get no limit, like a request whose wait cannot be read.
        ApiKey::CreateTopics
        | ApiKey::DeleteTopics
        | ApiKey::CreatePartitions
        | ApiKey::DeleteRecords
        | ApiKey::ElectLeaders => None,
        ApiKey::ListOffsets if version >= 10 => None,
        ApiKey::ShareFetch
        | ApiKey::JoinGroup
        | ApiKey::AlterPartitionReassignments
        | ApiKey::ListPartitionReassignments
        | ApiKey::UpdateFeatures
        | ApiKey::AddRaftVoter => None,
        _ => return Park::No,
    };
    match ms {
        Some(ms) => Park::For(Duration::from_millis(u64::try_from(ms).unwrap_or(0))),
        None => Park::Unbounded,
    }
}

/// Whether kroute knows version `version` of request `R`.
fn known<R: Message>(version: i16) -> bool {
    (R::VERSIONS.min..=R::VERSIONS.max).contains(&version)
}

/// A field before a request's wait.
#[derive(Clone, Copy)]
enum Field {
    /// A (nullable) string: compact in flexible versions.
    Str,
    I32,
}

/// The `i32` wait after the fields `before` at the start of the request's body.
///
/// Read by hand rather than decoded with kafka-protocol: the request is a client's, and
/// kafka-protocol sizes an array from the count on the wire before it reads the elements, so
/// a 20-byte request with a count of 2^31 would make kroute allocate without bound and abort
/// (found by the `request_deadline` fuzz target, docs/hardening.md). Only waits that come
/// before any array are read this way.
fn wait_after(api: ApiKey, frame: &Bytes, version: i16, before: &[Field]) -> Option<i32> {
    const WHAT: &str = "request wait";
    let flexible = api.request_header_version(version) >= 2;
    let mut r = WireReader::new(frame);
    r.skip(8, WHAT).ok()?; // api key, version, correlation id
    r.skip_nullable_string(WHAT).ok()?; // client id: never compact
    if flexible {
        r.skip_tagged_fields(WHAT).ok()?;
    }
    for field in before {
        match field {
            Field::Str => {
                r.nullable_string(flexible, WHAT).ok()?;
            }
            Field::I32 => {
                r.i32(WHAT).ok()?;
            }
        }
    }
    r.i32(WHAT).ok()
}

/// The request body after its header.
fn body(api: ApiKey, frame: &Bytes, version: i16) -> Option<Bytes> {
    let mut buf = frame.clone();
    RequestHeader::decode(&mut buf, api.request_header_version(version)).ok()?;
    Some(buf)
}

/// A Fetch's `max_wait_ms`, read in place (Fetch is frequent: no full decode). It follows
/// `replica_id` up to v14 and comes first from v15 on, in every version.
fn fetch_max_wait(frame: &Bytes, version: i16) -> Option<i32> {
    let mut body = body(ApiKey::Fetch, frame, version)?;
    if version < 15 {
        body.try_get_i32().ok()?;
    }
    body.try_get_i32().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::messages::{
        CreateTopicsRequest, FetchRequest, ListOffsetsRequest, MetadataRequest, ProduceRequest,
        SyncGroupRequest,
    };
    use kafka_protocol::protocol::{Encodable, StrBytes};

    const TIMEOUT: Duration = Duration::from_secs(60);

    fn frame<R: Encodable>(api: ApiKey, version: i16, body: &R) -> Bytes {
        let header = RequestHeader::default()
            .with_request_api_key(api as i16)
            .with_request_api_version(version)
            .with_correlation_id(7)
            .with_client_id(Some(StrBytes::from_static_str("c")));
        let mut out = BytesMut::new();
        header
            .encode(&mut out, api.request_header_version(version))
            .unwrap();
        body.encode(&mut out, version).unwrap();
        out.freeze()
    }

    fn limit_of<R: Encodable>(api: ApiKey, version: i16, body: &R) -> Limit {
        limit(
            Some(TIMEOUT),
            api as i16,
            version,
            &frame(api, version, body),
        )
    }

    fn within_ms(ms: u64) -> Limit {
        Limit::Within(Duration::from_millis(ms))
    }

    #[test]
    fn ordinary_requests_get_the_timeout() {
        let metadata = MetadataRequest::default();
        assert_eq!(
            limit_of(ApiKey::Metadata, 12, &metadata),
            Limit::Within(TIMEOUT)
        );
        // A Produce waits its timeout_ms for the replicas at most: the timeout is above that.
        let produce = ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(30_000);
        assert_eq!(
            limit_of(ApiKey::Produce, 9, &produce),
            Limit::Within(TIMEOUT)
        );
        // Unknown APIs are answered like any other request.
        let unknown = Bytes::from_static(&[0x7f, 0x7f, 0, 0, 0, 0, 0, 1]);
        assert_eq!(
            limit(Some(TIMEOUT), 0x7f7f, 0, &unknown),
            Limit::Within(TIMEOUT)
        );
    }

    #[test]
    fn off_means_no_limit_for_anything() {
        let f = frame(ApiKey::Metadata, 12, &MetadataRequest::default());
        assert_eq!(
            limit(None, ApiKey::Metadata as i16, 12, &f),
            Limit::Unbounded
        );
        assert_eq!(plain(None), Limit::Unbounded);
        assert_eq!(plain(Some(TIMEOUT)), Limit::Within(TIMEOUT));
    }

    #[test]
    fn a_fetch_gets_its_max_wait_on_top_in_every_version() {
        for version in [4, 11, 12, 14, 15, 17] {
            let fetch = FetchRequest::default().with_max_wait_ms(4_500);
            assert_eq!(
                limit_of(ApiKey::Fetch, version, &fetch),
                within_ms(64_500),
                "v{version}"
            );
        }
        // Older versions than kafka-protocol encodes have the same layout: replica_id, max_wait.
        let mut old = BytesMut::new();
        old.extend_from_slice(&[0, 1, 0, 2, 0, 0, 0, 9, 0, 1, b'c']); // Fetch v2, header v1
        old.extend_from_slice(&(-1i32).to_be_bytes());
        old.extend_from_slice(&500i32.to_be_bytes());
        assert_eq!(limit(Some(TIMEOUT), 1, 2, &old.freeze()), within_ms(60_500));
    }

    #[test]
    fn group_and_admin_requests_get_their_own_wait() {
        let join = JoinGroupRequest::default()
            .with_session_timeout_ms(10_000)
            .with_rebalance_timeout_ms(300_000);
        assert_eq!(limit_of(ApiKey::JoinGroup, 9, &join), within_ms(360_000));
        assert_eq!(limit_of(ApiKey::JoinGroup, 0, &join), within_ms(70_000));
        let share = ShareFetchRequest::default().with_max_wait_ms(1_000);
        assert_eq!(limit_of(ApiKey::ShareFetch, 1, &share), within_ms(61_000));
        let reassign = AlterPartitionReassignmentsRequest::default().with_timeout_ms(30_000);
        assert_eq!(
            limit_of(ApiKey::AlterPartitionReassignments, 0, &reassign),
            within_ms(90_000)
        );
        let voter = AddRaftVoterRequest::default()
            .with_cluster_id(Some(StrBytes::from_static_str("c1")))
            .with_timeout_ms(5_000);
        assert_eq!(limit_of(ApiKey::AddRaftVoter, 0, &voter), within_ms(65_000));
        // Waits after arrays of topics are not read: no limit.
        let create = CreateTopicsRequest::default().with_timeout_ms(30_000);
        assert_eq!(limit_of(ApiKey::CreateTopics, 7, &create), Limit::Unbounded);
        let offsets = ListOffsetsRequest::default().with_timeout_ms(20_000);
        assert_eq!(
            limit_of(ApiKey::ListOffsets, 10, &offsets),
            Limit::Unbounded
        );
        assert_eq!(
            limit_of(ApiKey::ListOffsets, 9, &offsets),
            Limit::Within(TIMEOUT)
        );
        // A negative wait adds nothing.
        let odd = UpdateFeaturesRequest::default().with_timeout_ms(-5);
        assert_eq!(
            limit_of(ApiKey::UpdateFeatures, 1, &odd),
            Limit::Within(TIMEOUT)
        );
    }

    #[test]
    fn a_huge_count_in_a_clients_request_is_never_sized() {
        // CreateTopics v7 (header v2): a topic count of 2^31 - 1 in a request of a few bytes.
        let mut f = BytesMut::new();
        f.extend_from_slice(&[0, 19, 0, 7, 0, 0, 0, 1, 0, 0, 0]);
        f.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x07]);
        assert_eq!(limit(Some(TIMEOUT), 19, 7, &f.freeze()), Limit::Unbounded);
        // JoinGroup v9 whose group id claims more bytes than there are: unreadable.
        let mut f = BytesMut::new();
        f.extend_from_slice(&[0, 11, 0, 9, 0, 0, 0, 1, 0, 0, 0, 0xff, 0xff, 0x03]);
        assert_eq!(limit(Some(TIMEOUT), 11, 9, &f.freeze()), Limit::Unbounded);
    }

    #[test]
    fn a_sync_group_or_an_unreadable_wait_has_no_limit() {
        let sync = SyncGroupRequest::default();
        assert_eq!(limit_of(ApiKey::SyncGroup, 5, &sync), Limit::Unbounded);
        let truncated = frame(ApiKey::Fetch, 15, &FetchRequest::default()).slice(..14);
        assert_eq!(limit(Some(TIMEOUT), 1, 15, &truncated), Limit::Unbounded);
        let join = frame(ApiKey::JoinGroup, 9, &JoinGroupRequest::default());
        assert_eq!(limit(Some(TIMEOUT), 11, 42, &join), Limit::Unbounded);
    }

    #[test]
    fn the_head_clock_starts_when_the_broker_could_start_on_it() {
        let t0 = Instant::now();
        let limit = Limit::Within(Duration::from_secs(5));
        // Sent after the last answer: counted from when it was sent.
        let sent = t0 + Duration::from_secs(1);
        assert_eq!(
            head_deadline(sent, t0, limit),
            Some(t0 + Duration::from_secs(6))
        );
        // Sent long before, behind a long poll answered at 30 s: counted from that answer.
        let answered = t0 + Duration::from_secs(30);
        assert_eq!(
            head_deadline(sent, answered, limit),
            Some(t0 + Duration::from_secs(35))
        );
        assert_eq!(head_deadline(sent, t0, Limit::Unbounded), None);
    }
}
