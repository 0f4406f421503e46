#!/usr/bin/env python3
"""Helper of bench/fleet.sh (issue 26 part 2): the log-end sampler, one case's numbers, the report.

  fleet_report.py sample BROKERS TOPIC LEADERS
      Every second (on a fixed schedule, start + k s) asks each broker for the latest offset
      (ListOffsets v1, timestamp -1: the high watermark, i.e. the records the brokers have
      acknowledged with acks=all) of every partition of TOPIC it leads, and prints one line
      "UNIX_TIME RECORDS_1 RECORDS_2 RECORDS_3" (the sums of those offsets per leader), flushed,
      until SIGTERM. BROKERS: "1=host:port,2=host:port,3=host:port", the brokers' own listeners
      (not the relays: a capped relay would delay the sample behind the traffic it carries).
      LEADERS: the leader of partition 0, 1, ... ("1,2,3,1,2,3"). One raw socket per broker,
      reconnected on error; a broker that does not answer within 0.8 s gets "-" that second.
  fleet_report.py case RESULTS key=value...
      Reads one case's files (samples, producer logs, kroute metrics and logs), prints a summary
      and appends one row to RESULTS (TSV). Exit 1 when the case is invalid (a producer failed,
      fewer records on the brokers than acknowledged, no traffic through kroute in a kroute case).
  fleet_report.py upstream-p99 RAW_PREFIX...
      For each kroute case's raw files (e.g. target/bench-fleet/raw/kroute-4), the p99 latency
      of the Produce requests the sidecars sent the brokers, in all and per broker, from their
      `kroute_upstream_request_duration_seconds` histograms summed over the sidecars: over the
      measured window (the scrapes at its ends, .w0/.w1) when the run has them, else over each
      sidecar's whole run. Interpolated within a bucket, as Prometheus' histogram_quantile
      does, so no finer than the buckets. What the fleet simulator's p99 compares to.
  fleet_report.py report RESULTS DOCS
      Prints the markdown section and replaces "## Part 2: N sidecars on real processes" in DOCS
      (creating DOCS with a one-line intro if it is missing; DOCS "none": print only). Run facts
      come from $BENCH_META (key=value lines).
"""
import math
import os
import re
import signal
import socket
import struct
import sys
import time

SECTION = "## Part 2: N sidecars on real processes"


# ------------------------------------------------------------------------------------------------
# sampler


def list_offsets_request(corr, topic, partitions):
    """A ListOffsets v1 request frame: latest offset (timestamp -1) of `partitions` of `topic`."""
    client = b"kroute-fleet-sampler"
    t = topic.encode()
    body = struct.pack(">hhih", 2, 1, corr, len(client)) + client
    body += struct.pack(">ii", -1, 1) + struct.pack(">h", len(t)) + t + struct.pack(">i", len(partitions))
    for p in partitions:
        body += struct.pack(">iq", p, -1)
    return struct.pack(">i", len(body)) + body


def read_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return buf


def list_offsets_response(payload, corr):
    """{partition: offset} of a ListOffsets v1 response; raises on an error code."""
    (got,) = struct.unpack_from(">i", payload, 0)
    if got != corr:
        raise ValueError(f"correlation id {got}, expected {corr}")
    pos = 4
    out = {}
    (ntopics,) = struct.unpack_from(">i", payload, pos)
    pos += 4
    for _ in range(ntopics):
        (tlen,) = struct.unpack_from(">h", payload, pos)
        pos += 2 + tlen
        (nparts,) = struct.unpack_from(">i", payload, pos)
        pos += 4
        for _ in range(nparts):
            p, err, _ts, off = struct.unpack_from(">ihqq", payload, pos)
            pos += 22
            if err:
                raise ValueError(f"partition {p}: error code {err}")
            out[p] = off
    return out


def cmd_sample(brokers, topic, leaders):
    addrs = {}
    for item in brokers.split(","):
        b, hp = item.split("=")
        host, port = hp.rsplit(":", 1)
        addrs[int(b)] = (host, int(port))
    lead = [int(x) for x in leaders.split(",")]
    parts = {b: [p for p, l in enumerate(lead) if l == b] for b in addrs}
    socks = {}
    corr = [0]
    stop = [False]

    def on_term(*_):
        stop[0] = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)

    def sock_of(b):
        if b not in socks:
            s = socket.create_connection(addrs[b], timeout=0.8)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            socks[b] = s
        return socks[b]

    start = time.time()
    k = 0
    while not stop[0]:
        due = start + k
        now = time.time()
        if due > now:
            time.sleep(due - now)
            if stop[0]:
                break
        elif now - due > 0.5:  # fell behind (a stall): skip to the next whole second
            k = int(now - start) + 1
            continue
        k += 1
        # send all requests first, then read the answers: the three brokers are asked at once
        sent = {}
        for b in sorted(addrs):
            if not parts[b]:
                continue
            corr[0] += 1
            try:
                sock_of(b).sendall(list_offsets_request(corr[0], topic, parts[b]))
                sent[b] = corr[0]
            except OSError:
                socks.pop(b, None)
        counts = {}
        for b, c in sent.items():
            try:
                s = socks[b]
                (size,) = struct.unpack(">i", read_exact(s, 4))
                offs = list_offsets_response(read_exact(s, size), c)
                counts[b] = sum(offs.values())
            except (OSError, ValueError, struct.error, ConnectionError) as e:
                print(f"# broker {b}: {e}", file=sys.stderr, flush=True)
                s = socks.pop(b, None)
                if s:
                    s.close()
        t = time.time()
        cols = [str(counts[b]) if b in counts else ("0" if not parts[b] else "-") for b in sorted(addrs)]
        print(f"{t:.3f} " + " ".join(cols), flush=True)


# ------------------------------------------------------------------------------------------------
# one case


def percentile(values, q):
    """Linear interpolation between closest ranks (numpy's default)."""
    v = sorted(values)
    if not v:
        return float("nan")
    pos = (len(v) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def read_samples(path):
    rows = []
    with open(path) as f:
        for line in f:
            w = line.split()
            if len(w) != 4 or "-" in w[1:]:
                continue
            rows.append((float(w[0]), [int(x) for x in w[1:]]))
    return rows


PERF = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th"
)
STATS = re.compile(r"statistics: txretries=(\d+) txerrs=(\d+) req_timeouts=(\d+)")


def metric_sum(text, name, label=""):
    total = 0.0
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        rest = line[len(name):]
        if not (rest.startswith("{") or rest.startswith(" ")):
            continue
        if label and label not in line:
            continue
        try:
            total += float(line.rsplit(" ", 1)[1])
        except ValueError:
            pass
    return total


UPSTREAM_LATENCY = "kroute_upstream_request_duration_seconds"


def histogram_buckets(texts, name, labels):
    """The buckets (upper bound -> count) of `name`, summed over `texts`, of the series whose
    line has every one of `labels`."""
    buckets = {}
    for text in texts:
        for line in text.splitlines():
            if not line.startswith(name + "_bucket{") or not all(x in line for x in labels):
                continue
            m = re.search(r'[{,]le="([^"]+)"', line)
            if not m:
                continue
            le = math.inf if m.group(1) == "+Inf" else float(m.group(1))
            buckets[le] = buckets.get(le, 0.0) + float(line.rsplit(" ", 1)[1])
    return buckets


def bucket_quantile(buckets, q):
    """Prometheus' histogram_quantile over cumulative `buckets`: (seconds, observations). NaN
    when there is no observation or no +Inf bucket, as in Prometheus."""
    total = buckets.get(math.inf, 0.0)
    if total <= 0:
        return float("nan"), total
    rank, lower, below = q * total, 0.0, 0.0
    for le in sorted(buckets):
        if buckets[le] >= rank:
            if math.isinf(le):
                return lower, total
            return lower + (le - lower) * (rank - below) / max(buckets[le] - below, 1e-9), total
        lower, below = le, buckets[le]
    return float("nan"), total


def read_texts(paths):
    texts = []
    for path in paths:
        with open(path) as f:
            texts.append(f.read())
    return texts


def cmd_upstream_p99(*prefixes):
    for prefix in prefixes:
        n = 0
        while os.path.exists(f"{prefix}.k{n + 1}.metrics"):
            n += 1
        ks = range(1, n + 1)
        window = n > 0 and all(os.path.exists(f"{prefix}.k{i}.w{w}.metrics") for i in ks for w in (0, 1))
        if window:
            end = read_texts(f"{prefix}.k{i}.w1.metrics" for i in ks)
            start = read_texts(f"{prefix}.k{i}.w0.metrics" for i in ks)
            # a scrape cut short, or a sidecar restarted in between, would not be a window
            window = all('le="+Inf"' in t for t in end + start)
        if not window:
            end, start = read_texts(f"{prefix}.k{i}.metrics" for i in ks), []
        parts = []
        for broker in ("", "1", "2", "3"):
            labels = ['api="Produce"'] + ([f'broker="{broker}"'] if broker else [])
            b1 = histogram_buckets(end, UPSTREAM_LATENCY, labels)
            b0 = histogram_buckets(start, UPSTREAM_LATENCY, labels)
            delta = {le: c - b0.get(le, 0.0) for le, c in b1.items()}
            if any(c < 0 for c in delta.values()):
                print(f"{prefix}: a counter went down between the window's ends", file=sys.stderr)
                delta = {}
            p99, count = bucket_quantile(delta, 0.99)
            parts.append(f"{'broker ' + broker if broker else 'all'} {p99 * 1e3:.1f} ms ({count:.0f})")
        span = "the measured window" if window else "each sidecar's whole run"
        print(f"{prefix}: {n} sidecars, Produce p99 over {span} (requests): " + ", ".join(parts))


def read_producers(prefix, n, label):
    """The rdkafka_perf summaries of producers PREFIX.p1 .. PREFIX.pN (their .out and .err):
    (matches of PERF, records acknowledged, retries, problems). `label` names them in problems."""
    perf, acked, retries, problems = [], 0, 0, []
    for i in range(1, n + 1):
        out = open(f"{prefix}.p{i}.out").read()
        err = open(f"{prefix}.p{i}.err").read()
        m = PERF.search(out)
        if not m:
            problems.append(f"{label}producer {i}: no summary line ({prefix}.p{i}.out)")
            continue
        perf.append(m)
        acked += int(m.group(1))
        s = STATS.search(err)
        if s:
            retries += int(s.group(1))
        for line in err.splitlines():
            if " ERROR " in line:
                problems.append(f"{label}producer {i}: {line.strip()}")
    return perf, acked, retries, problems


def cmd_case(results, *kvs):
    a = dict(kv.split("=", 1) for kv in kvs)
    case, n = a["case"], int(a["n"])
    size, warmup, secs = int(a["record_size"]), float(a["warmup"]), float(a["seconds"])
    t_start = float(a["t_start"])
    raw = a["raw"]
    problems = []

    # producers
    perf, acked, retries, found = read_producers(raw, n, "")
    problems += found
    p99s = sorted(int(m.group(8)) for m in perf)
    p50s = sorted(int(m.group(6)) for m in perf)
    prod_rate = sum(float(m.group(2)) for m in perf) * size / 1e6

    # the brokers' log ends
    rows = read_samples(f"{raw}.samples")
    if len(rows) < 3:
        problems.append(f"only {len(rows)} samples in {raw}.samples")
        rows = rows or [(0.0, [0, 0, 0])]
    grown = [rows[-1][1][b] - rows[0][1][b] for b in range(3)]
    if sum(grown) < acked:
        problems.append(f"the brokers' offsets grew by {sum(grown)}, the producers had {acked} acknowledged")
    dup = max(0, sum(grown) - acked)
    w0, w1 = t_start + warmup, t_start + warmup + secs
    shares, per_s, total = [], [], [0, 0, 0]
    t_first = t_last = None
    for (ta, ca), (tb, cb) in zip(rows, rows[1:]):
        if ta < w0 - 0.5 or tb > w1 + 0.5:
            continue
        d = [cb[b] - ca[b] for b in range(3)]
        t_first = ta if t_first is None else t_first
        t_last = tb
        for b in range(3):
            total[b] += d[b]
        per_s.append(d)
        if sum(d) > 0:
            shares.append(d[1] / sum(d))
    span = (t_last - t_first) if t_first is not None else 0.0
    if len(shares) < 3:
        problems.append(f"only {len(shares)} one-second intervals in the measured window")
    changes = [abs(b - a) for a, b in zip(shares, shares[1:])]
    mean = lambda xs: sum(xs) / len(xs) if xs else float("nan")  # noqa: E731
    tput = sum(total) * size / span / 1e6 if span > 0 else 0.0

    # kroute: the traffic went through it
    kr_bytes = kr_moved = 0.0
    kr_up = [0.0, 0.0, 0.0]
    kr_warn = 0
    if case == "kroute":
        for i in range(1, n + 1):
            text = open(f"{raw}.k{i}.metrics").read()
            kr_bytes += metric_sum(text, "kroute_request_bytes_total", 'api="Produce"')
            kr_moved += metric_sum(text, "kroute_batches_moved_total")
            for b in range(3):
                kr_up[b] += metric_sum(text, "kroute_upstream_produce_bytes_total", f'broker="{b + 1}"')
            for line in open(f"{raw}.k{i}.log", errors="replace"):
                if " WARN " in line or " ERROR " in line:
                    kr_warn += 1
        if kr_bytes < 0.95 * acked * size:
            problems.append(
                f"kroute's Produce bytes {kr_bytes:.0f} < 95% of the {acked} acknowledged records' {acked * size}"
            )
    up_share = kr_up[1] / sum(kr_up) if sum(kr_up) else float("nan")

    row = {
        "case": case,
        "n": n,
        "offered_mbps": float(a["offered_mbps"]),
        "rate_per_producer": float(a["rate"]),
        "intervals": len(shares),
        "records_b1": total[0],
        "records_b2": total[1],
        "records_b3": total[2],
        "window_share": total[1] / sum(total) if sum(total) else float("nan"),
        "share_mean": mean(shares),
        "share_p5": percentile(shares, 0.05),
        "share_p95": percentile(shares, 0.95),
        "share_min": min(shares) if shares else float("nan"),
        "share_max": max(shares) if shares else float("nan"),
        "share_change": mean(changes),
        "tput_mbps": tput,
        "producer_mbps": prod_rate,
        "p99_median": percentile(p99s, 0.5),
        "p99_max": max(p99s) if p99s else float("nan"),
        "p50_median": percentile(p50s, 0.5),
        "acked": acked,
        "duplicates": dup,
        "retries": retries,
        "kroute_produce_bytes": kr_bytes,
        "kroute_moved_batches": kr_moved,
        "kroute_b2_upstream_share": up_share,
        "kroute_warn_lines": kr_warn,
        "shares": ",".join(f"{s:.3f}" for s in shares),
        "valid": "no" if problems else "yes",
    }
    header = list(row)
    new = not os.path.exists(results) or os.path.getsize(results) == 0
    with open(results, "a") as f:
        if new:
            f.write("\t".join(header) + "\n")
        f.write("\t".join(fmt(row[k]) for k in header) + "\n")
    print(
        f"fleet: {case} N={n}: broker 2 share {row['share_mean']:.3f} (p5-p95 {row['share_p5']:.3f}-"
        f"{row['share_p95']:.3f}, mean change {row['share_change']:.3f}/s, {len(shares)} s), "
        f"{tput:.2f} MB/s on the brokers, p99 median {row['p99_median']:.0f} ms (max {row['p99_max']:.0f}), "
        f"{acked} records acknowledged, {dup} more on the brokers"
        + (f"; kroute Produce {kr_bytes / 1e6:.1f} MB, {kr_moved:.0f} batches moved, kroute's broker 2 share "
           f"{up_share:.3f}, {kr_warn} WARN/ERROR lines" if case == "kroute" else ""),
        file=sys.stderr,
    )
    for p in problems:
        print(f"fleet: INVALID {case} N={n}: {p}", file=sys.stderr)
    sys.exit(1 if problems else 0)


def fmt(v):
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.4f}"
    return str(v)


# ------------------------------------------------------------------------------------------------
# report


def read_results(path):
    with open(path) as f:
        lines = [l.rstrip("\n").split("\t") for l in f if l.strip()]
    head = lines[0]
    out = []
    for w in lines[1:]:
        r = dict(zip(head, w))
        for k, v in r.items():
            if k in ("case", "shares", "valid"):
                continue
            try:
                r[k] = float(v)
            except ValueError:
                pass
        out.append(r)
    return out


def cmd_report(results, docs):
    meta = dict(
        l.split("=", 1) for l in os.environ.get("BENCH_META", "").splitlines() if "=" in l
    )
    rows = read_results(results)
    by = {(r["case"], int(r["n"])): r for r in rows}
    ns = sorted({int(r["n"]) for r in rows})
    o = []
    o.append(SECTION)
    o.append("")
    o.append(
        "N kroute sidecars, each with its own librdkafka producer at a fixed rate, share one "
        "3-broker cluster whose broker 2 has a capped link; the same N producers straight to the "
        "brokers are the \"direct\" case. Where the records went is counted on the brokers: every "
        "second, the latest offset of every partition, summed per leader (not kroute's counters)."
    )
    o.append("")
    o.append("### Command")
    o.append("")
    o.append("```sh")
    o.append("bench/fleet.sh                                            # N = 2, 4, 8, 16: about 10 min on 2 cores")
    o.append('BENCH_FLEET_NS="2" BENCH_FLEET_SECONDS=20 bench/fleet.sh   # smoke: about 2 min')
    o.append("```")
    o.append("")
    o.append("### Setup")
    o.append("")
    caps = meta.get("caps", "?")
    o.append(
        f"- Cluster: its own (`scripts/cluster.sh`, `KROUTE_CLUSTER_PORT_OFFSET={meta.get('port_offset', '?')}`, "
        f"relayed mode), links of brokers 1/2/3 capped at {caps} MB/s each way (`cluster.sh cap`). A "
        "leader's link carries the produce traffic in and the two follower copies out, so a broker "
        f"leads at most half its cap: {meta.get('capacity_note', '')}."
    )
    o.append(
        f"- Topic: {meta.get('partitions', '?')} partitions, leaders {meta.get('leaders', '?')}, RF 3, "
        "min.insync.replicas=2 (exact replica assignment)."
    )
    o.append(
        f"- Load: {meta.get('offered_mbps', '?')} MB/s offered in all (10^6 bytes of record values per "
        f"second), split evenly over the N producers (`examples/rdkafka_perf.rs`, THROUGHPUT fixed), "
        f"keyless records of {meta.get('record_size', '?')} bytes, `{meta.get('producer_props', '')}` "
        "(queue.buffering.max.kbytes: the run's total client buffer split over the producers, so the "
        "backlog a capped broker leaves behind is the same for every N). A plain client puts a third "
        "of the records on broker 2, more than it can take, so the cap binds."
    )
    o.append(
        f"- kroute: one process per producer, each with its own config and ports, `[routing] strategy = "
        f"\"strict-cost\"` on the bench topic, all other settings default; started fresh for each case."
    )
    o.append(
        f"- Each case: {meta.get('warmup', '?')} s warm-up, then {meta.get('seconds', '?')} s measured "
        "(the 1 s intervals inside it), then the producers stop and flush. Broker 2's share: "
        "its records over all brokers' records per 1 s interval; \"change/s\": the mean absolute "
        "change of that share from one second to the next; throughput: the records the brokers "
        "acknowledged in the window (MB/s = 10^6 bytes of record values); p99: each producer's "
        "p99 from send() to its delivery report over its whole run (warm-up and flush included), "
        "median over the N producers (and the worst)."
    )
    o.append("")
    o.append(
        f"### Run of {meta.get('date', '?')}"
    )
    o.append("")
    o.append(
        f"`{meta.get('command', '?')}` ({meta.get('date', '?')}; kroute {meta.get('kroute', '?')}; "
        f"Kafka {meta.get('kafka', '?')}; {meta.get('client_version', '')}; {meta.get('nproc', '?')} cores, "
        f"{meta.get('cpu', '?')}; {int(float(meta.get('duration_s', 0))) // 60} min "
        f"{int(float(meta.get('duration_s', 0))) % 60} s; load average before/after "
        f"{meta.get('loadavg_before', '?')} / {meta.get('loadavg_after', '?')}{meta.get('load_note', '')})"
    )
    o.append("")
    o.append(
        "| case | N | broker 2 share, mean | p5-p95 of the 1 s shares | change/s | throughput MB/s | "
        "x direct | p99 ms, median (max) | x direct | through kroute |"
    )
    o.append("|---|---:|---:|---|---:|---:|---:|---:|---:|---|")
    for n in ns:
        d = by.get(("direct", n))
        for c in ("direct", "kroute"):
            r = by.get((c, n))
            if not r:
                continue
            tx = px = ""
            if c == "kroute" and d:
                tx = f"{r['tput_mbps'] / d['tput_mbps']:.2f}x" if d["tput_mbps"] else ""
                px = f"{r['p99_median'] / d['p99_median']:.3f}x" if d["p99_median"] else ""
            via = (
                f"{r['kroute_produce_bytes'] / 1e6:.0f} MB Produce, {r['kroute_moved_batches']:.0f} batches moved"
                if c == "kroute"
                else "0 (no kroute)"
            )
            bad = "" if r["valid"] == "yes" else " (INVALID)"
            o.append(
                f"| {c}{bad} | {n} | {r['share_mean']:.3f} | {r['share_p5']:.3f}-{r['share_p95']:.3f} | "
                f"{r['share_change']:.3f} | {r['tput_mbps']:.2f} | {tx} | {r['p99_median']:.0f} ({r['p99_max']:.0f}) | "
                f"{px} | {via} |"
            )
    o.append("")
    o.append(
        "Every case: all records the producers had acknowledged are on the brokers (offsets); "
        + ", ".join(
            f"{c} N={int(r['n'])}: {int(r['duplicates'])} more"
            for (c, _), r in sorted(by.items(), key=lambda kv: (kv[0][1], kv[0][0]))
            if r["duplicates"] > 0
        )
        + ("" if any(r["duplicates"] > 0 for r in rows) else "no duplicates")
        + " (non-idempotent producers: a retried batch may land twice). kroute cases: the sum of the "
        "sidecars' `kroute_request_bytes_total{api=\"Produce\"}` covers at least 95% of the "
        "acknowledged record bytes (checked), broker 2's share of `kroute_upstream_produce_bytes_total` "
        + ", ".join(
            f"N={int(r['n'])} {r['kroute_b2_upstream_share']:.3f}" for r in rows if r["case"] == "kroute"
        )
        + "; WARN/ERROR lines in the sidecars' logs: "
        + ", ".join(f"N={int(r['n'])} {int(r['kroute_warn_lines'])}" for r in rows if r["case"] == "kroute")
        + "."
    )
    o.append("")
    o.append(
        "Window shares (all records of the measured window), min and max of the 1 s shares: "
        + "; ".join(
            f"{r['case']} N={int(r['n'])} {r['window_share']:.3f} [{r['share_min']:.3f}, {r['share_max']:.3f}]"
            for r in rows
        )
        + f". Raw files: target/bench-fleet/ (results.tsv, raw/: samples, producer logs, kroute metrics and logs)."
    )
    if meta.get("notes"):
        o.append("")
        o.append(meta["notes"])
    text = "\n".join(o) + "\n"
    print(text)
    if docs == "none":
        return
    if os.path.exists(docs):
        old = open(docs).read()
    else:
        old = "# Many kroute sidecars sharing one cluster (issue 26)\n"
    i = old.find(SECTION)
    if i < 0:
        new = old.rstrip("\n") + "\n\n" + text
    else:
        j = old.find("\n## ", i + len(SECTION))
        new = old[:i] + text + (old[j + 1:] if j >= 0 else "")
        if j >= 0:
            new = old[:i] + text + "\n" + old[j + 1:]
    with open(docs, "w") as f:
        f.write(new)
    print(f"fleet: wrote {docs} ({SECTION[3:]})", file=sys.stderr)


if __name__ == "__main__":
    command = "cmd_" + sys.argv[1].replace("-", "_") if len(sys.argv) > 1 else ""
    if command not in globals():
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    globals()[command](*sys.argv[2:])
