//! kroute's listening sockets: one bootstrap address, plus one per broker of the cluster.
//!
//! Broker listeners follow the cluster view: a broker that appears gets a listener on
//! `broker_port_base + node_id` without a restart, and one that leaves the cluster loses it
//! (connections already open on it carry on until either side closes them).
//!
//! When shutdown begins ([`crate::shutdown::Shutdown`]) every listener closes at once, so new
//! connections are refused, and no broker gets a new one.
//!
//! Every accepted connection is first counted against `limits.max_connections` and
//! `limits.max_connections_per_ip` ([`crate::client::Limits`]); one over them is closed at once.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tracing::{debug, error, info, warn};

use crate::client::{self, Limits, Target, serve};
use crate::security::listener_tls::ListenerTls;

/// How long a client may take to complete the TLS handshake.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How soon a broker listener that failed to bind is tried again.
const REBIND_AFTER: Duration = Duration::from_secs(5);

/// Binds the bootstrap listener, then keeps one listener per known broker until shutdown
/// begins.
pub async fn run(ctx: Arc<dyn client::Context>) -> anyhow::Result<()> {
    let listen = &ctx.config().listen;
    let bootstrap = TcpListener::bind((listen.bind_host.as_str(), listen.bootstrap_port))
        .await
        .with_context(|| {
            format!(
                "cannot listen on {}:{} (listen.bootstrap_port)",
                listen.bind_host, listen.bootstrap_port
            )
        })?;
    let tls = match &listen.tls {
        Some(config) => Some(
            ListenerTls::new(config, ctx.security().metrics.clone())
                .map_err(|e| anyhow::anyhow!("listen.tls: {e}"))?,
        ),
        None => None,
    };
    info!(address = %bootstrap.local_addr()?, tls = tls.is_some(), "bootstrap listener ready");
    let limits = Limits::new(&ctx.config().limits, &ctx.metrics().client_limits);
    let listening = Listening { tls, limits };
    tokio::spawn(accept(
        bootstrap,
        Target::Bootstrap,
        listening.clone(),
        ctx.clone(),
    ));

    let mut changes = ctx.cluster().subscribe();
    let mut running: BTreeMap<i32, JoinHandle<()>> = BTreeMap::new();
    loop {
        if ctx.shutdown().is_draining() {
            return Ok(()); // every accept loop ends by itself
        }
        let all_bound = sync_listeners(&ctx, &listening, &mut running).await;
        ctx.metrics().brokers_known.set(running.len() as f64);
        // A failed bind is retried later, or sooner if the cluster changes.
        tokio::select! {
            _ = ctx.shutdown().draining() => return Ok(()),
            changed = changes.changed() => if changed.is_err() {
                return Ok(());
            },
            _ = tokio::time::sleep(REBIND_AFTER), if !all_bound => {}
        }
    }
}

/// Starts listeners for new brokers and stops those of departed ones. Returns false if some
/// broker could not get its listener.
async fn sync_listeners(
    ctx: &Arc<dyn client::Context>,
    listening: &Listening,
    running: &mut BTreeMap<i32, JoinHandle<()>>,
) -> bool {
    let wanted = ctx.cluster().node_ids();
    running.retain(|id, task| {
        let keep = wanted.contains(id);
        if !keep {
            task.abort();
            info!(
                broker = id,
                "broker left the cluster; its listener is closed"
            );
        }
        keep
    });
    let mut all_bound = true;
    let host = ctx.config().listen.bind_host.as_str();
    for id in wanted {
        if running.contains_key(&id) {
            continue;
        }
        let port = ctx.addresses().port(id);
        if port == 0 {
            error!(
                broker = id,
                "node id does not fit listen.broker_port_base + node_id into a port; this broker is unreachable through kroute"
            );
            continue;
        }
        match TcpListener::bind((host, port as u16)).await {
            Ok(listener) => {
                info!(broker = id, address = %format!("{host}:{port}"), "broker listener ready");
                running.insert(
                    id,
                    tokio::spawn(accept(
                        listener,
                        Target::Broker(id),
                        listening.clone(),
                        ctx.clone(),
                    )),
                );
            }
            Err(e) => {
                error!(
                    broker = id,
                    "cannot listen on {host}:{port} for broker {id}: {e}"
                );
                all_bound = false;
            }
        }
    }
    all_bound
}

/// What every listener shares: TLS, if on, and the connection limits.
#[derive(Clone)]
struct Listening {
    tls: Option<ListenerTls>,
    limits: Arc<Limits>,
}

async fn accept(
    listener: TcpListener,
    target: Target,
    listening: Listening,
    ctx: Arc<dyn client::Context>,
) {
    loop {
        let accepted = tokio::select! {
            biased;
            // Dropping the listener closes its socket: new connections are refused.
            _ = ctx.shutdown().draining() => return,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, peer)) => {
                // Over a limit: closed at once (counted and logged by the limits).
                let Some(conn) = listening.limits.admit(peer) else {
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let ctx = ctx.clone();
                match listening.tls.clone() {
                    None => {
                        tokio::spawn(serve(stream, target, ctx, conn));
                    }
                    Some(tls) => {
                        let acceptor = tls.acceptor();
                        tokio::spawn(async move {
                            match tokio::time::timeout(
                                TLS_HANDSHAKE_TIMEOUT,
                                acceptor.accept(stream),
                            )
                            .await
                            {
                                Ok(Ok(stream)) => serve(stream, target, ctx, conn).await,
                                // A bare TCP probe (a health check) closes before saying anything.
                                Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                                    debug!(%peer, ?target, "connection closed before the TLS handshake");
                                }
                                Ok(Err(e)) => {
                                    ctx.metrics().tls_handshake_failures.increment(1);
                                    warn!(%peer, ?target, "TLS handshake failed: {e}");
                                }
                                Err(_) => {
                                    ctx.metrics().tls_handshake_failures.increment(1);
                                    warn!(%peer, ?target, "TLS handshake timed out");
                                }
                            }
                        });
                    }
                }
            }
            Err(e) => {
                // Usually out of file descriptors: back off instead of spinning.
                warn!(?target, "accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}
