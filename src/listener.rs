//! kroute's listening sockets: one bootstrap address, plus one per broker of the cluster.
//!
//! Broker listeners follow the cluster view: a broker that appears gets a listener on
//! `broker_port_base + node_id` without a restart, and one that leaves the cluster loses it
//! (connections already open on it carry on until either side closes them).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tracing::{error, info, warn};

use crate::client::{Target, serve};
use crate::proxy::Proxy;

/// How soon a broker listener that failed to bind is tried again.
const REBIND_AFTER: Duration = Duration::from_secs(5);

/// Binds the bootstrap listener, then keeps one listener per known broker until shutdown.
pub async fn run(proxy: Arc<Proxy>) -> anyhow::Result<()> {
    let listen = &proxy.config.listen;
    let bootstrap = TcpListener::bind((listen.bind_host.as_str(), listen.bootstrap_port))
        .await
        .with_context(|| {
            format!(
                "cannot listen on {}:{} (listen.bootstrap_port)",
                listen.bind_host, listen.bootstrap_port
            )
        })?;
    info!(address = %bootstrap.local_addr()?, "bootstrap listener ready");
    tokio::spawn(accept(bootstrap, Target::Bootstrap, proxy.clone()));

    let mut changes = proxy.cluster.subscribe();
    let mut running: BTreeMap<i32, JoinHandle<()>> = BTreeMap::new();
    loop {
        let all_bound = sync_listeners(&proxy, &mut running).await;
        proxy.metrics.brokers_known.set(running.len() as f64);
        if all_bound {
            if changes.changed().await.is_err() {
                return Ok(());
            }
        } else {
            // Retry a failed bind later, or sooner if the cluster changes.
            let _ = tokio::time::timeout(REBIND_AFTER, changes.changed()).await;
        }
    }
}

/// Starts listeners for new brokers and stops those of departed ones. Returns false if some
/// broker could not get its listener.
async fn sync_listeners(proxy: &Arc<Proxy>, running: &mut BTreeMap<i32, JoinHandle<()>>) -> bool {
    let wanted = proxy.cluster.node_ids();
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
    let host = proxy.config.listen.bind_host.as_str();
    for id in wanted {
        if running.contains_key(&id) {
            continue;
        }
        let port = proxy.addresses.port(id);
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
                    tokio::spawn(accept(listener, Target::Broker(id), proxy.clone())),
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

async fn accept(listener: TcpListener, target: Target, proxy: Arc<Proxy>) {
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                tokio::spawn(serve(stream, peer, target, proxy.clone()));
            }
            Err(e) => {
                // Usually out of file descriptors: back off instead of spinning.
                warn!(?target, "accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}
