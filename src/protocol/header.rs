//! Reading just enough of a request or response header to route and match it.
//!
//! Every request header starts with `api_key i16, api_version i16, correlation_id i32`, whatever
//! its version, so unknown APIs and versions are forwarded after reading 8 bytes. Only Produce
//! requests are read further, to learn whether `acks = 0` (no response will come).

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;

/// The fixed start of every request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHead {
    pub api_key: i16,
    pub api_version: i16,
    pub correlation_id: i32,
}

/// A request or response that cannot be parsed as far as kroute needs to.
#[derive(Debug, thiserror::Error)]
#[error("malformed {what}")]
pub struct Malformed {
    pub what: &'static str,
}

fn malformed(what: &'static str) -> Malformed {
    Malformed { what }
}

impl RequestHead {
    /// Reads the fixed 8 bytes at the start of a request payload.
    pub fn parse(payload: &[u8]) -> Result<RequestHead, Malformed> {
        let b = payload
            .get(..8)
            .ok_or(malformed("request header (shorter than 8 bytes)"))?;
        Ok(RequestHead {
            api_key: i16::from_be_bytes([b[0], b[1]]),
            api_version: i16::from_be_bytes([b[2], b[3]]),
            correlation_id: i32::from_be_bytes([b[4], b[5], b[6], b[7]]),
        })
    }

    /// The API, if kafka-protocol knows it.
    pub fn api(&self) -> Option<ApiKey> {
        ApiKey::try_from(self.api_key).ok()
    }
}

/// A forward-only reader over a byte slice, with Kafka's primitive encodings.
pub struct WireReader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> WireReader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    pub fn position(&self) -> usize {
        self.pos
    }

    pub fn skip(&mut self, n: usize, what: &'static str) -> Result<(), Malformed> {
        let end = self.pos.checked_add(n).ok_or(malformed(what))?;
        if end > self.buf.len() {
            return Err(malformed(what));
        }
        self.pos = end;
        Ok(())
    }

    pub fn i16(&mut self, what: &'static str) -> Result<i16, Malformed> {
        let b = self
            .buf
            .get(self.pos..self.pos + 2)
            .ok_or(malformed(what))?;
        self.pos += 2;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }

    pub fn unsigned_varint(&mut self, what: &'static str) -> Result<u32, Malformed> {
        let mut value: u32 = 0;
        for shift in (0..35).step_by(7) {
            let byte = *self.buf.get(self.pos).ok_or(malformed(what))?;
            self.pos += 1;
            value |= u32::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(malformed(what))
    }

    pub fn i32(&mut self, what: &'static str) -> Result<i32, Malformed> {
        let b = self.take(4, what)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn i64(&mut self, what: &'static str) -> Result<i64, Malformed> {
        let b = self.take(8, what)?;
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(b);
        Ok(i64::from_be_bytes(bytes))
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], Malformed> {
        let start = self.pos;
        self.skip(n, what)?;
        Ok(&self.buf[start..self.pos])
    }

    /// A string, classic (`i16` length) or compact (varint length + 1); `None` when null.
    pub fn nullable_string(
        &mut self,
        compact: bool,
        what: &'static str,
    ) -> Result<Option<&'a str>, Malformed> {
        let len = if compact {
            match self.unsigned_varint(what)? {
                0 => return Ok(None),
                n => (n - 1) as usize,
            }
        } else {
            match self.i16(what)? {
                n if n < 0 => return Ok(None),
                n => n as usize,
            }
        };
        let bytes = self.take(len, what)?;
        std::str::from_utf8(bytes)
            .map(Some)
            .map_err(|_| malformed(what))
    }

    /// An array's length, classic (`i32`) or compact (varint + 1); `None` when null. A count
    /// larger than the bytes left could hold (each element takes at least `min_element`
    /// bytes) is malformed: nothing is sized from a count before the bytes are seen.
    pub fn array_len(
        &mut self,
        compact: bool,
        min_element: usize,
        what: &'static str,
    ) -> Result<Option<usize>, Malformed> {
        let len = if compact {
            match self.unsigned_varint(what)? {
                0 => return Ok(None),
                n => (n - 1) as usize,
            }
        } else {
            match self.i32(what)? {
                n if n < 0 => return Ok(None),
                n => n as usize,
            }
        };
        let left = self.buf.len() - self.pos;
        if len.saturating_mul(min_element.max(1)) > left {
            return Err(malformed(what));
        }
        Ok(Some(len))
    }

    /// Skips a classic `i16`-length nullable string.
    pub fn skip_nullable_string(&mut self, what: &'static str) -> Result<(), Malformed> {
        let len = self.i16(what)?;
        if len > 0 {
            self.skip(len as usize, what)?;
        }
        Ok(())
    }

    /// Skips a tagged-field section (count, then tag + size + data for each).
    pub fn skip_tagged_fields(&mut self, what: &'static str) -> Result<(), Malformed> {
        let count = self.unsigned_varint(what)?;
        for _ in 0..count {
            self.unsigned_varint(what)?;
            let size = self.unsigned_varint(what)?;
            self.skip(size as usize, what)?;
        }
        Ok(())
    }
}

/// What kroute reads of every Produce request before deciding anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProduceHead {
    /// Where the request body starts (after the request header).
    pub body_offset: usize,
    pub transactional: bool,
    pub acks: i16,
}

/// Reads a Produce request past its header and transactional id, up to `acks`.
pub fn produce_head(payload: &[u8], version: i16) -> Result<ProduceHead, Malformed> {
    const WHAT: &str = "produce request header";
    let mut r = WireReader::new(payload);
    r.skip(8, WHAT)?;
    // Request header v1 (Produce v0-8) has client_id; v2 (Produce v9+) adds tagged fields.
    r.skip_nullable_string(WHAT)?;
    if version >= 9 {
        r.skip_tagged_fields(WHAT)?;
    }
    let body_offset = r.position();
    // transactional_id (nullable) exists from v3 on; compact from v9 (flexible versions).
    let transactional = if version >= 9 {
        let len_plus_one = r.unsigned_varint(WHAT)?;
        r.skip((len_plus_one as usize).saturating_sub(1), WHAT)?;
        len_plus_one != 0
    } else if version >= 3 {
        let len = r.i16(WHAT)?;
        r.skip(len.max(0) as usize, WHAT)?;
        len >= 0
    } else {
        false
    };
    Ok(ProduceHead {
        body_offset,
        transactional,
        acks: r.i16("produce acks")?,
    })
}

/// Offset of the response body: after the correlation id and, in header v1, the tagged fields.
pub fn response_body_offset(payload: &[u8], header_version: i16) -> Result<usize, Malformed> {
    const WHAT: &str = "response header";
    let mut r = WireReader::new(payload);
    r.skip(4, WHAT)?;
    if header_version >= 1 {
        r.skip_tagged_fields(WHAT)?;
    }
    Ok(r.position())
}

/// Reads the correlation id of a response payload.
pub fn response_correlation_id(payload: &[u8]) -> Result<i32, Malformed> {
    let b = payload.get(..4).ok_or(malformed("response header"))?;
    Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// Splits a response payload into header bytes and body bytes without copying.
pub fn split_response(payload: &Bytes, header_version: i16) -> Result<(Bytes, Bytes), Malformed> {
    let at = response_body_offset(payload, header_version)?;
    Ok((payload.slice(..at), payload.slice(at..)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::messages::{ProduceRequest, RequestHeader, TransactionalId};
    use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

    fn encode_produce(version: i16, acks: i16, txn: Option<&str>) -> Bytes {
        let header = RequestHeader::default()
            .with_request_api_key(ApiKey::Produce as i16)
            .with_request_api_version(version)
            .with_correlation_id(77)
            .with_client_id(Some(StrBytes::from_static_str("client-1")));
        let body = ProduceRequest::default()
            .with_acks(acks)
            .with_timeout_ms(1000)
            .with_transactional_id(txn.map(|t| TransactionalId(StrBytes::from_string(t.into()))));
        let mut buf = BytesMut::new();
        header
            .encode(&mut buf, ApiKey::Produce.request_header_version(version))
            .unwrap();
        body.encode(&mut buf, version).unwrap();
        buf.freeze()
    }

    #[test]
    fn reads_the_fixed_head() {
        let frame = encode_produce(9, 1, None);
        let head = RequestHead::parse(&frame).unwrap();
        assert_eq!(head.api_key, 0);
        assert_eq!(head.api_version, 9);
        assert_eq!(head.correlation_id, 77);
        assert!(RequestHead::parse(&frame[..7]).is_err());
    }

    #[test]
    fn body_offset_points_at_the_body() {
        let frame = encode_produce(9, 1, Some("t"));
        let head = produce_head(&frame, 9).unwrap();
        let body = ProduceRequest::decode(&mut frame.slice(head.body_offset..), 9).unwrap();
        assert_eq!(body.acks, 1);
    }

    #[test]
    fn finds_acks_in_every_produce_version() {
        for version in 3..=13 {
            for acks in [-1, 0, 1] {
                for txn in [None, Some("txn-a")] {
                    let frame = encode_produce(version, acks, txn);
                    let head = produce_head(&frame, version).unwrap();
                    assert_eq!(head.acks, acks, "v{version}");
                    assert_eq!(head.transactional, txn.is_some(), "v{version}");
                }
            }
        }
    }

    #[test]
    fn truncated_produce_is_malformed_not_a_panic() {
        let frame = encode_produce(9, 0, Some("t"));
        for cut in 0..frame.len().min(40) {
            let _ = produce_head(&frame[..cut], 9);
        }
        assert!(produce_head(&frame[..10], 9).is_err());
    }

    #[test]
    fn response_body_offset_skips_tagged_header() {
        // correlation id 5, one tagged field (tag 0, 2 bytes), then body.
        let payload = [0, 0, 0, 5, 1, 0, 2, 0xaa, 0xbb, 0x42];
        assert_eq!(response_body_offset(&payload, 1).unwrap(), 9);
        assert_eq!(response_body_offset(&payload, 0).unwrap(), 4);
        assert!(response_body_offset(&payload[..6], 1).is_err());
    }
}
