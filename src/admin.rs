//! The admin HTTP endpoint (axum): `/metrics` (Prometheus text), `/health` and `/ready`, and
//! with `[lag]` enabled Burrow's `/v3/kafka/...` API ([`crate::lag::http`]), and the skew
//! report and plan, `/v1/skew` and `/v1/plan` ([`crate::skew::http`]).
//!
//! `/health` is liveness: 200 for as long as the process serves, draining included. `/ready`
//! says traffic may be sent to kroute: 200 once kroute has learnt the cluster (its own metadata
//! request succeeded and at least one broker is known), 503 before that and from the moment a
//! graceful shutdown begins. HTTP parsing, methods (GET and HEAD) and unknown paths (404) are
//! the library's; a malformed request gets the library's 400, never a panic.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;
use tracing::warn;

use crate::proxy::Proxy;
use crate::skew::Samples;

/// How often the exporter's histograms are compacted.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

#[derive(Clone)]
struct Admin {
    handle: PrometheusHandle,
    proxy: Arc<Proxy>,
    samples: Arc<Samples>,
}

/// Serves admin requests until the process ends.
pub async fn serve(
    listener: TcpListener,
    handle: PrometheusHandle,
    proxy: Arc<Proxy>,
    samples: Arc<Samples>,
) {
    let upkeep = handle.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(UPKEEP_EVERY);
        loop {
            tick.tick().await;
            upkeep.run_upkeep();
        }
    });
    if let Err(e) = axum::serve(listener, router(handle, proxy, samples)).await {
        warn!("admin endpoint stopped: {e}");
    }
}

/// The admin routes; more endpoints join here.
pub fn router(handle: PrometheusHandle, proxy: Arc<Proxy>, samples: Arc<Samples>) -> Router {
    let mut router = Router::new()
        .route("/metrics", get(metrics))
        .route("/health", get(health))
        .route("/ready", get(ready));
    if let Some(lag) = &proxy.lag {
        router = router.merge(crate::lag::http::routes(lag.clone()));
    }
    router = router.merge(crate::skew::http::routes(proxy.clone(), samples.clone()));
    router.with_state(Admin {
        handle,
        proxy,
        samples,
    })
}

async fn metrics(State(admin): State<Admin>) -> Response {
    crate::metrics::observe(
        readiness(&admin.proxy).is_ok(),
        admin.proxy.config.routing.max_producers,
    );
    let mut text = admin.handle.render();
    if let Some(lag) = &admin.proxy.lag {
        text.push_str(&crate::lag::metrics::render(
            lag,
            crate::lag::collect::now_ms(),
        ));
    }
    if let Some(report) = crate::skew::http::report_now(admin.proxy.as_ref(), &admin.samples) {
        text.push_str(&crate::skew::metrics::render(&report));
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

async fn health() -> &'static str {
    "ok\n"
}

async fn ready(State(admin): State<Admin>) -> (StatusCode, &'static str) {
    match readiness(&admin.proxy) {
        Ok(()) => (StatusCode::OK, "ready\n"),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
    }
}

/// Whether kroute should be sent traffic, and if not, why.
pub fn readiness(proxy: &Proxy) -> Result<(), &'static str> {
    if proxy.shutdown.is_draining() {
        return Err("not ready: shutting down\n");
    }
    if !proxy.cluster.is_ready()
        || (proxy.cluster.node_ids().is_empty() && !proxy.security.learns_brokers_from_clients())
    {
        return Err("not ready: cluster metadata not loaded yet\n");
    }
    Ok(())
}
