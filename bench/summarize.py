#!/usr/bin/env python3
"""Summarizes bench/passthrough.sh results (target/bench/results.tsv; BENCH_SECURITY=tls and
sasl_ssl: target/bench-tls/, target/bench-sasl_ssl/).

  summarize.py RESULTS.tsv DOCS.md|none     print the Markdown report; replace the results
                                            section of DOCS.md for the run's security mode
                                            (between that mode's bench markers)
  summarize.py --fixed-rate FRACTION RESULTS.tsv
                                            print FRACTION x median direct max records/s,
                                            rounded down to 100 (the auto fixed load)

Run metadata comes from the BENCH_META environment variable (key=value lines; security=
none|tls|sasl_ssl picks the section, none if absent).
"""
import csv
import os
import statistics
import sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchdoc import replace_section  # noqa: E402

CASES = ["direct", "kroute", "relay"]
# per BENCH_SECURITY: the section's start and end markers, the heading it gets appended under if
# the markers are missing, and what the cases are in that mode
SECTIONS = {
    "none": (
        "<!-- bench/passthrough.sh results: start (generated, replaced on every run) -->",
        "<!-- bench/passthrough.sh results: end -->",
        "## Results",
        None,
    ),
    "tls": (
        "<!-- bench/passthrough.sh tls results: start (generated, replaced on every run) -->",
        "<!-- bench/passthrough.sh tls results: end -->",
        "## Pass-through results: TLS on both sides",
        "TLS on both sides (`BENCH_SECURITY=tls`): direct = producer with `security.protocol=SSL` "
        "(PEM trust store: the test CA) to the brokers' SSL listeners {direct}; kroute = the same "
        "producer settings to kroute's TLS listener (`[listen.tls]`: the brokers' certificate), kroute "
        "-> `[upstream.tls]` (`ca_file`: the test CA) -> the same SSL listeners",
    ),
    "sasl_ssl": (
        "<!-- bench/passthrough.sh sasl_ssl results: start (generated, replaced on every run) -->",
        "<!-- bench/passthrough.sh sasl_ssl results: end -->",
        "## Pass-through results: SASL_SSL",
        "SASL_SSL (`BENCH_SECURITY=sasl_ssl`): direct = producer with `security.protocol=SASL_SSL`, "
        "SCRAM-SHA-512 as alice (PEM trust store: the test CA) to the brokers' SASL_SSL listeners "
        "{direct}; kroute = the same producer settings to kroute's TLS listener, kroute in "
        '`[upstream.sasl] mode = "passthrough"` without credentials of its own (the client\'s SCRAM '
        "exchange goes through to the broker) -> `[upstream.tls]` -> the same SASL_SSL listeners",
    ),
}

# targets from the issue
T_THROUGHPUT = 0.95  # kroute >= 0.95x direct throughput at max load
T_P99 = 1.10  # kroute p99 <= 1.1x direct at fixed load
T_RELAY = 0.95  # kroute within 5% of the L4 relay (max throughput)
SUSTAIN = 0.95  # a fixed-load run must achieve >= 95% of the offered rate


def load(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    for r in rows:
        for k, v in r.items():
            if k not in ("phase", "round", "case"):
                r[k] = float(v)
    return rows


def fixed_rate(fraction, path):
    rps = [r["records_per_s"] for r in load(path) if r["phase"] == "max" and r["case"] == "direct"]
    if not rps:
        sys.exit("summarize.py: no direct max-throughput runs to derive the fixed load from")
    rate = int(statistics.median(rps) * float(fraction) / 100) * 100
    print(max(rate, 100))


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def paired(rows, phase, metric, case, base):
    """median over rounds of (case / base) in the same round"""
    by_round = {}
    for r in rows:
        if r["phase"] == phase:
            by_round.setdefault(r["round"], {})[r["case"]] = r[metric]
    ratios = [v[case] / v[base] for v in by_round.values() if case in v and base in v and v[base] > 0]
    return med(ratios)


def fmt_ratio(x):
    return "n/a" if x != x else f"{x:.3f}x"


def has_relay(rows):
    return any(r["case"] == "relay" for r in rows)


def phase_table(rows, phase):
    rs = [r for r in rows if r["phase"] == phase]
    if not rs:
        return None, {}
    offered = rs[0]["offered_rps"]
    out = []
    title = "Max throughput (`--throughput -1`)" if phase == "max" else f"Fixed offered load ({offered:.0f} records/s)"
    n_rounds = len({r["round"] for r in rs})
    out.append(f"**{title}**, median of {n_rounds} round(s); ratios are medians of per-round ratios to direct (same round)")
    out.append("")
    out.append("| case | records/s | MB/s | avg ms | p99 ms | throughput vs direct | avg vs direct | p99 vs direct |")
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|")
    ratios = {}
    for c in CASES:
        cr = [r for r in rs if r["case"] == c]
        if not cr:
            continue
        t = paired(rows, phase, "records_per_s", c, "direct")
        a = paired(rows, phase, "avg_ms", c, "direct")
        p = paired(rows, phase, "p99_ms", c, "direct")
        ratios[c] = dict(tput=t, avg=a, p99=p)
        out.append(
            f"| {c} | {med([r['records_per_s'] for r in cr]):.0f} | {med([r['mb_per_s'] for r in cr]):.2f} | "
            f"{med([r['avg_ms'] for r in cr]):.2f} | {med([r['p99_ms'] for r in cr]):.0f} | "
            f"{fmt_ratio(t)} | {fmt_ratio(a)} | {fmt_ratio(p)} |"
        )
    ratios["kroute/relay"] = dict(
        tput=paired(rows, phase, "records_per_s", "kroute", "relay"),
        avg=paired(rows, phase, "avg_ms", "kroute", "relay"),
        p99=paired(rows, phase, "p99_ms", "kroute", "relay"),
    )
    kr = ratios["kroute/relay"]
    if has_relay(rs):
        out.append(
            f"| kroute vs relay | | | | | {fmt_ratio(kr['tput'])} | {fmt_ratio(kr['avg'])} | {fmt_ratio(kr['p99'])} |"
        )
    out.append("")
    if phase == "fixed":
        short = [r for r in rs if r["records_per_s"] < SUSTAIN * offered]
        ratios["unsustained"] = short
        if short:
            out.append(
                "Did NOT sustain the offered load (< 95%): "
                + ", ".join(f"round {r['round']} {r['case']} {r['records_per_s']:.0f}/s" for r in short)
                + ". Latency ratios at this load are not comparable; lower BENCH_FIXED_RATE."
            )
            out.append("")
    return "\n".join(out), ratios


def per_gb(cpu_s, nbytes):
    return cpu_s / (nbytes / 1e9) if nbytes else float("nan")


def kroute_cpu_per_gb(rows, phase):
    """kroute CPU seconds per GB of Produce request bytes over a phase's kroute runs"""
    k = [r for r in rows if r["phase"] == phase and r["case"] == "kroute"]
    return sum(r["kroute_cpu_s"] for r in k), sum(r["kroute_produce_bytes"] for r in k)


def relay_name():
    """the relay case's relay (bench/passthrough.sh BENCH_L4_RELAY)"""
    return META.get("l4_relay") or "socat"


def cpu_lines(rows):
    relay = has_relay(rows)
    out = ["**Proxy CPU cost** (CPU seconds of the proxy process per GB it received from the producer)", ""]
    cols = ["phase", "kroute CPU s", "kroute Produce GB", "kroute CPU s/GB"]
    if relay:
        cols += [f"{relay_name()} CPU s", "relay GB", f"{relay_name()} CPU s/GB"]
    out.append("| " + " | ".join(cols) + " |")
    out.append("|---|" + "---:|" * (len(cols) - 1))
    for phase in ("max", "fixed"):
        s = [r for r in rows if r["phase"] == phase and r["case"] == "relay"]
        kc, kb = kroute_cpu_per_gb(rows, phase)
        if not kb and not s:
            continue
        line = f"| {phase} | {kc:.2f} | {kb / 1e9:.3f} | {per_gb(kc, kb):.2f} |"
        if relay:
            sc, sb = sum(r["relay_cpu_s"] for r in s), sum(r["relay_bytes"] for r in s)
            line += f" {sc:.2f} | {sb / 1e9:.3f} | {per_gb(sc, sb):.2f} |"
        out.append(line)
    out.append("")
    return "\n".join(out)


def evidence(rows):
    relay = has_relay(rows)
    out = [
        "**Traffic went where it should** (per-run counter deltas; the bench fails otherwise) "
        "and kroute's CPU per run (in direct/relay runs: kroute idle)",
        "",
    ]
    out.append(
        "| phase | round | case | records/s | p99 ms | records x size | kroute Produce bytes (requests, connections) | kroute CPU s (s/GB) |"
        + (" relay veth bytes (connections) |" if relay else "")
    )
    out.append("|---|---|---|---:|---:|---:|---:|---:|" + ("---:|" if relay else ""))
    for r in rows:
        cpu = f"{r['kroute_cpu_s']:.2f}"
        if r["case"] == "kroute":
            cpu += f" ({per_gb(r['kroute_cpu_s'], r['kroute_produce_bytes']):.2f})"
        out.append(
            f"| {r['phase']} | {r['round']} | {r['case']} | {r['records_per_s']:.0f} | {r['p99_ms']:.0f} | "
            f"{r['records'] * record_size():.0f} | "
            f"{r['kroute_produce_bytes']:.0f} ({r['kroute_produce_requests']:.0f}, {r['kroute_connections']:.0f}) | {cpu} |"
            + (f" {r['relay_bytes']:.0f} ({r['relay_connections']:.0f}) |" if relay else "")
        )
    out.append("")
    return "\n".join(out)


def record_size():
    return float(META.get("record_size", "1024"))


def verdict(ok):
    return "PASS" if ok else "MISS"


def security():
    mode = META.get("security", "none")
    if mode not in SECTIONS:
        sys.exit(f"summarize.py: unknown security mode '{mode}' in BENCH_META")
    return mode


def report(rows):
    parts = []
    m = META
    relay = has_relay(rows)
    parts.append(f"### Run of {m.get('date', '?')}")
    parts.append("")
    parts.append("```")
    parts.append(m.get("command", "bench/passthrough.sh"))
    parts.append("```")
    parts.append("")
    parts.append(
        f"- machine: {m.get('nproc', '?')} CPUs ({m.get('cpu', '?')}), {m.get('mem', '?')}, Linux {m.get('kernel', '?')}; "
        f"load average before/after: {m.get('loadavg_before', '?')} / {m.get('loadavg_after', '?')}"
    )
    parts.append(
        f"- kroute {m.get('kroute', '?')} (release build); Apache Kafka {m.get('kafka', '?')} "
        f"(1 controller + 3 brokers, scripts/cluster.sh); {m.get('java', '?')}"
        + ((f"; socat {m.get('socat', '?')}" if relay_name() == "socat" else f"; relay case: {relay_name()}") if relay else "")
    )
    desc = SECTIONS[security()][3]
    if desc:
        parts.append("- " + desc.format(direct=m.get("direct_bootstrap", "?")) + "; no relay case")
    parts.append(
        f"- {m.get('rounds', '?')} rounds per phase, cases in rotating order; max: {m.get('records', '?')} records per run; "
        f"fixed: {m.get('fixed_rate', '?')} records/s (setting: {m.get('fixed_rate_setting', '?')}"
        + (f", {m.get('fixed_fraction')} x median direct max" if m.get("fixed_rate_setting") == "auto" else "")
        + f") for {m.get('fixed_seconds', '?')} s per run; {m.get('record_size', '?')} B records, acks=all; "
        f"warm-up {m.get('warmup_records', '?')} records per case; topic {m.get('topic', '?')}; "
        f"bench took {m.get('duration_s', '?')} s"
    )
    parts.append("")
    ratios = {}
    for phase in ("max", "fixed"):
        t, r = phase_table(rows, phase)
        if t:
            parts.append(t)
            ratios[phase] = r
    parts.append(cpu_lines(rows))

    v = ["**Targets**", ""]
    if "max" in ratios and "kroute" in ratios["max"]:
        t = ratios["max"]["kroute"]["tput"]
        v.append(f"- throughput >= {T_THROUGHPUT}x direct at max load: {fmt_ratio(t)} - {verdict(t >= T_THROUGHPUT)}")
        t = ratios["max"]["kroute/relay"]["tput"]
        if relay:
            v.append(f"- within 5% of the L4 relay (max throughput >= {T_RELAY}x relay): {fmt_ratio(t)} - {verdict(t >= T_RELAY)}")
    if "fixed" in ratios and "kroute" in ratios["fixed"]:
        p = ratios["fixed"]["kroute"]["p99"]
        note = " (offered load not sustained by every run, see above)" if ratios["fixed"].get("unsustained") else ""
        v.append(f"- p99 <= {T_P99}x direct at fixed load: {fmt_ratio(p)} - {verdict(p <= T_P99)}{note}")
        kr = ratios["fixed"]["kroute/relay"]
        if relay:
            v.append(f"- for reference, kroute vs relay at fixed load: avg {fmt_ratio(kr['avg'])}, p99 {fmt_ratio(kr['p99'])}")
    cpu = []
    for phase in ("max", "fixed"):
        kc, kb = kroute_cpu_per_gb(rows, phase)
        if kb:
            cpu.append(f"{per_gb(kc, kb):.2f} s/GB at {phase} load")
    if cpu:
        v.append(f"- kroute CPU per GB of Produce requests (reported, no target): {', '.join(cpu)}")
    v.append("")
    parts.append("\n".join(v))
    parts.append(fetch_lines(os.environ.get("BENCH_FETCH_TSV", "")))
    parts.append(evidence(rows))
    return "\n".join(parts)


def fetch_lines(path):
    """The fetch phase's table (issue 28, part 1): read throughput paired with direct per round,
    and the proxies' CPU per GB read."""
    if not path or not os.path.exists(path):
        return ""
    rows = []
    with open(path) as f:
        header = f.readline().rstrip("\n").split("\t")
        for line in f:
            r = dict(zip(header, line.rstrip("\n").split("\t")))
            for k in header:
                if k != "case":
                    # "-": a latency the client does not report (float("nan") for it)
                    r[k] = float("nan") if r[k] == "-" else float(r[k])
            rows.append(r)
    if not rows:
        return ""
    librdkafka = META.get("fetch_client") == "librdkafka"
    by = {(r["round"], r["case"]): r for r in rows}
    cases = [c for c in ("direct", "kroute", "relay") if any(r["case"] == c for r in rows)]
    out = [
        f"**Reading it back** (fetch phase: "
        + ("librdkafka (examples/rdkafka_consume)" if librdkafka else "ConsumerPerformance")
        + f", a fresh group per run, {META.get('fetch_records', '?')} records from the earliest "
        "offset; 'fetching' MB/s leaves out the group join; fetch latency: "
        + (
            "librdkafka's round trips to the brokers while records came, mean / p50 / p99 / max"
            if librdkafka
            else "the consumer's fetch-latency-avg / -max"
        )
        + ", median of the rounds)",
        "",
        "| case | MB/s (median) | vs direct (median of rounds) | fetching MB/s | fetch latency ms | proxy CPU s/GB read | kroute RSS max MiB |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    ratios = {}
    for c in cases:
        rs = [r for r in rows if r["case"] == c]
        pairs = [
            by[(r["round"], c)]["fetch_mb_per_s"] / by[(r["round"], "direct")]["fetch_mb_per_s"]
            for r in rs
            if (r["round"], "direct") in by and by[(r["round"], "direct")]["fetch_mb_per_s"] > 0
        ]
        ratios[c] = med(pairs) if pairs else float("nan")
        if c == "kroute":
            cpu = per_gb(sum(r["kroute_cpu_s"] for r in rs), sum(r["kroute_fetch_bytes"] for r in rs))
            rss = f"{max(r['kroute_rss_kib'] for r in rs) / 1024:.1f}"
        elif c == "relay":
            cpu = per_gb(sum(r["relay_cpu_s"] for r in rs), sum(r["relay_bytes"] for r in rs))
            rss = "-"
        else:
            cpu, rss = float("nan"), "-"
        out.append(
            f"| {c} | {med([r['mb_per_s'] for r in rs]):.1f} | {fmt_ratio(ratios[c])} | "
            f"{med([r['fetch_mb_per_s'] for r in rs]):.1f} | {latency_cell(rs, librdkafka)} | "
            + ("-" if cpu != cpu else f"{cpu:.2f}")
            + f" | {rss} |"
        )
    out.append("")
    if "kroute" in ratios:
        t = ratios["kroute"]
        out.append(f"- read throughput >= 0.98x direct: {fmt_ratio(t)} - {verdict(t >= 0.98)}")
    if "relay" in cases and "kroute" in cases:
        k = [r for r in rows if r["case"] == "kroute"]
        s_ = [r for r in rows if r["case"] == "relay"]
        kc = per_gb(sum(r["kroute_cpu_s"] for r in k), sum(r["kroute_fetch_bytes"] for r in k))
        sc = per_gb(sum(r["relay_cpu_s"] for r in s_), sum(r["relay_bytes"] for r in s_))
        ok = kc <= 0.5 * sc
        out.append(f"- kroute CPU per GB read <= 0.5x {relay_name()}'s: {kc / sc:.2f}x - {verdict(ok)}")
    out.append("")
    return "\n".join(out)


def latency_cell(rs, librdkafka):
    """Fetch latency of a case's runs, the median of each figure over the rounds."""
    names = ("lat_mean_ms", "lat_p50_ms", "lat_p99_ms", "lat_max_ms") if librdkafka else ("lat_mean_ms", "lat_max_ms")
    cells = []
    for n in names:
        vs = [r[n] for r in rs if n in r and r[n] == r[n]]
        cells.append(f"{med(vs):.2f}" if vs else "-")
    return " / ".join(cells)


def write_docs(path, text):
    start, end, heading, _ = SECTIONS[security()]
    replace_section(path, start, end, text, heading)

META = {}


def main():
    global META
    if len(sys.argv) == 4 and sys.argv[1] == "--fixed-rate":
        fixed_rate(sys.argv[2], sys.argv[3])
        return
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    for line in os.environ.get("BENCH_META", "").splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            META[k] = v
    security()  # a valid mode, before anything is written
    rows = load(sys.argv[1])
    text = report(rows)
    print(text)
    if sys.argv[2] != "none":
        write_docs(sys.argv[2], text)
        print(f"bench: results written to {sys.argv[2]}", file=sys.stderr)


if __name__ == "__main__":
    main()
