#!/usr/bin/env bash
# Skew: kroute's plan vs `kafka-reassign-partitions --generate`, proven by applying them with
# Kafka's own tools under a keyed-only load (issue 25 part 3).
#
#   bench/skew.sh                   full run (defaults below): about 30 minutes on 2 cores, builds
#                                   and cluster start included (27.7 and 31.8 min measured)
#   BENCH_ROUNDS=1 BENCH_LAYOUTS=22/10/4 BENCH_SECONDS=12 BENCH_WARMUP_SECONDS=0 bench/skew.sh
#                                   smoke run (about 5 minutes)
#
# Cluster: a cluster of its own next to the default one (scripts/cluster.sh with
# KROUTE_CLUSTER_PORT_OFFSET [2000] and KROUTE_CLUSTER_DIR [target/cluster-skew]; give both to
# override), in relayed mode, every broker's link capped at BENCH_CAP_MBPS each way
# (scripts/cluster.sh cap: the leader's link carries its produce traffic in and the copies its
# follower fetches out), so each broker has a capacity of its own and the broker leading the most
# partitions is the bottleneck, not the shared CPU or the client. Started if not running (and
# stopped at the end only then); one already running must be in relayed mode.
#
# Histories (RF 2; replica lists as Kafka places them: leaders round-robin over the brokers that
# exist, followers shifted by one more broker each round; the leaders are checked with
# kafka-topics --describe and the run fails if they are not exactly the layout's):
#   22/10/4   seed 000's testing-1, the way seed 003 says skew arises:
#             (a) 12 partitions created while brokers 1 and 2 exist: leaders 6/6/0;
#             (b) broker 2 restarts (scripts/cluster.sh kill-broker 2 --wait-fenced, start-broker
#                 2): its 6 leaders fail over to broker 1 and stay there (no auto leader
#                 rebalance): 12/0/0;
#             (c) 12 partitions added, still on brokers 1 and 2 (kafka-topics --alter --partitions
#                 24 --replica-assignment ...): 18/6/0;
#             (d) broker 3 joins; 12 partitions added over brokers 1, 2, 3: 22/10/4.
#   16/16/4   seed 000's testing-2: 24 partitions created on brokers 1 and 2 (12/12/0), then
#             broker 3 joins and 12 partitions are added over 1, 2, 3: 16/16/4.
# Each round builds every layout twice, one topic per case, in one history (one restart of
# broker 2 per round, before the 16/16/4 topics exist). Broker 3 is running all along, but no
# replica is placed on it before it "joins" (the placement a broker that did not exist yet gets).
#
# Load: keyed records only (what kroute cannot move): examples/rdkafka_perf.rs with
# kroute.keys=BENCH_KEYS (each record's key drawn uniformly from that many keys, so librdkafka's
# default partitioner spreads them over all 36 partitions), acks=all, BENCH_RECORD_SIZE bytes,
# as fast as it can (or BENCH_RATE records/s) for BENCH_SECONDS (kroute.seconds), then flushed.
# Throughput and latency are the producer's ProducerPerformance-style summary line: records/s
# from the first send to the end of the final flush, and latency from send() to the
# acknowledgement, queueing in the client included. At full speed the client's queue
# (BENCH_QUEUE_KB) stays full, so p99 is mostly the wait in it; and the broker with the largest
# share of the keys is busy from the start to the end of the flush (the others finish early), so
# the whole-run rate is that broker's capacity over its share: what the layout allows. (A window
# inside the run overstates the skewed layouts: the queue takes tens of seconds to fill up with
# the busiest broker's records.) MB/s here are 10^6 bytes of record values per second, the cap's
# unit. Each run lasts BENCH_SECONDS plus the flush (up to the queue over one broker's cap).
# The producer goes straight to the brokers (BENCH_VIA=kroute: through kroute, which leaves
# keyed records where the partitioner put them). Where the records went is counted
# on the brokers: each partition's log-end offset (GetOffsetShell) before and after the run,
# summed per broker leading it; the run fails unless the offsets grew by every record the
# producer had acknowledged.
#
# Cases, per layout and round (each on its own topic with the same history):
#   kroute     "before" run; then the same keyed load at a steady rate every broker sustains
#              (BENCH_PLAN_LOAD=steady: BENCH_PLAN_FRACTION of the layout's capacity, the busiest
#              broker at that fraction of its cap) and, BENCH_PLAN_AT s into it (kroute has
#              sampled the load at least twice, [skew] sample_interval_ms = BENCH_SAMPLE_MS),
#              `kroute plan --admin .. --topics T --reassignment-out F --election-out E` against a
#              kroute running beside the cluster (BENCH_PLAN_LOAD=before: asked BENCH_PLAN_AT s
#              into the full-speed "before" run instead; see BENCH_PLAN_LOAD); F applied with
#              kafka-reassign-partitions --execute (polled with --verify until complete), then E
#              with kafka-leader-election --election-type PREFERRED --path-to-json-file; "after".
#   generate   "before" run; kafka-reassign-partitions --generate --topics-to-move-json-file
#              (T) --broker-list 1,2,3, its proposed assignment applied the same way, then a
#              preferred election of every partition of T (the generated plan needs it to move
#              leaders that stay replicas); "after" run.
#   reference  BENCH_REFERENCE=1: a 36-partition topic created with all three brokers
#              (12/12/12), measured once per round: the ceiling an even layout reaches (after
#              each round's restart of broker 2, a preferred election puts its leaders back).
# For each apply: partitions reassigned (replica list changed), replicas added (data copies),
# leader changes, bytes copied (kafka-log-dirs: the partition's size when the copy started),
# the time from --execute to the election's end, and the leader counts before and after.
# The reassignment runs unthrottled under the caps, with no load running.
#
# Environment (defaults in brackets):
#   BENCH_ROUNDS          rounds [2]
#   BENCH_LAYOUTS         [22/10/4 16/16/4]
#   BENCH_CASES           [kroute generate]
#   BENCH_REFERENCE       1 = measure the even 12/12/12 reference topic each round [1]
#   BENCH_CAP_MBPS        every broker's link, MB/s each way [0.5]
#   BENCH_SECONDS         length of each measured run (records sent for that long, then flushed) [30]
#   BENCH_WARMUP_SECONDS  one uncounted run on the reference topic first (0 = none) [20]
#   BENCH_RECORD_SIZE     bytes per record value [10240]
#   BENCH_KEYS            distinct keys [36000: ~1000 per partition, so each partition's share of
#                         the keys is within a few % of 1/36]
#   BENCH_RATE            records/s offered, -1 = as fast as possible [-1]
#   BENCH_QUEUE_KB        the producer's queue.buffering.max.kbytes [16384]: at full speed with
#                         acks=all the capped links stay busy only with several seconds of
#                         records in flight (a follower fetches what arrived since its last
#                         fetch through the same capped link); 4096 left them idle half the time
#   BENCH_PRODUCER_PROPS  extra librdkafka properties, "k=v k=v" [none]
#   BENCH_SAMPLE_MS       kroute's [skew] sample_interval_ms [2000]
#   BENCH_RATE_WINDOW_MS  kroute's [skew] rate_window_ms, the span its rates are taken over
#                         [kroute's default, 2 min: the plan then weighs the whole "before" run
#                         and the steady load]
#   BENCH_PLAN_LOAD       steady or before: the load kroute measures for its plan [steady]. At
#                         full speed the first tens of seconds are a transient (the client's
#                         queue filling, the less loaded brokers draining it at their full cap)
#                         in which the records appended per broker say little about where the
#                         keys go; a steady load below capacity shows it exactly
#   BENCH_PLAN_FRACTION   steady: the offered rate, as a fraction of the layout's capacity [0.7]
#   BENCH_PLAN_AT         seconds into that load to ask for the plan [steady: 2 sample intervals
#                         + 4 s; before: 2/3 of BENCH_SECONDS, at least 2 sample intervals + 3 s]
#   BENCH_TOLERANCE       `kroute plan --tolerance` [kroute's default]
#   BENCH_VIA             direct or kroute: where the producer connects [direct]
#   BENCH_KROUTE_PORT     kroute's bootstrap port; brokers at +8+N, admin at +354 [11392]
#   BENCH_APPLY_TIMEOUT   seconds to wait for a reassignment to complete [900]
#   BENCH_BUILD           1 = cargo build --release --bin kroute and --example rdkafka_perf [1]
#   BENCH_KEEP_CLUSTER    1 = leave a cluster this run started running [0]
#   KROUTE_BIN            [target/release/kroute]   RDKAFKA_PERF_BIN [target/release/examples/rdkafka_perf]
# Output: target/bench-skew/ (results.md: the report, also printed; runs.tsv, applies.tsv; raw/:
# producer logs, describes, offsets, plans, kroute's /v1/skew at plan time; kroute.log).
# On exit: stops kroute and any producer, deletes the topics it created and restores the caps
# (on a cluster it did not start), or stops the cluster (one it started).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/common.sh
source bench/common.sh
REPO=$PWD

export KROUTE_CLUSTER_PORT_OFFSET=${KROUTE_CLUSTER_PORT_OFFSET:-2000}
export KROUTE_CLUSTER_DIR=${KROUTE_CLUSTER_DIR:-$REPO/target/cluster-skew}
ROUNDS=${BENCH_ROUNDS:-2}
LAYOUTS=(${BENCH_LAYOUTS:-22/10/4 16/16/4})
CASES=(${BENCH_CASES:-kroute generate})
REFERENCE=${BENCH_REFERENCE:-1}
CAP=${BENCH_CAP_MBPS:-0.5}
RUN_SECONDS=${BENCH_SECONDS:-30}
WARMUP_SECONDS=${BENCH_WARMUP_SECONDS:-20}
RECORD_SIZE=${BENCH_RECORD_SIZE:-10240}
KEYS=${BENCH_KEYS:-36000}
RATE=${BENCH_RATE:--1}
QUEUE_KB=${BENCH_QUEUE_KB:-16384}
EXTRA_PROPS=(${BENCH_PRODUCER_PROPS:-})
SAMPLE_MS=${BENCH_SAMPLE_MS:-2000}
RATE_WINDOW_MS=${BENCH_RATE_WINDOW_MS:-}
PLAN_LOAD=${BENCH_PLAN_LOAD:-steady}
PLAN_FRACTION=${BENCH_PLAN_FRACTION:-0.7}
TOLERANCE=${BENCH_TOLERANCE:-}
VIA=${BENCH_VIA:-direct}
KR_BOOT=${BENCH_KROUTE_PORT:-11392}
APPLY_TIMEOUT=${BENCH_APPLY_TIMEOUT:-900}
BUILD=${BENCH_BUILD:-1}
KEEP_CLUSTER=${BENCH_KEEP_CLUSTER:-0}
KROUTE_BIN=${KROUTE_BIN:-target/release/kroute}
RDKAFKA_PERF_BIN=${RDKAFKA_PERF_BIN:-target/release/examples/rdkafka_perf}
KR_BASE=$((KR_BOOT + 8))
KR_ADMIN=127.0.0.1:$((KR_BOOT + 354))
OUT=$REPO/target/bench-skew
RAW=$OUT/raw
HELPER=$OUT/skew_helper.py
RUN_ID=$(date +%s)
PARTITIONS=36

say() { echo "bench: $*" >&2; }
die() { echo "bench: FAILED: $*" >&2; exit 1; }

for v in ROUNDS RUN_SECONDS WARMUP_SECONDS RECORD_SIZE KEYS QUEUE_KB SAMPLE_MS KR_BOOT APPLY_TIMEOUT; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a non-negative integer (got '${!v}')"
done
[ "$ROUNDS" -ge 1 ] && [ "$RUN_SECONDS" -ge 1 ] && [ "$KEYS" -ge 1 ] || die "rounds, seconds and keys must be >= 1"
[[ $CAP =~ ^[0-9]+(\.[0-9]+)?$ ]] && awk -v c="$CAP" 'BEGIN { exit !(c > 0) }' || die "BENCH_CAP_MBPS must be a number > 0"
[[ $RATE == -1 || $RATE =~ ^[0-9]+$ ]] || die "BENCH_RATE must be -1 or records/s"
[[ -z $RATE_WINDOW_MS || $RATE_WINDOW_MS =~ ^[0-9]+$ ]] || die "BENCH_RATE_WINDOW_MS must be milliseconds"
[[ $VIA == direct || $VIA == kroute ]] || die "BENCH_VIA must be direct or kroute"
for l in "${LAYOUTS[@]}"; do [[ $l == 22/10/4 || $l == 16/16/4 ]] || die "unknown layout '$l' (22/10/4 or 16/16/4)"; done
for c in "${CASES[@]}"; do [[ $c == kroute || $c == generate ]] || die "unknown case '$c' (kroute or generate)"; done
[[ $PLAN_LOAD == steady || $PLAN_LOAD == before ]] || die "BENCH_PLAN_LOAD must be steady or before"
awk -v f="$PLAN_FRACTION" 'BEGIN { exit !(f > 0 && f < 1) }' || die "BENCH_PLAN_FRACTION must be between 0 and 1"
SAMPLE_S=$(( (SAMPLE_MS + 999) / 1000 ))
if [ "$PLAN_LOAD" = steady ]; then
  PLAN_AT=${BENCH_PLAN_AT:-$(( 2 * SAMPLE_S + 4 ))}
else
  PLAN_AT=${BENCH_PLAN_AT:-$(( RUN_SECONDS * 2 / 3 > 2 * SAMPLE_S + 3 ? RUN_SECONDS * 2 / 3 : 2 * SAMPLE_S + 3 ))}
fi
[[ $PLAN_AT =~ ^[0-9]+$ ]] || die "BENCH_PLAN_AT must be whole seconds"
if [[ " ${CASES[*]} " == *" kroute "* && $PLAN_LOAD == before ]] && [ "$PLAN_AT" -ge "$RUN_SECONDS" ]; then
  die "the plan is asked ${PLAN_AT}s into a ${RUN_SECONDS}s run (kroute needs two samples of the load, ${SAMPLE_MS} ms apart): raise BENCH_SECONDS or lower BENCH_PLAN_AT/BENCH_SAMPLE_MS"
fi
command -v curl >/dev/null || die "curl missing"
command -v python3 >/dev/null || die "python3 missing"
mkdir -p "$RAW"
rm -f "$RAW"/* "$OUT/runs.tsv" "$OUT/applies.tsv"

# ---------------------------------------------------------------------------------------------
# helpers in Python: parsing the tools' output, arithmetic on layouts, the report

cat >"$HELPER" <<'PY'
import json, re, statistics, sys

def layout(describe_file):
    """kafka-topics --describe -> {partition: {"leader": n, "replicas": [...], "isr": [...]}}"""
    parts = {}
    for line in open(describe_file):
        m = re.search(r"Partition: (\d+)\s+Leader: (-?\d+|none)\s+Replicas: ([\d,]*)\s+Isr: ([\d,]*)", line)
        if m:
            lead = int(m.group(2)) if m.group(2) != "none" else -1
            parts[int(m.group(1))] = {"leader": lead,
                                      "replicas": [int(x) for x in m.group(3).split(",") if x],
                                      "isr": [int(x) for x in m.group(4).split(",") if x]}
    return parts

def counts(parts):
    c = {1: 0, 2: 0, 3: 0}
    for p in parts.values():
        c[p["leader"]] = c.get(p["leader"], 0) + 1
    return "/".join(str(c[b]) for b in (1, 2, 3))

def offsets(path):
    """GetOffsetShell lines topic:partition:offset -> {partition: offset}"""
    out = {}
    for line in open(path):
        f = line.strip().rsplit(":", 2)
        if len(f) == 3 and f[1].isdigit():
            out[int(f[1])] = int(f[2])
    return out

def perf(path):
    """the producer's summary line -> dict"""
    for line in open(path):
        m = re.match(r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
                     r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th", line)
        if m:
            return dict(records=int(m.group(1)), rps=float(m.group(2)), avg=float(m.group(4)),
                        max=float(m.group(5)), p50=int(m.group(6)), p95=int(m.group(7)),
                        p99=int(m.group(8)), p999=int(m.group(9)))
    sys.exit(f"no summary line in {path}")

def cmd_assign(brokers, n, describe=None):
    """replica lists: the existing partitions' as they are, then n new ones placed over brokers
    the way Kafka places them (leader round-robin, follower shifted one more each round)"""
    bs = [int(b) for b in brokers.split(",")]
    have = layout(describe) if describe else {}
    lists = [":".join(map(str, have[p]["replicas"])) for p in sorted(have)]
    k = len(bs)
    for j in range(int(n)):
        lead = j % k
        follow = (lead + 1 + (j // k) % (k - 1)) % k
        lists.append(f"{bs[lead]}:{bs[follow]}")
    print(",".join(lists))

def cmd_leaders(describe):
    print(counts(layout(describe)))

def cmd_replicated(describe, rf):
    """exit 0 iff every partition has a leader and rf replicas in sync"""
    parts = layout(describe)
    ok = parts and all(p["leader"] > 0 and len(p["isr"]) == int(rf) for p in parts.values())
    sys.exit(0 if ok else 1)

def cmd_json_partitions(path):
    print(len(json.load(open(path)).get("partitions", [])))

def cmd_proposed(generate_out, dest):
    """kafka-reassign-partitions --generate's output -> its proposed assignment as a file"""
    lines = open(generate_out).read().splitlines()
    i = lines.index("Proposed partition reassignment configuration")
    json.dump(json.loads(lines[i + 1]), open(dest, "w"))

def cmd_election_all(describe, topic, dest):
    parts = layout(describe)
    json.dump({"partitions": [{"topic": topic, "partition": p} for p in sorted(parts)]}, open(dest, "w"))

def sizes(logdirs):
    """kafka-log-dirs --describe -> {partition: largest size over its replicas}"""
    text = open(logdirs).read()
    data = json.loads(text[text.index("{"):])
    out = {}
    for b in data["brokers"]:
        for d in b["logDirs"]:
            for p in d["partitions"]:
                n = int(p["partition"].rsplit("-", 1)[1])
                out[n] = max(out.get(n, 0), p["size"])
    return out

def cmd_diff(before, after, logdirs):
    """what an apply changed -> k=v words"""
    a, b, s = layout(before), layout(after), sizes(logdirs)
    moved = sum(1 for p in a if a[p]["replicas"] != b[p]["replicas"])
    added = [(p, r) for p in a for r in b[p]["replicas"] if r not in a[p]["replicas"]]
    removed = sum(1 for p in a for r in a[p]["replicas"] if r not in b[p]["replicas"])
    leaders = sum(1 for p in a if a[p]["leader"] != b[p]["leader"])
    not_preferred = sum(1 for p in b.values() if p["leader"] != p["replicas"][0])
    print(f"reassigned={moved} added={len(added)} removed={removed} leader_changes={leaders} "
          f"bytes_copied={sum(s.get(p, 0) for p, _ in added)} leaders_before={counts(a)} "
          f"leaders_after={counts(b)} not_preferred_after={not_preferred}")

def cmd_run(tag, describe, off0, off1, perf_log, size):
    """one run -> k=v words; fails unless the brokers hold every acknowledged record"""
    parts, o0, o1, pf = layout(describe), offsets(off0), offsets(off1), perf(perf_log)
    per = {1: 0, 2: 0, 3: 0}
    for p, q in parts.items():
        per[q["leader"]] += o1.get(p, 0) - o0.get(p, 0)
    total = sum(per.values())
    if total < pf["records"]:
        sys.exit(f"{tag}: the brokers' offsets grew by {total}, the producer had {pf['records']} acknowledged")
    secs = pf["records"] / pf["rps"] if pf["rps"] else 0
    busiest = max(per.values()) * int(size) / secs / 1e6 if secs else 0
    share = "/".join(f"{100 * per[b] / total:.0f}" if total else "-" for b in (1, 2, 3))
    print(f"records={pf['records']} rps={pf['rps']} mbps={pf['rps'] * int(size) / 1e6:.3f} p50={pf['p50']} "
          f"p99={pf['p99']} avg={pf['avg']:.0f} offsets_grew={total} dup={total - pf['records']} "
          f"share={share} busiest_mbps={busiest:.3f} secs={secs:.1f} leaders={counts(parts)}")

def cmd_plan_summary(plan_txt):
    """`kroute plan`'s printed summary -> k=v words (all "-" without one)"""
    out = dict(plan_window="-", plan_load="-", plan_leaders="-", plan_leader_changes="-", plan_moves="-", plan_bytes="-")
    try:
        text = open(plan_txt).read()
    except FileNotFoundError:
        text = ""
    pairs = lambda line: "/".join(x.split(":")[1] for x in line.split()[2:])
    for line in text.splitlines():
        m = re.search(r"weighted by records/s over ([\d.]+) s", line)
        if m:
            out["plan_window"] = m.group(1)
        if line.startswith("load before"):
            out["plan_load"] = pairs(line)
        elif line.startswith("leaders after"):
            out["plan_leaders"] = pairs(line)
        elif line.startswith("changes"):
            m = re.search(r"(\d+) leader changes, (\d+) replica moves, (\d+) bytes", line)
            if m:
                out.update(plan_leader_changes=m.group(1), plan_moves=m.group(2), plan_bytes=m.group(3))
    print(" ".join(f"{k}={v}" for k, v in out.items()))

def cmd_skew_check(skew_json, topic, describe):
    """kroute's /v1/skew for TOPIC against kafka-topics --describe -> problems, one per line"""
    r = json.load(open(skew_json))
    want = {str(b): int(n) for b, n in zip((1, 2, 3), counts(layout(describe)).split("/"))}
    for t in r.get("topics", []):
        if t.get("topic") == topic:
            got = {str(b): int(n) for b, n in (t.get("leaders") or {}).items()}
            got = {b: got.get(b, 0) for b in want}
            if got != want:
                print(f"/v1/skew leaders of {topic}: {got}, kafka-topics --describe: {want}")
            return
    print(f"/v1/skew has no topic {topic}")

def tsv_append(path, row):
    import os
    new = not os.path.exists(path)
    with open(path, "a") as f:
        if new:
            f.write("\t".join(row) + "\n")
        f.write("\t".join(row.values()) + "\n")

def cmd_record(path, *kvs):
    row = {}
    for kv in kvs:
        for w in kv.split(" "):
            if w:
                k, v = w.split("=", 1)
                row[k] = v
    tsv_append(path, row)

def read_tsv(path):
    try:
        lines = open(path).read().splitlines()
    except FileNotFoundError:
        return []
    head = lines[0].split("\t")
    return [dict(zip(head, l.split("\t"))) for l in lines[1:]]

def cmd_report(runs_tsv, applies_tsv, meta_file):
    meta = dict(l.split("=", 1) for l in open(meta_file).read().splitlines() if "=" in l)
    runs, applies = read_tsv(runs_tsv), read_tsv(applies_tsv)
    run = {(r["round"], r["layout"], r["case"], r["phase"]): r for r in runs}
    med = lambda xs: statistics.median(xs) if xs else float("nan")
    name = {"kroute": "kroute plan", "generate": "`--generate`"}
    o = []
    w = o.append
    w("## Skew results: kroute's plan vs `--generate`, applied under a keyed load")
    w("")
    w(f"`{meta['command']}` ({meta['date']}; kroute {meta['kroute']}; Kafka {meta['kafka']}; "
      f"{meta['nproc']} cores, {meta['cpu']}; {meta['duration_min']} min)")
    w("")
    w(f"Three brokers, RF 2, every broker's link capped at {meta['cap']} MB/s each way "
      f"(`scripts/cluster.sh cap`), 36-partition topics built the way seed 003 says skew arises "
      f"(22/10/4: created on brokers 1-2, broker 2 restarted and its leaders failed over to broker 1, "
      f"partitions added on 1-2, then broker 3 joined and partitions were added over 1-2-3; "
      f"16/16/4: created on 1-2, broker 3 joined, partitions added). One librdkafka producer, "
      f"keyed records only ({meta['keys']} keys drawn uniformly, so all 36 partitions get records; "
      f"kroute cannot move keyed records), {meta['record_size']} B values, acks=all, "
      f"{'as fast as it can' if meta['rate'] == '-1' else meta['rate'] + ' records/s offered'} for "
      f"{meta['seconds']} s per run (queue {meta['queue_kb']} KiB), straight to the brokers"
      f"{'' if meta['via'] == 'direct' else ' through kroute'}. Each plan is applied with "
      f"`kafka-reassign-partitions --execute` (until `--verify` says complete) and "
      f"`kafka-leader-election --election-type PREFERRED`. kroute's plan (`kroute plan`, "
      f"{'tolerance ' + meta['tolerance'] if meta['tolerance'] else 'default tolerance'}) was asked "
      + (f"right after the \"before\" run, {meta['plan_at']} s into the same keyed load at a steady "
         f"{meta['plan_fraction']} of the layout's capacity"
         if meta['plan_load'] == 'steady' else f"{meta['plan_at']} s into the full-speed \"before\" run")
      + f", kroute sampling the log ends every {meta['sample_ms']} ms"
      + (f" and taking rates over {meta['rate_window_ms']} ms." if meta.get('rate_window_ms')
         else " and taking rates over its default window."))
    w("")
    w("| layout | round | plan | replicas added (copies) | partitions reassigned | leader changes | bytes copied | time to apply | leaders 1/2/3 | keyed MB/s | throughput after/before | p99 ms | p99 after/before |")
    w("|---|---|---|---:|---:|---:|---:|---:|---|---|---:|---|---:|")
    goals = {}
    for a in applies:
        b = run.get((a["round"], a["layout"], a["case"], "before"))
        f = run.get((a["round"], a["layout"], a["case"], "after"))
        if not b or not f:
            continue
        tr = float(f["rps"]) / float(b["rps"])
        pr = int(f["p99"]) / int(b["p99"]) if int(b["p99"]) else float("nan")
        goals.setdefault((a["layout"], a["case"]), []).append((tr, int(a["added"]), pr))
        w(f"| {a['layout']} | {a['round']} | {name[a['case']]} | {a['added']} | {a['reassigned']} | "
          f"{a['leader_changes']} | {int(a['bytes_copied']) / 1e6:.1f} MB | {float(a['apply_s']):.0f} s | "
          f"{a['leaders_before']} → {a['leaders_after']} | {float(b['mbps']):.2f} → {float(f['mbps']):.2f} | "
          f"**{tr:.2f}x** | {b['p99']} → {f['p99']} | {pr:.2f}x |")
    refs = [r for r in runs if r["phase"] == "reference"]
    if refs:
        w("")
        w("Reference, a topic created with all three brokers (12/12/12) under the same load and caps: "
          + ", ".join(f"round {r['round']}: {float(r['mbps']):.2f} MB/s, p99 {r['p99']} ms" for r in refs)
          + f" (an even layout's ceiling: 3 x {meta['cap']} MB/s of records in, less the framing).")
    planned = [a for a in applies if a["case"] == "kroute"]
    if planned:
        w("")
        w("kroute's plans as `kroute plan` printed them: the load it weighed partitions by (records/s "
          "led by brokers 1/2/3, over the span it says), the shares counted on the brokers in the "
          "\"before\" run, and what it planned:")
        w("")
        w("| layout | round | load weighed by kroute | over | share 1/2/3 % (offsets) | leaders after, planned | leader changes | replica moves | bytes to copy |")
        w("|---|---|---|---:|---|---|---:|---:|---:|")
        for a in planned:
            s = run.get((a["round"], a["layout"], "kroute", "before"), {})
            w(f"| {a['layout']} | {a['round']} | {a['plan_load']} | {a['plan_window']} s | {s.get('share', '-')} | "
              f"{a['plan_leaders']} | {a['plan_leader_changes']} | {a['plan_moves']} | {a['plan_bytes']} |")
    w("")
    w("Where the records went, counted on the brokers (log-end offsets per partition, summed per leader), "
      "share of records on brokers 1/2/3 and the busiest broker's MB/s of record values:")
    w("")
    w("| layout | round | plan | before: share 1/2/3 % | busiest MB/s | after: share 1/2/3 % | busiest MB/s |")
    w("|---|---|---|---|---:|---|---:|")
    for a in applies:
        b = run.get((a["round"], a["layout"], a["case"], "before"))
        f = run.get((a["round"], a["layout"], a["case"], "after"))
        if b and f:
            w(f"| {a['layout']} | {a['round']} | {name[a['case']]} | {b['share']} | {float(b['busiest_mbps']):.2f} | "
              f"{f['share']} | {float(f['busiest_mbps']):.2f} |")
    w("")
    w("Goals (issue 25): keyed throughput after kroute's plan >= 1.3x before, with at most half the "
      "replicas `--generate`'s plan moves (medians over the rounds):")
    w("")
    for lay in dict.fromkeys(a["layout"] for a in applies):
        k, g = goals.get((lay, "kroute"), []), goals.get((lay, "generate"), [])
        parts = []
        if k:
            kt = med([x[0] for x in k])
            parts.append(f"kroute's plan {kt:.2f}x the throughput ({'met' if kt >= 1.3 else 'NOT met'}), "
                         f"p99 {med([x[2] for x in k]):.2f}x")
        if g:
            parts.append(f"`--generate`'s {med([x[0] for x in g]):.2f}x, p99 {med([x[2] for x in g]):.2f}x")
        if k and g:
            ka, ga = med([x[1] for x in k]), med([x[1] for x in g])
            parts.append(f"replicas added {ka:g} vs {ga:g} ({'met' if ka <= ga / 2 else 'NOT met'}: "
                         f"{ka / ga if ga else float('nan'):.2f} of `--generate`'s)")
        w(f"- {lay}: " + "; ".join(parts) + ".")
    w("")
    w(f"Every run: the brokers' offsets grew by every record the producer had acknowledged "
      f"(duplicates: {sum(int(r['dup']) for r in runs)}); the histories' leader counts were checked "
      f"with `kafka-topics --describe`. Machine: {meta['nproc']} cores, load average "
      f"{meta['loadavg_before']} before and {meta['loadavg_after']} after. Files: target/bench-skew/.")
    if meta.get("problems"):
        w("")
        w("Problems seen (the run went on): " + meta["problems"])
    print("\n".join(o))

if __name__ == "__main__":
    globals()["cmd_" + sys.argv[1].replace("-", "_")](*sys.argv[2:])
PY
py() { python3 "$HELPER" "$@"; }

# ---------------------------------------------------------------------------------------------
# cleanup

started_cluster=0
caps_before=
KR_PID=
PRODUCER_PID=
topics=()
problems=()

cleanup() {
  local rc=$? t b c
  set +e
  [ -n "$PRODUCER_PID" ] && kill -TERM "$PRODUCER_PID" 2>/dev/null && wait "$PRODUCER_PID" 2>/dev/null
  [ -n "$KR_PID" ] && kill -TERM "$KR_PID" 2>/dev/null && wait "$KR_PID" 2>/dev/null
  if [ "$started_cluster" = 1 ] && [ "$KEEP_CLUSTER" != 1 ]; then
    say "stopping the cluster (started by this run)"; scripts/cluster.sh stop >/dev/null 2>&1
  else
    for t in "${topics[@]}"; do scripts/cluster.sh delete-topic "$t" >/dev/null 2>&1; done
    while read -r _ b c; do [ -n "$b" ] && scripts/cluster.sh cap "$b" "$c" >/dev/null 2>&1; done <<<"$caps_before"
  fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------------------------------------
# cluster and tools

cluster_up() {
  relayed_cluster_up
  local b
  for b in 1 2 3; do scripts/cluster.sh cap "$b" "$CAP" 2>/dev/null || die "scripts/cluster.sh cap $b $CAP failed"; done
  say "bootstrap $BOOT, every broker capped at $CAP MB/s each way"
}

tool() { # CLASS ARGS...: a Kafka tool against the cluster
  local class=$1; shift
  scripts/cluster.sh tool "$class" --bootstrap-server "$BOOT" "$@"
}
describe() { # TOPIC FILE
  tool org.apache.kafka.tools.TopicCommand --describe --topic "$1" >"$2" 2>"$2.err" || { cat "$2.err" >&2; die "describing $1 failed"; }
}
read_offsets() { # TOPIC FILE
  tool org.apache.kafka.tools.GetOffsetShell --topic "$1" >"$2" 2>"$2.err" || { cat "$2.err" >&2; die "GetOffsetShell $1 failed"; }
}
leaders_of() { # TOPIC: "a/b/c"
  describe "$1" "$RAW/leaders.describe"; py leaders "$RAW/leaders.describe"
}
expect_leaders() { # TOPIC A/B/C WHAT
  local got; got=$(leaders_of "$1")
  [ "$got" = "$2" ] || die "$1: leaders on brokers 1/2/3 are $got after $3, intended $2"
  say "$1: leaders $got ($3)"
}
wait_replicated() { # TOPIC...: every partition led and both replicas in sync
  local t i
  for t in "$@"; do
    for ((i = 0; i < 120; i++)); do
      describe "$t" "$RAW/replicated.describe"
      py replicated "$RAW/replicated.describe" 2 && continue 2
      sleep 1
    done
    die "$t: not fully replicated after 120s"
  done
}

# ---------------------------------------------------------------------------------------------
# histories

create_on() { # TOPIC BROKERS N: a new topic with N partitions over BROKERS (e.g. 1,2)
  topics+=("$1")
  scripts/cluster.sh create-topic "$1" --replica-assignment "$(py assign "$2" "$3")" >/dev/null 2>"$RAW/create.err" ||
    { cat "$RAW/create.err" >&2; die "creating $1 failed"; }
}
add_on() { # TOPIC BROKERS N: N partitions added over BROKERS
  local total
  describe "$1" "$RAW/add.describe"
  total=$(( $(grep -c 'Partition: ' "$RAW/add.describe") + $3 ))
  tool org.apache.kafka.tools.TopicCommand --alter --topic "$1" --partitions "$total" \
    --replica-assignment "$(py assign "$2" "$3" "$RAW/add.describe")" >/dev/null 2>"$RAW/add.err" ||
    { cat "$RAW/add.err" >&2; die "adding partitions to $1 failed"; }
  local i
  for ((i = 0; i < 60; i++)); do
    describe "$1" "$RAW/add.describe"
    [ "$(grep -c 'Partition: ' "$RAW/add.describe")" = "$total" ] && py replicated "$RAW/add.describe" 2 && return
    sleep 0.5
  done
  die "$1: the added partitions have no leader after 30s"
}
restart_broker2() { # broker 2 dies and comes back; its leaders stay where failover put them
  say "broker 2 restarts (kill-broker 2 --wait-fenced, start-broker 2)"
  scripts/cluster.sh kill-broker 2 --wait-fenced 2>"$RAW/restart.log" || { cat "$RAW/restart.log" >&2; die "kill-broker 2 failed"; }
  scripts/cluster.sh start-broker 2 2>>"$RAW/restart.log" || { cat "$RAW/restart.log" >&2; die "start-broker 2 failed"; }
}

# build_round R: every layout x case of round R, sharing one history; sets TOPIC[R/layout/case]
declare -A TOPIC
build_round() {
  local r=$1 l c t tag t22=() t16=()
  for l in "${LAYOUTS[@]}"; do
    for c in "${CASES[@]}"; do
      tag=${l//\//-}
      t=skew-$RUN_ID-r$r-$tag-$c
      TOPIC[$r/$l/$c]=$t
      if [ "$l" = 22/10/4 ]; then t22+=("$t"); else t16+=("$t"); fi
    done
  done
  for t in "${t22[@]}"; do create_on "$t" 1,2 12; expect_leaders "$t" 6/6/0 "created on brokers 1,2"; done
  if [ ${#t22[@]} -gt 0 ]; then
    restart_broker2
    for t in "${t22[@]}"; do expect_leaders "$t" 12/0/0 "broker 2's restart"; done
    wait_replicated "${t22[@]}"
  fi
  for t in "${t16[@]}"; do create_on "$t" 1,2 24; expect_leaders "$t" 12/12/0 "created on brokers 1,2"; done
  for t in "${t22[@]}"; do add_on "$t" 1,2 12; expect_leaders "$t" 18/6/0 "12 partitions added on brokers 1,2"; done
  say "broker 3 joins: 12 partitions added over brokers 1,2,3 to each topic"
  for t in "${t22[@]}"; do add_on "$t" 1,2,3 12; expect_leaders "$t" 22/10/4 "broker 3 joined, 12 partitions added"; done
  for t in "${t16[@]}"; do add_on "$t" 1,2,3 12; expect_leaders "$t" 16/16/4 "broker 3 joined, 12 partitions added"; done
}

# ---------------------------------------------------------------------------------------------
# kroute, beside the cluster: it samples the layout and the log ends, and plans

start_kroute() {
  local p
  for p in "$KR_BOOT" $((KR_BASE + 1)) $((KR_BASE + 2)) $((KR_BASE + 3)) "${KR_ADMIN##*:}"; do
    port_open 127.0.0.1 "$p" && die "port $p is already in use (BENCH_KROUTE_PORT to move kroute's ports)"
  done
  cat >"$OUT/kroute.toml" <<EOF
# written by bench/skew.sh
[listen]
bind_host = "127.0.0.1"
advertised_host = "127.0.0.1"
bootstrap_port = $KR_BOOT
broker_port_base = $KR_BASE

[upstream]
bootstrap_servers = [$(sed 's/\([^,]*\)/"\1"/g; s/,/, /g' <<<"$BOOT")]

[admin]
listen = "$KR_ADMIN"

[skew]
sample_interval_ms = $SAMPLE_MS
EOF
  [ -z "$RATE_WINDOW_MS" ] || echo "rate_window_ms = $RATE_WINDOW_MS" >>"$OUT/kroute.toml"
  "$KROUTE_BIN" --config "$OUT/kroute.toml" </dev/null >"$OUT/kroute.log" 2>&1 &
  KR_PID=$!
  poll 100 0.2 curl -fsS --max-time 2 -o /dev/null "http://$KR_ADMIN/ready" ||
    { tail -n 20 "$OUT/kroute.log" >&2; die "kroute not ready within 20s"; }
  say "kroute pid $KR_PID (admin $KR_ADMIN, [skew] sample_interval_ms = $SAMPLE_MS)"
}

kroute_plan() { # TOPIC TAG DESCRIBE: kroute's plan files $RAW/TAG.reassign.json, $RAW/TAG.election.json
  local t=$1 tag=$2 describe_file=$3 args=() rc=0
  [ -n "$TOLERANCE" ] && args+=(--tolerance "$TOLERANCE")
  curl -fsS --max-time 10 "http://$KR_ADMIN/v1/skew" >"$RAW/$tag.skew.json" 2>"$RAW/$tag.skew.err" ||
    problems+=("GET /v1/skew failed at plan time ($tag: $(head -c 200 "$RAW/$tag.skew.err"))")
  if [ -s "$RAW/$tag.skew.json" ]; then
    local p
    while IFS= read -r p; do [ -n "$p" ] && problems+=("$tag: $p") && say "WARNING: $p"; done \
      < <(py skew-check "$RAW/$tag.skew.json" "$t" "$describe_file" 2>&1 || true)
  fi
  "$KROUTE_BIN" plan --config "$OUT/kroute.toml" --admin "$KR_ADMIN" --topics "$t" "${args[@]}" \
    --reassignment-out "$RAW/$tag.reassign.json" --election-out "$RAW/$tag.election.json" \
    >"$RAW/$tag.plan.txt" 2>&1 || rc=$?
  [ "$rc" = 0 ] || { cat "$RAW/$tag.plan.txt" >&2; die "kroute plan for $t failed (exit $rc)"; }
  say "kroute plan for $t:"; sed 's/^/    /' "$RAW/$tag.plan.txt" >&2
}

generate_plan() { # TOPIC TAG: --generate's files $RAW/TAG.reassign.json, $RAW/TAG.election.json
  local t=$1 tag=$2
  echo "{\"version\":1,\"topics\":[{\"topic\":\"$t\"}]}" >"$RAW/$tag.move.json"
  tool org.apache.kafka.tools.reassign.ReassignPartitionsCommand --generate \
    --topics-to-move-json-file "$RAW/$tag.move.json" --broker-list 1,2,3 >"$RAW/$tag.generate.txt" 2>&1 ||
    { cat "$RAW/$tag.generate.txt" >&2; die "kafka-reassign-partitions --generate for $t failed"; }
  py proposed "$RAW/$tag.generate.txt" "$RAW/$tag.reassign.json"
  describe "$t" "$RAW/$tag.gen.describe"
  py election-all "$RAW/$tag.gen.describe" "$t" "$RAW/$tag.election.json"
}

# ---------------------------------------------------------------------------------------------
# applying a plan with Kafka's tools

reassign() { # FILE TAG: --execute, then --verify until no partition is in progress
  local f=$1 tag=$2 deadline=$((SECONDS + APPLY_TIMEOUT))
  tool org.apache.kafka.tools.reassign.ReassignPartitionsCommand --execute --reassignment-json-file "$f" \
    >"$RAW/$tag.execute.txt" 2>&1 || { cat "$RAW/$tag.execute.txt" >&2; die "kafka-reassign-partitions --execute ($tag) failed"; }
  while :; do
    tool org.apache.kafka.tools.reassign.ReassignPartitionsCommand --verify --reassignment-json-file "$f" \
      >"$RAW/$tag.verify.txt" 2>&1 || true
    grep -q 'still in progress' "$RAW/$tag.verify.txt" || break
    [ "$SECONDS" -lt "$deadline" ] || die "reassignment ($tag) not complete after ${APPLY_TIMEOUT}s"
    sleep 2
  done
  grep -q 'is complete' "$RAW/$tag.verify.txt" || { cat "$RAW/$tag.verify.txt" >&2; die "kafka-reassign-partitions --verify ($tag) did not say complete"; }
}

elect() { # FILE TAG: preferred leader election (retried: a new replica may just have joined the ISR)
  local i
  for ((i = 0; i < 10; i++)); do
    tool org.apache.kafka.tools.LeaderElectionCommand --election-type PREFERRED --path-to-json-file "$1" \
      >"$RAW/$2.elect.txt" 2>&1 && return
    sleep 2
  done
  cat "$RAW/$2.elect.txt" >&2; die "kafka-leader-election ($2) failed 10 times"
}

apply_plan() { # ROUND LAYOUT CASE TOPIC TAG: apply $RAW/TAG.{reassign,election}.json, record what changed
  local r=$1 l=$2 c=$3 t=$4 tag=$5 n_re n_el t0 diff
  n_re=$(py json-partitions "$RAW/$tag.reassign.json" 2>/dev/null || echo 0)
  n_el=$(py json-partitions "$RAW/$tag.election.json" 2>/dev/null || echo 0)
  describe "$t" "$RAW/$tag.apply0.describe"
  tool org.apache.kafka.tools.LogDirsCommand --describe --topic-list "$t" >"$RAW/$tag.logdirs" 2>"$RAW/$tag.logdirs.err" ||
    { cat "$RAW/$tag.logdirs.err" >&2; die "kafka-log-dirs for $t failed"; }
  say "$tag: applying ($n_re partitions in the reassignment file, $n_el in the election file)"
  t0=$(date +%s.%N)
  [ "$n_re" -gt 0 ] && reassign "$RAW/$tag.reassign.json" "$tag"
  [ "$n_el" -gt 0 ] && elect "$RAW/$tag.election.json" "$tag"
  local apply_s; apply_s=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  wait_replicated "$t"
  describe "$t" "$RAW/$tag.apply1.describe"
  diff=$(py diff "$RAW/$tag.apply0.describe" "$RAW/$tag.apply1.describe" "$RAW/$tag.logdirs")
  say "$tag: applied in ${apply_s}s: $diff"
  local planned; planned=$(py plan-summary "$RAW/$tag.plan.txt")
  if [ "$c" = kroute ]; then
    local want got
    want=$(sed -n 's/.*plan_leaders=\([^ ]*\).*/\1/p' <<<"$planned"); got=$(sed -n 's/.*leaders_after=\([^ ]*\).*/\1/p' <<<"$diff")
    [ "$want" = "$got" ] || { problems+=("$tag: kroute's plan said leaders $want after, applied they are $got"); say "WARNING: ${problems[-1]}"; }
  fi
  py record "$OUT/applies.tsv" "round=$r layout=$l case=$c topic=$t plan_reassign=$n_re plan_elect=$n_el apply_s=$apply_s" "$diff" "$planned"
}

# ---------------------------------------------------------------------------------------------
# one measured run

run_load() { # ROUND LAYOUT CASE PHASE TOPIC SECONDS RATE [plan]: the keyed load; with "plan", kroute's plan mid-run
  local r=$1 l=$2 c=$3 phase=$4 t=$5 secs=$6 rate=$7 plan=${8:-} tag="r$1-${2//\//-}-$3-$4" bootstrap=$BOOT words
  [ "$VIA" = kroute ] && bootstrap=127.0.0.1:$KR_BOOT
  describe "$t" "$RAW/$tag.describe"
  read_offsets "$t" "$RAW/$tag.off0"
  say "$tag: keyed load on $t (leaders $(py leaders "$RAW/$tag.describe")) for ${secs}s, $([ "$rate" = -1 ] && echo 'at full speed' || echo "$rate records/s")"
  "$RDKAFKA_PERF_BIN" "$bootstrap" "$t" 1000000000 "$RECORD_SIZE" "$rate" acks=all linger.ms=20 batch.size=131072 \
    "queue.buffering.max.kbytes=$QUEUE_KB" "kroute.keys=$KEYS" "kroute.seconds=$secs" "client.id=bench-skew-$tag" \
    "${EXTRA_PROPS[@]}" >"$RAW/$tag.perf" 2>"$RAW/$tag.perf.err" &
  PRODUCER_PID=$!
  if [ "$plan" = plan ]; then
    sleep "$PLAN_AT"
    kill -0 "$PRODUCER_PID" 2>/dev/null || { cat "$RAW/$tag.perf.err" >&2; die "the producer ($tag) ended before the plan was asked"; }
    kroute_plan "$t" "r$r-${l//\//-}-$c" "$RAW/$tag.describe"
  fi
  wait "$PRODUCER_PID" || { PRODUCER_PID=; tail -n 20 "$RAW/$tag.perf.err" >&2; die "the producer ($tag) failed"; }
  PRODUCER_PID=
  read_offsets "$t" "$RAW/$tag.off1"
  words=$(py run "$tag" "$RAW/$tag.describe" "$RAW/$tag.off0" "$RAW/$tag.off1" "$RAW/$tag.perf" "$RECORD_SIZE") || die "run $tag invalid"
  say "$tag: $(head -n 1 "$RAW/$tag.perf")"
  say "$tag: $words"
  py record "$OUT/runs.tsv" "round=$r layout=$l case=$c phase=$phase topic=$t" "$words"
}

steady_rate() { # LAYOUT: records/s at which its busiest broker runs at PLAN_FRACTION of its cap
  awk -v f="$PLAN_FRACTION" -v cap="$CAP" -v size="$RECORD_SIZE" -v l="$1" -v n=$PARTITIONS 'BEGIN {
    split(l, a, "/"); m = a[1]; if (a[2] > m) m = a[2]; if (a[3] > m) m = a[3]
    printf "%d", f * cap * 1e6 / size * n / m }'
}

one_case() { # ROUND LAYOUT CASE: before, plan, apply, after
  local r=$1 l=$2 c=$3 t=${TOPIC[$1/$2/$3]} tag="r$1-${2//\//-}-$3"
  if [ "$c" = kroute ] && [ "$PLAN_LOAD" = before ]; then
    run_load "$r" "$l" "$c" before "$t" "$RUN_SECONDS" "$RATE" plan
  elif [ "$c" = kroute ]; then
    run_load "$r" "$l" "$c" before "$t" "$RUN_SECONDS" "$RATE"
    # long enough that the load still runs when the plan is asked, and one sample after it
    run_load "$r" "$l" "$c" sample "$t" $((PLAN_AT + SAMPLE_S + 2)) "$(steady_rate "$l")" plan
  else
    run_load "$r" "$l" "$c" before "$t" "$RUN_SECONDS" "$RATE"
    generate_plan "$t" "$tag"
  fi
  apply_plan "$r" "$l" "$c" "$t" "$tag"
  run_load "$r" "$l" "$c" after "$t" "$RUN_SECONDS" "$RATE"
}

# ---------------------------------------------------------------------------------------------
# run

if [ "$BUILD" = 1 ]; then build_kroute_and_rdkafka_perf; fi
[ -x "$RDKAFKA_PERF_BIN" ] || die "$RDKAFKA_PERF_BIN not found (cargo build --release --example rdkafka_perf)"
NEED_KROUTE=0
[[ " ${CASES[*]} " == *" kroute "* || $VIA == kroute ]] && NEED_KROUTE=1
if [ "$NEED_KROUTE" = 1 ]; then
  [ -x "$KROUTE_BIN" ] || die "$KROUTE_BIN not found (cargo build --release --bin kroute)"
  "$KROUTE_BIN" plan --help >/dev/null 2>&1 || die "$KROUTE_BIN has no 'plan' command"
fi

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
bench_start=$SECONDS
cluster_up
[ "$NEED_KROUTE" = 1 ] && start_kroute
REF=
if [ "$REFERENCE" = 1 ] || [ "$WARMUP_SECONDS" -gt 0 ]; then
  REF=skew-$RUN_ID-reference-12-12-12
  create_on "$REF" 1,2,3 $PARTITIONS
  expect_leaders "$REF" 12/12/12 "created with brokers 1,2,3"
fi
if [ "$WARMUP_SECONDS" -gt 0 ]; then
  run_load 0 12/12/12 reference warmup "$REF" "$WARMUP_SECONDS" "$RATE"
fi
for ((r = 1; r <= ROUNDS; r++)); do
  say "round $r of $ROUNDS: building the histories"
  build_round "$r"
  if [ "$REFERENCE" = 1 ]; then
    describe "$REF" "$RAW/ref.describe"
    py election-all "$RAW/ref.describe" "$REF" "$RAW/ref.election.json"
    elect "$RAW/ref.election.json" "r$r-reference"
    expect_leaders "$REF" 12/12/12 "a preferred election after broker 2's restart"
    run_load "$r" 12/12/12 reference reference "$REF" "$RUN_SECONDS" "$RATE"
  fi
  for l in "${LAYOUTS[@]}"; do
    for ((i = 0; i < ${#CASES[@]}; i++)); do
      # the cases' order alternates per round
      one_case "$r" "$l" "${CASES[$(((i + r - 1) % ${#CASES[@]}))]}"
    done
  done
done
if [ "$NEED_KROUTE" = 1 ]; then
  kill -0 "$KR_PID" 2>/dev/null || problems+=("kroute exited during the run (see $OUT/kroute.log)")
  n_warn=$(grep -cE ' (WARN|ERROR) ' "$OUT/kroute.log" || true)
  [ "$n_warn" = 0 ] || problems+=("kroute logged $n_warn warnings/errors (see $OUT/kroute.log)")
fi
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

# ---------------------------------------------------------------------------------------------
# report

IDENTITY_PATHS="examples/rdkafka_perf.rs bench/skew.sh"
bench_identity bench/skew.sh
{
  bench_machine_meta
  cat <<EOF
cap=$CAP
seconds=$RUN_SECONDS
keys=$KEYS
record_size=$RECORD_SIZE
rate=$RATE
queue_kb=$QUEUE_KB
via=$VIA
sample_ms=$SAMPLE_MS
plan_at=$PLAN_AT
tolerance=$TOLERANCE
rate_window_ms=$RATE_WINDOW_MS
plan_load=$PLAN_LOAD
plan_fraction=$PLAN_FRACTION
loadavg_before=$load_before
loadavg_after=$load_after
duration_min=$(( (SECONDS - bench_start + 30) / 60 ))
problems=${problems[*]:-}
EOF
} >"$OUT/meta.txt"
py report "$OUT/runs.tsv" "$OUT/applies.tsv" "$OUT/meta.txt" >"$OUT/results.md"
cat "$OUT/results.md"
say "report: $OUT/results.md ($(( SECONDS - bench_start ))s)"
