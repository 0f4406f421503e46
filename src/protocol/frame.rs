//! Kafka framing: a big-endian `int32` size, then that many payload bytes.
//!
//! Unlike `tokio_util::codec::LengthDelimitedCodec`, this decoder never reserves the size a peer
//! announces: a hostile 100 MiB length header costs kroute only the bytes actually sent, because
//! the buffer grows in bounded steps as data arrives, and to the whole frame only once an eighth
//! of it is there (so a large Fetch answer is copied by the buffer's growth about once, not at
//! every doubling).
//!
//! A frame is split off the read buffer without a copy, so it shares the buffer's allocation.
//! After a large frame the buffer starts afresh: otherwise it would take that allocation back
//! once the frame is forwarded and keep it for the connection's life, and an idle connection
//! would hold the largest answer it ever carried (memory: connections x `fetch.max.bytes`).

use bytes::{Buf, Bytes, BytesMut};
use tokio_util::codec::Decoder;

/// Largest step by which the read buffer grows while a frame is still arriving, until an eighth
/// of the frame has arrived.
const MAX_RESERVE_STEP: usize = 256 * 1024;

/// Once this fraction (1/N) of a frame is in the buffer, the rest is reserved at once: memory
/// stays within N times what arrived, whatever a header announces.
const WHOLE_FRAME_AFTER: usize = 8;

/// A read buffer's size when a connection starts, and again after each frame larger than
/// [`MAX_RESERVE_STEP`].
pub const FRESH_BUFFER_BYTES: usize = 64 * 1024;

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
            let step = if src.len() * WHOLE_FRAME_AFTER >= 4 + size {
                missing
            } else {
                missing.min(MAX_RESERVE_STEP)
            };
            src.reserve(step);
            return Ok(None);
        }
        src.advance(4);
        let frame = src.split_to(size).freeze();
        if size > MAX_RESERVE_STEP {
            start_afresh(src);
        }
        Ok(Some(frame))
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
        match self.decode(src)? {
            Some(frame) => Ok(Some(frame)),
            None if src.is_empty() => Ok(None),
            None => Err(FrameError::Truncated(src.len())),
        }
    }
}

/// Moves what follows a large frame (the start of the next one, if any) into a buffer of its own,
/// so that the frame's allocation is freed once the frame is.
fn start_afresh(src: &mut BytesMut) {
    let mut fresh = BytesMut::with_capacity(FRESH_BUFFER_BYTES.max(src.len()));
    fresh.extend_from_slice(src);
    *src = fresh;
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

    /// Feeds a frame of `size` bytes in 64 KiB reads, as a socket would; returns the frame, the
    /// buffer after it, and (bytes in the buffer, its capacity) after each read that did not
    /// complete the frame.
    fn feed(size: usize, after: &[u8]) -> (Bytes, BytesMut, Vec<(usize, usize)>) {
        let mut c = FrameCodec::new(64 << 20);
        let mut buf = BytesMut::with_capacity(FRESH_BUFFER_BYTES);
        let mut stream = (size as i32).to_be_bytes().to_vec();
        stream.resize(4 + size, 7);
        stream.extend_from_slice(after);
        let mut growth = Vec::new();
        for piece in stream.chunks(64 * 1024) {
            buf.extend_from_slice(piece);
            if let Some(frame) = c.decode(&mut buf).unwrap() {
                return (frame, buf, growth);
            }
            growth.push((buf.len(), buf.capacity()));
        }
        panic!("no frame in {} bytes", stream.len());
    }

    #[test]
    fn a_large_frame_is_reserved_whole_once_an_eighth_arrived() {
        let size = 8 << 20;
        let (frame, _, growth) = feed(size, &[]);
        assert_eq!(frame.len(), size);
        for (arrived, capacity) in growth {
            if arrived * WHOLE_FRAME_AFTER >= 4 + size {
                assert!(
                    capacity >= 4 + size,
                    "{arrived} arrived, room for {capacity}"
                );
            } else {
                assert!(
                    capacity <= 8 * arrived + 2 * MAX_RESERVE_STEP,
                    "{arrived}: {capacity}"
                );
            }
        }
    }

    #[test]
    fn a_large_frame_leaves_the_buffer_small_and_not_sharing_it() {
        let (frame, buf, _) = feed(3 << 20, &[0, 0, 0, 9, 1, 2]);
        assert!(
            frame.is_unique(),
            "the read buffer still shares the frame's allocation"
        );
        assert_eq!(
            &buf[..],
            &[0, 0, 0, 9, 1, 2],
            "the next frame's start is kept"
        );
        assert!(buf.capacity() <= FRESH_BUFFER_BYTES, "{}", buf.capacity());
        // A small frame still shares the buffer: no allocation per answer.
        let (small, _buf, _) = feed(1000, &[]);
        assert!(!small.is_unique());
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
