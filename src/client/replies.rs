//! The replies of one client connection, in request order.
//!
//! For each request that expects an answer the reader queues a [`Slot`] ([`Slots::send`]); the
//! writer ([`write_replies`]) sends replies from the front of that queue as they complete, so
//! the client sees answers in the order it asked even when later ones finish first. While the
//! writer waits (for the answer at the front, or for the client to take bytes), it takes the
//! answers that arrive for the slots behind, so every reply's bytes count against the
//! connection's limits ([`super::limits`]) from the moment it arrives.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::io::{AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::mpsc::{self, error::TryRecvError as QueueEmpty};
use tokio::sync::oneshot::{self, error::TryRecvError};

use super::limits::{Admitted, Limits};
use super::session::ClientError;
use crate::metrics::Metrics;
use crate::protocol::frame::{FrameError, size_prefix};
use crate::route::Merge;
use crate::shutdown::Shutdown;
use crate::upstream::{Reply, UpstreamGone};

/// Largest piece of a reply written at once: a client reading slowly still shows progress.
const WRITE_CHUNK: usize = 256 * 1024;

/// A reply in request order, and the bytes of its request.
pub(super) struct Slot {
    pub api_key: i16,
    /// Counted against the connection until the reply is written.
    pub request_bytes: usize,
    /// Room reserved for the answer until it arrives ([`super::limits::Limits::reservation`]).
    pub reserved: usize,
    pub reply: Pending,
}

pub(super) enum Pending {
    /// Known: answered by kroute itself, or arrived from the broker ahead of its turn.
    Answered(Reply),
    /// Still coming from the broker.
    Waiting(oneshot::Receiver<Reply>),
    /// To be merged from the answers of several brokers.
    Merging {
        replies: Vec<oneshot::Receiver<Reply>>,
        merge: Box<dyn Merge>,
    },
}

/// The reader's end of the queue.
pub(super) struct Slots<'a> {
    tx: mpsc::Sender<Slot>,
    conn: &'a Admitted,
}

/// The writer's end: the slots not written yet, those taken ahead of their turn first.
pub(super) struct Replies<'a> {
    rx: mpsc::Receiver<Slot>,
    ahead: VecDeque<Slot>,
    conn: &'a Admitted,
}

/// A queue for at most `max_in_flight` slots (the reader stops before: [`Admitted::blocked`]).
pub(super) fn queue(conn: &Admitted, max_in_flight: usize) -> (Slots<'_>, Replies<'_>) {
    let (tx, rx) = mpsc::channel(max_in_flight);
    let replies = Replies {
        rx,
        ahead: VecDeque::new(),
        conn,
    };
    (Slots { tx, conn }, replies)
}

impl Slots<'_> {
    /// The limits the slots count against.
    pub fn limits(&self) -> &Limits {
        self.conn.limits()
    }

    /// Queues a reply slot; fails if the writer has gone.
    pub async fn send(&self, slot: Slot) -> Result<(), UpstreamGone> {
        let answered = match &slot.reply {
            Pending::Answered(answer) => Some(answer.as_ref().map_or(0, Bytes::len)),
            Pending::Waiting(_) | Pending::Merging { .. } => None,
        };
        self.conn
            .queued(slot.request_bytes, answered, slot.reserved);
        self.tx
            .send(slot)
            .await
            .map_err(|_| UpstreamGone::Unanswered)
    }
}

impl Replies<'_> {
    /// The next slot in request order; None once the reader has stopped and all are taken.
    async fn next(&mut self) -> Option<Slot> {
        match self.ahead.pop_front() {
            Some(slot) => Some(slot),
            None => std::future::poll_fn(|_| self.take_queued()).await,
        }
    }

    /// A slot the reader has queued, if any; Ready(None) once the reader has stopped.
    ///
    /// Never registers for a wake-up, on purpose: the reader runs in the same task and is
    /// polled before the writer every time ([`super::session::serve`]), so what it queues is
    /// seen in the same poll. Waking the task from inside itself, once per request, made tokio
    /// re-queue it as a yield, which wakes the other worker thread: one thread wake-up and
    /// about one move between CPUs per request (docs/benchmarks.md, "Wake-ups per request,
    /// counted").
    fn take_queued(&mut self) -> Poll<Option<Slot>> {
        match self.rx.try_recv() {
            Ok(slot) => Poll::Ready(Some(slot)),
            Err(QueueEmpty::Empty) => Poll::Pending,
            Err(QueueEmpty::Disconnected) => Poll::Ready(None),
        }
    }

    fn is_empty(&self) -> bool {
        self.ahead.is_empty() && self.rx.is_empty()
    }

    /// Takes every slot queued and every answer arrived for them; ready if one arrived.
    fn poll_collect(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        while let Poll::Ready(Some(slot)) = self.take_queued() {
            self.ahead.push_back(slot);
        }
        let mut arrived = false;
        for slot in &mut self.ahead {
            if let Pending::Waiting(reply) = &mut slot.reply
                && let Poll::Ready(answer) = Pin::new(reply).poll(cx)
            {
                let answer = answer.unwrap_or(Err(UpstreamGone::Unanswered));
                self.conn
                    .arrived(answer.as_ref().map_or(0, Bytes::len), slot.reserved);
                slot.reply = Pending::Answered(answer);
                arrived = true;
            }
        }
        if arrived {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }

    /// Takes arriving answers until dropped (run next to a wait).
    async fn collect(&mut self) -> Infallible {
        loop {
            std::future::poll_fn(|cx| self.poll_collect(cx)).await;
        }
    }

    /// Waits for `reply`, taking the answers arriving behind it meanwhile; the drain timeout
    /// stops the wait.
    async fn wait(
        &mut self,
        reply: &mut oneshot::Receiver<Reply>,
        shutdown: &Shutdown,
    ) -> Result<Reply, ClientError> {
        tokio::select! {
            answer = reply => Ok(answer.unwrap_or(Err(UpstreamGone::Unanswered))),
            never = self.collect() => match never {},
            _ = shutdown.cut() => Err(ClientError::Cut),
        }
    }
}

/// Writes the replies in request order, each as soon as it is complete, until the reader has
/// stopped and every reply is written; then closes the connection (for writing). At the drain
/// timeout it stops waiting for answers ([`ClientError::Cut`]), having written whole frames
/// only.
pub(super) async fn write_replies(
    wr: impl AsyncWrite + Unpin,
    mut replies: Replies<'_>,
    metrics: &Metrics,
    shutdown: &Shutdown,
) -> Result<(), ClientError> {
    let conn = replies.conn;
    let mut out = BufWriter::with_capacity(64 * 1024, wr);
    while let Some(Slot {
        api_key,
        request_bytes,
        reserved,
        reply,
    }) = replies.next().await
    {
        let answer = match reply {
            Pending::Answered(answer) => answer,
            Pending::Waiting(mut reply) => {
                let answer = match reply.try_recv() {
                    Ok(answer) => answer,
                    Err(TryRecvError::Closed) => Err(UpstreamGone::Unanswered),
                    Err(TryRecvError::Empty) => {
                        // Nothing ready to add: let the client have what is buffered meanwhile.
                        flush(&mut out, &mut replies).await?;
                        replies.wait(&mut reply, shutdown).await?
                    }
                };
                conn.arrived(answer.as_ref().map_or(0, Bytes::len), reserved);
                answer
            }
            Pending::Merging {
                replies: parts,
                merge,
            } => {
                flush(&mut out, &mut replies).await?;
                let mut answers = Vec::with_capacity(parts.len());
                for mut part in parts {
                    answers.push(replies.wait(&mut part, shutdown).await?);
                }
                let merged = merge.merge(answers);
                conn.arrived(merged.len(), reserved);
                Ok(merged)
            }
        };
        let payload = match answer {
            Ok(payload) => payload,
            Err(gone) => {
                // Replies already written are the client's: deliver them before closing.
                let _ = out.flush().await;
                return Err(gone.into());
            }
        };
        metrics
            .api(api_key)
            .response_bytes
            .increment(4 + payload.len() as u64);
        let written = async {
            out.write_all(&size_prefix(payload.len())).await?;
            for chunk in payload.chunks(WRITE_CHUNK) {
                out.write_all(chunk).await?;
                conn.active();
            }
            std::io::Result::Ok(())
        };
        tokio::select! {
            biased;
            written = written => written.map_err(FrameError::Io)?,
            never = replies.collect() => match never {},
        }
        conn.written(request_bytes + payload.len());
        if replies.is_empty() {
            flush(&mut out, &mut replies).await?;
        }
    }
    // Flushes, then ends the stream (TLS close_notify, TCP FIN) after the last whole answer.
    out.shutdown().await.map_err(FrameError::Io)?;
    Ok(())
}

/// Flushes what is buffered, taking arriving answers while the client is slow to read.
async fn flush(
    out: &mut (impl AsyncWrite + Unpin),
    replies: &mut Replies<'_>,
) -> Result<(), ClientError> {
    tokio::select! {
        biased;
        flushed = out.flush() => Ok(flushed.map_err(FrameError::Io)?),
        never = replies.collect() => match never {},
    }
}
