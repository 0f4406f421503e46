//! Load generator for bench/load.sh: many idle client connections, and many small producers
//! sending to the brokers directly and through kroute side by side.
//!
//! ```text
//! cargo build --release --example load_gen
//! target/release/examples/load_gen idle --targets H:P,H:P,... --count N [--steps S] [--topic T] [--source-net A.B]
//! target/release/examples/load_gen produce --side NAME=BOOTSTRAP [--side NAME=BOOTSTRAP ...] --topic T \
//!     --producers N --rate R [--records K] [--record-size B] [--acks 1] [--warmup S] [--seconds S] [--source-net A.B]
//! ```
//!
//! `idle`: opens N connections, connection i to target i mod (number of targets), each doing
//! what a client does on connect: ApiVersions (v3), then Metadata (v12) for TOPIC (or for no
//! topic, brokers only); then it stays open, sending nothing. The connections are opened in S
//! equal steps (at most `--concurrency` handshakes at a time); after each step one line
//! `open K failed F` goes to stdout, and the next step starts when a line arrives on stdin (so
//! the caller can measure between steps). After the last step it holds the connections until
//! stdin reaches EOF, watching each one (a connection the peer closes is counted), then closes
//! them all and prints `closed_by_peer C` and exits (status 1 if any connection failed to open or
//! was closed by the peer). Failures are printed to stderr (the first 10 in full).
//!
//! `produce`: for each side (e.g. `direct=127.0.0.1:19192` and `kroute=127.0.0.1:12092`), reads
//! TOPIC's partition leaders from the side's bootstrap (Metadata v12, so through kroute the
//! leaders' kroute addresses), then runs N producers on that side, all sides at the same time
//! with the same schedule. Producer i of every side writes partition i mod P on its own
//! connection to that partition's leader (ApiVersions v3 first), sending one Produce request (v9,
//! `acks` as given, one batch of K keyless records of B bytes, magic 2, uncompressed, no
//! producer id) every 1/R s, starting at a random phase within the first period, pipelined (at
//! most 5 in flight, as Kafka clients do by default). Latency is per request, from the moment it is
//! written to the moment its response is read. Producers start during the first second; the
//! first `--warmup` seconds are not counted; then stdout gets `window-start`, `--seconds` later
//! `window-end`, and the producers stop (answers still owed are awaited for up to 10 s; the
//! process stays at least 2 s more, so the caller can sample it). Only
//! requests written inside the window count. Then one line per side:
//!
//! ```text
//! side=kroute producers=1000 requests=120000 bytes=134280000 errors=0 error_codes= late_sends=0
//!   failures=0 sent_total=140000 sent_bytes_total=156660000 acked_total=140000 mean_ms=1.93 p50_ms=1.40 p90_ms=3.10 p99_ms=9.80 p999_ms=21.00 max_ms=48.20
//! ```
//!
//! (one line), where `bytes` are the Produce request frames written (size prefix included),
//! `errors` the partitions answered with an error code (their codes and counts in
//! `error_codes`, e.g. `6:3`), `late_sends` the requests written more than one period after
//! their scheduled time (the generator itself falling behind: its machine is too busy, or 5
//! requests were in flight), `sent_total` / `sent_bytes_total` the requests and bytes written
//! over the whole run (warm-up included), `acked_total` the requests answered without an error
//! over the whole run (what the topic must hold), and the percentiles exact ones over every request's latency
//! (sorted, the value at rank ceil(p x count)). Exit status 1 if a connection failed or an answer
//! was missing (printed to stderr).
//!
//! `--source-net A.B`: connection i binds the local address A.B.(i / 250).(1 + i mod 250) before
//! connecting (127.x.y.z addresses are all on the loopback interface on Linux), so the clients
//! come from many IPs, as they would in production (and a per-IP connection limit applies to
//! each of them separately); source ports are then also per address.

use std::collections::{BTreeMap, HashMap};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use bytes::{BufMut, Bytes, BytesMut};
use clap::{Args, Parser, Subcommand};
use kafka_protocol::messages::api_versions_request::ApiVersionsRequest;
use kafka_protocol::messages::api_versions_response::ApiVersionsResponse;
use kafka_protocol::messages::metadata_request::{MetadataRequest, MetadataRequestTopic};
use kafka_protocol::messages::metadata_response::MetadataResponse;
use kafka_protocol::messages::produce_request::{
    PartitionProduceData, ProduceRequest, TopicProduceData,
};
use kafka_protocol::messages::produce_response::ProduceResponse;
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpSocket;
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{Semaphore, mpsc};

const API_VERSIONS_VERSION: i16 = 3;
const METADATA_VERSION: i16 = 12;
const PRODUCE_VERSION: i16 = 9;
/// Requests a producer connection has in flight at most (Kafka clients' default).
const MAX_IN_FLIGHT: usize = 5;
/// Largest response frame accepted.
const MAX_FRAME: usize = 64 * 1024 * 1024;
/// How long a connect and each handshake answer may take.
const IO_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Parser)]
#[command(about = "Idle connections and small producers for bench/load.sh")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Open idle connections (ApiVersions + Metadata each) and hold them.
    Idle(IdleArgs),
    /// Run small producers on each side at the same time and report latency percentiles.
    Produce(ProduceArgs),
}

#[derive(Args)]
struct IdleArgs {
    /// Comma-separated host:port addresses; connection i goes to target i mod their number.
    #[arg(long, value_delimiter = ',', required = true)]
    targets: Vec<SocketAddr>,
    /// Connections to open.
    #[arg(long)]
    count: usize,
    /// Steps to open them in (a stdin line between two steps).
    #[arg(long, default_value_t = 1)]
    steps: usize,
    /// Topic for each connection's Metadata request (none: brokers only).
    #[arg(long)]
    topic: Option<String>,
    /// First two octets of the source addresses (e.g. 127.2).
    #[arg(long)]
    source_net: Option<String>,
    /// Handshakes in progress at most.
    #[arg(long, default_value_t = 200)]
    concurrency: usize,
    /// client.id sent in the request headers.
    #[arg(long, default_value = "load-gen-idle")]
    client_id: String,
}

#[derive(Args)]
struct ProduceArgs {
    /// NAME=BOOTSTRAP (host:port); repeat for each side, all run at the same time.
    #[arg(long = "side", required = true)]
    sides: Vec<String>,
    #[arg(long)]
    topic: String,
    /// Producers per side.
    #[arg(long)]
    producers: usize,
    /// Produce requests per second per producer.
    #[arg(long)]
    rate: f64,
    /// Records per request (one batch).
    #[arg(long, default_value_t = 5)]
    records: usize,
    /// Bytes per record value.
    #[arg(long, default_value_t = 100)]
    record_size: usize,
    /// acks of every Produce request (1 or -1 = all).
    #[arg(long, default_value_t = 1, allow_hyphen_values = true)]
    acks: i16,
    /// Seconds not counted at the start.
    #[arg(long, default_value_t = 10.0)]
    warmup: f64,
    /// Seconds of the measured window.
    #[arg(long, default_value_t = 60.0)]
    seconds: f64,
    /// First two octets of the source addresses; each side's producers use the next net
    /// (A.B, A.B+1, ...).
    #[arg(long)]
    source_net: Option<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("load_gen: ERROR building the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.cmd {
            Cmd::Idle(a) => idle(a).await,
            Cmd::Produce(a) => produce(a).await,
        }
    });
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("load_gen: ERROR {e:#}");
            ExitCode::FAILURE
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Connections and frames

/// Parses "A.B" into the first two octets of source addresses.
fn parse_net(net: &Option<String>) -> anyhow::Result<Option<(u8, u8)>> {
    let Some(net) = net else { return Ok(None) };
    let (a, b) = net
        .split_once('.')
        .with_context(|| format!("--source-net {net}: expected A.B"))?;
    Ok(Some((
        a.parse().context("--source-net")?,
        b.parse().context("--source-net")?,
    )))
}

/// The source address of connection `i` in net A.B (250 per third octet).
fn source_addr((a, b): (u8, u8), i: usize) -> anyhow::Result<SocketAddr> {
    let c = u8::try_from(i / 250).context("more than 64000 connections from one --source-net")?;
    let d = (1 + i % 250) as u8;
    Ok(SocketAddr::V4(SocketAddrV4::new(
        Ipv4Addr::new(a, b, c, d),
        0,
    )))
}

async fn connect(addr: SocketAddr, source: Option<SocketAddr>) -> anyhow::Result<TcpStream> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .context("socket")?;
    if let Some(src) = source {
        socket.bind(src).with_context(|| format!("binding {src}"))?;
    }
    let stream = tokio::time::timeout(IO_TIMEOUT, socket.connect(addr))
        .await
        .with_context(|| format!("connecting to {addr}: timed out"))?
        .with_context(|| format!("connecting to {addr}"))?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// A request frame, size prefix included.
fn frame<T: Encodable>(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    client_id: &str,
    body: &T,
) -> anyhow::Result<Bytes> {
    let header = RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_string(client_id.to_owned())));
    let mut out = BytesMut::with_capacity(256);
    out.put_i32(0);
    header.encode(&mut out, api.request_header_version(version))?;
    body.encode(&mut out, version)?;
    let size = (out.len() - 4) as i32;
    out[..4].copy_from_slice(&size.to_be_bytes());
    Ok(out.freeze())
}

/// Reads one response frame (without its size prefix).
async fn read_frame<R: AsyncReadExt + Unpin>(rd: &mut R) -> anyhow::Result<Bytes> {
    let size = rd.read_i32().await.context("reading a response size")?;
    if size < 0 || size as usize > MAX_FRAME {
        bail!("response frame of {size} bytes");
    }
    let mut buf = vec![0u8; size as usize];
    rd.read_exact(&mut buf)
        .await
        .context("reading a response")?;
    Ok(Bytes::from(buf))
}

/// Decodes a response: its header (checking the correlation id), then the body.
fn decode<T: Decodable>(
    mut payload: Bytes,
    api: ApiKey,
    version: i16,
    correlation_id: i32,
) -> anyhow::Result<T> {
    let header = ResponseHeader::decode(&mut payload, api.response_header_version(version))?;
    if header.correlation_id != correlation_id {
        bail!(
            "{api:?} answer has correlation id {}, expected {correlation_id}",
            header.correlation_id
        );
    }
    T::decode(&mut payload, version)
}

/// One request, one answer, with a timeout.
async fn ask<Q: Encodable, A: Decodable>(
    stream: &mut TcpStream,
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    client_id: &str,
    body: &Q,
) -> anyhow::Result<A> {
    let req = frame(api, version, correlation_id, client_id, body)?;
    tokio::time::timeout(IO_TIMEOUT, async {
        stream.write_all(&req).await.context("writing a request")?;
        let payload = read_frame(stream).await?;
        decode(payload, api, version, correlation_id)
    })
    .await
    .with_context(|| format!("{api:?}: no answer within {IO_TIMEOUT:?}"))?
}

/// ApiVersions, as every client sends first; returns the max Produce version offered.
async fn api_versions(stream: &mut TcpStream, client_id: &str) -> anyhow::Result<i16> {
    let req = ApiVersionsRequest::default()
        .with_client_software_name(StrBytes::from_static_str("kroute-load-gen"))
        .with_client_software_version(StrBytes::from_static_str("1"));
    let resp: ApiVersionsResponse = ask(
        stream,
        ApiKey::ApiVersions,
        API_VERSIONS_VERSION,
        0,
        client_id,
        &req,
    )
    .await?;
    if resp.error_code != 0 {
        bail!("ApiVersions error code {}", resp.error_code);
    }
    let produce = resp
        .api_keys
        .iter()
        .find(|k| k.api_key == ApiKey::Produce as i16)
        .context("ApiVersions offers no Produce")?;
    if !(produce.min_version..=produce.max_version).contains(&PRODUCE_VERSION) {
        bail!(
            "Produce v{PRODUCE_VERSION} not offered (v{}-v{})",
            produce.min_version,
            produce.max_version
        );
    }
    Ok(produce.max_version)
}

async fn metadata(
    stream: &mut TcpStream,
    client_id: &str,
    topic: Option<&str>,
) -> anyhow::Result<MetadataResponse> {
    let topics = topic.map(|t| {
        vec![
            MetadataRequestTopic::default()
                .with_name(Some(TopicName(StrBytes::from_string(t.to_owned())))),
        ]
    });
    let req = MetadataRequest::default()
        .with_topics(Some(topics.unwrap_or_default()))
        .with_allow_auto_topic_creation(false);
    ask(
        stream,
        ApiKey::Metadata,
        METADATA_VERSION,
        1,
        client_id,
        &req,
    )
    .await
}

// ---------------------------------------------------------------------------------------------
// idle

async fn idle(a: IdleArgs) -> anyhow::Result<bool> {
    let net = parse_net(&a.source_net)?;
    let steps = a.steps.clamp(1, a.count.max(1));
    let failed = Arc::new(AtomicUsize::new(0));
    let closed = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(Semaphore::new(a.concurrency.max(1)));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut holders = Vec::with_capacity(a.count);
    let mut stdin = BufReader::new(tokio::io::stdin()).lines();
    let mut opened = 0;
    for step in 1..=steps {
        let upto = a.count * step / steps;
        let mut handshakes = Vec::with_capacity(upto - opened);
        for i in opened..upto {
            let target = a.targets[i % a.targets.len()];
            let source = net.map(|n| source_addr(n, i)).transpose()?;
            let gate = gate.clone();
            let topic = a.topic.clone();
            let client_id = a.client_id.clone();
            handshakes.push(tokio::spawn(async move {
                let _permit = gate.acquire_owned().await;
                let mut s = connect(target, source).await?;
                api_versions(&mut s, &client_id).await?;
                metadata(&mut s, &client_id, topic.as_deref()).await?;
                anyhow::Ok(s)
            }));
        }
        for (n, h) in handshakes.into_iter().enumerate() {
            match h.await.context("handshake task")? {
                Ok(s) => holders.push(tokio::spawn(hold(s, stop_rx.clone(), closed.clone()))),
                Err(e) => {
                    if failed.fetch_add(1, Ordering::Relaxed) < 10 {
                        eprintln!("load_gen: connection {} failed: {e:#}", opened + n);
                    }
                }
            }
        }
        opened = upto;
        println!(
            "open {} failed {}",
            opened - failed.load(Ordering::Relaxed),
            failed.load(Ordering::Relaxed)
        );
        if step < steps && stdin.next_line().await?.is_none() {
            break;
        }
    }
    // hold until stdin ends
    while stdin.next_line().await?.is_some() {}
    let _ = stop_tx.send(true);
    for h in holders {
        let _ = h.await;
    }
    let (failed, closed) = (
        failed.load(Ordering::Relaxed),
        closed.load(Ordering::Relaxed),
    );
    println!("closed_by_peer {closed}");
    if failed > 0 {
        eprintln!("load_gen: {failed} connections failed to open");
    }
    if closed > 0 {
        eprintln!("load_gen: {closed} connections were closed by the peer while idle");
    }
    Ok(failed == 0 && closed == 0)
}

/// Holds an idle connection until told to stop; counts it if the peer closes it first.
async fn hold(
    mut s: TcpStream,
    mut stop: tokio::sync::watch::Receiver<bool>,
    closed: Arc<AtomicUsize>,
) {
    let mut byte = [0u8; 1];
    tokio::select! {
        _ = stop.wait_for(|s| *s) => {}
        r = s.read(&mut byte) => {
            closed.fetch_add(1, Ordering::Relaxed);
            match r {
                Ok(0) => {}
                Ok(_) => eprintln!("load_gen: an idle connection received unrequested bytes"),
                Err(e) => eprintln!("load_gen: an idle connection failed: {e}"),
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// produce

/// What one side's producers measured inside the window.
#[derive(Default)]
struct SideStats {
    latencies_us: std::sync::Mutex<Vec<u32>>,
    requests: AtomicU64,
    bytes: AtomicU64,
    late_sends: AtomicU64,
    error_codes: std::sync::Mutex<BTreeMap<i16, u64>>,
    /// Requests never answered, connections lost (whole run).
    failures: AtomicU64,
    /// Requests answered without an error, whole run (warm-up and drain included).
    acked: AtomicU64,
    /// Requests and bytes written, whole run.
    sent_total: AtomicU64,
    sent_bytes_total: AtomicU64,
    /// The first error answer, with the broker's message.
    first_error: std::sync::Mutex<Option<String>>,
}

/// The measured window, as offsets from the run's start.
#[derive(Clone, Copy)]
struct Window {
    start: Instant,
    from: Duration,
    to: Duration,
}

impl Window {
    fn contains(&self, t: Instant) -> bool {
        let at = t.saturating_duration_since(self.start);
        at >= self.from && at < self.to
    }
}

/// Partition leaders of `topic` as one side sees them: (partition, leader address).
async fn leaders(
    bootstrap: SocketAddr,
    topic: &str,
    source: Option<SocketAddr>,
) -> anyhow::Result<Vec<(i32, SocketAddr)>> {
    let mut s = connect(bootstrap, source).await?;
    api_versions(&mut s, "load-gen-metadata").await?;
    let md = metadata(&mut s, "load-gen-metadata", Some(topic)).await?;
    let brokers: HashMap<i32, String> = md
        .brokers
        .iter()
        .map(|b| (b.node_id.0, format!("{}:{}", b.host, b.port)))
        .collect();
    let t = md
        .topics
        .iter()
        .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == topic))
        .with_context(|| format!("{topic} not in the metadata from {bootstrap}"))?;
    if t.error_code != 0 {
        bail!("{topic}: metadata error code {}", t.error_code);
    }
    let mut out = Vec::new();
    for p in &t.partitions {
        let addr = brokers
            .get(&p.leader_id.0)
            .with_context(|| format!("{topic}/{}: no leader", p.partition_index))?;
        let addr: SocketAddr = tokio::net::lookup_host(addr.as_str())
            .await?
            .next()
            .with_context(|| format!("cannot resolve {addr}"))?;
        out.push((p.partition_index, addr));
    }
    out.sort_by_key(|(p, _)| *p);
    if out.is_empty() {
        bail!("{topic} has no partitions");
    }
    Ok(out)
}

/// One batch of `n` keyless records of `size` bytes, stamped now.
fn batch(n: usize, size: usize, payload: &Bytes) -> anyhow::Result<Bytes> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let records: Vec<Record> = (0..n)
        .map(|i| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // kafka-protocol starts a new batch where offset - sequence changes: this keeps
            // one batch (Produce v3+ allows only one per partition) with base sequence -1
            sequence: i as i32 - 1,
            timestamp: now,
            key: None,
            value: Some(payload.slice(..size)),
            headers: Default::default(),
        })
        .collect();
    let mut out = BytesMut::with_capacity(n * (size + 32) + 64);
    RecordBatchEncoder::encode(
        &mut out,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )?;
    Ok(out.freeze())
}

/// Settings every producer shares.
struct ProducerPlan {
    topic: TopicName,
    acks: i16,
    records: usize,
    record_size: usize,
    payload: Bytes,
    period: Duration,
    window: Window,
    /// When producers stop writing (the window's end).
    stop_at: Instant,
}

async fn produce(a: ProduceArgs) -> anyhow::Result<bool> {
    if a.rate <= 0.0 || a.producers == 0 {
        bail!("--rate and --producers must be positive");
    }
    let net = parse_net(&a.source_net)?;
    let mut sides = Vec::new();
    for (k, spec) in a.sides.iter().enumerate() {
        let (name, addr) = spec
            .split_once('=')
            .with_context(|| format!("--side {spec}: expected NAME=HOST:PORT"))?;
        let addr: SocketAddr = tokio::net::lookup_host(addr)
            .await?
            .next()
            .with_context(|| format!("cannot resolve {addr}"))?;
        let side_net = net.map(|(x, y)| (x, y.wrapping_add(k as u8)));
        let leaders = leaders(
            addr,
            &a.topic,
            side_net.map(|n| source_addr(n, 0)).transpose()?,
        )
        .await
        .with_context(|| format!("side {name}"))?;
        sides.push((name.to_owned(), leaders, side_net));
    }
    let start = Instant::now();
    let window = Window {
        start,
        from: Duration::from_secs_f64(a.warmup),
        to: Duration::from_secs_f64(a.warmup + a.seconds),
    };
    let payload: Bytes = (0..a.record_size)
        .map(|i| b'A' + (i % 26) as u8)
        .collect::<Vec<u8>>()
        .into();
    let plan = Arc::new(ProducerPlan {
        topic: TopicName(StrBytes::from_string(a.topic.clone())),
        acks: a.acks,
        records: a.records,
        record_size: a.record_size,
        payload,
        period: Duration::from_secs_f64(1.0 / a.rate),
        window,
        stop_at: start + window.to,
    });
    let mut tasks = Vec::new();
    let mut stats = Vec::new();
    for (name, leaders, side_net) in &sides {
        let st = Arc::new(SideStats::default());
        stats.push((name.clone(), st.clone()));
        for i in 0..a.producers {
            let (partition, leader) = leaders[i % leaders.len()];
            // producers start spread over the first second, each at a random phase of its period
            let first = start
                + Duration::from_secs_f64(
                    (i as f64 / a.producers as f64) + fastrand_unit(i as u64) / a.rate,
                );
            let source = side_net.map(|n| source_addr(n, i + 1)).transpose()?;
            let client_id = format!("load-gen-{name}-{i}");
            tasks.push(tokio::spawn(producer(
                plan.clone(),
                st.clone(),
                leader,
                source,
                partition,
                client_id,
                first,
            )));
        }
    }
    tokio::time::sleep_until((start + window.from).into()).await;
    println!("window-start");
    tokio::time::sleep_until((start + window.to).into()).await;
    println!("window-end");
    // alive at least 2 s more, so the caller can still sample this process after `window-end`
    let linger = tokio::time::sleep(Duration::from_secs(2));
    for t in tasks {
        let _ = t.await;
    }
    linger.await;
    let mut ok = true;
    for (name, st) in &stats {
        let mut lat = std::mem::take(&mut *st.latencies_us.lock().unwrap());
        lat.sort_unstable();
        let codes = st.error_codes.lock().unwrap();
        let errors: u64 = codes.values().sum();
        let codes: Vec<String> = codes.iter().map(|(c, n)| format!("{c}:{n}")).collect();
        let mean = if lat.is_empty() {
            0.0
        } else {
            lat.iter().map(|&v| v as f64).sum::<f64>() / lat.len() as f64 / 1000.0
        };
        println!(
            "side={name} producers={} requests={} bytes={} errors={errors} error_codes={} \
             late_sends={} failures={} sent_total={} sent_bytes_total={} acked_total={} mean_ms={mean:.3} p50_ms={:.3} p90_ms={:.3} p99_ms={:.3} \
             p999_ms={:.3} max_ms={:.3}",
            a.producers,
            st.requests.load(Ordering::Relaxed),
            st.bytes.load(Ordering::Relaxed),
            codes.join(","),
            st.late_sends.load(Ordering::Relaxed),
            st.failures.load(Ordering::Relaxed),
            st.sent_total.load(Ordering::Relaxed),
            st.sent_bytes_total.load(Ordering::Relaxed),
            st.acked.load(Ordering::Relaxed),
            pct(&lat, 0.50),
            pct(&lat, 0.90),
            pct(&lat, 0.99),
            pct(&lat, 0.999),
            lat.last().map_or(0.0, |&v| v as f64 / 1000.0),
        );
        if let Some(e) = st.first_error.lock().unwrap().as_ref() {
            eprintln!("load_gen: side {name}: first error answer: {e}");
        }
        if st.failures.load(Ordering::Relaxed) > 0 || lat.is_empty() {
            ok = false;
        }
    }
    Ok(ok)
}

/// The value at rank ceil(p x n) of sorted microseconds, in ms.
fn pct(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1] as f64 / 1000.0
}

/// A number in [0, 1) from a seed (splitmix64): the producers' phases, reproducible.
fn fastrand_unit(seed: u64) -> f64 {
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

/// A request written and not answered yet: its correlation id, when it was written, whether it
/// counts.
struct Sent {
    correlation_id: i32,
    at: Instant,
    counted: bool,
}

async fn producer(
    plan: Arc<ProducerPlan>,
    st: Arc<SideStats>,
    leader: SocketAddr,
    source: Option<SocketAddr>,
    partition: i32,
    client_id: String,
    first: Instant,
) {
    tokio::time::sleep_until(first.into()).await;
    let result = async {
        let mut s = connect(leader, source).await?;
        api_versions(&mut s, &client_id).await?;
        let (rd, wr) = s.into_split();
        let (tx, rx) = mpsc::channel::<Sent>(MAX_IN_FLIGHT);
        let reader = tokio::spawn(read_answers(rd, rx, st.clone()));
        let mut wr = wr;
        let written = write_requests(&mut wr, tx, &plan, &st, partition, &client_id, first).await;
        // the reader ends once every request written is answered (the channel is closed); the
        // write half stays open meanwhile (dropping it would half-close the connection, and a
        // broker closes a half-closed connection without answering what is in flight)
        let read = tokio::time::timeout(Duration::from_secs(10), reader).await;
        drop(wr);
        written?;
        match read {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => Err(e.into()),
            Err(_) => bail!("answers still missing 10 s after the last request"),
        }
    }
    .await;
    if let Err(e) = result
        && st.failures.fetch_add(1, Ordering::Relaxed) < 10
    {
        eprintln!("load_gen: producer {client_id} -> {leader}: {e:#}");
    }
}

async fn write_requests(
    wr: &mut OwnedWriteHalf,
    tx: mpsc::Sender<Sent>,
    plan: &ProducerPlan,
    st: &SideStats,
    partition: i32,
    client_id: &str,
    first: Instant,
) -> anyhow::Result<()> {
    let mut due = first;
    let mut correlation_id = 1;
    while due < plan.stop_at {
        tokio::time::sleep_until(due.into()).await;
        let records = batch(plan.records, plan.record_size, &plan.payload)?;
        let req = ProduceRequest::default()
            .with_acks(plan.acks)
            .with_timeout_ms(30_000)
            .with_topic_data(vec![
                TopicProduceData::default()
                    .with_name(plan.topic.clone())
                    .with_partition_data(vec![
                        PartitionProduceData::default()
                            .with_index(partition)
                            .with_records(Some(records)),
                    ]),
            ]);
        let bytes = frame(
            ApiKey::Produce,
            PRODUCE_VERSION,
            correlation_id,
            client_id,
            &req,
        )?;
        // a slot for its answer first: at most MAX_IN_FLIGHT unanswered
        let permit = tx
            .reserve()
            .await
            .map_err(|_| anyhow::anyhow!("the connection's reader ended"))?;
        let at = Instant::now();
        let counted = plan.window.contains(at);
        if counted && at.saturating_duration_since(due) > plan.period {
            st.late_sends.fetch_add(1, Ordering::Relaxed);
        }
        permit.send(Sent {
            correlation_id,
            at,
            counted,
        });
        wr.write_all(&bytes).await.context("writing a Produce")?;
        st.sent_total.fetch_add(1, Ordering::Relaxed);
        st.sent_bytes_total
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        if counted {
            st.requests.fetch_add(1, Ordering::Relaxed);
            st.bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        }
        correlation_id += 1;
        due += plan.period;
    }
    Ok(())
}

async fn read_answers(
    rd: OwnedReadHalf,
    mut rx: mpsc::Receiver<Sent>,
    st: Arc<SideStats>,
) -> anyhow::Result<()> {
    let mut rd = BufReader::new(rd);
    let mut lat = Vec::new();
    while let Some(sent) = rx.recv().await {
        let payload = read_frame(&mut rd).await?;
        let took = sent.at.elapsed();
        let resp: ProduceResponse = decode(
            payload,
            ApiKey::Produce,
            PRODUCE_VERSION,
            sent.correlation_id,
        )?;
        let mut answered = 0;
        for t in &resp.responses {
            for p in &t.partition_responses {
                answered += 1;
                if p.error_code != 0 && st.first_error.lock().unwrap().is_none() {
                    *st.first_error.lock().unwrap() = Some(format!(
                        "error code {} ({:?}; record errors {:?})",
                        p.error_code, p.error_message, p.record_errors
                    ));
                }
                if p.error_code != 0 && sent.counted {
                    *st.error_codes
                        .lock()
                        .unwrap()
                        .entry(p.error_code)
                        .or_default() += 1;
                }
            }
        }
        if answered == 1
            && resp
                .responses
                .iter()
                .flat_map(|t| &t.partition_responses)
                .all(|p| p.error_code == 0)
        {
            st.acked.fetch_add(1, Ordering::Relaxed);
        }
        if answered != 1 {
            bail!("a Produce answer names {answered} partitions, not 1");
        }
        if sent.counted {
            lat.push(took.as_micros().min(u32::MAX as u128) as u32);
        }
    }
    st.latencies_us.lock().unwrap().extend(lat);
    Ok(())
}
