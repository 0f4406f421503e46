//! A stand-in broker for the Produce path's unit tests: it reads every request kroute writes
//! and answers none, until the test cuts its connections. A request it read was written, so
//! kroute must count it as possibly appended; a request kroute never wrote (no address, a
//! connection that could not take it) is known unsent ([`crate::upstream::UpstreamGone`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;
use tokio::sync::{Notify, watch};

use crate::route::Context;

pub struct SilentBroker {
    /// Requests read so far, over every connection.
    read: Arc<AtomicUsize>,
    read_more: Arc<Notify>,
    cut: watch::Sender<bool>,
}

impl SilentBroker {
    /// Starts one, and makes it every broker (1-3) of `proxy`'s cluster.
    pub async fn serve(ctx: &dyn Context) -> SilentBroker {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        ctx.cluster().replace(BTreeMap::from([
            (1, addr.clone()),
            (2, addr.clone()),
            (3, addr),
        ]));
        let (read, read_more) = (Arc::new(AtomicUsize::new(0)), Arc::new(Notify::new()));
        let (cut, cut_rx) = watch::channel(false);
        let (count, notify) = (read.clone(), read_more.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (count, notify, cut) = (count.clone(), notify.clone(), cut_rx.clone());
                tokio::spawn(read_until_cut(stream, count, notify, cut));
            }
        });
        SilentBroker {
            read,
            read_more,
            cut,
        }
    }

    /// Waits until it has read `requests` requests in all, then closes every connection: the
    /// requests still unanswered get no answer.
    pub async fn cut_after(&self, requests: usize) {
        loop {
            let more = self.read_more.notified();
            if self.read.load(Ordering::SeqCst) >= requests {
                break;
            }
            more.await;
        }
        let _ = self.cut.send(true);
    }
}

/// Reads size-prefixed requests off one connection, counting them, until the test cuts it.
async fn read_until_cut(
    mut stream: tokio::net::TcpStream,
    count: Arc<AtomicUsize>,
    notify: Arc<Notify>,
    mut cut: watch::Receiver<bool>,
) {
    let mut pending = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    loop {
        let n = tokio::select! {
            _ = cut.wait_for(|c| *c) => return,
            n = stream.read(&mut chunk) => match n {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
        };
        pending.extend_from_slice(&chunk[..n]);
        while pending.len() >= 4 {
            let size = u32::from_be_bytes(pending[..4].try_into().unwrap()) as usize;
            if pending.len() < 4 + size {
                break;
            }
            pending.drain(..4 + size);
            count.fetch_add(1, Ordering::SeqCst);
            notify.notify_waiters();
        }
    }
}
