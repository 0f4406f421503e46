//! Kafka framing: a big-endian `int32` size, then that many payload bytes.
//!
//! Unlike `tokio_util::codec::LengthDelimitedCodec`, this decoder never reserves the size a peer
//! announces: a hostile 100 MiB length header costs kroute only the bytes actually sent, because
//! the buffer grows in bounded steps as data arrives.

use bytes::{Buf, Bytes, BytesMut};
use tokio_util::codec::Decoder;

/// Largest step by which the read buffer grows while a frame is still arriving.
const MAX_RESERVE_STEP: usize = 256 * 1024;

/// Why a byte stream stopped being a valid Kafka frame stream.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame size {0} is negative")]
    NegativeSize(i32),
    #[error("frame size {size} exceeds the limit of {max} bytes")]
    TooLarge { size: usize, max: usize },
    #[error("connection closed in the middle of a frame ({0} bytes buffered)")]
    Truncated(usize),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl FrameError {
    /// A short, fixed label for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            FrameError::NegativeSize(_) => "negative_size",
            FrameError::TooLarge { .. } => "oversize",
            FrameError::Truncated(_) => "truncated",
            FrameError::Io(_) => "io",
        }
    }
}

/// Splits a byte stream into frame payloads (without the size prefix).
#[derive(Debug, Clone)]
pub struct FrameCodec {
    max_frame_bytes: usize,
}

impl FrameCodec {
    pub fn new(max_frame_bytes: usize) -> Self {
        Self { max_frame_bytes }
    }
}

impl Decoder for FrameCodec {
    type Item = Bytes;
    type Error = FrameError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
        let Some(header) = src.get(..4) else {
            return Ok(None);
        };
        let size = i32::from_be_bytes([header[0], header[1], header[2], header[3]]);
        let size = usize::try_from(size).map_err(|_| FrameError::NegativeSize(size))?;
        if size > self.max_frame_bytes {
            return Err(FrameError::TooLarge {
                size,
                max: self.max_frame_bytes,
            });
        }
        let missing = (4 + size).saturating_sub(src.len());
        if missing > 0 {
            src.reserve(missing.min(MAX_RESERVE_STEP));
            return Ok(None);
        }
        src.advance(4);
        Ok(Some(src.split_to(size).freeze()))
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
        match self.decode(src)? {
            Some(frame) => Ok(Some(frame)),
            None if src.is_empty() => Ok(None),
            None => Err(FrameError::Truncated(src.len())),
        }
    }
}

/// The 4-byte size prefix for a payload of `len` bytes.
pub fn size_prefix(len: usize) -> [u8; 4] {
    // Payloads come from frames that passed the size limit (< i32::MAX) or from our own encoder.
    (len as u32).to_be_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codec() -> FrameCodec {
        FrameCodec::new(1024)
    }

    #[test]
    fn splits_back_to_back_frames() {
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&[0, 0, 0, 2, b'a', b'b', 0, 0, 0, 1, b'c', 0, 0]);
        let mut c = codec();
        assert_eq!(c.decode(&mut buf).unwrap().unwrap(), &b"ab"[..]);
        assert_eq!(c.decode(&mut buf).unwrap().unwrap(), &b"c"[..]);
        assert!(c.decode(&mut buf).unwrap().is_none());
        assert_eq!(buf.len(), 2, "partial size header stays buffered");
    }

    #[test]
    fn zero_length_frame_is_a_frame() {
        let mut buf = BytesMut::from(&[0u8, 0, 0, 0][..]);
        assert_eq!(codec().decode(&mut buf).unwrap().unwrap().len(), 0);
    }

    #[test]
    fn negative_size_is_rejected() {
        let mut buf = BytesMut::from(&(-1i32).to_be_bytes()[..]);
        let err = codec().decode(&mut buf).unwrap_err();
        assert_eq!(err.reason(), "negative_size");
    }

    #[test]
    fn oversize_is_rejected_before_any_payload_arrives() {
        let mut buf = BytesMut::from(&1025i32.to_be_bytes()[..]);
        let err = codec().decode(&mut buf).unwrap_err();
        assert_eq!(err.reason(), "oversize");
    }

    #[test]
    fn hostile_size_does_not_reserve_announced_bytes() {
        let mut c = FrameCodec::new(100 * 1024 * 1024);
        let mut buf = BytesMut::from(&(100 * 1024 * 1024i32).to_be_bytes()[..]);
        assert!(c.decode(&mut buf).unwrap().is_none());
        assert!(
            buf.capacity() <= 4 + MAX_RESERVE_STEP + 64,
            "capacity {} grew towards the announced size",
            buf.capacity()
        );
    }

    #[test]
    fn eof_inside_a_frame_is_truncation() {
        let mut buf = BytesMut::from(&[0u8, 0, 0, 9, 1, 2][..]);
        let err = codec().decode_eof(&mut buf).unwrap_err();
        assert_eq!(err.reason(), "truncated");
        let mut empty = BytesMut::new();
        assert!(codec().decode_eof(&mut empty).unwrap().is_none());
    }
}
