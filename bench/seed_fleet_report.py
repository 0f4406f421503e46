#!/usr/bin/env python3
"""Helper of bench/seed_fleet.sh (issue 26 part 1): one case's numbers, the report.

  seed_fleet_report.py case JSON key=value...
      Reads one case's files (one sampler file per group, from bench/fleet_report.py sample; the
      producers' logs; in case kroute the sidecars' metrics and logs), prints a summary and writes
      JSON. Exit 1 when the case is invalid (a producer failed, a topic holds fewer records than
      its producers had acknowledged, a kroute's Produce bytes below 95% of its group's).
  seed_fleet_report.py report CASES_DIR DOCS
      Prints the markdown section and replaces "## Part 1: seed 000's full setup" in DOCS (or
      inserts it before "## Part 2: N sidecars on real processes"; DOCS "none": print only). Run
      facts come from $BENCH_META (key=value lines).
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fleet_report import metric_sum, percentile, read_producers, read_samples  # noqa: E402

SECTION = "## Part 1: seed 000's full setup"
NEXT = "## Part 2: N sidecars on real processes"


def mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")


def stability(series):
    """mean, p5, p95 of 1 s shares and the mean absolute change from one second to the next"""
    ch = [abs(b - a) for a, b in zip(series, series[1:])]
    return {
        "mean": mean(series),
        "p5": percentile(series, 0.05),
        "p95": percentile(series, 0.95),
        "min": min(series) if series else float("nan"),
        "max": max(series) if series else float("nan"),
        "change": mean(ch),
    }


def cmd_case(out, *kvs):
    a = dict(kv.split("=", 1) for kv in kvs)
    case = a["case"]
    ng, per = int(a["groups"]), int(a["per_group"])
    topics, layouts = a["topics"].split(","), a["layouts"].split(",")
    size, warmup, secs = int(a["record_size"]), float(a["warmup"]), float(a["seconds"])
    t_start = float(a["t_start"])
    raw = a["raw"]
    w0, w1 = t_start + warmup, t_start + warmup + secs
    problems = []
    groups = []
    bins = []  # per group: {second index: [d1, d2, d3]}
    for g in range(1, ng + 1):
        # producers
        perf, acked, retries, found = read_producers(f"{raw}.g{g}", per, f"group {g} ")
        problems += found
        p50s = [int(m.group(6)) for m in perf]
        p99s = [int(m.group(8)) for m in perf]
        # the brokers' log ends of this group's topic
        rows = read_samples(f"{raw}.g{g}.samples")
        if len(rows) < 3:
            problems.append(f"group {g}: only {len(rows)} samples")
            rows = rows or [(0.0, [0, 0, 0])]
        grown = [rows[-1][1][b] - rows[0][1][b] for b in range(3)]
        if sum(grown) < acked:
            problems.append(f"group {g}: the brokers' offsets grew by {sum(grown)}, the producers had {acked} acknowledged")
        bn = {}
        for (ta, ca), (tb, cb) in zip(rows, rows[1:]):
            if ta < w0 - 0.5 or tb > w1 + 0.5:
                continue
            bn[int(round(tb - w0))] = ([cb[b] - ca[b] for b in range(3)], tb - ta)
        bins.append(bn)
        groups.append({
            "topic": topics[g - 1],
            "layout": layouts[g - 1],
            "acked": acked,
            "duplicates": max(0, sum(grown) - acked),
            "retries": retries,
            "producer_mbps": sum(float(m.group(2)) for m in perf) * size / 1e6,
            "p50_median": percentile(p50s, 0.5),
            "p50_max": max(p50s) if p50s else float("nan"),
            "p99_median": percentile(p99s, 0.5),
            "p99_max": max(p99s) if p99s else float("nan"),
        })
    # the seconds every group's sampler saw
    common = sorted(set.intersection(*(set(b) for b in bins))) if bins else []
    if len(common) < 3:
        problems.append(f"only {len(common)} one-second intervals in the measured window")
    span = sum(mean([bins[g][k][1] for g in range(ng)]) for k in common)
    tot = [sum(bins[g][k][0][b] for g in range(ng) for k in common) for b in range(3)]
    all_recs = sum(tot)
    # per broker, all groups
    brokers = []
    for b in range(3):
        series = []
        for k in common:
            s = sum(sum(bins[g][k][0]) for g in range(ng))
            if s > 0:
                series.append(sum(bins[g][k][0][b] for g in range(ng)) / s)
        brokers.append({
            "broker": b + 1,
            "mbps": tot[b] * size / span / 1e6 if span else 0.0,
            "share": tot[b] / all_recs if all_recs else float("nan"),
            **{"s_" + k: v for k, v in stability(series).items()},
        })
    # per group: its throughput, its share of the cluster, its brokers' shares
    for g in range(ng):
        gt = [sum(bins[g][k][0][b] for k in common) for b in range(3)]
        gs = sum(gt)
        groups[g]["mbps"] = gs * size / span / 1e6 if span else 0.0
        groups[g]["cluster_share"] = gs / all_recs if all_recs else float("nan")
        cs = []
        for k in common:
            s = sum(sum(bins[h][k][0]) for h in range(ng))
            if s > 0:
                cs.append(sum(bins[g][k][0]) / s)
        groups[g]["cluster_share_stab"] = stability(cs)
        groups[g]["brokers"] = []
        for b in range(3):
            series = [bins[g][k][0][b] / sum(bins[g][k][0]) for k in common if sum(bins[g][k][0]) > 0]
            groups[g]["brokers"].append({"share": gt[b] / gs if gs else float("nan"), **stability(series)})
    # kroute: the traffic went through each group's sidecar
    if case == "kroute":
        for g in range(1, ng + 1):
            text = open(f"{raw}.k{g}.metrics").read()
            kb = metric_sum(text, "kroute_request_bytes_total", 'api="Produce"')
            moved = metric_sum(text, "kroute_batches_moved_total")
            up = [metric_sum(text, "kroute_upstream_produce_bytes_total", f'broker="{b + 1}"') for b in range(3)]
            warn = sum(1 for line in open(f"{raw}.k{g}.log", errors="replace") if " WARN " in line or " ERROR " in line)
            gr = groups[g - 1]
            gr.update(kroute_produce_bytes=kb, kroute_moved_batches=moved, kroute_upstream=up, kroute_warn_lines=warn)
            if kb < 0.95 * gr["acked"] * size:
                problems.append(f"kroute {g}: Produce bytes {kb:.0f} < 95% of its group's {gr['acked'] * size} acknowledged")
    res = {
        "case": case,
        "intervals": len(common),
        "span_s": span,
        "mbps": all_recs * size / span / 1e6 if span else 0.0,
        "brokers": brokers,
        "groups": groups,
        "valid": not problems,
        "problems": problems,
    }
    with open(out, "w") as f:
        json.dump(res, f, indent=1)
    print(
        f"seed-fleet: {case}: {res['mbps']:.2f} MB/s on the brokers over {len(common)} s; broker shares "
        + " / ".join(f"{b['share']:.3f} (p5-p95 {b['s_p5']:.3f}-{b['s_p95']:.3f}, change {b['s_change']:.3f})" for b in brokers)
        + "; groups "
        + "; ".join(
            f"{gr['topic']} {gr['mbps']:.2f} MB/s p50 {gr['p50_median']:.0f} p99 {gr['p99_median']:.0f} ms"
            + (f", kroute Produce {gr['kroute_produce_bytes'] / 1e6:.1f} MB, {gr['kroute_moved_batches']:.0f} moved"
               if case == "kroute" else "")
            for gr in groups
        ),
        file=sys.stderr,
    )
    for p in problems:
        print(f"seed-fleet: INVALID {case}: {p}", file=sys.stderr)
    sys.exit(1 if problems else 0)


def band(s):
    return f"{s['p5']:.3f}-{s['p95']:.3f}"


def cmd_report(cases_dir, docs):
    meta = dict(l.split("=", 1) for l in os.environ.get("BENCH_META", "").splitlines() if "=" in l)
    cases = {}
    for c in ("direct", "kroute"):
        p = os.path.join(cases_dir, c + ".json")
        if os.path.exists(p):
            cases[c] = json.load(open(p))
    d = cases.get("direct")
    k = cases.get("kroute")
    cap = float(meta.get("cap", "0") or 0)
    o = [SECTION, ""]
    o.append(
        "Seed 000 ran three producer hosts at once, each with 4 producers writing its own topic, on the "
        "same three brokers. Here: the same three groups on a cluster of their own whose every broker "
        "link is capped, first every producer straight to the brokers (\"direct\", the client's default "
        "partitioner), then each group behind its own kroute (\"kroute\", one sidecar per host). Where "
        "the records went is counted on the brokers: every second, the latest offset of every partition "
        "of each topic, summed per leader."
    )
    o += ["", "### Command", "", "```sh",
          "bench/seed_fleet.sh                                   # about 3.5 min on 2 cores (7 with a rebuild, busy machine)",
          "BENCH_SEED_SECONDS=15 BENCH_SEED_WARMUP=5 BENCH_SEED_WARM_RUN=0 bench/seed_fleet.sh   # smoke: about 2 min",
          "```", "", "### Setup", ""]
    o.append(
        f"- Cluster: its own (`scripts/cluster.sh`, `KROUTE_CLUSTER_PORT_OFFSET={meta.get('port_offset', '?')}`, relayed "
        f"mode), every broker's link capped at {meta.get('cap', '?')} MB/s each way (`cluster.sh cap`). A leader's link "
        f"carries the produce traffic in and the two follower copies out (RF 3), so each broker leads at most "
        f"{cap / 2:g} MB/s of records and the cluster {1.5 * cap:g} MB/s."
    )
    o.append(
        "- Topics (seed 000): testing-1 36 partitions led 22/10/4 by brokers 1/2/3, testing-2 16/16/4, testing-3 "
        "12/12/12; RF 3, min.insync.replicas=2, exact replica assignment (bench/routing.sh's layout, checked before "
        "and after). Broker 1 leads 50 of the 108 partitions, broker 2 38, broker 3 20."
    )
    off = float(meta.get("offered_mbps", "0") or 0)
    o.append(
        f"- Load: 3 groups x 4 producers, `examples/rdkafka_perf` (librdkafka {meta.get('client_version', '').replace('librdkafka ', '')}; "
        f"12 Java producers would not fit beside four JVM brokers on 2 cores), each at a fixed {meta.get('rate', '?')} "
        f"records/s: {meta.get('offered_mbps', '?')} MB/s offered in all (10^6 bytes of record values per second), keyless "
        f"records of {meta.get('record_size', '?')} bytes, `{meta.get('producer_props', '')}`. A plain client spreads each "
        f"topic's records evenly over its partitions, so broker 1 is offered {off * (22 / 36 + 16 / 36 + 12 / 36) / 3:.2f} MB/s "
        f"against the {cap / 2:g} it can lead: the cap binds, while the cluster ({1.5 * cap:g} MB/s) could carry the "
        f"{off:g} MB/s if the records went where the capacity is. librdkafka's default partitioner for keyless records "
        "is sticky (a random partition per batch window), not the Java client's adaptive one (KIP-794), which "
        "leans away from slow brokers a little."
    )
    o.append(
        "- kroute: one process per group, each with its own config and ports, `[routing] strategy = \"strict-cost\"` "
        "on its group's topic, all other settings default; started fresh for the case."
    )
    o.append(
        f"- Each case: {meta.get('warmup', '?')} s warm-up, then {meta.get('seconds', '?')} s measured (the 1 s "
        "intervals inside it), then the producers stop and flush. Shares: a broker's (or group's) records over all "
        "records per 1 s interval, p5-p95 of those 1 s shares, \"change/s\" the mean absolute change from one second "
        "to the next. MB/s: records the brokers acknowledged in the window. p50/p99: each producer's, from send() to "
        "its delivery report over its whole run (warm-up and flush included), median of the group's 4 (worst)."
    )
    o += ["", f"### Run of {meta.get('date', '?')}", ""]
    dur = int(float(meta.get("duration_s", 0) or 0))
    o.append(
        f"`{meta.get('command', '?')}` (kroute {meta.get('kroute', '?')}; Kafka {meta.get('kafka', '?')}; "
        f"{meta.get('client_version', '')}; {meta.get('nproc', '?')} cores, {meta.get('cpu', '?')}; {dur // 60} min {dur % 60} s; "
        f"load average before/after {meta.get('loadavg_before', '?')} / {meta.get('loadavg_after', '?')})"
    )
    o += ["", "Per broker (all three topics):", "",
          "| case | broker | MB/s | share | p5-p95 of the 1 s shares | change/s |",
          "|---|---:|---:|---:|---|---:|"]
    for c, r in cases.items():
        bad = "" if r["valid"] else " (INVALID)"
        for b in r["brokers"]:
            o.append(
                f"| {c}{bad} | {b['broker']} | {b['mbps']:.2f} | {b['share']:.3f} | {b['s_p5']:.3f}-{b['s_p95']:.3f} | "
                f"{b['s_change']:.3f} |"
            )
        o.append(f"| {c}{bad} | all | {r['mbps']:.2f} | | {r['intervals']} intervals | |")
    o += ["", "Per group (host): its throughput, its share of the cluster's records, its producers' latency, and "
          "how its own records split over the brokers (share, p5-p95 of the 1 s shares, change/s):", "",
          "| case | group (leaders) | MB/s | cluster share (p5-p95) | p50 ms | p99 ms | broker 1 | broker 2 | broker 3 |",
          "|---|---|---:|---|---:|---:|---|---|---|"]
    for c, r in cases.items():
        for gr in r["groups"]:
            cs = gr["cluster_share_stab"]
            bs = " | ".join(
                f"{x['share']:.3f} ({band(x)}, {x['change']:.3f})" for x in gr["brokers"]
            )
            o.append(
                f"| {c} | {gr['topic']} ({gr['layout']}) | {gr['mbps']:.2f} | {gr['cluster_share']:.3f} ({band(cs)}) | "
                f"{gr['p50_median']:.0f} ({gr['p50_max']:.0f}) | {gr['p99_median']:.0f} ({gr['p99_max']:.0f}) | {bs} |"
            )
    if d and k:
        o.append("")
        ratios = []
        for gd, gk in zip(d["groups"], k["groups"]):
            tx = gk["mbps"] / gd["mbps"] if gd["mbps"] else float("nan")
            px = gk["p99_median"] / gd["p99_median"] if gd["p99_median"] else float("nan")
            ratios.append(f"{gd['topic']} {tx:.2f}x throughput, {px:.3f}x p99")
        o.append(
            f"kroute against direct: {k['mbps'] / d['mbps']:.2f}x the cluster's throughput; " + "; ".join(ratios) + "."
        )
    if k:
        o.append("")
        o.append(
            "Through kroute (case kroute), per sidecar: "
            + "; ".join(
                f"kroute {i + 1} ({gr['topic']}) `kroute_request_bytes_total{{api=\"Produce\"}}` "
                f"{gr['kroute_produce_bytes'] / 1e6:.0f} MB for {gr['acked'] * int(meta.get('record_size', 10240)) / 1e6:.0f} MB "
                f"of acknowledged records, {gr['kroute_moved_batches']:.0f} batches moved, upstream Produce bytes to "
                f"brokers 1/2/3 " + "/".join(f"{u / max(1.0, sum(gr['kroute_upstream'])):.3f}" for u in gr["kroute_upstream"])
                + f", {gr['kroute_warn_lines']} WARN/ERROR log lines"
                for i, gr in enumerate(k["groups"])
            )
            + " (each must cover 95% of its group's acknowledged bytes: checked)."
        )
    o.append("")
    o.append(
        "Every case: each topic holds at least the records its producers had acknowledged (offsets); "
        + ", ".join(
            f"{c} {gr['topic']}: {gr['duplicates']} more" for c, r in cases.items() for gr in r["groups"] if gr["duplicates"]
        )
        + ("" if any(gr["duplicates"] for r in cases.values() for gr in r["groups"]) else "no duplicates")
        + " (non-idempotent producers). Min and max of the brokers' 1 s shares: "
        + "; ".join(
            f"{c} " + ", ".join(f"b{b['broker']} [{b['s_min']:.3f}, {b['s_max']:.3f}]" for b in r["brokers"])
            for c, r in cases.items()
        )
        + ". Raw files: target/bench-seed-fleet/ (cases/*.json, raw/: samples, producer logs, kroute metrics and logs)."
    )
    for c, r in cases.items():
        if r["problems"]:
            o.append("")
            o.append(f"INVALID {c}: " + "; ".join(r["problems"]))
    if meta.get("notes"):
        o += ["", meta["notes"]]
    text = "\n".join(o) + "\n"
    print(text)
    if docs == "none":
        return
    old = open(docs).read() if os.path.exists(docs) else "# Many kroute sidecars sharing one cluster (issue 26)\n"
    i = old.find(SECTION)
    if i >= 0:
        j = old.find("\n## ", i + len(SECTION))
        new = old[:i] + text + ("\n" + old[j + 1:] if j >= 0 else "")
    else:
        j = old.find(NEXT)
        new = old[:j] + text + "\n" + old[j:] if j >= 0 else old.rstrip("\n") + "\n\n" + text
    with open(docs, "w") as f:
        f.write(new)
    print(f"seed-fleet: wrote {docs} ({SECTION[3:]})", file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) < 2 or "cmd_" + sys.argv[1] not in globals():
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    globals()["cmd_" + sys.argv[1]](*sys.argv[2:])
