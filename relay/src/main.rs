//! `delay_relay`: a TCP relay that delays everything a server sends back to its clients, and can
//! cap the server's bandwidth.
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
//! Bandwidth cap (`--cap-file`, optional like `--delay-file`: once for all pairs, once per pair,
//! or not at all): the file holds a decimal number of MB/s (10^6 bytes/s, e.g. `12.5`); missing,
//! empty, invalid or 0 means unlimited. It is re-read every 100 ms like the delay. Why: on one
//! machine the three brokers share the CPU, disk and loopback, so a broker leading more partitions
//! has no less capacity than the others; capping each broker's relay gives it a link of its own,
//! as if it were its own machine. The cap is a token bucket per direction (client -> server and
//! server -> client each get the full cap, like a full-duplex link), shared by every connection and
//! every listen/target pair given the same cap file. A chunk read from one side waits for its
//! tokens before it is written on (client -> server) or queued for the delay (server -> client, so
//! the delay comes after the link: serialization, then latency); while it waits the relay reads no
//! more from that side, so TCP backpressure slows the sender. Bursts are at most a bucket depth
//! (5 ms of traffic or 64 KiB, whichever is larger), so bytes flow smoothly, not in 1 s lumps.
//! A changed cap applies within 100 ms, also to bytes already waiting.
//!
//! ```text
//! delay_relay --listen 127.0.0.1:19192 --target 127.0.0.1:19092 \
//!     --delay-file target/cluster/delay/broker1 --cap-file target/cluster/cap/broker1
//! ```
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
/// A capped link may send this much time's worth of traffic at once (or `CHUNK` bytes, whichever
/// is larger, so that one read's chunk passes an idle link without waiting).
const BURST: Duration = Duration::from_millis(5);
/// Shortest wait for tokens: a wait of a few ns (float rounding) must sleep, not spin.
const MIN_WAIT: Duration = Duration::from_millis(1);
/// Upper bound for the cap in MB/s (far above anything loopback does; keeps the math finite).
const MAX_CAP_MBPS: f64 = 1_000_000.0;

#[derive(Parser)]
#[command(
    about = "TCP relay that delays server->client bytes by the ms in a file and caps both directions at the MB/s in another"
)]
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
    /// File holding the bandwidth cap in MB/s per direction (once for all pairs, or once per
    /// pair; none, 0 or invalid: unlimited).
    #[arg(long)]
    cap_file: Vec<PathBuf>,
    /// Tokio worker threads (1 = a single-threaded runtime).
    #[arg(long, default_value_t = 1)]
    threads: usize,
}

/// `RUST_LOG` as `target=level` directives (kroute's `log_filter` reads it the same way; the
/// relay is a package of its own and so does not link kroute), `info` when unset or unreadable.
fn log_filter() -> tracing_subscriber::filter::Targets {
    std::env::var("RUST_LOG")
        .ok()
        .and_then(|directives| directives.parse().ok())
        .unwrap_or_else(|| {
            tracing_subscriber::filter::Targets::new()
                .with_default(tracing_subscriber::filter::LevelFilter::INFO)
        })
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    {
        use tracing_subscriber::layer::SubscriberExt;
        use tracing_subscriber::util::SubscriberInitExt;
        let lines = tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_target(false)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
        tracing_subscriber::registry()
            .with(log_filter())
            .with(lines)
            .init();
    }
    if cli.listen.len() != cli.target.len() {
        bail!(
            "{} --listen but {} --target",
            cli.listen.len(),
            cli.target.len()
        );
    }
    for (flag, files) in [
        ("--delay-file", &cli.delay_file),
        ("--cap-file", &cli.cap_file),
    ] {
        if files.len() > 1 && files.len() != cli.listen.len() {
            bail!(
                "give {flag} once, or once per --listen ({})",
                cli.listen.len()
            );
        }
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
    let delays = shared_settings(&cli.delay_file, Setting::Delay);
    // one link (a bucket per direction) per cap file: pairs sharing a file share the bandwidth
    let links: Vec<Arc<Link>> = shared_settings(&cli.cap_file, Setting::Cap)
        .into_iter()
        .map(|cap| Arc::new(Link::new(cap)))
        .collect();
    for (i, (&listen, &target)) in cli.listen.iter().zip(&cli.target).enumerate() {
        let listener = TcpListener::bind(listen)
            .await
            .with_context(|| format!("binding {listen}"))?;
        let shaping = Shaping {
            delay: delays[i.min(delays.len() - 1)].clone(),
            link: links[i.min(links.len() - 1)].clone(),
        };
        info!(
            "relaying {listen} -> {target} (delay {} ms, cap {})",
            shaping.delay.load(Ordering::Relaxed),
            show_cap(shaping.link.cap.load(Ordering::Relaxed))
        );
        tokio::spawn(accept_loop(listener, target, shaping, conns.clone()));
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

/// A runtime setting read from a file: the delay (ms) or the bandwidth cap (bytes/s).
#[derive(Clone, Copy)]
enum Setting {
    Delay,
    Cap,
}

impl Setting {
    fn read(self, path: &Path) -> u64 {
        match self {
            Setting::Delay => read_delay(path),
            Setting::Cap => read_cap(path),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Setting::Delay => "delay",
            Setting::Cap => "cap",
        }
    }

    fn show(self, value: u64) -> String {
        match self {
            Setting::Delay => format!("{value} ms"),
            Setting::Cap => show_cap(value),
        }
    }
}

/// One shared value per file, kept current by a poller (or a constant 0 without any file), so
/// a runtime change reaches every connection of the pairs that share the file.
fn shared_settings(paths: &[PathBuf], setting: Setting) -> Vec<Arc<AtomicU64>> {
    let mut cells: Vec<Arc<AtomicU64>> = Vec::new();
    for path in paths {
        let cell = Arc::new(AtomicU64::new(setting.read(path)));
        tokio::spawn(poll_setting(path.clone(), cell.clone(), setting));
        cells.push(cell);
    }
    if cells.is_empty() {
        cells.push(Arc::new(AtomicU64::new(0)));
    }
    cells
}

/// The delay in the file: a non-negative integer number of ms (capped at one hour); anything
/// else (or no file) is 0. (A tiny local file: reading it synchronously is fine.)
fn read_delay(path: &Path) -> u64 {
    match std::fs::read_to_string(path) {
        Ok(s) => s.trim().parse::<u64>().map_or(0, |ms| ms.min(MAX_DELAY_MS)),
        Err(_) => 0,
    }
}

/// The cap in the file in bytes/s: a non-negative decimal number of MB/s; anything else (or no
/// file) is 0 = unlimited.
fn read_cap(path: &Path) -> u64 {
    std::fs::read_to_string(path).map_or(0, |s| parse_cap(&s))
}

fn parse_cap(text: &str) -> u64 {
    match text.trim().parse::<f64>() {
        Ok(mbps) if mbps.is_finite() && mbps > 0.0 => {
            // at least 1 B/s: a tiny positive cap must not round to "unlimited"
            ((mbps.min(MAX_CAP_MBPS) * 1e6).round() as u64).max(1)
        }
        _ => 0,
    }
}

fn show_cap(bytes_per_sec: u64) -> String {
    if bytes_per_sec == 0 {
        "unlimited".into()
    } else {
        format!("{} MB/s", bytes_per_sec as f64 / 1e6)
    }
}

async fn poll_setting(path: PathBuf, cell: Arc<AtomicU64>, setting: Setting) {
    let mut tick = tokio::time::interval(POLL_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let new = setting.read(&path);
        let old = cell.swap(new, Ordering::Relaxed);
        if old != new {
            // e.g. "<file>: delay 0 ms -> 20 ms"; cluster.sh `cap` waits for the cap's line to
            // know the relay applied a change
            info!(
                "{}: {} {} -> {}",
                path.display(),
                setting.name(),
                setting.show(old),
                setting.show(new)
            );
        }
    }
}

/// What a listen/target pair does to the bytes it relays: its delay and its link's cap.
#[derive(Clone)]
struct Shaping {
    delay: Arc<AtomicU64>,
    link: Arc<Link>,
}

/// One broker's link: the cap (bytes/s per direction, 0 = unlimited) and one bucket per
/// direction, shared by all connections of the pairs given the same cap file.
struct Link {
    cap: Arc<AtomicU64>,
    /// client -> server
    up: Bucket,
    /// server -> client
    down: Bucket,
}

impl Link {
    fn new(cap: Arc<AtomicU64>) -> Link {
        Link {
            up: Bucket::new(cap.clone()),
            down: Bucket::new(cap.clone()),
            cap,
        }
    }
}

/// One direction of a capped link: a [`Pacer`] at the link's current cap.
struct Bucket {
    cap: Arc<AtomicU64>,
    pacer: Mutex<Pacer>,
}

impl Bucket {
    fn new(cap: Arc<AtomicU64>) -> Bucket {
        Bucket {
            cap,
            pacer: Mutex::new(Pacer::new(Instant::now())),
        }
    }

    /// Waits until `n` more bytes may cross this direction (at once while uncapped).
    async fn acquire(&self, n: usize) {
        // uncapped: no lock, no bookkeeping; the pacer catches up when a cap is set (an idle
        // link's `sent` reaches `reserved` on the next advance)
        if self.cap.load(Ordering::Relaxed) == 0 {
            return;
        }
        let end = self.with_pacer(|p, _| p.reserve(n));
        // the wait is recomputed after each sleep, so a cap changed meanwhile (or removed)
        // applies to bytes already waiting, within POLL_INTERVAL
        while let Some(wait) = self.with_pacer(|p, rate| p.wait(end, rate)) {
            tokio::time::sleep(wait.clamp(MIN_WAIT, POLL_INTERVAL)).await;
        }
    }

    /// Runs `f` on the pacer brought up to now at the current cap.
    fn with_pacer<T>(&self, f: impl FnOnce(&mut Pacer, u64) -> T) -> T {
        let rate = self.cap.load(Ordering::Relaxed);
        // the pacer's numbers stay usable even if a holder panicked
        let mut pacer = self.pacer.lock().unwrap_or_else(PoisonError::into_inner);
        pacer.advance(Instant::now(), rate);
        f(&mut pacer, rate)
    }
}

/// A token bucket counted in byte positions (time is passed in, so tests can inject it).
/// `reserved` counts every byte granted or waiting; `sent` is how far a virtual link running at
/// the cap has got, never past `reserved` (an idle link saves no credit beyond the bucket).
/// Bytes up to `sent + depth` may go. Waiters hold positions, not deadlines, so they pass in
/// the order they asked and a changed rate applies to them at once. (A connection cut while
/// waiting leaves its reservation behind: the link spends at most one chunk's time on it.)
struct Pacer {
    reserved: f64,
    sent: f64,
    last: Instant,
}

impl Pacer {
    fn new(now: Instant) -> Pacer {
        Pacer {
            reserved: 0.0,
            sent: 0.0,
            last: now,
        }
    }

    /// Moves the virtual link on to `now` at `rate` bytes/s (0 = unlimited: everything is sent).
    fn advance(&mut self, now: Instant, rate: u64) {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.sent = if rate == 0 {
            self.reserved
        } else {
            (self.sent + elapsed * rate as f64).min(self.reserved)
        };
        self.last = now;
    }

    /// Takes the next `n` byte positions; returns where they end.
    fn reserve(&mut self, n: usize) -> f64 {
        self.reserved += n as f64;
        self.reserved
    }

    /// How long until the bytes ending at `end` may go (None: now), at `rate` bytes/s.
    fn wait(&self, end: f64, rate: u64) -> Option<Duration> {
        if rate == 0 {
            return None;
        }
        let missing = end - (self.sent + depth(rate));
        (missing > 0.0).then(|| Duration::from_secs_f64(missing / rate as f64))
    }
}

/// The bucket depth at `rate` bytes/s: BURST of traffic, at least one CHUNK.
fn depth(rate: u64) -> f64 {
    (rate as f64 * BURST.as_secs_f64()).max(CHUNK as f64)
}

async fn accept_loop(
    listener: TcpListener,
    target: SocketAddr,
    shaping: Shaping,
    conns: Arc<Connections>,
) {
    loop {
        match listener.accept().await {
            Ok((client, peer)) => {
                let shaping = shaping.clone();
                conns.spawn(async move {
                    if let Err(e) = relay(client, target, shaping).await {
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

async fn relay(client: TcpStream, target: SocketAddr, shaping: Shaping) -> anyhow::Result<()> {
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
            read_server(server_r, tx, &shaping.link.down),
            write_client(client_w, rx, &shaping.delay)
        )
        .map(|_| ())
    };
    tokio::select! {
        r = forward(client_r, server_w, &shaping.link.up) => r,
        r = down => r,
    }
}

/// client -> server, undelayed, at most at the link's cap (no reads while a chunk waits for its
/// tokens, so the client is slowed by TCP backpressure).
async fn forward(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    link: &Bucket,
) -> anyhow::Result<()> {
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = from.read(&mut buf).await.context("reading from client")?;
        if n == 0 {
            return Ok(());
        }
        link.acquire(n).await;
        to.write_all(&buf[..n]).await.context("writing to server")?;
    }
}

/// server -> queue, at most at the link's cap: every chunk stamped with the time it got its
/// tokens (it "arrives" once the link has carried it; the delay is added on top, as latency).
async fn read_server(
    mut from: OwnedReadHalf,
    tx: mpsc::Sender<(Instant, Bytes)>,
    link: &Bucket,
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
        link.acquire(n).await;
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

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1_000_000;

    /// Sends `total` bytes in CHUNK reads through a pacer at `rate`, jumping the clock by each
    /// wait it asks for; returns the time it took.
    fn paced(rate: u64, total: usize) -> Duration {
        let start = Instant::now();
        let (mut pacer, mut now, mut left) = (Pacer::new(start), start, total);
        while left > 0 {
            let n = left.min(CHUNK);
            left -= n;
            pacer.advance(now, rate);
            let end = pacer.reserve(n);
            while let Some(wait) = pacer.wait(end, rate) {
                now += wait;
                pacer.advance(now, rate);
            }
        }
        now - start
    }

    #[test]
    fn long_run_rate_is_the_cap() {
        // 50 MB at 5 MB/s: 10 s, less the one bucket depth that goes at once
        let took = paced(5 * MB, 50_000_000).as_secs_f64();
        let expect = (50_000_000.0 - depth(5 * MB)) / 5e6;
        assert!(
            (took - expect).abs() < 1e-3,
            "took {took} s, expected {expect} s"
        );
    }

    #[test]
    fn depth_is_a_few_ms_or_one_chunk() {
        assert_eq!(depth(5 * MB), CHUNK as f64); // 5 ms = 25 kB < 64 KiB
        assert_eq!(depth(100 * MB), 500_000.0); // 5 ms of 100 MB/s
    }

    #[test]
    fn an_idle_link_saves_no_more_than_one_bucket() {
        let t0 = Instant::now();
        let mut pacer = Pacer::new(t0);
        let rate = MB;
        // an hour idle, then a burst: only one depth (64 KiB) goes at once
        let later = t0 + Duration::from_secs(3600);
        pacer.advance(later, rate);
        let first = pacer.reserve(CHUNK);
        assert_eq!(pacer.wait(first, rate), None);
        let second = pacer.reserve(CHUNK);
        let wait = pacer.wait(second, rate).expect("the second chunk waits");
        assert!(
            (wait.as_secs_f64() - CHUNK as f64 / 1e6).abs() < 1e-9,
            "{wait:?}"
        );
    }

    #[test]
    fn waiters_go_in_order_and_follow_a_changed_rate() {
        let t0 = Instant::now();
        let mut pacer = Pacer::new(t0);
        let rate = MB;
        let ends: Vec<f64> = (0..4).map(|_| pacer.reserve(CHUNK)).collect();
        let waits: Vec<Duration> = ends
            .iter()
            .map(|&e| pacer.wait(e, rate).unwrap_or_default())
            .collect();
        assert!(waits.windows(2).all(|w| w[0] < w[1]), "{waits:?}");
        // the cap doubles: the last waiter's remaining wait halves
        let doubled = pacer.wait(ends[3], 2 * MB).unwrap();
        assert!((doubled.as_secs_f64() * 2.0 - waits[3].as_secs_f64()).abs() < 1e-9);
        // the cap is removed: everyone goes
        pacer.advance(t0, 0);
        assert!(ends.iter().all(|&e| pacer.wait(e, 0).is_none()));
    }

    #[test]
    fn a_chunk_larger_than_the_bucket_still_passes() {
        let t0 = Instant::now();
        let mut pacer = Pacer::new(t0);
        let end = pacer.reserve(4 * CHUNK);
        let wait = pacer.wait(end, MB).expect("waits for 3 chunks' worth");
        pacer.advance(t0 + wait, MB);
        assert_eq!(pacer.wait(end, MB), None);
    }

    #[test]
    fn cap_file_is_decimal_megabytes_per_second() {
        assert_eq!(parse_cap("12.5\n"), 12_500_000);
        assert_eq!(parse_cap(" 5 "), 5_000_000);
        assert_eq!(parse_cap("0.000001"), 1);
        assert_eq!(parse_cap("1e-12"), 1); // tiny, but not unlimited
        assert_eq!(parse_cap("1e30"), (MAX_CAP_MBPS * 1e6) as u64);
        for unlimited in ["", "0", "-3", "abc", "inf", "NaN", "5 MB/s"] {
            assert_eq!(parse_cap(unlimited), 0, "{unlimited:?}");
        }
        assert_eq!(show_cap(12_500_000), "12.5 MB/s");
        assert_eq!(show_cap(0), "unlimited");
    }

    /// The async path under tokio's paused clock: two connections share one direction's cap,
    /// and removing the cap releases a waiter within a poll interval.
    #[tokio::test(start_paused = true)]
    async fn bucket_shares_the_cap_and_follows_changes() {
        let cap = Arc::new(AtomicU64::new(MB));
        let link = Arc::new(Link::new(cap.clone()));
        let start = Instant::now();
        let send = |link: Arc<Link>| async move {
            for _ in 0..40 {
                link.up.acquire(25_000).await; // 1 MB per task
            }
        };
        tokio::join!(send(link.clone()), send(link.clone()));
        let took = start.elapsed().as_secs_f64();
        let expect = (2e6 - depth(MB)) / 1e6;
        // each sleep ends on tokio's 1 ms timer grain
        assert!(
            (took - expect).abs() < 0.05,
            "took {took} s, expected {expect} s"
        );
        // the other direction is a bucket of its own: full at once
        let t = Instant::now();
        link.down.acquire(CHUNK).await;
        assert_eq!(t.elapsed(), Duration::ZERO);

        // at 1 B/s a first chunk empties the bucket and the next one would wait 18 hours:
        // removing the cap releases it within one poll interval
        let cap = Arc::new(AtomicU64::new(1));
        let link = Arc::new(Link::new(cap.clone()));
        link.up.acquire(CHUNK).await;
        assert_eq!(
            Instant::now(),
            t,
            "an idle link lets one chunk through at once"
        );
        let waiter = tokio::spawn({
            let link = link.clone();
            async move { link.up.acquire(CHUNK).await }
        });
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert!(!waiter.is_finished());
        let removed = Instant::now();
        cap.store(0, Ordering::Relaxed);
        waiter.await.unwrap();
        assert!(
            removed.elapsed() <= POLL_INTERVAL,
            "{:?}",
            removed.elapsed()
        );
    }
}
