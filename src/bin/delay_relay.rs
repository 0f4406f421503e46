//! `delay_relay`: a TCP relay that delays everything a server sends back to its clients.
//!
//! Why it exists: tests and benchmarks need "a reproducible slow broker that every client sees"
//! (e.g. broker 2 answering every request 20 ms late, for direct clients, for clients going
//! through kroute and for the other brokers' replica fetchers alike, switchable at runtime). The
//! usual tool, `tc qdisc ... netem delay`, is not available on our test machines (the kernel has
//! no netem: "Specified qdisc kind is unknown"). So `scripts/cluster.sh start --relayed` puts one
//! of these relays in front of each broker and makes the broker *advertise* the relay's address,
//! so every connection to that broker goes through the relay.
//!
//! ```text
//! delay_relay --listen 127.0.0.1:19192 --target 127.0.0.1:19092 --delay-file target/cluster/delay/broker1
//! ```
//!
//! Several `--listen`/`--target` pairs may be given (the n-th listen address forwards to the
//! n-th target); `--delay-file` is given once (shared by all pairs), once per pair, or not at all
//! (no delay).
//!
//! Behaviour per accepted connection:
//! * it connects to the target (TCP_NODELAY on both sockets);
//! * client -> server bytes are forwarded immediately;
//! * server -> client bytes are read in chunks of up to 64 KiB, each stamped with its arrival
//!   time, queued, and written to the client at `arrival + current delay` by a writer task. Order
//!   and pipelining are kept, so throughput stays about the same and only latency grows;
//! * EOF (half-close) or an error on either side closes both directions.
//!
//! The delay (integer milliseconds; a missing, empty or invalid file means 0) is re-read from the
//! delay file every 100 ms, so it can be changed at runtime with `echo 20 > FILE`. It is applied
//! when a chunk is written, so lowering the delay releases already queued chunks early.
//!
//! SIGUSR1 cuts every currently open connection (both of its sockets are closed at once, as if
//! the network between client and broker had broken; queued, not yet delivered server bytes are
//! discarded) and logs one line with how many were cut; the relay keeps accepting new
//! connections. `scripts/cluster.sh cut N` sends it to broker N's relay.
//!
//! SIGTERM / SIGINT stop the relay (open connections are dropped).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Context, bail};
use bytes::{Bytes, BytesMut};
use clap::Parser;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tokio::time::Instant;
use tracing::{debug, info, warn};

/// Read size per socket read (and the largest chunk queued on the delayed path).
const CHUNK: usize = 64 * 1024;
/// Queued server -> client chunks per connection before the relay stops reading from the server
/// (at most `QUEUE_CHUNKS * CHUNK` bytes in flight per connection; 32 MiB).
const QUEUE_CHUNKS: usize = 512;
/// How often the delay file is re-read.
const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// Upper bound for the delay (keeps `Instant + delay` far from overflowing).
const MAX_DELAY_MS: u64 = 3_600_000;
/// Timeout for connecting to the target.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Parser)]
#[command(about = "TCP relay that delays server->client bytes by the number of ms in a file")]
struct Cli {
    /// Address to listen on (repeatable; pairs with the --target at the same position).
    #[arg(long, required = true)]
    listen: Vec<SocketAddr>,
    /// Address to forward to (repeatable).
    #[arg(long, required = true)]
    target: Vec<SocketAddr>,
    /// File holding the delay in ms (once for all pairs, or once per pair; none: no delay).
    #[arg(long)]
    delay_file: Vec<PathBuf>,
    /// Tokio worker threads (1 = a single-threaded runtime).
    #[arg(long, default_value_t = 1)]
    threads: usize,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    if cli.listen.len() != cli.target.len() {
        bail!(
            "{} --listen but {} --target",
            cli.listen.len(),
            cli.target.len()
        );
    }
    if cli.delay_file.len() > 1 && cli.delay_file.len() != cli.listen.len() {
        bail!(
            "give --delay-file once, or once per --listen ({})",
            cli.listen.len()
        );
    }
    let runtime = if cli.threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(cli.threads)
            .enable_all()
            .build()
    }
    .context("building the tokio runtime")?;
    runtime.block_on(run(cli))
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let conns = Arc::new(Connections::default());
    // registered before the listeners are bound: once cluster.sh sees the port open, a SIGUSR1
    // must cut connections, not kill the relay (its default action)
    spawn_cut_handler(conns.clone())?;
    // one shared delay per distinct delay file (or a constant 0 without one)
    let mut delays: Vec<Arc<AtomicU64>> = Vec::new();
    for path in &cli.delay_file {
        let delay = Arc::new(AtomicU64::new(read_delay(path)));
        tokio::spawn(poll_delay(path.clone(), delay.clone()));
        delays.push(delay);
    }
    if delays.is_empty() {
        delays.push(Arc::new(AtomicU64::new(0)));
    }
    for (i, (&listen, &target)) in cli.listen.iter().zip(&cli.target).enumerate() {
        let listener = TcpListener::bind(listen)
            .await
            .with_context(|| format!("binding {listen}"))?;
        let delay = delays[i.min(delays.len() - 1)].clone();
        info!(
            "relaying {listen} -> {target} (delay {} ms)",
            delay.load(Ordering::Relaxed)
        );
        tokio::spawn(accept_loop(listener, target, delay, conns.clone()));
    }
    shutdown_signal().await;
    info!("shutting down");
    Ok(())
}

/// The open relayed connections (of all listen/target pairs), so SIGUSR1 can cut them.
#[derive(Default)]
struct Connections {
    next_id: AtomicU64,
    open: Mutex<HashMap<u64, AbortHandle>>,
}

impl Connections {
    /// Runs `conn` as a task that SIGUSR1 can abort; it is registered until it ends or is cut.
    fn spawn<F>(self: &Arc<Self>, conn: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let guard = Registration {
            id,
            conns: self.clone(),
        };
        // spawned under the lock: the task's own deregistration (guard drop) can't run before
        // the insert, which would leave a stale entry behind
        let mut open = self.lock();
        let task = tokio::spawn(async move {
            let _guard = guard;
            conn.await;
        });
        open.insert(id, task.abort_handle());
    }

    /// Aborts every open connection task (dropping a task's future drops its sockets, which
    /// closes them); returns how many there were.
    fn cut_all(&self) -> usize {
        // taken out under the lock, aborted after it: an aborted task deregisters itself
        let cut: Vec<AbortHandle> = self.lock().drain().map(|(_, task)| task).collect();
        for task in &cut {
            task.abort();
        }
        cut.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, AbortHandle>> {
        // the map stays consistent even if a holder panicked
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Deregisters a connection when its task ends (completed or aborted).
struct Registration {
    id: u64,
    conns: Arc<Connections>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.conns.lock().remove(&self.id);
    }
}

/// Cuts all open connections on every SIGUSR1.
#[cfg(unix)]
fn spawn_cut_handler(conns: Arc<Connections>) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut usr1 = signal(SignalKind::user_defined1()).context("listening for SIGUSR1")?;
    tokio::spawn(async move {
        while usr1.recv().await.is_some() {
            let n = conns.cut_all();
            info!("SIGUSR1: cut {n} open connection(s)");
        }
    });
    Ok(())
}

#[cfg(not(unix))]
fn spawn_cut_handler(_conns: Arc<Connections>) -> anyhow::Result<()> {
    Ok(())
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(e) => {
                warn!("cannot listen for SIGTERM: {e}");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// The delay in the file: a non-negative integer number of ms (capped at one hour); anything
/// else (or no file) is 0. (A tiny local file: reading it synchronously is fine.)
fn read_delay(path: &Path) -> u64 {
    match std::fs::read_to_string(path) {
        Ok(s) => s.trim().parse::<u64>().map_or(0, |ms| ms.min(MAX_DELAY_MS)),
        Err(_) => 0,
    }
}

async fn poll_delay(path: PathBuf, delay: Arc<AtomicU64>) {
    let mut tick = tokio::time::interval(POLL_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let ms = read_delay(&path);
        let old = delay.swap(ms, Ordering::Relaxed);
        if old != ms {
            info!("{}: delay {old} ms -> {ms} ms", path.display());
        }
    }
}

async fn accept_loop(
    listener: TcpListener,
    target: SocketAddr,
    delay: Arc<AtomicU64>,
    conns: Arc<Connections>,
) {
    loop {
        match listener.accept().await {
            Ok((client, peer)) => {
                let delay = delay.clone();
                conns.spawn(async move {
                    if let Err(e) = relay(client, target, delay).await {
                        debug!("{peer} -> {target}: {e:#}");
                    }
                });
            }
            Err(e) => {
                // e.g. out of file descriptors: back off instead of spinning
                warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn relay(client: TcpStream, target: SocketAddr, delay: Arc<AtomicU64>) -> anyhow::Result<()> {
    let server = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(target))
        .await
        .context("connect timed out")?
        .context("connect failed")?;
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    let (client_r, client_w) = client.into_split();
    let (server_r, server_w) = server.into_split();
    let (tx, rx) = mpsc::channel(QUEUE_CHUNKS);
    // Whichever direction ends first (EOF or error) ends the connection: dropping the halves
    // closes both sockets. The downstream path ends when the writer has flushed everything the
    // reader queued before the server's EOF (the reader dropping `tx` ends the writer's queue);
    // an error on either side of it ends it at once.
    let down = async {
        tokio::try_join!(
            read_server(server_r, tx),
            write_client(client_w, rx, &delay)
        )
        .map(|_| ())
    };
    tokio::select! {
        r = forward(client_r, server_w) => r,
        r = down => r,
    }
}

/// client -> server, undelayed.
async fn forward(mut from: OwnedReadHalf, mut to: OwnedWriteHalf) -> anyhow::Result<()> {
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = from.read(&mut buf).await.context("reading from client")?;
        if n == 0 {
            return Ok(());
        }
        to.write_all(&buf[..n]).await.context("writing to server")?;
    }
}

/// server -> queue: every chunk stamped with its arrival time.
async fn read_server(
    mut from: OwnedReadHalf,
    tx: mpsc::Sender<(Instant, Bytes)>,
) -> anyhow::Result<()> {
    let mut buf = BytesMut::with_capacity(CHUNK);
    loop {
        // reuses the unused tail of the current allocation, or allocates a fresh 64 KiB once the
        // queued chunks hold on to it
        buf.reserve(CHUNK);
        let n = from
            .read_buf(&mut buf)
            .await
            .context("reading from server")?;
        if n == 0 {
            return Ok(());
        }
        let chunk = buf.split().freeze();
        if tx.send((Instant::now(), chunk)).await.is_err() {
            return Ok(()); // the writer is gone (client closed): nothing left to do
        }
    }
}

/// queue -> client, each chunk at arrival + the delay current at that moment.
async fn write_client(
    mut to: OwnedWriteHalf,
    mut rx: mpsc::Receiver<(Instant, Bytes)>,
    delay: &AtomicU64,
) -> anyhow::Result<()> {
    while let Some((arrived, chunk)) = rx.recv().await {
        let ms = delay.load(Ordering::Relaxed);
        if ms > 0 {
            // sleep_until returns at once for a deadline in the past
            tokio::time::sleep_until(arrived + Duration::from_millis(ms)).await;
        }
        to.write_all(&chunk).await.context("writing to client")?;
    }
    Ok(())
}
