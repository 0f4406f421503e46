//! KIP-368 re-authentication of a connection kroute authenticated itself.
//!
//! The broker ends a SASL session after `session_lifetime_ms`; kroute runs the SASL exchange
//! again before then. It does so from the connection's writer, between two requests: the
//! SaslHandshake and SaslAuthenticate requests join the reader's queue of expected answers like
//! any request (a broker answers a connection's requests in order), their answers come back to
//! the writer, and the writer sends nothing else until the exchange is over. So requests in
//! flight are answered first, and none is dropped.

use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use tokio::io::{AsyncWriteExt, BufWriter};
use tokio::sync::{mpsc, oneshot};
use tracing::debug;

use super::{InFlight, PendingReply, deadline};
use crate::protocol::frame::size_prefix;
use crate::security::Reauthentication;
use crate::security::sasl::{self, SaslError, SaslTransport};
use crate::security::stream::WriteHalf;

/// Runs kroute's SASL exchange again on a live connection and returns the next deadline.
pub(super) async fn reauthenticate(
    out: &mut BufWriter<WriteHalf>,
    pending_tx: &mpsc::UnboundedSender<InFlight>,
    due: &Reauthentication,
    request_timeout: Option<Duration>,
) -> Result<Option<Reauthentication>, SaslError> {
    let mechanism = due.credentials.mechanism;
    let mut pipeline = Pipeline {
        out,
        pending_tx,
        request_timeout,
    };
    match sasl::authenticate(&due.credentials, &mut pipeline).await {
        Ok(session) => {
            due.metrics.reauthenticated(mechanism);
            debug!(
                mechanism = mechanism.name(),
                "re-authenticated upstream connection"
            );
            Ok(session.reauthenticate_at.map(|at| Reauthentication {
                at,
                credentials: due.credentials.clone(),
                metrics: due.metrics.clone(),
            }))
        }
        Err(e) => {
            due.metrics.authentication_failed(mechanism);
            Err(e)
        }
    }
}

/// SASL requests on a live connection: queued for the reader like any request, their answers
/// come back to the writer, which sends nothing else until the exchange is over.
struct Pipeline<'a> {
    out: &'a mut BufWriter<WriteHalf>,
    pending_tx: &'a mpsc::UnboundedSender<InFlight>,
    request_timeout: Option<Duration>,
}

impl SaslTransport for Pipeline<'_> {
    async fn round_trip(
        &mut self,
        correlation_id: i32,
        api_key: ApiKey,
        api_version: i16,
        frame: Bytes,
    ) -> std::io::Result<Bytes> {
        let gone = || std::io::Error::new(std::io::ErrorKind::BrokenPipe, "connection closed");
        let (tx, rx) = oneshot::channel();
        let pending = PendingReply::new(api_key as i16, api_version, correlation_id, tx);
        let sent = Instant::now();
        let limit = deadline::plain(self.request_timeout);
        self.pending_tx
            .send(InFlight {
                pending,
                sent,
                bytes: frame.len(),
                limit,
            })
            .map_err(|_| gone())?;
        self.out.write_all(&size_prefix(frame.len())).await?;
        self.out.write_all(&frame).await?;
        self.out.flush().await?;
        match rx.await {
            Ok(Ok(answer)) => Ok(answer),
            _ => Err(gone()),
        }
    }
}
