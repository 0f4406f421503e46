//! Why a batch stays on the partition its client chose: the outcomes of routing's look at a
//! batch that are not a move. Routing decides them ([`crate::route::batch`],
//! [`crate::route::produce`]); the metrics count them and the skew report sorts the traffic by
//! them, so the names live here, below all three.

/// Why a batch stays on the partition the client chose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeepReason {
    /// Not a magic v2 batch (or not parsable as one).
    Malformed,
    /// At least one record has a key: its partition was computed from the key.
    Keyed,
    /// An idempotent producer: sequence numbers are per partition.
    Idempotent,
    Transactional,
    Control,
    /// The topic is not enabled for routing in proxy.toml.
    Policy,
    /// kroute does not know the topic's partition leaders yet.
    UnknownTopic,
    /// The chosen broker leads no partition of the topic that is free in this request.
    NoPartition,
    /// The strategy chose the broker the client sent it to.
    Home,
    /// Compressed data too large to inspect, or that would not decompress.
    Uninspectable,
    /// Keyed and keyless records that could not be split ([`crate::route::divide`]): a part would
    /// be larger than the batch, or its codec cannot be written.
    Unsplittable,
    /// A SASL client whose principal has no connection through kroute to the chosen broker:
    /// its batch can only go out under its own identity ([`crate::upstream::principals`]).
    NoClientConnection,
}

impl KeepReason {
    pub const ALL: [KeepReason; 12] = [
        KeepReason::Malformed,
        KeepReason::Keyed,
        KeepReason::Idempotent,
        KeepReason::Transactional,
        KeepReason::Control,
        KeepReason::Policy,
        KeepReason::UnknownTopic,
        KeepReason::NoPartition,
        KeepReason::Home,
        KeepReason::Uninspectable,
        KeepReason::Unsplittable,
        KeepReason::NoClientConnection,
    ];

    pub fn label(self) -> &'static str {
        match self {
            KeepReason::Malformed => "malformed",
            KeepReason::Keyed => "keyed",
            KeepReason::Idempotent => "idempotent",
            KeepReason::Transactional => "transactional",
            KeepReason::Control => "control",
            KeepReason::Policy => "policy",
            KeepReason::UnknownTopic => "unknown_topic",
            KeepReason::NoPartition => "no_partition",
            KeepReason::Home => "no_better_broker",
            KeepReason::Uninspectable => "uninspectable",
            KeepReason::Unsplittable => "unsplittable",
            KeepReason::NoClientConnection => "no_client_connection",
        }
    }
}
