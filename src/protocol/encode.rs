//! Encoding a decoded message back to the wire, for the answers kroute changes.

use bytes::{Bytes, BytesMut};
use kafka_protocol::protocol::Encodable;

/// Encodes `message`, refusing output that would not decode. kafka-protocol 0.18 counts every
/// unknown tagged field it decoded but writes only those with a tag below 2^31 (it keeps tags as
/// i32): a body carrying a larger tag would go out with a count its bytes do not hold, and the
/// client would fail on it. Such a body is an error, as one kroute cannot decode is.
pub fn encode_checked<T: Encodable>(message: &T, version: i16) -> anyhow::Result<Bytes> {
    let size = message.compute_size(version)?;
    let mut out = BytesMut::with_capacity(size);
    message.encode(&mut out, version)?;
    anyhow::ensure!(
        out.len() == size,
        "response has a tagged field kroute cannot re-encode (tag above 2^31)"
    );
    Ok(out.freeze())
}
