//! The client connections of each authenticated principal, by broker: where a moved batch of
//! a SASL passthrough client can go out under its own identity.
//!
//! kroute cannot open a connection as a client (it never holds a reusable secret: SCRAM is a
//! challenge-response, and keeping a PLAIN password to replay is not kroute's business). The
//! connections authenticated as a principal are the ones its clients opened through kroute,
//! one per broker each client talks to. Each such connection registers here once its client's
//! SASL exchange succeeded ([`Registration`], dropped with the client session), and a batch a
//! client of that principal moves to another broker is queued on one of them as an *injected*
//! request ([`Injector`]): the broker authorizes it as the principal, and the connection's
//! reader hands the answer back to whoever queued it, never to that connection's client.
//!
//! Entries hold weak senders: a registered connection still closes when its client leaves.
//! An injected request never goes out while the connection's client re-authenticates
//! (KIP-368), nor near the end of its SASL session, after which the broker would close the
//! connection ([`super::SaslGate::accepted`]): the connection's writer drops it, and its reply
//! fails as never sent ([`super::UpstreamGone::NeverSent`]), which every caller treats as
//! retriable. Such a connection is not offered to routing meanwhile.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use dashmap::DashMap;
use metrics::{Counter, counter};
use tokio::sync::mpsc;

use super::{Link, Outbound, Upstream, UpstreamGone};
use crate::security::principal::Principal;

/// A way to queue requests on a client's connection without keeping it open.
#[derive(Clone)]
pub struct Injector {
    id: u64,
    tx: mpsc::WeakSender<Outbound>,
    link: Arc<Link>,
}

impl Injector {
    /// Whether the connection is still open (its client still connected, its broker too).
    fn is_open(&self) -> bool {
        !self.link.reader_done.load(Ordering::Relaxed) && self.tx.strong_count() > 0
    }

    /// Whether a request queued now would go out: the connection is open and its client is
    /// not re-authenticating.
    pub fn is_ready(&self) -> bool {
        self.is_open() && self.link.injectable()
    }

    /// Queues `out` as an injected request without waiting; gives it back if the connection
    /// is gone, its client re-authenticates, or its queue is full (dropping it fails its
    /// reply).
    pub fn try_send(&self, mut out: Outbound) -> Result<(), Box<Outbound>> {
        if !self.link.injectable() {
            return Err(Box::new(out));
        }
        out.injected = true;
        match self.tx.upgrade() {
            Some(tx) => tx.try_send(out).map_err(|e| Box::new(e.into_inner())),
            None => Err(Box::new(out)),
        }
    }

    /// Queues `out` as an injected request, waiting for room in the connection's queue.
    pub async fn send(&self, mut out: Outbound) -> Result<(), UpstreamGone> {
        out.injected = true;
        let tx = self.tx.upgrade().ok_or(UpstreamGone::NeverSent)?;
        tx.send(out).await.map_err(|_| UpstreamGone::NeverSent)
    }
}

type ByBroker = HashMap<i32, Vec<Injector>>;

/// The registry: principal -> broker -> its clients' connections there.
#[derive(Default)]
pub struct ClientConnections {
    inner: Arc<Registry>,
    cursor: AtomicUsize,
}

struct Registry {
    map: DashMap<Arc<Principal>, ByBroker>,
    next_id: AtomicU64,
    registered: Counter,
}

impl Default for Registry {
    fn default() -> Self {
        Self {
            map: DashMap::new(),
            next_id: AtomicU64::new(0),
            registered: counter!("kroute_client_connections_registered_total"),
        }
    }
}

impl ClientConnections {
    /// What registers `upstream`, a client's own connection, once the broker has accepted its
    /// client as some principal (known only then, on the connection's reader).
    pub fn registrar(&self, upstream: &Upstream) -> Registrar {
        Registrar {
            registry: self.inner.clone(),
            injector: Injector {
                id: self.inner.next_id.fetch_add(1, Ordering::Relaxed),
                tx: upstream.tx.downgrade(),
                link: upstream.link.clone(),
            },
            node_id: upstream.node_id,
        }
    }

    /// Whether `principal` has a ready connection to broker `node_id`.
    pub fn reaches(&self, principal: &Principal, node_id: i32) -> bool {
        self.inner.map.get(principal).is_some_and(|by_broker| {
            by_broker
                .get(&node_id)
                .is_some_and(|v| v.iter().any(Injector::is_ready))
        })
    }

    /// One of `principal`'s ready connections to broker `node_id`: the `shard`-th (modulo how
    /// many there are), so that a caller asking with the same shard keeps getting the same one
    /// while the set does not change.
    pub fn pick(&self, principal: &Principal, node_id: i32, shard: usize) -> Option<Injector> {
        let by_broker = self.inner.map.get(principal)?;
        let ready: Vec<&Injector> = by_broker
            .get(&node_id)?
            .iter()
            .filter(|i| i.is_ready())
            .collect();
        (!ready.is_empty()).then(|| ready[shard % ready.len()].clone())
    }

    /// Like [`Self::pick`], spreading callers over the connections in turn.
    pub fn any(&self, principal: &Principal, node_id: i32) -> Option<Injector> {
        let shard = self.cursor.fetch_add(1, Ordering::Relaxed);
        self.pick(principal, node_id, shard)
    }
}

/// Registers one client connection ([`ClientConnections::registrar`]).
pub struct Registrar {
    registry: Arc<Registry>,
    injector: Injector,
    node_id: i32,
}

impl Registrar {
    /// Registers the connection as authenticated by `principal` until the returned
    /// registration is dropped. The connection also learns its principal, for the producers
    /// its client starts ([`super::observe_producer_id`]).
    pub fn register(&self, principal: Arc<Principal>) -> Registration {
        self.injector
            .link
            .principal_known
            .store(true, Ordering::Relaxed);
        self.registry
            .map
            .entry(principal.clone())
            .or_default()
            .entry(self.node_id)
            .or_default()
            .push(self.injector.clone());
        self.registry.registered.increment(1);
        Registration {
            registry: self.registry.clone(),
            principal,
            node_id: self.node_id,
            id: self.injector.id,
        }
    }
}

/// A connection's entry in [`ClientConnections`]; dropping it removes the entry.
pub struct Registration {
    registry: Arc<Registry>,
    principal: Arc<Principal>,
    node_id: i32,
    id: u64,
}

impl Registration {
    pub fn principal(&self) -> &Arc<Principal> {
        &self.principal
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let map = &self.registry.map;
        let emptied = map.get_mut(&self.principal).is_some_and(|mut by_broker| {
            if let Some(v) = by_broker.get_mut(&self.node_id) {
                v.retain(|i| i.id != self.id);
                if v.is_empty() {
                    by_broker.remove(&self.node_id);
                }
            }
            by_broker.is_empty()
        });
        if emptied {
            map.remove_if(&self.principal, |_, by_broker| by_broker.is_empty());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;

    use super::*;
    use crate::config::Config;
    use crate::metrics::Metrics;
    use crate::proxy::Proxy;
    use crate::security::principal::Mechanism;

    /// A client connection to broker `node_id` with no socket behind it: what is queued on it
    /// arrives on the returned receiver.
    fn connection(proxy: &Proxy, node_id: i32) -> (Upstream, mpsc::Receiver<Outbound>) {
        let (tx, rx) = mpsc::channel(4);
        let link = Link::new(proxy, node_id);
        (Upstream { node_id, tx, link }, rx)
    }

    fn proxy() -> Arc<Proxy> {
        let text = "[upstream]\nbootstrap_servers = [\"127.0.0.1:1\"]\n";
        Proxy::new(Config::parse(text, "t").unwrap(), Metrics::new()).unwrap()
    }

    /// Whether `injector` gives back a request queued now.
    fn refuses(injector: &Injector) -> bool {
        injector
            .try_send(Outbound::new(Bytes::new(), None))
            .is_err()
    }

    fn principal(name: &str) -> Arc<Principal> {
        let token = format!("\0{name}\0secret");
        Arc::new(Mechanism::Plain.principal(token.as_bytes()).unwrap())
    }

    #[tokio::test(start_paused = true)]
    async fn a_registered_connection_carries_its_principals_requests_until_it_cannot() {
        let proxy = proxy();
        let connections = ClientConnections::default();
        let (alice, bob) = (principal("alice"), principal("bob"));
        let (upstream, mut rx) = connection(&proxy, 2);
        assert!(
            !connections.reaches(&alice, 2),
            "not before the broker accepted the client"
        );

        let registration = connections.registrar(&upstream).register(alice.clone());
        assert!(connections.reaches(&alice, 2));
        assert!(
            !connections.reaches(&alice, 3),
            "only the broker it is connected to"
        );
        assert!(!connections.reaches(&bob, 2), "only its own principal");
        let injector = connections.pick(&alice, 2, 7).unwrap();
        injector
            .try_send(Outbound::new(Bytes::from_static(b"moved"), None))
            .unwrap_or_else(|_| panic!("queued"));
        let out = rx.try_recv().unwrap();
        assert!(out.injected && out.frame == "moved");

        // Its client starts a SASL exchange (KIP-368): nothing goes out until it is over.
        let gate = upstream.client_sasl_started();
        assert!(!connections.reaches(&alice, 2));
        assert!(refuses(&injector));
        gate.accepted(10_000);
        gate.open();
        assert!(connections.reaches(&alice, 2));
        // The session's last second (a tenth of 10 s, under the 5 s margin): nothing, until
        // the client re-authenticates.
        tokio::time::advance(Duration::from_millis(8_999)).await;
        assert!(connections.reaches(&alice, 2));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(!connections.reaches(&alice, 2));
        assert!(refuses(&injector));
        gate.accepted(0);
        assert!(
            connections.reaches(&alice, 2),
            "no limit once re-authenticated without one"
        );

        // The session ends: the entry goes with it.
        drop(registration);
        assert!(!connections.reaches(&alice, 2));
        assert!(connections.inner.map.is_empty(), "no principal left behind");
        let again = connections.registrar(&upstream).register(alice.clone());
        // The client closes its connection: the injector cannot keep it open.
        drop(upstream);
        assert!(!connections.reaches(&alice, 2));
        assert!(refuses(&injector));
        drop(again);
    }

    #[test]
    fn a_shard_keeps_its_connection_while_the_set_does_not_change() {
        let proxy = proxy();
        let connections = ClientConnections::default();
        let alice = principal("alice");
        let (a, _ra) = connection(&proxy, 1);
        let (b, _rb) = connection(&proxy, 1);
        let _ea = connections.registrar(&a).register(alice.clone());
        let _eb = connections.registrar(&b).register(alice.clone());
        let first = connections.pick(&alice, 1, 4).unwrap().id;
        assert_eq!(connections.pick(&alice, 1, 4).unwrap().id, first);
        assert_ne!(connections.pick(&alice, 1, 5).unwrap().id, first);
        let spread: std::collections::HashSet<u64> = (0..4)
            .map(|_| connections.any(&alice, 1).unwrap().id)
            .collect();
        assert_eq!(spread.len(), 2, "turns go to both connections");
    }
}
