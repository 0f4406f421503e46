//! Which topics a client connection's batches may move to.
//!
//! In SASL passthrough, a client whose principal kroute knows ([`super::principal`]) has its
//! moved batches written over its principal's own connections through kroute
//! ([`crate::upstream::principals`]): the broker authorizes every batch as the client, so every
//! topic may move ([`Permit::Own`]), and its idempotent producers are renumbered too.
//!
//! Otherwise (a mechanism whose identity kroute cannot read, or SaslHandshake v0) a moved batch
//! is written over one of kroute's own connections, which carry kroute's identity, not the
//! client's, so moving a client's batch could let it write where its own principal may not.
//! The rule then: a batch moves only to a topic this client's own
//! authenticated connection has already written to successfully; a topic the broker refuses
//! the client (TOPIC_AUTHORIZATION_FAILED) stops being movable. Both are learnt from the answers
//! to the Produce requests kroute forwards whole (the session hooks those); the home part of a
//! split request is not watched, so a Write permission revoked mid-connection is noticed only at
//! the client's next unsplit request on that topic. Unauthenticated
//! connections (and all connections in originate mode, where every connection carries kroute's
//! identity anyway) may move batches of every routed topic.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, ProduceResponse};
use kafka_protocol::protocol::Decodable;

use super::principal::Principal;
use crate::protocol::header::split_response;

/// TOPIC_AUTHORIZATION_FAILED.
const TOPIC_AUTHORIZATION_FAILED: i16 = 29;

#[derive(Clone, Default)]
pub enum Permit {
    /// No client identity on the connection: routing policy alone decides.
    #[default]
    Any,
    /// The client authenticated and kroute has no credentials of its own: nothing moves.
    Nothing,
    /// The client authenticated: only topics it has written to itself.
    Written(Arc<WrittenTopics>),
    /// The client authenticated as this principal: its moved batches go out over its
    /// principal's own connections, wherever it has one.
    Own(Arc<Principal>),
}

impl Permit {
    /// What a connection whose client just started SASL may do, given whether kroute can
    /// authenticate its own connections.
    pub fn for_authenticated_client(kroute_has_credentials: bool) -> Permit {
        if kroute_has_credentials {
            Permit::Written(Arc::default())
        } else {
            Permit::Nothing
        }
    }

    /// Whether batches of `topic` may move to another broker.
    pub fn allows(&self, topic: &str) -> bool {
        match self {
            Permit::Any | Permit::Own(_) => true,
            Permit::Nothing => false,
            Permit::Written(w) => w.contains(topic),
        }
    }

    /// Whether kroute may take over an idempotent producer's numbering: not for a client
    /// authenticated under a principal kroute does not know, since every batch of it would go
    /// out under kroute's identity.
    pub fn may_renumber(&self) -> bool {
        matches!(self, Permit::Any | Permit::Own(_))
    }

    /// The principal whose connections carry this client's moved batches.
    pub fn principal(&self) -> Option<&Arc<Principal>> {
        match self {
            Permit::Own(p) => Some(p),
            _ => None,
        }
    }
}

/// Topics a client's own connection has written to.
#[derive(Default)]
pub struct WrittenTopics {
    topics: Mutex<HashSet<String>>,
}

impl WrittenTopics {
    pub fn contains(&self, topic: &str) -> bool {
        self.topics
            .lock()
            .map(|t| t.contains(topic))
            .unwrap_or(false)
    }

    /// Learns from the broker's answer to a Produce request the client sent over its own
    /// connection: topics written without error become movable, refused ones stop being.
    pub fn learn(&self, api_version: i16, answer: &Bytes) {
        let header_version = ApiKey::Produce.response_header_version(api_version);
        let Ok((_, mut body)) = split_response(answer, header_version) else {
            return;
        };
        let Ok(response) = ProduceResponse::decode(&mut body, api_version) else {
            return;
        };
        let Ok(mut topics) = self.topics.lock() else {
            return;
        };
        for topic in &response.responses {
            let name = topic.name.as_str();
            let codes = || topic.partition_responses.iter().map(|p| p.error_code);
            if codes().any(|c| c == TOPIC_AUTHORIZATION_FAILED) {
                topics.remove(name);
            } else if !name.is_empty() && codes().all(|c| c == 0) {
                topics.insert(name.to_string());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{BufMut, BytesMut};
    use kafka_protocol::messages::TopicName;
    use kafka_protocol::messages::produce_response::{
        PartitionProduceResponse, TopicProduceResponse,
    };
    use kafka_protocol::protocol::{Encodable, StrBytes};

    fn answer(topic: &str, codes: &[i16]) -> Bytes {
        let response = ProduceResponse::default().with_responses(vec![
            TopicProduceResponse::default()
                .with_name(TopicName(StrBytes::from_string(topic.into())))
                .with_partition_responses(
                    codes
                        .iter()
                        .enumerate()
                        .map(|(i, c)| {
                            PartitionProduceResponse::default()
                                .with_index(i as i32)
                                .with_error_code(*c)
                        })
                        .collect(),
                ),
        ]);
        let mut out = BytesMut::new();
        out.put_i32(7); // correlation id; Produce v8 answers with header v0
        response.encode(&mut out, 8).unwrap();
        out.freeze()
    }

    #[test]
    fn only_topics_written_without_error_become_movable_and_refusal_revokes() {
        let permit = Permit::for_authenticated_client(true);
        let Permit::Written(written) = &permit else {
            panic!("kroute has credentials: the client's written topics decide");
        };
        assert!(!permit.allows("orders"));
        written.learn(8, &answer("orders", &[0, 6]));
        assert!(
            !permit.allows("orders"),
            "a partly failed write proves nothing"
        );
        written.learn(8, &answer("orders", &[0, 0]));
        assert!(permit.allows("orders"));
        assert!(!permit.allows("payments"));
        written.learn(8, &answer("orders", &[TOPIC_AUTHORIZATION_FAILED]));
        assert!(
            !permit.allows("orders"),
            "a refused write revokes the topic"
        );
        written.learn(8, &Bytes::from_static(b"\x00\x01"));
        assert!(!Permit::for_authenticated_client(false).allows("orders"));
        assert!(Permit::Any.allows("orders"));
    }
}
