//! What the lag feature costs: the helper of bench/lag_cost.sh, and a micro-measurement.
//!
//! ```text
//! cargo build --release --example lag_cost
//! target/release/examples/lag_cost produce BOOTSTRAP TOPIC PARTITIONS RECORDS
//! target/release/examples/lag_cost commit BOOTSTRAP TOPIC PARTITIONS PREFIX GROUPS START STEP INTERVAL_MS [ROUNDS]
//! target/release/examples/lag_cost delete BOOTSTRAP PREFIX GROUPS
//! target/release/examples/lag_cost micro [GROUPS PARTITIONS INTERVALS REPEATS]
//! ```
//!
//! - `produce`: RECORDS small records (16 bytes) on each of the PARTITIONS partitions of TOPIC,
//!   with librdkafka (explicit partitions), so the log ends are RECORDS.
//! - `commit`: groups PREFIX-0 .. PREFIX-(GROUPS-1) commit offsets on every partition of TOPIC,
//!   as `kafka-consumer-groups --reset-offsets` does (OffsetCommit v8 with generation -1 and no
//!   member: an empty classic group), but one request per group, on 8 connections to each
//!   coordinator: one FindCoordinator (v4, every group in one request), then, every INTERVAL_MS,
//!   one OffsetCommit per group, all sent before the answers are read. Round r commits
//!   START + r x STEP on every partition (ROUNDS rounds, 0 = until killed). Any error code in an
//!   answer stops it (exit 1). Prints one line per round to stdout:
//!   `round R offset O groups G partitions P ms M`.
//! - `delete`: deletes those groups (DeleteGroups v2 on each coordinator; a group with members
//!   is not deleted, and counted).
//! - `micro`: no cluster. Fills a `LagStore` (defaults 200 groups x 50 partitions, 15 commits
//!   per window, 60 log-end points per partition) as the collector does, then times
//!   `LagStore::statuses`, `LagStore::status` (one group) and `lag::metrics::render`, and counts
//!   the bytes the store holds (a counting allocator: live bytes after filling minus before).

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::ExitCode;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, BytesMut};
use kafka_protocol::messages::delete_groups_request::DeleteGroupsRequest;
use kafka_protocol::messages::delete_groups_response::DeleteGroupsResponse;
use kafka_protocol::messages::find_coordinator_request::FindCoordinatorRequest;
use kafka_protocol::messages::find_coordinator_response::FindCoordinatorResponse;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequest, OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_commit_response::OffsetCommitResponse;
use kafka_protocol::messages::{ApiKey, GroupId, RequestHeader, ResponseHeader, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kroute::lag::store::{Owner, Source};
use kroute::lag::{LagConfig, LagStore};
use rdkafka::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

/// The system allocator, counting the bytes live (for `micro`).
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is forwarded to `System` unchanged; only a counter is updated.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract is `System.alloc`'s.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract is `System.dealloc`'s.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: the caller's contract is `System.realloc`'s.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

type Result<T> = std::result::Result<T, String>;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let done = match args.first().map(String::as_str) {
        Some("produce") if args.len() == 5 => produce(&args[1..]),
        Some("commit") if args.len() == 9 || args.len() == 10 => commit(&args[1..]),
        Some("delete") if args.len() == 4 => delete(&args[1..]),
        Some("micro") if args.len() == 1 || args.len() == 5 => micro(&args[1..]),
        _ => Err("usage: lag_cost produce BOOTSTRAP TOPIC PARTITIONS RECORDS | \
                  lag_cost commit BOOTSTRAP TOPIC PARTITIONS PREFIX GROUPS START STEP INTERVAL_MS [ROUNDS] | \
                  lag_cost delete BOOTSTRAP PREFIX GROUPS | lag_cost micro [GROUPS PARTITIONS INTERVALS REPEATS]"
            .into()),
    };
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lag_cost: ERROR {e}");
            ExitCode::FAILURE
        }
    }
}

fn number<T: std::str::FromStr>(what: &str, s: &str) -> Result<T> {
    s.parse().map_err(|_| format!("{what}: not a number: {s}"))
}

// ------------------------------------------------------------------------------------------
// produce

fn produce(args: &[String]) -> Result<()> {
    let (bootstrap, topic) = (&args[0], &args[1]);
    let partitions: i32 = number("PARTITIONS", &args[2])?;
    let records: u64 = number("RECORDS", &args[3])?;
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("linger.ms", "20")
        .set("acks", "all")
        .create()
        .map_err(|e| format!("producer: {e}"))?;
    let payload = [b'x'; 16];
    for _ in 0..records {
        for p in 0..partitions {
            let mut record = BaseRecord::<(), _>::to(topic)
                .payload(&payload[..])
                .partition(p);
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((e, back)) => {
                        if !matches!(
                            e.rdkafka_error_code(),
                            Some(rdkafka::types::RDKafkaErrorCode::QueueFull)
                        ) {
                            return Err(format!("send: {e}"));
                        }
                        record = back;
                        producer.poll(Duration::from_millis(5));
                    }
                }
            }
        }
        producer.poll(Duration::ZERO);
    }
    producer
        .flush(Duration::from_secs(60))
        .map_err(|e| format!("flush: {e}"))?;
    Ok(())
}

// ------------------------------------------------------------------------------------------
// commit: a minimal blocking Kafka client (plaintext)

struct Connection {
    stream: TcpStream,
    correlation_id: i32,
}

impl Connection {
    fn open(addr: &str) -> Result<Self> {
        let stream = TcpStream::connect(addr).map_err(|e| format!("connect {addr}: {e}"))?;
        stream.set_nodelay(true).ok();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .map_err(|e| e.to_string())?;
        Ok(Self {
            stream,
            correlation_id: 0,
        })
    }

    /// Sends `body` as `api` v`version` and returns the answer's body.
    fn call<Q: Encodable, A: Decodable>(
        &mut self,
        api: ApiKey,
        version: i16,
        body: &Q,
    ) -> Result<A> {
        let id = self.send(api, version, body)?;
        self.receive(api, version, id)
    }

    /// Sends `body` as `api` v`version`; returns its correlation id.
    fn send<Q: Encodable>(&mut self, api: ApiKey, version: i16, body: &Q) -> Result<i32> {
        self.correlation_id += 1;
        let header = RequestHeader::default()
            .with_request_api_key(api as i16)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation_id)
            .with_client_id(Some(StrBytes::from_static_str("lag-cost")));
        let mut frame = BytesMut::new();
        frame.put_i32(0);
        header
            .encode(&mut frame, api.request_header_version(version))
            .map_err(|e| e.to_string())?;
        body.encode(&mut frame, version)
            .map_err(|e| e.to_string())?;
        let len = i32::try_from(frame.len() - 4).map_err(|e| e.to_string())?;
        frame[..4].copy_from_slice(&len.to_be_bytes());
        self.stream.write_all(&frame).map_err(|e| e.to_string())?;
        Ok(self.correlation_id)
    }

    /// Reads the next answer, which must be the one to request `id` (`api` v`version`).
    fn receive<A: Decodable>(&mut self, api: ApiKey, version: i16, id: i32) -> Result<A> {
        let mut size = [0u8; 4];
        self.stream
            .read_exact(&mut size)
            .map_err(|e| e.to_string())?;
        let mut answer = vec![0u8; i32::from_be_bytes(size).max(0) as usize];
        self.stream
            .read_exact(&mut answer)
            .map_err(|e| e.to_string())?;
        let mut buf = bytes::Bytes::from(answer);
        let header = ResponseHeader::decode(&mut buf, api.response_header_version(version))
            .map_err(|e| e.to_string())?;
        if header.correlation_id != id {
            return Err(format!("correlation id {} for {id}", header.correlation_id));
        }
        let answer = A::decode(&mut buf, version).map_err(|e| e.to_string())?;
        if buf.has_remaining() {
            return Err(format!(
                "{} bytes left in a {api:?} answer",
                buf.remaining()
            ));
        }
        Ok(answer)
    }
}

fn commit(args: &[String]) -> Result<()> {
    let (bootstrap, topic, prefix) = (&args[0], &args[1], &args[3]);
    let partitions: i32 = number("PARTITIONS", &args[2])?;
    let groups: usize = number("GROUPS", &args[4])?;
    let start: i64 = number("START", &args[5])?;
    let step: i64 = number("STEP", &args[6])?;
    let interval = Duration::from_millis(number("INTERVAL_MS", &args[7])?);
    let rounds: u64 = match args.get(8) {
        Some(r) => number("ROUNDS", r)?,
        None => 0,
    };
    let names: Vec<String> = (0..groups).map(|g| format!("{prefix}-{g}")).collect();
    let (coordinator, mut connections) = coordinators(bootstrap, &names)?;

    let mut due = Instant::now();
    let mut round = 0u64;
    while rounds == 0 || round < rounds {
        let t0 = Instant::now();
        let offset = start + i64::try_from(round).unwrap_or(i64::MAX) * step;
        let topics = vec![
            OffsetCommitRequestTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.clone())))
                .with_partitions(
                    (0..partitions)
                        .map(|p| {
                            OffsetCommitRequestPartition::default()
                                .with_partition_index(p)
                                .with_committed_offset(offset)
                                .with_committed_leader_epoch(-1)
                                .with_committed_metadata(Some(StrBytes::from_static_str("")))
                        })
                        .collect(),
                ),
        ];
        // Every group's request first, spread over the coordinator's connections, then the
        // answers in the same order (each connection answers in order).
        let mut sent = Vec::with_capacity(names.len());
        for (i, name) in names.iter().enumerate() {
            let addr = coordinator
                .get(name)
                .ok_or_else(|| format!("no coordinator for {name}"))?;
            let conns = connections.get_mut(addr).expect("opened above");
            let c = i % conns.len();
            let request = OffsetCommitRequest::default()
                .with_group_id(GroupId(StrBytes::from_string(name.clone())))
                .with_generation_id_or_member_epoch(-1)
                .with_member_id(StrBytes::from_static_str(""))
                .with_retention_time_ms(-1)
                .with_topics(topics.clone());
            let id = conns[c].send(ApiKey::OffsetCommit, 8, &request)?;
            sent.push((name, addr, c, id));
        }
        for (name, addr, c, id) in sent {
            let conn = &mut connections.get_mut(addr).expect("opened above")[c];
            let answer: OffsetCommitResponse = conn.receive(ApiKey::OffsetCommit, 8, id)?;
            let committed: usize = answer.topics.iter().map(|t| t.partitions.len()).sum();
            if let Some(p) = answer
                .topics
                .iter()
                .flat_map(|t| &t.partitions)
                .find(|p| p.error_code != 0)
            {
                return Err(format!(
                    "OffsetCommit {name} partition {}: error {}",
                    p.partition_index, p.error_code
                ));
            }
            if committed != partitions as usize {
                return Err(format!(
                    "OffsetCommit {name}: {committed} partitions answered"
                ));
            }
        }
        println!(
            "round {round} offset {offset} groups {groups} partitions {partitions} ms {}",
            t0.elapsed().as_millis()
        );
        round += 1;
        due += interval;
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
    }
    Ok(())
}

/// Connections per coordinator: the broker handles one request per connection at a time, and an
/// OffsetCommit waits for its replication, so one connection makes ~20 commits/s on 2 busy cores.
const CONNECTIONS: usize = 8;

type Coordinators = (HashMap<String, String>, HashMap<String, Vec<Connection>>);

/// Every group's coordinator (one FindCoordinator v4 for all), and `CONNECTIONS` to each.
fn coordinators(bootstrap: &str, names: &[String]) -> Result<Coordinators> {
    let first = bootstrap.split(',').next().unwrap_or_default();
    let found: FindCoordinatorResponse = Connection::open(first)?.call(
        ApiKey::FindCoordinator,
        4,
        &FindCoordinatorRequest::default()
            .with_key_type(0)
            .with_coordinator_keys(
                names
                    .iter()
                    .map(|n| StrBytes::from_string(n.clone()))
                    .collect(),
            ),
    )?;
    let mut coordinator: HashMap<String, String> = HashMap::new();
    for c in &found.coordinators {
        if c.error_code != 0 {
            return Err(format!(
                "FindCoordinator {}: error {}",
                c.key.as_str(),
                c.error_code
            ));
        }
        coordinator.insert(c.key.to_string(), format!("{}:{}", c.host.as_str(), c.port));
    }
    let mut connections: HashMap<String, Vec<Connection>> = HashMap::new();
    for addr in coordinator.values() {
        if !connections.contains_key(addr) {
            let conns = (0..CONNECTIONS).map(|_| Connection::open(addr));
            connections.insert(addr.clone(), conns.collect::<Result<_>>()?);
        }
    }
    Ok((coordinator, connections))
}

/// Deletes the groups PREFIX-0 .. PREFIX-(GROUPS-1) (DeleteGroups v2 on each coordinator).
fn delete(args: &[String]) -> Result<()> {
    let (bootstrap, prefix) = (&args[0], &args[1]);
    let groups: usize = number("GROUPS", &args[2])?;
    let names: Vec<String> = (0..groups).map(|g| format!("{prefix}-{g}")).collect();
    let (coordinator, mut connections) = coordinators(bootstrap, &names)?;
    let mut failed = 0;
    for (addr, conns) in &mut connections {
        let conn = &mut conns[0];
        let mine: Vec<GroupId> = names
            .iter()
            .filter(|n| coordinator.get(*n) == Some(addr))
            .map(|n| GroupId(StrBytes::from_string(n.clone())))
            .collect();
        let request = DeleteGroupsRequest::default().with_groups_names(mine);
        let answer: DeleteGroupsResponse = conn.call(ApiKey::DeleteGroups, 2, &request)?;
        failed += answer.results.iter().filter(|r| r.error_code != 0).count();
    }
    println!("deleted {} groups, {failed} not", groups - failed);
    Ok(())
}

// ------------------------------------------------------------------------------------------
// micro

fn micro(args: &[String]) -> Result<()> {
    let (groups, partitions, intervals, repeats): (usize, i32, usize, usize) = if args.is_empty() {
        (200, 50, 15, 20)
    } else {
        (
            number("GROUPS", &args[0])?,
            number("PARTITIONS", &args[1])?,
            number("INTERVALS", &args[2])?,
            number("REPEATS", &args[3])?,
        )
    };
    let config = LagConfig {
        enabled: true,
        intervals,
        ..LagConfig::default()
    };
    let points = config.time_lag_points;
    let topic = "lag-cost-micro";
    let before = LIVE.load(Ordering::Relaxed);
    let store = LagStore::new(&config);
    // As the collector does, one poll every 2 s: log ends first (growing by 100), then the
    // groups' commits (growing by 10, so every window entry is new and the lag is not zero).
    let polls = intervals.max(points);
    let t0 = 1_700_000_000_000i64;
    let fill = Instant::now();
    for poll in 0..polls as i64 {
        let now = t0 + poll * 2000;
        for p in 0..partitions {
            store.record_log_end((topic, p), 1000 + poll * 100, now);
        }
        for g in 0..groups {
            let group = format!("micro-{g}");
            let owners = (0..partitions)
                .map(|p| {
                    let owner = Owner {
                        host: "/10.0.0.1".into(),
                        client_id: format!("consumer-{g}"),
                    };
                    ((topic.to_owned(), p), owner)
                })
                .collect();
            store.listed(&group, owners, now);
            for p in 0..partitions {
                let source = Source::Polled { asked_ms: now };
                store.record_commit(&group, (topic, p), 500 + poll * 10, now + 1, source);
            }
        }
    }
    let fill = fill.elapsed();
    let held = LIVE.load(Ordering::Relaxed) - before;
    let counts = store.counts();
    if counts.groups != groups || counts.partitions != groups * partitions as usize {
        return Err(format!("store holds {counts:?}"));
    }
    let now = t0 + polls as i64 * 2000;
    let time = |f: &mut dyn FnMut() -> usize| {
        let mut runs: Vec<Duration> = (0..repeats)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(f());
                t.elapsed()
            })
            .collect();
        runs.sort();
        (runs[runs.len() / 2], runs[runs.len() - 1])
    };
    let (statuses, statuses_max) = time(&mut || store.statuses(now).len());
    let (status, status_max) = time(&mut || {
        store
            .status("micro-0", now)
            .map_or(0, |s| s.partitions.len())
    });
    let mut size = 0;
    let (render, render_max) = time(&mut || {
        size = kroute::lag::metrics::render(&store, now).len();
        size
    });
    println!("groups={groups}");
    println!("partitions={}", counts.partitions);
    println!("intervals={intervals}");
    println!("time_lag_points={points}");
    println!("fill_polls={polls}");
    println!("fill_ms={:.1}", fill.as_secs_f64() * 1e3);
    println!("store_bytes={held}");
    println!(
        "bytes_per_partition={:.0}",
        held as f64 / counts.partitions as f64
    );
    println!("repeats={repeats}");
    println!(
        "statuses_ms={:.2} (max {:.2})",
        ms(statuses),
        ms(statuses_max)
    );
    println!(
        "status_one_group_ms={:.3} (max {:.3})",
        ms(status),
        ms(status_max)
    );
    println!("render_ms={:.2} (max {:.2})", ms(render), ms(render_max));
    println!("render_bytes={size}");
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
