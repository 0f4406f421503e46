//! The admin HTTP endpoint: `/metrics` (Prometheus text), `/health` and `/ready`.
//!
//! `/health` says the process is serving; `/ready` says kroute has learnt the cluster (its own
//! metadata request succeeded and at least one broker is known), so traffic can be sent to it.
//! A deliberately tiny HTTP/1.1 responder: one request per connection, GET only.

use std::sync::Arc;
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusHandle;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tracing::debug;

use crate::proxy::Proxy;

const MAX_REQUEST_HEAD: usize = 8 * 1024;

/// Serves admin requests until the process ends.
pub async fn serve(listener: TcpListener, handle: PrometheusHandle, proxy: Arc<Proxy>) {
    let upkeep = handle.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            tick.tick().await;
            upkeep.run_upkeep();
        }
    });
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let handle = handle.clone();
        let proxy = proxy.clone();
        tokio::spawn(async move {
            if let Err(e) = respond(stream, &handle, &proxy).await {
                debug!("admin request failed: {e}");
            }
        });
    }
}

async fn respond(
    mut stream: TcpStream,
    handle: &PrometheusHandle,
    proxy: &Proxy,
) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    let read = tokio::time::timeout(Duration::from_secs(5), async {
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_REQUEST_HEAD {
            let n = stream.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            head.extend_from_slice(&buf[..n]);
        }
        std::io::Result::Ok(())
    })
    .await;
    if !matches!(read, Ok(Ok(()))) {
        return Ok(());
    }
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (status, content_type, body) = match (method, path) {
        ("GET", "/metrics") => ("200 OK", "text/plain; version=0.0.4", handle.render()),
        ("GET", "/health") => ("200 OK", "text/plain", "ok\n".to_string()),
        ("GET", "/ready")
            if proxy.cluster.is_ready()
                && (!proxy.cluster.node_ids().is_empty()
                    || proxy.security.learns_brokers_from_clients()) =>
        {
            ("200 OK", "text/plain", "ready\n".to_string())
        }
        ("GET", "/ready") => (
            "503 Service Unavailable",
            "text/plain",
            "not ready: cluster metadata not loaded yet\n".to_string(),
        ),
        ("GET", _) => ("404 Not Found", "text/plain", "not found\n".to_string()),
        _ => (
            "405 Method Not Allowed",
            "text/plain",
            "GET only\n".to_string(),
        ),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}
