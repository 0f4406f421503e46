//! Reading a client's requests under the connection's limits ([`super::limits`]): the next
//! request is read only when there is room for it, and one timer per connection closes a
//! client that leaves a request incomplete or the connection idle for too long.
//!
//! Frames are split from one read buffer as `FramedRead` does (same codec, same buffer
//! growth), but by hand, so that kroute knows when a request's first byte arrived.

use std::pin::Pin;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::time::{Instant, Sleep};
use tokio_util::codec::Decoder;

use super::limits::Admitted;
use super::session::ClientError;
use crate::protocol::frame::{FRESH_BUFFER_BYTES, FrameCodec, FrameError};

/// The timer's deadline when no timeout is on (it then re-checks once a day).
const FAR: Duration = Duration::from_secs(86_400);

pub(super) struct Intake<'a, R> {
    rd: R,
    buf: BytesMut,
    codec: FrameCodec,
    conn: &'a Admitted,
    timer: Pin<Box<Sleep>>,
    /// When the timer fires next.
    armed: Instant,
    /// When the first byte of the incomplete request in `buf` arrived, while kroute reads.
    partial_since: Option<Instant>,
    last_read: Instant,
}

impl<'a, R: AsyncRead + Unpin> Intake<'a, R> {
    pub fn new(rd: R, max_frame_bytes: usize, conn: &'a Admitted) -> Self {
        let now = Instant::now();
        let armed = match conn.check(now, None) {
            Ok(Some(at)) => at,
            _ => now + FAR,
        };
        Intake {
            rd,
            buf: BytesMut::with_capacity(FRESH_BUFFER_BYTES),
            codec: FrameCodec::new(max_frame_bytes),
            conn,
            timer: Box::pin(tokio::time::sleep_until(armed)),
            armed,
            partial_since: None,
            last_read: now,
        }
    }

    /// The next request; None once the client has closed the connection.
    pub async fn next(&mut self) -> Result<Option<Bytes>, ClientError> {
        if self.conn.pause() {
            // An incomplete request waiting while kroute does not read is not the client's delay.
            self.partial_since = None;
            let room = loop {
                if self.conn.room(self.timer.as_mut()).await {
                    break Ok(());
                }
                if let Err(e) = self.fire() {
                    break Err(e);
                }
            };
            self.conn.resume();
            room?;
            if !self.buf.is_empty() {
                self.started(Instant::now());
            }
        }
        loop {
            if let Some(frame) = self.codec.decode(&mut self.buf)? {
                self.partial_since = None;
                if !self.buf.is_empty() {
                    self.started(self.last_read); // the next request's first bytes are here
                }
                return Ok(Some(frame));
            }
            self.buf.reserve(1);
            let read = tokio::select! {
                biased;
                read = self.rd.read_buf(&mut self.buf) => read,
                () = self.timer.as_mut() => {
                    self.fire()?;
                    continue;
                }
            };
            if read.map_err(FrameError::Io)? == 0 {
                return Ok(self.codec.decode_eof(&mut self.buf)?);
            }
            let now = Instant::now();
            self.last_read = now;
            self.conn.active_at(now);
            if self.partial_since.is_none() {
                self.started(now);
            }
        }
    }

    /// A request began arriving `at`: its deadline may come before the timer's.
    fn started(&mut self, at: Instant) {
        self.partial_since = Some(at);
        if let Ok(Some(due)) = self.conn.check(at, self.partial_since)
            && due < self.armed
        {
            self.arm(due);
        }
    }

    /// The timer fired: closes the connection if a timeout passed, else re-arms.
    fn fire(&mut self) -> Result<(), ClientError> {
        let now = Instant::now();
        match self.conn.check(now, self.partial_since) {
            Ok(next) => {
                self.arm(next.unwrap_or(now + FAR));
                Ok(())
            }
            Err(timeout) => {
                self.conn.timed_out(timeout, self.buf.len());
                Err(ClientError::Timeout(timeout))
            }
        }
    }

    fn arm(&mut self, at: Instant) {
        self.armed = at;
        self.timer.as_mut().reset(at);
    }
}
