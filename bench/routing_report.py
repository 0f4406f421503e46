#!/usr/bin/env python3
"""Records and summarizes bench/routing.sh runs (target/bench-routing/results.tsv).

  routing_report.py record RESULTS.tsv key=value...
        validate one run (producer logs, broker end offsets, kroute metrics under raw=PREFIX)
        and append one line to RESULTS.tsv; exit 1 with a reason if the run is invalid
  routing_report.py fixed-rate RESULTS.tsv FRACTION PRODUCERS
        FRACTION x the median direct-default max records/s of skew-12-12-12 (else of all skew-*
        scenarios), per producer, rounded down to 10: the auto fixed load
  routing_report.py report RESULTS.tsv DOCS.md|none CHART.png|none
        print the Markdown report, replace the routing results section of DOCS.md (between the
        bench/routing.sh markers), draw the chart

Run metadata for the report comes from the BENCH_META environment variable (key=value lines).
With idempotent=1 (record: an argument; report: in BENCH_META), the run used idempotent
producers: record also checks kroute's kroute_idempotent_batches_total and the producers' logs
for sequence errors and adds their counts to the results, and report writes its own section
(between the bench/routing.sh idempotent markers), with those counts and, given
baseline=RESULTS.tsv of a non-idempotent run in BENCH_META, a comparison of the gains.
With client=librdkafka (record: an argument; report: in BENCH_META, with client_version and
client_props), the producers were examples/rdkafka_perf.rs: its statistics line is read for
retries and epoch bumps, and the report names librdkafka and writes its own sections and chart.
"""
import csv
import json
import os
import re
import statistics
import subprocess
import sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchdoc import replace_section  # noqa: E402

CASES = ["direct-default", "direct-noadaptive", "kroute-strict", "kroute-off"]
BASE = "direct-default"
START = "<!-- bench/routing.sh results: start (generated, replaced on every run) -->"
END = "<!-- bench/routing.sh results: end -->"
# BENCH_IDEMPOTENT=1: a section of its own
I_START = "<!-- bench/routing.sh idempotent results: start (generated, replaced on every run) -->"
I_END = "<!-- bench/routing.sh idempotent results: end -->"
I_HEADING = "## Routing results: idempotent producers"
# BENCH_CLIENT=librdkafka: sections of their own
R_START = "<!-- bench/routing.sh librdkafka results: start (generated, replaced on every run) -->"
R_END = "<!-- bench/routing.sh librdkafka results: end -->"
R_HEADING = "## Routing results: librdkafka producers"
RI_START = "<!-- bench/routing.sh librdkafka idempotent results: start (generated, replaced on every run) -->"
RI_END = "<!-- bench/routing.sh librdkafka idempotent results: end -->"
RI_HEADING = "## Routing results: librdkafka, idempotent producers"

# goals from the issue
G_SLOW_TPUT = 1.3  # slow broker: kroute-strict >= 1.3x direct-default aggregate throughput
G_SLOW_P99 = 0.5  # slow broker: kroute-strict p99 <= 0.5x direct-default
G_SHARE = 0.10  # equal brokers: |share - 1/3| <= 0.1 x 1/3 for every broker
SUSTAIN = 0.95  # a fixed-load run must achieve >= 95% of the offered rate

FINAL = re.compile(
    r"^(\d+) records sent, ([0-9.]+) records/sec \(([0-9.]+) MB/sec\), ([0-9.]+) ms avg latency, "
    r"([0-9.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99\.9th\.?$"
)
SAMPLE = re.compile(r"^([^{\s]+)(?:\{([^}]*)\})?\s+(\S+)")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')

FIELDS = [
    "phase", "round", "scenario", "case", "topic", "producers", "records", "record_size", "offered_rps",
    "rps", "mib_s", "rps_wall", "avg_ms", "p50_ms", "p95_ms", "p99_ms", "p999_ms", "max_ms",
    "producer_rps", "producer_p99",
    "sent", "broker_records", "duplicates", "rec_b1", "rec_b2", "rec_b3", "share_b1", "share_b2", "share_b3",
    "maxdev", "kroute_produce_bytes", "up_b1", "up_b2", "up_b3", "upshare_b1", "upshare_b2", "upshare_b3",
    "batches_moved", "records_moved", "moved_to", "kept", "cost_ms", "wall_s",
]
# idempotent runs only: kroute_idempotent_batches_total{outcome} deltas of the case's kroute,
# its kroute_idempotent_producers after the run, producers refused, the producers' retries
OUTCOMES = ["renumbered", "resent", "answered_from_memory", "busy", "sequence_error_hidden",
            "sequence_error_passed", "waited", "joined"]
I_FIELDS = OUTCOMES + ["producers_tracked", "producers_refused", "producer_retries"]
# errors of the idempotence protocol itself: a producer that logs one had its sequence numbers
# (or producer id) rejected, which kroute's renumbering must never cause
SEQ_ERRORS = re.compile(
    r"OUT_OF_ORDER_SEQUENCE_NUMBER|UNKNOWN_PRODUCER_ID|INVALID_PRODUCER_EPOCH|OutOfOrderSequence"
    r"|UnknownProducerId|InvalidProducerEpoch")
# the Java producer's warning for a retried batch ("... retrying (N attempts left). Error: X")
RETRY = re.compile(r"retrying \(\d+ attempts left\)\. Error: ([A-Z_]+)")
# librdkafka (examples/rdkafka_perf.rs): the same errors by their protocol names, their rdkafka
# names (RDKafkaErrorCode, e.g. "OutOfOrderSequenceNumber (Broker: Broker received an out of
# order sequence number)") and librdkafka's own texts, including its idempotence failures
RD_SEQ_ERRORS = re.compile(
    SEQ_ERRORS.pattern
    + r"|out of order sequence number|Unknown Producer Id|operation with an old epoch"
    r"|sequence desynchroni[sz]ation|skipped sequence numbers|rewound sequence|Gap-less ordering"
    r"|GaplessGuarantee|GAPLESS_GUARANTEE", re.IGNORECASE)
# rdkafka_perf's last stderr line: librdkafka's statistics at the end, summed over the brokers
RD_STATS = re.compile(r"statistics: txretries=(\d+) txerrs=(\d+) req_timeouts=(\d+) epoch_cnt=(-?\d+)")


# ---------------------------------------------------------------------------------------------
# record


def metrics(path):
    """{(name, frozenset(labels)): value}"""
    out = {}
    with open(path) as f:
        for line in f:
            if not line.strip() or line.startswith("#"):
                continue
            m = SAMPLE.match(line)
            if not m:
                continue
            labels = frozenset(LABEL.findall(m.group(2) or ""))
            try:
                out[(m.group(1), labels)] = float(m.group(3))
            except ValueError:
                pass
    return out


def delta(m0, m1, name, **want):
    """sum over samples of NAME whose labels include WANT of (after - before)"""
    tot = 0.0
    for (n, labels), v in m1.items():
        if n != name:
            continue
        d = dict(labels)
        if all(d.get(k) == w for k, w in want.items()):
            tot += v - m0.get((n, labels), 0.0)
    return tot


def by_label(m0, m1, name, label, **want):
    out = {}
    for (n, labels), v in m1.items():
        if n != name:
            continue
        d = dict(labels)
        if all(d.get(k) == w for k, w in want.items()):
            dv = v - m0.get((n, labels), 0.0)
            if dv:
                key = d.get(label, "?")
                out[key] = out.get(key, 0.0) + dv
    return out


def offsets(path, topic):
    out = {}
    with open(path) as f:
        for line in f:
            parts = line.strip().rsplit(":", 2)
            if len(parts) == 3 and parts[0] == topic:
                out[int(parts[1])] = int(parts[2])
    return out


def fail(msg):
    print(f"bench: INVALID RUN: {msg}", file=sys.stderr)
    sys.exit(1)


def record(path, args):
    a = dict(x.split("=", 1) for x in args)
    raw, topic, case = a["raw"], a["topic"], a["case"]
    n, producers, size = int(a["records"]), int(a["producers"]), int(a["record_size"])
    leaders = [int(x) for x in a["leaders"].split(",")]
    idem = a.get("idempotent", "0") == "1"
    rdk = a.get("client", "java") == "librdkafka"

    # producers
    finals = []
    retries = {}
    for i in range(1, producers + 1):
        log = f"{raw}.p{i}.log"
        text = open(log, errors="replace").read()
        st = RD_STATS.findall(text) if rdk else []
        if rdk and not st:
            fail(f"no rdkafka_perf statistics line in {log}")
        if idem:
            bad = [l for l in text.splitlines() if (RD_SEQ_ERRORS if rdk else SEQ_ERRORS).search(l)]
            if bad:
                fail(f"producer {i} got {len(bad)} sequence/producer-id error line(s) ({log}):\n  " + "\n  ".join(bad[:5]))
            if rdk and int(st[-1][3]) > 1:
                fail(f"producer {i} got {st[-1][3]} producer id/epoch assignments (librdkafka bumped its epoch "
                     f"after a sequence or producer-id error; epoch_cnt in {log})")
            for e in RETRY.findall(text):
                retries[e] = retries.get(e, 0) + 1
            if rdk and int(st[-1][0]):
                # librdkafka names no error per retry at warning level: its request retry count
                retries["txretries"] = retries.get("txretries", 0) + int(st[-1][0])
        if re.search(r"Exception|ERROR", text):
            bad = [l for l in text.splitlines() if re.search(r"Exception|ERROR", l)][:5]
            fail(f"producer {i} reported errors ({log}):\n  " + "\n  ".join(bad))
        lines = [FINAL.match(l.strip()) for l in text.splitlines()]
        lines = [m for m in lines if m]
        if not lines:
            fail(f"no final {'rdkafka_perf' if rdk else 'ProducerPerformance'} line in {log}")
        m = lines[-1]
        sent = int(m.group(1))
        if sent != n:
            fail(f"producer {i} sent {sent} of {n} records ({log})")
        finals.append(
            dict(sent=sent, rps=float(m.group(2)), avg=float(m.group(4)), max=float(m.group(5)),
                 p50=int(m.group(6)), p95=int(m.group(7)), p99=int(m.group(8)), p999=int(m.group(9)))
        )
    sent = sum(f["sent"] for f in finals)
    rps = sum(f["rps"] for f in finals)
    # the conservative aggregate: all records over the slowest producer's duration
    rps_wall = sent / max(f["sent"] / f["rps"] for f in finals)

    # brokers: end offsets before/after, per leader
    o0, o1 = offsets(raw + ".o0", topic), offsets(raw + ".o1", topic)
    if sorted(o1) != list(range(len(leaders))):
        fail(f"GetOffsetShell returned partitions {sorted(o1)} for {topic}, expected 0..{len(leaders) - 1}")
    rec = {1: 0, 2: 0, 3: 0}
    for p, off in o1.items():
        rec[leaders[p]] += off - o0.get(p, 0)
    total = sum(rec.values())
    if total < sent:
        fail(f"the brokers got {total} records, the producers sent {sent}")
    dup = total - sent
    if dup and idem:
        fail(f"the brokers got {total} records, the producers sent {sent}: {dup} duplicates from idempotent producers")
    if dup:
        print(f"bench: warning: {dup} more records on the brokers than sent (retried duplicates)", file=sys.stderr)
    share = {b: rec[b] / total for b in rec}
    maxdev = max(abs(share[b] - 1 / 3) for b in share) / (1 / 3)

    # kroute counters
    m = {(k, w): metrics(f"{raw}.m{w}-{k}") for k in ("strict", "off") for w in (0, 1)}
    pb = {k: delta(m[(k, 0)], m[(k, 1)], "kroute_request_bytes_total", api="Produce") for k in ("strict", "off")}
    payload = sent * size
    mine = {"kroute-strict": "strict", "kroute-off": "off"}.get(case)
    for k in ("strict", "off"):
        if k == mine:
            if pb[k] < payload:
                fail(f"kroute-{k} received {pb[k]:.0f} Produce bytes for {sent} x {size} B: traffic did not go through it")
        elif pb[k] != 0:
            fail(f"kroute-{k} received {pb[k]:.0f} Produce bytes during a {case} run")
    up = {1: 0.0, 2: 0.0, 3: 0.0}
    moved = rmoved = 0.0
    moved_to, kept, cost = {}, {}, {}
    if mine:
        m0, m1 = m[(mine, 0)], m[(mine, 1)]
        for b in up:
            up[b] = delta(m0, m1, "kroute_upstream_produce_bytes_total", broker=str(b))
        moved = delta(m0, m1, "kroute_batches_moved_total", topic=topic)
        rmoved = delta(m0, m1, "kroute_records_moved_total", topic=topic)
        moved_to = by_label(m0, m1, "kroute_batches_moved_total", "to", topic=topic)
        kept = by_label(m0, m1, "kroute_batches_kept_total", "reason")
        for (nm, labels), v in m1.items():
            if nm == "kroute_broker_cost_seconds":
                cost[dict(labels).get("broker", "?")] = round(v * 1000, 2)
        if mine == "off" and moved:
            fail(f"kroute-off moved {moved:.0f} batches")
    iextra = {}
    if idem:
        # kroute_idempotent_batches_total carries no topic: each run's traffic is the only one
        # on its kroute (the other kroute's Produce bytes did not move, checked above)
        outc = {k: {o: delta(m[(k, 0)], m[(k, 1)], "kroute_idempotent_batches_total", outcome=o) for o in OUTCOMES}
                for k in ("strict", "off")}
        for k in ("strict", "off"):
            if outc[k]["sequence_error_passed"]:
                fail(f"kroute-{k} passed {outc[k]['sequence_error_passed']:.0f} OUT_OF_ORDER_SEQUENCE_NUMBER answers to the client")
            if k != mine and any(outc[k].values()):
                fail(f"kroute-{k}'s idempotent counters moved during a {case} run: {outc[k]}")
        if mine == "off" and any(outc["off"].values()):
            fail(f"kroute-off (strategy off) counted idempotent batches: {outc['off']}")
        o = outc[mine] if mine else {x: 0.0 for x in OUTCOMES}
        tracked = refused = 0.0
        if mine:
            m0, m1 = m[(mine, 0)], m[(mine, 1)]
            tracked = m1.get(("kroute_idempotent_producers", frozenset()), 0.0)
            refused = delta(m0, m1, "kroute_idempotent_producers_refused_total")
        if mine == "strict":
            if o["renumbered"] <= 0:
                fail("kroute-strict renumbered no batch: the idempotent path was not used")
            if kept.get("idempotent"):
                fail(f"kroute-strict kept {kept['idempotent']:.0f} idempotent batches without renumbering them")
            if refused:
                fail(f"kroute-strict refused to own {refused:.0f} producers (max_producers)")
            counts = [leaders.count(b) for b in (1, 2, 3)]
            if (a["scenario"] == "slow-broker" or len(set(counts)) > 1) and moved <= 0:
                fail(f"kroute-strict moved no batch in {a['scenario']} (leaders {counts[0]}/{counts[1]}/{counts[2]})")
        iextra = {x: f"{o[x]:.0f}" for x in OUTCOMES}
        iextra.update(producers_tracked=f"{tracked:.0f}", producers_refused=f"{refused:.0f}",
                      producer_retries=json.dumps(dict(sorted(retries.items())), separators=(",", ":")))
    upt = sum(up.values())
    upshare = {b: (up[b] / upt if upt else float("nan")) for b in up}

    row = dict(
        phase=a["phase"], round=a["round"], scenario=a["scenario"], case=case, topic=topic,
        producers=producers, records=n, record_size=size, offered_rps=a["offered"],
        rps=f"{rps:.1f}", mib_s=f"{rps * size / 2**20:.2f}", rps_wall=f"{rps_wall:.1f}",
        avg_ms=f"{statistics.mean(f['avg'] for f in finals):.2f}",
        p50_ms=max(f["p50"] for f in finals), p95_ms=max(f["p95"] for f in finals),
        p99_ms=max(f["p99"] for f in finals), p999_ms=max(f["p999"] for f in finals),
        max_ms=f"{max(f['max'] for f in finals):.0f}",
        producer_rps="/".join(f"{f['rps']:.0f}" for f in finals),
        producer_p99="/".join(str(f["p99"]) for f in finals),
        sent=sent, broker_records=total, duplicates=dup,
        rec_b1=rec[1], rec_b2=rec[2], rec_b3=rec[3],
        share_b1=f"{share[1]:.4f}", share_b2=f"{share[2]:.4f}", share_b3=f"{share[3]:.4f}",
        maxdev=f"{maxdev:.4f}", kroute_produce_bytes=f"{pb[mine]:.0f}" if mine else "0",
        up_b1=f"{up[1]:.0f}", up_b2=f"{up[2]:.0f}", up_b3=f"{up[3]:.0f}",
        upshare_b1=f"{upshare[1]:.4f}", upshare_b2=f"{upshare[2]:.4f}", upshare_b3=f"{upshare[3]:.4f}",
        batches_moved=f"{moved:.0f}", records_moved=f"{rmoved:.0f}",
        moved_to=json.dumps({k: int(v) for k, v in sorted(moved_to.items())}, separators=(",", ":")),
        kept=json.dumps({k: int(v) for k, v in sorted(kept.items())}, separators=(",", ":")),
        cost_ms=json.dumps(dict(sorted(cost.items())), separators=(",", ":")),
        wall_s=a["wall_s"],
    )
    row.update(iextra)
    msg = (
        f"{a['phase']:<6} {a['round']:<6} {a['scenario']:<13} {case:<17} {rps * size / 2**20:7.2f} MiB/s "
        f"({rps:6.0f} rec/s) avg {float(row['avg_ms']):8.2f} ms p99 {row['p99_ms']:5d} ms | "
        f"brokers {share[1]:.2f}/{share[2]:.2f}/{share[3]:.2f}"
    )
    if mine:
        msg += f" | kroute {upshare[1]:.2f}/{upshare[2]:.2f}/{upshare[3]:.2f} moved {moved:.0f}"
    if idem and mine:
        msg += (f" | renumbered {iextra['renumbered']} resent {iextra['resent']} memory "
                f"{iextra['answered_from_memory']} busy {iextra['busy']} hidden {iextra['sequence_error_hidden']} "
                f"waited {iextra['waited']} joined {iextra['joined']}")
    if idem and retries:
        msg += " | producer retries " + ", ".join(f"{k} {v}" for k, v in sorted(retries.items()))
    print("bench: " + msg, file=sys.stderr)
    if a["phase"] == "warmup":
        return
    new = not os.path.exists(path) or os.path.getsize(path) == 0
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, FIELDS + (I_FIELDS if idem else []), delimiter="\t", lineterminator="\n")
        if new:
            w.writeheader()
        w.writerow(row)


# ---------------------------------------------------------------------------------------------
# summaries


NUM = {"producers", "records", "record_size", "offered_rps", "rps", "mib_s", "rps_wall", "avg_ms", "p50_ms",
       "p95_ms", "p99_ms", "p999_ms", "max_ms", "sent", "broker_records", "duplicates", "rec_b1", "rec_b2",
       "rec_b3", "share_b1", "share_b2", "share_b3", "maxdev", "kroute_produce_bytes", "up_b1", "up_b2",
       "up_b3", "upshare_b1", "upshare_b2", "upshare_b3", "batches_moved", "records_moved", "wall_s"} | set(
    OUTCOMES + ["producers_tracked", "producers_refused"])


def load(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    for r in rows:
        for k in NUM:
            if k in r:
                r[k] = float(r[k])
    return rows


def med(xs):
    xs = list(xs)
    return statistics.median(xs) if xs else float("nan")


def fixed_rate(path, fraction, producers):
    rows = [r for r in load(path) if r["phase"] == "max" and r["case"] == BASE]
    pick = [r["rps"] for r in rows if r["scenario"] == "skew-12-12-12"] or [
        r["rps"] for r in rows if r["scenario"].startswith("skew-")]
    if not pick:
        sys.exit("routing_report.py: no direct-default max runs of an equal-broker scenario to derive the fixed load from")
    rate = int(med(pick) * float(fraction) / int(producers) / 10) * 10
    print(max(rate, 10))


def paired(rows, metric, case, base=BASE):
    """median over rounds of (case / base) in the same round (rows: one scenario and phase)"""
    by_round = {}
    for r in rows:
        by_round.setdefault(r["round"], {})[r["case"]] = r[metric]
    ratios = [v[case] / v[base] for v in by_round.values() if case in v and base in v and v[base] > 0]
    return med(ratios)


def sum_json(rows, key):
    out = {}
    for r in rows:
        for k, v in json.loads(r[key]).items():
            out[k] = out.get(k, 0) + v
    return out


def fr(x):
    return "n/a" if x != x else f"{x:.2f}x"


def verdict(ok):
    return "**PASS**" if ok else "**MISS**"


def scen_sort(rows):
    order = []
    for r in rows:
        if r["scenario"] not in order:
            order.append(r["scenario"])
    return order


def summarize(rows):
    """{(scenario, phase): {case: dict}}"""
    out = {}
    for s in scen_sort(rows):
        for ph in ("max", "fixed"):
            rs = [r for r in rows if r["scenario"] == s and r["phase"] == ph]
            if not rs:
                continue
            d = {}
            for c in CASES:
                cr = [r for r in rs if r["case"] == c]
                if not cr:
                    continue
                d[c] = dict(
                    n=len(cr),
                    mib=med(r["mib_s"] for r in cr), rps=med(r["rps"] for r in cr),
                    avg=med(r["avg_ms"] for r in cr), p99=med(r["p99_ms"] for r in cr),
                    shares=[med(r[f"share_b{b}"] for r in cr) for b in (1, 2, 3)],
                    upshares=[med(r[f"upshare_b{b}"] for r in cr) for b in (1, 2, 3)],
                    maxdev=med(r["maxdev"] for r in cr), maxdev_worst=max(r["maxdev"] for r in cr),
                    moved=med(r["batches_moved"] for r in cr),
                    moved_sum=sum(r["batches_moved"] for r in cr),
                    kept=sum_json(cr, "kept"),
                    moved_frac=med(r["records_moved"] / r["sent"] for r in cr),
                    t_ratio=paired(rs, "rps", c), avg_ratio=paired(rs, "avg_ms", c), p99_ratio=paired(rs, "p99_ms", c),
                    short=[r for r in cr if ph == "fixed" and r["rps"] < SUSTAIN * r["offered_rps"] * r["producers"]],
                    offered=cr[0]["offered_rps"] * cr[0]["producers"],
                )
                if "renumbered" in cr[0]:
                    d[c].update({o: sum(r[o] for r in cr) for o in OUTCOMES})
                    d[c]["sent_sum"] = sum(r["sent"] for r in cr)
                    d[c]["dup_sum"] = sum(r["duplicates"] for r in cr)
                    d[c]["retries"] = sum_json(cr, "producer_retries")
            out[(s, ph)] = d
    return out


def table(s, ph, d, meta):
    size = float(meta.get("record_size", "10240"))
    out = []
    if ph == "max":
        out.append(f"**{s}, max throughput** (`--throughput -1`)")
    else:
        off = next(iter(d.values()))["offered"]
        out.append(f"**{s}, fixed offered load** ({off:.0f} records/s = {off * size / 2**20:.1f} MiB/s in total)")
    out.append("")
    out.append("| case | MiB/s | vs default | avg ms | vs default | p99 ms | vs default | share b1 / b2 / b3 | max dev from 1/3 (worst round) | kroute's upstream bytes b1 / b2 / b3 | records moved |")
    out.append("|---|---:|---:|---:|---:|---:|---:|---|---:|---|---:|")
    for c in CASES:
        if c not in d:
            continue
        x = d[c]
        up = " / ".join(f"{v:.2f}" for v in x["upshares"]) if c.startswith("kroute") else ""
        mv = f"{x['moved_frac'] * 100:.0f}%" if c == "kroute-strict" else ""
        out.append(
            f"| {c} | {x['mib']:.1f} | {fr(x['t_ratio'])} | {x['avg']:.1f} | {fr(x['avg_ratio'])} | {x['p99']:.0f} | "
            f"{fr(x['p99_ratio'])} | {' / '.join(f'{v:.3f}' for v in x['shares'])} | "
            f"{x['maxdev'] * 100:.0f}% ({x['maxdev_worst'] * 100:.0f}%) | {up} | {mv} |"
        )
    out.append("")
    if "kroute-strict" in d and d["kroute-strict"]["kept"]:
        k = d["kroute-strict"]["kept"]
        tot = sum(k.values()) + d["kroute-strict"]["moved_sum"]
        out.append(
            "kroute-strict batches, all rounds: "
            + ", ".join([f"moved {d['kroute-strict']['moved_sum'] / tot * 100:.0f}%"]
                        + [f"kept `{r}` {v / tot * 100:.0f}%" for r, v in sorted(k.items(), key=lambda x: -x[1])])
            + "."
        )
        out.append("")
    short = [r for x in d.values() for r in x["short"]]
    if short:
        out.append(
            "Did NOT sustain the offered load (< 95%): "
            + ", ".join(f"round {r['round']} {r['case']} {r['rps']:.0f}/s" for r in short)
            + ". Latencies of these runs include the backlog."
        )
        out.append("")
    return "\n".join(out)


def goals(summ, meta):
    out = ["**Goals** (kroute-strict vs direct-default, ratios = median of per-round ratios)", ""]
    s = summ.get(("slow-broker", "max"), {})
    if "kroute-strict" in s and BASE in s:
        t = s["kroute-strict"]["t_ratio"]
        out.append(f"- slow broker, aggregate throughput >= {G_SLOW_TPUT}x at max load: {fr(t)} - {verdict(t >= G_SLOW_TPUT)}")
        p = s["kroute-strict"]["p99_ratio"]
        out.append(f"- slow broker, p99 latency <= {G_SLOW_P99}x at max load: {fr(p)} - {verdict(p <= G_SLOW_P99)}")
    s = summ.get(("slow-broker", "fixed"), {})
    if "kroute-strict" in s and BASE in s:
        p = s["kroute-strict"]["p99_ratio"]
        note = " (some runs did not sustain the load, see the table)" if any(x["short"] for x in s.values()) else ""
        out.append(f"- slow broker, p99 latency <= {G_SLOW_P99}x at the fixed load: {fr(p)} - {verdict(p <= G_SLOW_P99)}{note}")
    for (sc, ph), d in summ.items():
        if sc == "slow-broker" or "kroute-strict" not in d:
            continue
        x = d["kroute-strict"]
        sh = " / ".join(f"{v:.3f}" for v in x["shares"])
        out.append(
            f"- equal brokers, {sc} {ph}: every share within 10% of 1/3 (0.300..0.367): {sh}, max dev "
            f"{x['maxdev'] * 100:.1f}% (worst round {x['maxdev_worst'] * 100:.1f}%) - {verdict(x['maxdev'] <= G_SHARE + 1e-9)}"
        )
    out.append("")
    return "\n".join(out)


def evidence(rows, meta):
    idem = "renumbered" in (rows[0] if rows else {})
    out = ["**Per run** (brokers' records from end offsets; kroute counters are deltas of the case's own kroute)", ""]
    if idem:
        out.append("| phase | round | scenario | case | records sent | on brokers b1 / b2 / b3 | kroute Produce bytes | batches moved | kept (reason: batches) | renumbered / resent / from memory / busy / hidden / passed / waited / joined | producer retries | kroute cost ms after |")
        out.append("|---|---|---|---|---:|---|---:|---:|---|---|---|---|")
    else:
        out.append("| phase | round | scenario | case | records sent | on brokers b1 / b2 / b3 | kroute Produce bytes | batches moved | kept (reason: batches) | kroute cost ms after |")
        out.append("|---|---|---|---|---:|---|---:|---:|---|---|")
    for r in rows:
        k = r["case"].startswith("kroute")
        kept = ", ".join(f"{a}: {b}" for a, b in json.loads(r["kept"]).items())
        cost = ", ".join(f"b{a} {b}" for a, b in json.loads(r["cost_ms"]).items())
        extra = ""
        if idem:
            oc = " / ".join(f"{r[o]:.0f}" for o in OUTCOMES) if k else ""
            rt = ", ".join(f"{a}: {b}" for a, b in json.loads(r["producer_retries"]).items())
            extra = f" | {oc} | {rt}"
        out.append(
            f"| {r['phase']} | {r['round']} | {r['scenario']} | {r['case']} | {r['sent']:.0f} | "
            f"{r['rec_b1']:.0f} / {r['rec_b2']:.0f} / {r['rec_b3']:.0f}"
            + (f" (+{r['duplicates']:.0f} dup)" if r["duplicates"] else "")
            + f" | {r['kroute_produce_bytes']:.0f} | {r['batches_moved']:.0f} | {kept if k else ''}{extra} | {cost} |"
        )
    out.append("")
    return "\n".join(out)


def idempotent_path(summ, meta=None):
    """What kroute did with the idempotent batches, per scenario, phase and case (sums over rounds)."""
    if (meta or {}).get("client") == "librdkafka":
        who = ("librdkafka's request retries (`txretries` of its statistics, summed over the brokers: "
               "librdkafka logs no error per retry)")
        also = (" (by their protocol or rdkafka names or librdkafka's texts), and any epoch bump "
                "(librdkafka's statistics `epoch_cnt` > 1: it recovers from a sequence error by taking a new epoch)")
    else:
        who, also = "the Java producer's \"retrying ... Error: X\" warnings", ""
    per_batch = ("librdkafka's batches hold up to batch.size (see the properties above), several records"
                 if (meta or {}).get("client") == "librdkafka" else "one 10 KiB record per batch, so batches = records")
    out = ["**The idempotent path** (`kroute_idempotent_batches_total{outcome}` of the case's kroute, summed over "
           f"rounds; {per_batch}; producer retries = {who}; the run "
           "fails on any duplicate, any `sequence_error_passed`, and any OUT_OF_ORDER_SEQUENCE_NUMBER, "
           f"UNKNOWN_PRODUCER_ID or INVALID_PRODUCER_EPOCH in a producer's log{also}; waited = batches that "
           "waited in kroute for a partition, joined = batches that went out joined behind another one)", ""]
    out.append("| scenario | phase | case | records sent | duplicates | renumbered | resent | answered from memory | busy | sequence_error_hidden | sequence_error_passed | waited | joined | producer retries (error: count) |")
    out.append("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    tot = {}
    for (s, ph), d in summ.items():
        for c in CASES:
            x = d.get(c)
            if not x or "renumbered" not in x:
                continue
            rt = ", ".join(f"{a}: {b}" for a, b in sorted(x["retries"].items())) or "0"
            k = c.startswith("kroute")
            oc = " | ".join(f"{x[o]:.0f}" if k else "" for o in OUTCOMES)
            out.append(f"| {s} | {ph} | {c} | {x['sent_sum']:.0f} | {x['dup_sum']:.0f} | {oc} | {rt} |")
            t = tot.setdefault(c, {o: 0.0 for o in OUTCOMES + ["sent_sum", "dup_sum"]} | {"retries": {}})
            for o in OUTCOMES + ["sent_sum", "dup_sum"]:
                t[o] += x[o]
            for a, b in x["retries"].items():
                t["retries"][a] = t["retries"].get(a, 0) + b
    for c, x in tot.items():
        rt = ", ".join(f"{a}: {b}" for a, b in sorted(x["retries"].items())) or "0"
        k = c.startswith("kroute")
        oc = " | ".join(f"**{x[o]:.0f}**" if k else "" for o in OUTCOMES)
        out.append(f"| **all** | | **{c}** | **{x['sent_sum']:.0f}** | **{x['dup_sum']:.0f}** | {oc} | {rt} |")
    out.append("")
    return "\n".join(out)


def baseline_comparison(summ, path):
    """kroute-strict's gains over direct-default here vs in the non-idempotent run of `path`."""
    try:
        base_rows = load(path)
    except (OSError, KeyError, ValueError) as e:
        return f"(baseline {path} unreadable: {e})\n"
    if base_rows and "renumbered" in base_rows[0]:
        return f"(baseline {path} is an idempotent run, not compared)\n"
    base = summarize(base_rows)
    out = [f"**Gains vs the non-idempotent run** (`{os.path.basename(path)}`; kroute-strict vs direct-default "
           "of the same run, medians of per-round ratios; shares: kroute-strict's max deviation from 1/3, goal <= 10%)", ""]
    out.append("| scenario | phase | direct-default MiB/s non-idem / idem | kroute-strict MiB/s non-idem / idem | throughput vs default non-idem / idem | p99 vs default non-idem / idem | max share dev non-idem / idem | goal non-idem / idem |")
    out.append("|---|---|---|---|---|---|---|---|")

    def goal(sc, ph, x):
        if sc == "slow-broker" and ph == "max":
            return "PASS" if x["t_ratio"] >= G_SLOW_TPUT and x["p99_ratio"] <= G_SLOW_P99 else "MISS"
        if sc == "slow-broker":
            return "PASS" if x["p99_ratio"] <= G_SLOW_P99 else "MISS"
        return "PASS" if x["maxdev"] <= G_SHARE + 1e-9 else "MISS"

    for (s, ph), d in summ.items():
        b = base.get((s, ph), {})
        if "kroute-strict" not in d or "kroute-strict" not in b or BASE not in d or BASE not in b:
            continue
        x, y = b["kroute-strict"], d["kroute-strict"]
        out.append(
            f"| {s} | {ph} | {b[BASE]['mib']:.1f} / {d[BASE]['mib']:.1f} | {x['mib']:.1f} / {y['mib']:.1f} | "
            f"{fr(x['t_ratio'])} / {fr(y['t_ratio'])} | {fr(x['p99_ratio'])} / {fr(y['p99_ratio'])} | "
            f"{x['maxdev'] * 100:.0f}% / {y['maxdev'] * 100:.0f}% | {goal(s, ph, x)} / {goal(s, ph, y)} |"
        )
    out.append("")
    return "\n".join(out)


def chart(summ, path, meta):
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("bench: installing matplotlib (pip, quietly)", file=sys.stderr)
        r = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                            "matplotlib"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if r.returncode:
            print(f"bench: pip install matplotlib failed, no chart:\n{r.stderr[-2000:]}", file=sys.stderr)
            return False
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    scens = []
    for (s, _ph) in summ:
        if s not in scens:
            scens.append(s)
    if not scens:
        return False
    phases = [ph for ph in ("max", "fixed") if any((s, ph) in summ for s in scens)]
    colors = ["#4c72b0", "#dd8452", "#55a868"]
    short = {"direct-default": "direct\ndefault", "direct-noadaptive": "direct\nno-adapt.",
             "kroute-strict": "kroute\nstrict", "kroute-off": "kroute\noff"}
    layouts = dict(x.split("=", 1) for x in meta.get("layouts", "").strip(";").split(";") if "=" in x)
    nrow = len(phases) + 1
    fig, axes = plt.subplots(nrow, len(scens), figsize=(2.9 * len(scens) + 0.8, 2.5 * nrow + 0.7), squeeze=False)
    w = 0.26
    for j, s in enumerate(scens):
        cs = [c for c in CASES if any(c in summ.get((s, ph), {}) for ph in phases)]
        for i, ph in enumerate(phases):
            ax = axes[i][j]
            d = summ.get((s, ph), {})
            for b in range(3):
                ax.bar([k + (b - 1) * w for k in range(len(cs))],
                       [d[c]["shares"][b] if c in d else float("nan") for c in cs], w,
                       color=colors[b], label=f"broker {b + 1}")
            ax.axhspan(0.3, 1 / 3 * 1.1, color="0.85", zorder=0, label="1/3 +-10%")
            ax.axhline(1 / 3, color="k", lw=0.6, ls="--")
            ax.set_xticks(range(len(cs)))
            ax.set_xticklabels([short[c] for c in cs], fontsize=7)
            ax.set_ylim(0, 0.8)
            ax.tick_params(axis="y", labelsize=7)
            if i == 0:
                extra = f", b{meta.get('slow_broker', '2')} +{meta.get('slow_ms', '20')} ms" if s == "slow-broker" else ""
                ax.set_title(f"{s}\nleaders {layouts.get(s, '?')}{extra}", fontsize=9)
            if j == 0:
                ax.set_ylabel(f"share of records\n({'max throughput' if ph == 'max' else 'fixed load'})", fontsize=8)
        ax = axes[nrow - 1][j]
        dm, dfx = summ.get((s, "max"), {}), summ.get((s, "fixed"), {})
        series = [("throughput, max", dm, "t_ratio", "#4c72b0"), ("p99, max", dm, "p99_ratio", "#c44e52"),
                  ("p99, fixed load", dfx, "p99_ratio", "#8172b2")]
        vals_all = []
        for k, (lbl, dd, key, col) in enumerate(series):
            vals = [dd[c][key] if c in dd else float("nan") for c in cs]
            vals_all += [v for v in vals if v == v and v > 0]
            ax.bar([q + (k - 1) * w for q in range(len(cs))], vals, w, color=col, label=lbl)
        ax.axhline(1, color="k", lw=0.8)
        ax.set_yscale("log")
        lo = min([0.2] + [v / 1.5 for v in vals_all])
        hi = max([5] + [v * 1.5 for v in vals_all])
        ax.set_ylim(lo, hi)
        ticks = [t for t in (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100) if lo <= t <= hi]
        ax.yaxis.set_major_locator(FixedLocator(ticks))
        ax.yaxis.set_minor_locator(NullLocator())
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:g}x"))
        ax.set_xticks(range(len(cs)))
        ax.set_xticklabels([short[c] for c in cs], fontsize=7)
        ax.tick_params(axis="y", labelsize=7)
        if j == 0:
            ax.set_ylabel("vs direct-default", fontsize=8)
    partitioner = "librdkafka's partitioner" if meta.get("client") == "librdkafka" else "the Java partitioner"
    fig.suptitle(
        f"kroute strict-cost vs {partitioner}\n{meta.get('date', '')}, {meta.get('producers', '2')} producers, "
        f"{float(meta.get('record_size', '10240')) / 1024:.0f} KiB keyless records\nacks=all, "
        f"{'idempotent producers' if meta.get('idempotent') == '1' else 'no idempotence'}; "
        f"medians of {meta.get('rounds', '?')} round(s)", fontsize=7)
    h1, l1 = axes[0][0].get_legend_handles_labels()
    h2, l2 = axes[nrow - 1][0].get_legend_handles_labels()
    fig.legend(h1, l1, loc="upper left", fontsize=6, ncol=2, frameon=False)
    fig.legend(h2, l2, loc="upper right", fontsize=6, ncol=1, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.75 / (2.5 * nrow + 0.7)))
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path, dpi=72)
    plt.close(fig)
    try:  # shrink the PNG (matplotlib depends on Pillow)
        from PIL import Image
        Image.open(path).convert("RGB").quantize(colors=64).save(path, optimize=True)
    except Exception:
        pass
    print(f"bench: chart written to {path} ({os.path.getsize(path) // 1024} KiB)", file=sys.stderr)
    return True


def report(rows, chart_path, docs_path):
    m = META
    idem = m.get("idempotent") == "1"
    rdk = m.get("client") == "librdkafka"
    summ = summarize(rows)
    parts = [f"### Run of {m.get('date', '?')}", "", "```", m.get("command", "bench/routing.sh"), "```", ""]
    parts.append(
        f"- machine: {m.get('nproc', '?')} CPUs ({m.get('cpu', '?')}), {m.get('mem', '?')}, Linux {m.get('kernel', '?')}; "
        f"load average before/after: {m.get('loadavg_before', '?')} / {m.get('loadavg_after', '?')}"
    )
    parts.append(
        f"- kroute {m.get('kroute', '?')}, release build; Apache Kafka {m.get('kafka', '?')} (1 controller + 3 "
        f"brokers, scripts/cluster.sh relayed mode); {m.get('java', '?')}"
    )
    if rdk:
        parts.append(
            f"- producers: **librdkafka** ({m.get('client_version', '?')}, examples/rdkafka_perf.rs; its default "
            "partitioner, sticky per `sticky.partitioning.linger.ms`), properties mirroring the Java producer's: "
            f"{m.get('client_props', '?')}; direct-default = librdkafka straight to the brokers"
        )
    parts.append(
        f"- {m.get('rounds', '?')} round(s), cases in rotating order; {m.get('producers', '?')} producers per run, "
        f"{m.get('record_size', '?')} B keyless records, acks=all, "
        + ("enable.idempotence=true (max.in.flight.requests.per.connection 5" + (")" if rdk else ", the default)")
           if idem else "enable.idempotence=false")
        + (f", {m.get('producer_props')}" if m.get("producer_props") else "")
        + "; max: "
        f"{m.get('records', '?')} records per producer ({m.get('slow_records', '?')} in slow-broker); fixed: {m.get('fixed_rate', '?')} records/s per producer "
        f"(setting: {m.get('fixed_rate_setting', '?')}"
        + (f", {m.get('fixed_fraction')} x median direct-default max of skew-12-12-12" if m.get("fixed_rate_setting") == "auto" else "")
        + f") for {m.get('fixed_seconds', '?')} s; slow broker: broker {m.get('slow_broker', '?')} +{m.get('slow_ms', '?')} ms; "
        + (f"bandwidth caps b1/b2/b3: {m.get('caps')} MB/s each way; " if m.get("caps") else "")
        + f"layouts {m.get('layouts', '?').rstrip(';').replace(';', ', ')}; warm-up {m.get('warmup_records', '?')} "
        f"records per producer per case; topics {m.get('topic_prefix', '?')}-*; bench took {m.get('duration_s', '?')} s"
    )
    parts.append("")
    if chart_path != "none":
        if chart(summ, chart_path, m):
            rel = os.path.relpath(chart_path, os.path.dirname(docs_path) or ".") if docs_path != "none" else chart_path
            who = ", librdkafka" if rdk else ""
            parts.append(f"![routing benchmark{who}{', idempotent producers' if idem else ''}]({rel})")
            parts.append("")
    parts.append(goals(summ, m))
    if idem:
        if m.get("baseline"):
            parts.append(baseline_comparison(summ, m["baseline"]))
        parts.append(idempotent_path(summ, m))
    for (s, ph), d in summ.items():
        parts.append(table(s, ph, d, m))
    parts.append(evidence(rows, m))
    return "\n".join(parts)


def write_docs(path, text):
    rdk = META.get("client") == "librdkafka"
    if META.get("idempotent") == "1":
        replace_section(path, *((RI_START, RI_END) if rdk else (I_START, I_END)), text, RI_HEADING if rdk else I_HEADING)
    else:
        replace_section(path, *((R_START, R_END) if rdk else (START, END)), text, R_HEADING if rdk else "## Routing results")

META = {}


def main():
    global META
    if len(sys.argv) >= 3 and sys.argv[1] == "record":
        record(sys.argv[2], sys.argv[3:])
        return
    if len(sys.argv) == 5 and sys.argv[1] == "fixed-rate":
        fixed_rate(sys.argv[2], sys.argv[3], sys.argv[4])
        return
    if len(sys.argv) != 5 or sys.argv[1] != "report":
        sys.exit(__doc__)
    for line in os.environ.get("BENCH_META", "").splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            META[k] = v
    rows = load(sys.argv[2])
    text = report(rows, sys.argv[4], sys.argv[3])
    print(text)
    if sys.argv[3] != "none":
        write_docs(sys.argv[3], text)
        print(f"bench: results written to {sys.argv[3]}", file=sys.stderr)


if __name__ == "__main__":
    main()
