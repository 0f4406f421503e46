//! What every connection shares: configuration, the cluster view, metrics, the address map.

use std::sync::Arc;
use std::time::Instant;

use tracing::{info, warn};

use crate::ask::Ask;
use crate::balance::scores::Scores;
use crate::client;
use crate::cluster::{AbsurdCluster, Brokers, ClusterView, fetch_metadata};
use crate::config::Config;
use crate::lag::LagStore;
use crate::metrics::Metrics;
use crate::rewrite::AddressMap;
use crate::route::{self, Router};
use crate::security::UpstreamSecurity;
use crate::security::metrics::SecurityMetrics;
use crate::shutdown::Shutdown;
use crate::skew::{self, traffic::ProduceTraffic};
use crate::upstream::{self, principals::ClientConnections};

pub struct Proxy {
    pub config: Config,
    pub security: UpstreamSecurity,
    pub cluster: ClusterView,
    pub metrics: Metrics,
    pub addresses: AddressMap,
    pub router: Router,
    /// SASL passthrough clients' own connections, by principal and broker: where their moved
    /// batches go out under their own identity.
    pub client_connections: ClientConnections,
    /// Graceful shutdown: listeners and client sessions watch it.
    pub shutdown: Shutdown,
    /// Consumer lag, when `[lag]` is enabled.
    pub lag: Option<Arc<LagStore>>,
}

impl Brokers for Proxy {
    fn cluster(&self) -> &ClusterView {
        &self.cluster
    }

    fn scores(&self) -> &Scores {
        &self.router.scores
    }

    fn ask<'a>(&'a self, addr: &'a str) -> Ask<'a> {
        Ask {
            addr,
            timeout: self.config.connect_timeout(),
            max_frame_bytes: self.config.limits.max_frame_bytes,
            security: &self.security,
        }
    }
}

impl upstream::Context for Proxy {
    fn config(&self) -> &Config {
        &self.config
    }

    fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    fn security(&self) -> &UpstreamSecurity {
        &self.security
    }

    fn addresses(&self) -> &AddressMap {
        &self.addresses
    }

    fn own_producer(&self, producer_id: i64, now: Instant) {
        self.router.producers.own(producer_id, now);
    }
}

impl route::Context for Proxy {
    fn router(&self) -> &Router {
        &self.router
    }

    fn client_connections(&self) -> &ClientConnections {
        &self.client_connections
    }
}

impl client::Context for Proxy {
    fn shutdown(&self) -> &Shutdown {
        &self.shutdown
    }

    fn lag_store(&self) -> Option<&Arc<LagStore>> {
        self.lag.as_ref()
    }
}

impl skew::Sources for Proxy {
    fn settings(&self) -> &skew::SkewConfig {
        &self.config.skew
    }

    fn bootstrap_servers(&self) -> &[String] {
        &self.config.upstream.bootstrap_servers
    }

    fn learns_brokers_from_clients(&self) -> bool {
        self.security.learns_brokers_from_clients()
    }

    fn traffic(&self) -> &ProduceTraffic {
        &self.metrics.routing.traffic
    }

    fn lag(&self) -> Option<&LagStore> {
        self.lag.as_deref()
    }
}

impl Proxy {
    /// Fails, naming the file, if a certificate or key of `[upstream.tls]` cannot be loaded.
    /// Needs a tokio runtime when certificate files are watched for changes.
    pub fn new(config: Config, metrics: Metrics) -> Result<Arc<Proxy>, String> {
        let security = UpstreamSecurity::new(&config, Arc::new(SecurityMetrics::new()))?;
        let addresses = AddressMap::new(
            &config.listen.advertised_host,
            config.listen.broker_port_base,
        );
        let router = Router::new(&config.routing);
        let lag = config
            .lag
            .enabled
            .then(|| Arc::new(LagStore::new(&config.lag)));
        Ok(Arc::new(Proxy {
            config,
            security,
            cluster: ClusterView::new(),
            metrics,
            addresses,
            router,
            client_connections: ClientConnections::default(),
            shutdown: Shutdown::new(),
            lag,
        }))
    }
}

/// Keeps the cluster view current with kroute's own Metadata requests, forever: the brokers,
/// and the layouts of the topics kroute has seen (routing places batches by them, and must not
/// wait for a client to ask for metadata after a leader moved).
///
/// Tries the known brokers first (rotating), then the configured bootstrap servers. A failure
/// streak is logged once when it starts and once when it ends.
pub async fn refresh_metadata(proxy: Arc<Proxy>) {
    let config = &proxy.config;
    if proxy.security.learns_brokers_from_clients() {
        info!(
            "upstream.sasl: passthrough without kroute credentials; brokers are learnt from clients' metadata"
        );
        proxy.cluster.assume_ready();
        return;
    }
    let mut failing = false;
    loop {
        let mut last_error = None;
        for addr in proxy
            .cluster
            .bootstrap_candidates(&config.upstream.bootstrap_servers)
        {
            let topics = proxy.cluster.topic_names();
            match fetch_metadata(&proxy.ask(&addr), topics).await {
                Ok(fetched) => {
                    if failing {
                        info!(from = %addr, "metadata refresh works again");
                        failing = false;
                    }
                    proxy.cluster.replace(fetched.brokers);
                    proxy.cluster.observe_topics(fetched.topics);
                    last_error = None;
                    break;
                }
                Err(e) => {
                    if e.downcast_ref::<AbsurdCluster>().is_some() {
                        proxy.metrics.absurd_answers.increment(1);
                    }
                    last_error = Some(format!("{addr}: {e:#}"));
                }
            }
        }
        if let Some(e) = last_error {
            proxy.metrics.metadata_refresh_failures.increment(1);
            if !failing {
                warn!("metadata refresh failed on every known broker (last: {e}); retrying");
                failing = true;
            }
        }
        // At the next period, or sooner when the view went stale; not more than a few times
        // a second, whatever happens.
        tokio::select! {
            _ = tokio::time::sleep(config.metadata_refresh()) => {}
            _ = proxy.cluster.went_stale() => {}
        }
        tokio::time::sleep(MIN_REFRESH_GAP.min(config.metadata_refresh())).await;
    }
}

/// The least time between two of kroute's own metadata refreshes.
const MIN_REFRESH_GAP: std::time::Duration = std::time::Duration::from_millis(250);
