//! The brokers: capacity-limited FIFO queues, with acks=all replication.
//!
//! A Produce request of `x` bytes led by broker `b` is served by `b` in arrival order in
//! `overhead + x / capacity(b)` seconds. Each follower of `b` then fetches it
//! (`fetch_delay` later) and writes it, a job of `repl_cost * x` bytes in the follower's own
//! queue, behind the Produce requests and replica writes that follower already has. The
//! request is answered (acks=all) once every follower has written it, one network hop later.
//! Capacities change with time (a broker degraded, an antagonist), read when a job arrives.
//! A degraded broker is slow at serving Produce requests (its request handling or its client
//! network, as the capped relays of the real bench make it), while its replica fetchers work
//! on at full speed in a queue of their own; with `slow_replicas` the whole broker is slow (a
//! slow disk): replica writes share its one queue, and every partition it follows answers late.
//!
//! With a `burst` (`fleet-bench`: part 2's capped relays), a leader is a token bucket rather
//! than a server: requests pass at once while the bucket holds bytes, and wait at the
//! link's rate behind a backlog.
//!
//! With a [`Wake`] cost, a job that finds its queue idle first pays a wake-up that grows with
//! how long the queue was idle: the threads of a broker sent little sleep and must be woken,
//! those of a busy one keep running. On the 2-core test machine lone requests to an idle broker
//! took up to twice as long as to a busy one (docs/fleet.md, part 4); without this the model
//! has no such effect. The oracle's split ([`oracle_split`]) does not know of it.

/// One broker's queue: the time it becomes idle.
#[derive(Debug, Clone, Default)]
struct Queue {
    busy_until: f64,
}

/// The wake-up a job pays when its queue was idle for `idle` seconds:
/// `max * (1 - exp(-idle / tau))`. `max` 0: none.
#[derive(Debug, Clone, Copy, Default)]
pub struct Wake {
    pub max: f64,
    pub tau: f64,
}

impl Wake {
    fn after(&self, idle: f64) -> f64 {
        if self.max <= 0.0 || idle <= 0.0 {
            return 0.0;
        }
        self.max * (1.0 - (-idle / self.tau.max(1e-9)).exp())
    }
}

/// The cluster's shape and costs.
#[derive(Debug, Clone)]
pub struct Shape {
    /// Partitions led by each broker (what a plain client's partitioner spreads over).
    pub leaders: Vec<u32>,
    /// Bytes per second each broker writes at full capacity.
    pub capacity: f64,
    /// Replicas per partition, the leader included.
    pub replication: usize,
    /// A follower's write of one byte, in leader writes.
    pub repl_cost: f64,
    /// One-way network delay, seconds.
    pub net: f64,
    /// Time from a leader's write to the followers' fetch of it.
    pub fetch_delay: f64,
    /// Fixed cost of one request at the leader, seconds.
    pub overhead: f64,
    /// Whether a degraded broker's replica writes are slow too.
    pub slow_replicas: bool,
    /// What an idle queue costs the job that wakes it (leader and replica queues alike).
    pub wake: Wake,
    /// Bytes a leader that has been idle takes in at once, 0: none. A capped link of the
    /// bench's relays is a token bucket (64 KiB deep, `relay/`), not a server: a request finding
    /// the bucket full passes without waiting, and only a backlog waits at the link's rate.
    /// Such a leader pays no [`Wake`], and its clock runs at the capacity a job finds, so it
    /// is meant for fixed capacities (`fleet-bench`), not drops or antagonists.
    pub burst: f64,
}

impl Shape {
    pub fn brokers(&self) -> usize {
        self.leaders.len()
    }

    /// The followers of broker `b`'s partitions: the next brokers on the ring.
    pub fn followers(&self, b: usize) -> impl Iterator<Item = usize> + '_ {
        let n = self.brokers();
        (1..self.replication.min(n)).map(move |k| (b + k) % n)
    }

    /// Work per byte produced, summed over the cluster (leader plus followers' writes).
    pub fn work_per_byte(&self) -> f64 {
        1.0 + self.repl_cost * (self.replication.min(self.brokers()) - 1) as f64
    }
}

/// The brokers' queues.
pub struct Cluster {
    pub shape: Shape,
    /// Produce requests from clients.
    front: Vec<Queue>,
    /// Replica writes (the front queue instead with `slow_replicas`).
    replica: Vec<Queue>,
}

impl Cluster {
    pub fn new(shape: Shape) -> Self {
        let front = vec![Queue::default(); shape.brokers()];
        let replica = front.clone();
        Self {
            shape,
            front,
            replica,
        }
    }

    /// A job of `seconds` of work at full capacity arriving at `q` at `t`, when the broker
    /// runs at `factor` of its capacity: when it is done.
    fn serve(q: &mut Queue, t: f64, seconds: f64, factor: f64, wake: Wake) -> f64 {
        let start = if t > q.busy_until {
            t + wake.after(t - q.busy_until)
        } else {
            q.busy_until
        };
        q.busy_until = start + seconds / factor.max(1e-6);
        q.busy_until
    }

    /// A Produce request of `bytes` reaching its leader `b` at `t`: when the leader has
    /// written it.
    pub fn lead(&mut self, b: usize, t: f64, bytes: f64, factor: f64) -> f64 {
        let work = self.shape.overhead + bytes / self.shape.capacity;
        if self.shape.burst > 0.0 {
            let factor = factor.max(1e-6);
            let depth = self.shape.burst / (self.shape.capacity * factor);
            return Self::pass(&mut self.front[b], t, work / factor, depth);
        }
        Self::serve(&mut self.front[b], t, work, factor, self.shape.wake)
    }

    /// A job of `seconds` through a token bucket `depth` seconds deep: the queue's clock may
    /// lag `t` by the depth (tokens saved while idle), and the job leaves when its clock has
    /// served it, or at once if that is already past.
    fn pass(q: &mut Queue, t: f64, seconds: f64, depth: f64) -> f64 {
        let start = (t - depth).max(q.busy_until);
        q.busy_until = start + seconds;
        q.busy_until.max(t)
    }

    /// The followers of `b` fetch the request written at `t`: when the last has written it.
    /// `factor(f)` is follower `f`'s capacity factor.
    pub fn replicate(
        &mut self,
        b: usize,
        t: f64,
        bytes: f64,
        factor: impl Fn(usize) -> f64,
    ) -> f64 {
        let work = self.shape.repl_cost * bytes / self.shape.capacity;
        let followers: Vec<usize> = self.shape.followers(b).collect();
        let arrive = t + self.shape.fetch_delay;
        let (slow, wake) = (self.shape.slow_replicas, self.shape.wake);
        followers
            .into_iter()
            .map(|f| {
                if slow {
                    Self::serve(&mut self.front[f], arrive, work, factor(f), wake)
                } else {
                    Self::serve(&mut self.replica[f], arrive, work, 1.0, wake)
                }
            })
            .fold(t, f64::max)
    }
}

/// The split of the traffic over the brokers that equalizes their latency, given their true
/// capacity factors and the offered load (bytes/s) with requests of `mean_bytes`: what an
/// oracle knowing the capacities would choose. Latency per broker is the M/M/1 sojourn of its
/// Produce requests plus that of the slowest follower's replica write; the split is found by
/// moving shares towards the brokers whose latency is below the mean until all are equal.
pub fn oracle_split(shape: &Shape, factors: &[f64], load: f64, mean_bytes: f64) -> Vec<f64> {
    let n = shape.brokers();
    let mut shares = vec![1.0 / n as f64; n];
    for _ in 0..4000 {
        let lat = predicted_latency(shape, factors, load, mean_bytes, &shares);
        let mean: f64 = lat.iter().zip(&shares).map(|(l, s)| l * s).sum();
        for (s, l) in shares.iter_mut().zip(&lat) {
            *s *= (mean / l).powf(0.05);
        }
        let sum: f64 = shares.iter().sum();
        shares.iter_mut().for_each(|s| *s /= sum);
    }
    shares
}

/// M/M/1 latency of each broker's Produce requests under `shares` (seconds).
pub fn predicted_latency(
    shape: &Shape,
    factors: &[f64],
    load: f64,
    mean_bytes: f64,
    shares: &[f64],
) -> Vec<f64> {
    let n = shape.brokers();
    // Utilization of the front queues (leader work at the broker's factor) and the replica
    // queues (at full speed), or of one queue per broker when replicas are slow too.
    let mut front = vec![0.0; n];
    let mut replica = vec![0.0; n];
    for b in 0..n {
        let rate = load * shares[b] / mean_bytes;
        front[b] += rate * (shape.overhead + mean_bytes / shape.capacity) / factors[b];
        let repl = rate * shape.repl_cost * mean_bytes / shape.capacity;
        for f in shape.followers(b) {
            if shape.slow_replicas {
                front[f] += repl / factors[f];
            } else {
                replica[f] += repl;
            }
        }
    }
    let lead_sojourn = |b: usize, job: f64| mm1(front[b], job / factors[b]);
    let repl_sojourn = |f: usize, job: f64| {
        if shape.slow_replicas {
            mm1(front[f], job / factors[f])
        } else {
            mm1(replica[f], job)
        }
    };
    (0..n)
        .map(|b| {
            let lead = lead_sojourn(b, shape.overhead + mean_bytes / shape.capacity);
            let repl_job = shape.repl_cost * mean_bytes / shape.capacity;
            let repl = shape
                .followers(b)
                .map(|f| repl_sojourn(f, repl_job))
                .fold(0.0, f64::max);
            2.0 * shape.net + lead + shape.fetch_delay + repl
        })
        .collect()
}

/// M/M/1 sojourn at utilization `rho` with mean service `service`; past saturation a large
/// value that still grows with the overload, so the oracle's search moves away from it.
fn mm1(rho: f64, service: f64) -> f64 {
    if rho >= 0.999 {
        service * 1000.0 * (1.0 + rho)
    } else {
        service / (1.0 - rho)
    }
}
