#!/usr/bin/env python3
"""Checks a bench/soak.sh run and prints its report (markdown) on stdout.

    check.py RUN_DIR               the checks and the report; exit 1 if a check failed
    check.py --caught-up RUN_DIR   exit 0 once the consumers have read up to end-offsets.txt

What the run dir holds (written by bench/soak.sh and its clients):
  producer-<p>.log     a <id> <partition> <offset> <send_ms> <ack_ms> | f <id> <send_ms> <fail_ms> <err>
                       | e <ms> <err> (librdkafka) | done ...
  consumer.<i>         r <topic> <partition> <offset> <key> <id> <seq> | e <ms> <err> | done ...
  logs/*.err           the Java clients' log4j lines "<ms> <LEVEL> ..." (WARN and up)
  faults.log           <start_ms> <end_ms> <kind> <detail...>
  kroute-stops.log     <ms> <pid> TERM|KILL, then <ms> <pid> exit=<rc>
  rss.log              <ms> <pid> <rss KiB> every 10 s
  metrics.log          <ms> <pid> <series> <value>: kroute's counters every 10 s and before each stop
  end-offsets.txt      topic:partition:end offset (GetOffsetShell, after the producers stopped)
  load-start, load-end epoch ms; meta.txt key=value (seed, minutes, rss_window_s, value_bytes, ...)
  kroute.log           every kroute process's log, one after the other
"""

import bisect
import collections
import glob
import os
import re
import statistics
import sys

KINDS = ["broker-kill", "cut", "delay", "elect", "reassign", "kroute-term", "kroute-kill"]
TOPIC_OF = {"jl": "soak-keyless", "rl": "soak-keyless", "jk": "soak-keyed", "rk": "soak-keyed"}
CLIENT_OF = {"jl": "Java", "jk": "Java", "rl": "librdkafka", "rk": "librdkafka"}
NO_FAULT = "(before the first fault)"


def read_lines(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                yield line.rstrip("\n")
    except FileNotFoundError:
        return


def consumed_records(run):
    """(topic, partition, offset) -> (key, id, seq), deduplicated; also the consumer error lines."""
    recs = {}
    errors = []
    deliveries = 0
    for path in sorted(glob.glob(os.path.join(run, "consumer.*"))):
        for line in read_lines(path):
            w = line.split(" ")
            if w[0] == "r" and len(w) >= 7:
                deliveries += 1
                recs[(w[1], int(w[2]), int(w[3]))] = (w[4], w[5], w[6])
            elif w[0] == "e" and len(w) >= 3:
                errors.append((int(w[1]), " ".join(w[2:])))
    return recs, errors, deliveries


def end_offsets(run):
    ends = {}
    for line in read_lines(os.path.join(run, "end-offsets.txt")):
        parts = line.split(":")
        if len(parts) == 3 and parts[2].isdigit():
            ends[(parts[0], int(parts[1]))] = int(parts[2])
    return ends


def caught_up(run):
    ends = end_offsets(run)
    if not ends:
        return False
    top = collections.defaultdict(lambda: -1)
    for path in glob.glob(os.path.join(run, "consumer.*")):
        for line in read_lines(path):
            if line.startswith("r "):
                w = line.split(" ")
                tp = (w[1], int(w[2]))
                o = int(w[3])
                if o > top[tp]:
                    top[tp] = o
    return all(top[tp] + 1 >= e for tp, e in ends.items())


def meta(run):
    m = {}
    for line in read_lines(os.path.join(run, "meta.txt")):
        if "=" in line:
            k, v = line.split("=", 1)
            m[k] = v
    return m


def java_log_lines(path):
    """(ms, level) of each log4j line "<ms> <LEVEL> ..." (stack trace lines are skipped)."""
    out = []
    for line in read_lines(path):
        m = re.match(r"^(\d{13}) (ERROR|WARN|FATAL)\b", line)
        if m:
            out.append((int(m.group(1)), "ERROR" if m.group(2) != "WARN" else "WARN", line))
    return out


def fmt_mib(kib):
    return f"{kib / 1024:.1f}"


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--caught-up":
        sys.exit(0 if caught_up(sys.argv[2]) else 1)
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    run = sys.argv[1]
    m = meta(run)
    value_bytes = int(m.get("value_bytes", "0"))
    window_s = int(m.get("rss_window_s", "1200"))
    load_start = int(open(os.path.join(run, "load-start")).read().strip())
    load_end_path = os.path.join(run, "load-end")
    load_end = int(open(load_end_path).read().strip()) if os.path.exists(load_end_path) else None
    failures = []
    notes = []

    # ---- faults
    faults = []
    for line in read_lines(os.path.join(run, "faults.log")):
        w = line.split(" ")
        if len(w) >= 3:
            faults.append((int(w[0]), int(w[1]), w[2], " ".join(w[3:])))
    faults.sort()
    fault_starts = [f[0] for f in faults]

    def fault_at(ms):
        i = bisect.bisect_right(fault_starts, ms) - 1
        return faults[i][2] if i >= 0 else NO_FAULT

    # kroute stops: a SIGKILL counts from the signal to the exit its parent saw (on a loaded
    # machine a killed process can still run for a moment)
    kills, terms, term_rcs, last_sig = [], [], [], None
    for line in read_lines(os.path.join(run, "kroute-stops.log")):
        w = line.split(" ")
        if len(w) == 3 and w[2] in ("TERM", "KILL"):
            last_sig = (w[2], int(w[0]))
            if w[2] == "TERM":
                terms.append(int(w[0]))
        elif len(w) == 3 and w[2].startswith("exit=") and last_sig:
            if last_sig[0] == "TERM":
                term_rcs.append(int(w[2][5:]))
            else:
                kills.append((last_sig[1], int(w[0])))
    kills.sort()

    # ---- producers
    acked = {}  # id -> (prefix, partition, offset, send_ms, ack_ms)
    failed = {}  # id -> (prefix, send_ms, fail_ms, err)
    client_events = []  # (ms, client, kind ERROR|WARN, text)
    done = {}
    dupseq = []  # librdkafka debug lines on idempotence errors: (ms, prefix, text)
    for path in sorted(glob.glob(os.path.join(run, "producer-*.log"))):
        prefix = os.path.basename(path)[len("producer-"):-len(".log")]
        for line in read_lines(path):
            w = line.split(" ")
            if w[0] == "a" and len(w) >= 6:
                acked[w[1]] = (prefix, int(w[2]), int(w[3]), int(w[4]), int(w[5]))
            elif w[0] == "f" and len(w) >= 5:
                failed[w[1]] = (prefix, int(w[2]), int(w[3]), " ".join(w[4:]))
            elif w[0] == "e" and len(w) >= 3:
                level = "WARN" if w[2].startswith("log_Warning") else "ERROR"
                client_events.append((int(w[1]), CLIENT_OF.get(prefix, prefix), level, " ".join(w[2:])))
            elif w[0] == "d" and len(w) >= 3:
                dupseq.append((int(w[1]), prefix, " ".join(w[2:])))
            elif w[0] == "done":
                done[prefix] = " ".join(w[1:])
    producers = m.get("producers", " ".join(TOPIC_OF)).split()
    for prefix in producers:
        if prefix not in done:
            failures.append(f"producer {prefix} did not end cleanly (no done line)")
    for path in glob.glob(os.path.join(run, "logs", "*.err")):
        name = os.path.basename(path)
        if not (name.startswith("producer-j") or name.startswith("consumer")):
            continue
        client = "Java consumer" if name.startswith("consumer") else "Java"
        for ms, level, text in java_log_lines(path):
            client_events.append((ms, client, level, text))

    # ---- consumers
    recs, consumer_errors, deliveries = consumed_records(run)
    for ms, text in consumer_errors:
        client_events.append((ms, "Java consumer", "ERROR", text))
    positions = collections.defaultdict(list)  # id -> [(topic, partition, offset)]
    for pos, (key, rid, seq) in recs.items():
        positions[rid].append(pos)
    ends = end_offsets(run)
    on_brokers = sum(ends.values())
    consumed_offsets = len(recs)
    if consumed_offsets < on_brokers:
        failures.append(f"the consumers read {consumed_offsets} of the {on_brokers} records on the brokers")

    # ---- lost
    lost = [rid for rid in acked if rid not in positions]
    lost_by = collections.Counter(fault_at(acked[rid][3]) for rid in lost)
    if lost:
        failures.append(f"{len(lost)} acknowledged records were not consumed")

    # ---- duplicates
    dup_ids = {rid: ps for rid, ps in positions.items() if len(ps) > 1}
    dup_attr, dup_unattr = collections.Counter(), collections.Counter()
    dup_unattr_examples = []
    dup_copies = 0
    for rid, ps in dup_ids.items():
        extra = len(ps) - 1
        dup_copies += extra
        if rid in acked:
            send, end = acked[rid][3], acked[rid][4]
        elif rid in failed:
            send, end = failed[rid][1], failed[rid][2]
        else:
            send, end = 0, 1 << 62
        if any(send <= k_exit and end >= k_sig for k_sig, k_exit in kills):
            dup_attr["kroute-kill"] += extra
        else:
            dup_unattr[fault_at(send)] += extra
            if len(dup_unattr_examples) < 10:
                dup_unattr_examples.append((rid, send, end, sorted(ps)))
    if sum(dup_unattr.values()):
        failures.append(f"{sum(dup_unattr.values())} duplicate copies not in flight at a kroute SIGKILL")

    # ---- unknown ids (consumed, never sent by a producer we know)
    unknown = [rid for rid in positions if rid not in acked and rid not in failed]
    failed_consumed = sum(1 for rid in failed if rid in positions)

    # ---- acknowledged positions
    # librdkafka numbers the records of a batch answered with base offset -1 (a batch kroute
    # moved) -1, 0, 1, ...: such runs (per producer and partition in id order, from a -1 on, each
    # offset one more than the one before) are unknown offsets, not positions
    derived = set()
    groups = collections.defaultdict(list)
    for rid, (prefix, p, o, _s, a) in acked.items():
        if CLIENT_OF.get(prefix) == "librdkafka":
            groups[(prefix, p)].append((rid, o))
    for rows in groups.values():
        rows.sort()
        prev = None
        for rid, o in rows:
            if o == -1:
                prev = -1
            elif prev is not None and o == prev + 1:
                derived.add(rid)
                prev = o
            else:
                prev = None
    pos_mismatch = []
    acked_unknown_offset = collections.Counter()
    acked_dupseq = collections.Counter()
    for rid, (prefix, p, o, _s, _a) in acked.items():
        if o == -1001:
            acked_dupseq[prefix] += 1
            continue
        if o < 0 or rid in derived:
            acked_unknown_offset[prefix] += 1
            continue
        if rid in positions and (TOPIC_OF[prefix], p, o) not in positions[rid]:
            pos_mismatch.append((rid, prefix, p, o, positions[rid]))
    if pos_mismatch:
        failures.append(f"{len(pos_mismatch)} records acknowledged at a partition/offset where they are not")

    # ---- keyed: one partition per key, order per key
    key_parts = collections.defaultdict(set)
    per_part = collections.defaultdict(list)
    for (topic, p, o), (key, rid, seq) in recs.items():
        if topic == "soak-keyed":
            key_parts[key].add(p)
            per_part[p].append((o, key, rid, int(seq)))
    split_keys = {k: ps for k, ps in key_parts.items() if len(ps) > 1}
    if split_keys:
        failures.append(f"{len(split_keys)} keys found in more than one partition: {dict(list(split_keys.items())[:5])}")
    order_violations = []
    for p, rows in per_part.items():
        rows.sort()
        seen, last = set(), {}
        for o, key, rid, seq in rows:
            if rid in seen:
                continue
            seen.add(rid)
            if key in last and seq <= last[key]:
                order_violations.append((key, p, o, last[key], seq))
            last[key] = max(seq, last.get(key, -1))
    if order_violations:
        failures.append(f"{len(order_violations)} keyed records out of order, e.g. {order_violations[:3]}")
    keyed_moved = sum(1 for rid, a in acked.items() if TOPIC_OF[a[0]] == "soak-keyed" and a[2] < 0)

    # ---- kroute: log, exits, counters, RSS
    klog = list(read_lines(os.path.join(run, "kroute.log")))
    panics = [line for line in klog if "panic" in line.lower()]
    if panics:
        failures.append(f"{len(panics)} panic lines in kroute's log, e.g. {panics[0][:200]}")
    klevels = collections.Counter()
    for line in klog:
        mm = re.search(r"\b(ERROR|WARN)\b", line)
        if mm:
            klevels[mm.group(1)] += 1
    bad_terms = [rc for rc in term_rcs if rc != 0]
    if bad_terms:
        failures.append(f"kroute exited with {bad_terms} after SIGTERM")

    last = {}  # (pid, series) -> value (the last sample of each process)
    for line in read_lines(os.path.join(run, "metrics.log")):
        w = line.split(" ")
        if len(w) == 4:
            try:
                last[(w[1], w[2])] = float(w[3])
            except ValueError:
                pass
    totals = collections.Counter()
    pids = set()
    for (pid, series), v in last.items():
        pids.add(pid)
        if "brokers_known" not in series:
            totals[series] += v

    def total(prefix, label=""):
        return sum(v for s, v in totals.items() if s.startswith(prefix) and label in s)

    produce_bytes = total("kroute_request_bytes_total", 'api="Produce"')
    acked_payload = len(acked) * value_bytes
    if produce_bytes < acked_payload:
        failures.append(f"kroute's Produce request bytes {produce_bytes:.0f} < the acknowledged payload {acked_payload}")

    rss = []
    for line in read_lines(os.path.join(run, "rss.log")):
        w = line.split(" ")
        if len(w) == 3:
            rss.append((int(w[0]), w[1], int(w[2])))
    win_end = load_end or (rss[-1][0] if rss else 0)
    win = [r for r in rss if win_end - window_s * 1000 <= r[0] <= win_end]
    rss_verdict = "no samples"
    if len(win) >= 3:
        win_pids = {r[1] for r in win}
        xs = [(r[0] - win[0][0]) / 60000 for r in win]
        ys = [r[2] / 1024 for r in win]
        mx, my = statistics.fmean(xs), statistics.fmean(ys)
        sxx = sum((x - mx) ** 2 for x in xs)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
        span_min = xs[-1] - xs[0]
        growth = slope * span_min
        med = statistics.median(ys)
        limit = max(8.0, 0.10 * med)
        flat = growth <= limit and len(win_pids) == 1
        rss_verdict = (
            f"window {span_min:.1f} min, {len(win)} samples, {len(win_pids)} kroute process(es); "
            f"slope {slope * 10:+.2f} MiB per 10 min, fitted growth {growth:+.2f} MiB (limit {limit:.1f} MiB), "
            f"min {min(ys):.1f} / median {med:.1f} / max {max(ys):.1f} MiB (max-min {max(ys) - min(ys):.1f} MiB)"
        )
        if not flat:
            failures.append("kroute's RSS is not flat over the window: " + rss_verdict)
    else:
        failures.append(f"too few RSS samples in the window ({len(win)})")

    # ---- per fault
    injected = collections.Counter(f[2] for f in faults)
    fails_by = collections.Counter(fault_at(f[2]) for f in failed.values())
    errs_by = collections.Counter(fault_at(e[0]) for e in client_events if e[2] == "ERROR")
    warns_by = collections.Counter(fault_at(e[0]) for e in client_events if e[2] == "WARN")
    dups_by = collections.Counter()
    dups_by.update(dup_unattr)
    rows = [NO_FAULT] + KINDS
    for k in KINDS:
        if injected[k] == 0:
            notes.append(f"no {k} fault was injected in this run")

    # ---- report
    out = []
    p = out.append
    p(f"# Chaos soak {os.path.basename(run)}")
    p("")
    p(f"seed {m.get('seed')}, {m.get('minutes')} min of load, {m.get('rate')} records/s per producer "
      f"({value_bytes}-byte values), {m.get('consumers')} group consumers; kroute {m.get('kroute')}; "
      f"{m.get('nproc')} cores ({m.get('cpu')}); command: `{m.get('command')}` with SOAK_SEED={m.get('seed')}")
    p("")
    p("## Result: " + ("PASS" if not failures else "FAIL"))
    for f in failures:
        p(f"- FAILED: {f}")
    for n in notes:
        p(f"- note: {n}")
    p("")
    p("## Records")
    p("")
    per_prod = collections.Counter(a[0] for a in acked.values())
    per_fail = collections.Counter(f[0] for f in failed.values())
    p("| producer | client | topic | acknowledged | failed | end of its log |")
    p("|---|---|---|---|---|---|")
    for prefix in producers:
        p(f"| {prefix} | {CLIENT_OF[prefix]} | {TOPIC_OF[prefix]} | {per_prod[prefix]} | {per_fail[prefix]} | {done.get(prefix, '(none)')} |")
    p("")
    p(f"- acknowledged {len(acked)}, failed {len(failed)} (of which consumed anyway: {failed_consumed}); "
      f"on the brokers {on_brokers} (end offsets), consumed {consumed_offsets} distinct offsets "
      f"({deliveries} deliveries to the group, re-deliveries after rebalances included)")
    p(f"- **lost: {len(lost)}**; duplicates (an id at more than one offset): {len(dup_ids)} ids, {dup_copies} extra copies, "
      f"{sum(dup_attr.values())} attributed to a kroute SIGKILL (sent before it, answered after), "
      f"{sum(dup_unattr.values())} not attributed")
    p(f"- ids consumed that no producer logged: {len(unknown)}; acknowledged positions that do not hold the record: {len(pos_mismatch)}")
    p(f"- acknowledged with offset -1 (answered with base offset -1: a batch kroute moved; for librdkafka "
      f"also the records after the first of such a batch, which it numbers -1, 0, 1, ...): "
      f"{', '.join(f'{k} {v}' for k, v in sorted(acked_unknown_offset.items())) or 'none'}; "
      f"of them keyed (base offset -1 for a batch that did not move): {keyed_moved}")
    lost_dupseq = sum(1 for rid in lost if acked[rid][2] == -1001)
    p(f"- acknowledged with offset -1001 (RD_KAFKA_OFFSET_INVALID: librdkafka reported them delivered "
      f"without taking an offset from any answer): {', '.join(f'{k} {v}' for k, v in sorted(acked_dupseq.items())) or 'none'} "
      f"(of them lost: {lost_dupseq}); librdkafka debug lines on idempotence errors (DUPSEQ, ERRSEQ, ERRPID, UNKPID): "
      f"{len(dupseq)}")
    p(f"- keyed: {len(key_parts)} keys, each in one partition: {'yes' if not split_keys else 'NO'}; "
      f"order violations per key: {len(order_violations)}")
    if lost:
        p("")
        p("Lost records (first 20): id, producer, acknowledged partition/offset, send ms, ack ms, fault at send:")
        for rid in sorted(lost, key=lambda r: acked[r][3])[:20]:
            a = acked[rid]
            p(f"- {rid} {a[0]} p{a[1]} o{a[2]} sent {a[3]} acked {a[4]} ({fault_at(a[3])})")
    if dupseq:
        p("")
        p("librdkafka idempotence debug lines (first 10): ms, producer, text:")
        for d in sorted(dupseq)[:10]:
            p(f"- {d[0]} ({fault_at(d[0])}) {d[1]}: {d[2][:300]}")
    if dup_unattr_examples:
        p("")
        p("Duplicates not attributed (first 10): id, send ms, answer ms, positions:")
        for ex in dup_unattr_examples:
            p(f"- {ex}")
    if pos_mismatch:
        p("")
        p("Acknowledged positions not holding the record (first 10):")
        for ex in pos_mismatch[:10]:
            p(f"- {ex}")
    p("")
    p("## Per fault type")
    p("")
    p("Client events and failed records (by the time they failed), lost records and duplicates (by the")
    p("time they were sent) are counted against the last fault begun before then (the row before the")
    p("first fault: the warm-up). Failed = records whose send failed (error callback);")
    p("client errors = Java ERROR log lines, consumer exceptions, librdkafka error events; warnings =")
    p("Java WARN lines and librdkafka warnings.")
    p("")
    p("| fault | injected | failed records | client errors | client warnings | lost | duplicates |")
    p("|---|---|---|---|---|---|---|")
    for k in rows:
        d = dups_by[k] + (dup_attr[k] if k == "kroute-kill" else 0)
        dtxt = str(d)
        if k == "kroute-kill" and dup_attr[k]:
            dtxt = f"{d} (in flight at the SIGKILL)"
        p(f"| {k} | {injected[k] if k in KINDS else '-'} | {fails_by[k]} | {errs_by[k]} | {warns_by[k]} | {lost_by[k]} | {dtxt} |")
    p(f"| total | {len(faults)} | {len(failed)} | {sum(errs_by.values())} | {sum(warns_by.values())} | {len(lost)} | {dup_copies} |")
    p("")
    p("Faults in order (start, duration, kind, detail):")
    p("")
    p("```")
    for s, e, k, d in faults:
        p(f"+{(s - load_start) / 1000:7.1f}s {(e - s) / 1000:6.1f}s {k:12} {d}")
    p("```")
    p("")
    p("## kroute")
    p("")
    p(f"- processes: {len(pids)} ({len(kills)} SIGKILL, {len(terms)} SIGTERM incl. the final one; "
      f"exit codes after SIGTERM: {term_rcs})")
    p(f"- log: {klevels['ERROR']} ERROR, {klevels['WARN']} WARN lines; panics: {len(panics)}")
    p(f"- RSS: {rss_verdict}")
    p("")
    p("RSS over time (every 2 min; minutes since the load started, kroute pid, MiB):")
    p("")
    p("```")
    step = 0
    for t, pid, kib in rss:
        if t >= load_start + step * 120000:
            p(f"{(t - load_start) / 60000:5.1f} min  pid {pid}  {fmt_mib(kib)} MiB")
            while t >= load_start + step * 120000:
                step += 1
    if rss:
        t, pid, kib = rss[-1]
        p(f"{(t - load_start) / 60000:5.1f} min  pid {pid}  {fmt_mib(kib)} MiB  (last)")
    p("```")
    p("")
    p("Counters, summed over kroute's processes (each process's last sample, taken just before it was stopped):")
    p("")
    produce_requests = total("kroute_requests_total", 'api="Produce"')
    p(f"- Produce requests from clients: {produce_requests:.0f}, "
      f"{produce_bytes / 1e6:.1f} MB (acknowledged payload {acked_payload / 1e6:.1f} MB: the traffic went through kroute)")
    ub = {b: total("kroute_upstream_produce_bytes_total", f'broker="{b}"') for b in (1, 2, 3)}
    p(f"- passed on to brokers 1 / 2 / 3: {ub[1] / 1e6:.1f} / {ub[2] / 1e6:.1f} / {ub[3] / 1e6:.1f} MB")
    outcomes = sorted((s, v) for s, v in totals.items() if s.startswith("kroute_idempotent_batches_total") and v)
    named = [(re.sub(r'.*outcome="([^"]*)".*', r"\1", s), v) for s, v in outcomes]
    p("- idempotent batches: " + (", ".join(f"{n} {v:.0f}" for n, v in named) or "none"))
    p(f"- batches moved {total('kroute_batches_moved_total'):.0f}, records moved {total('kroute_records_moved_total'):.0f}")
    for name in ("recovered", "adopted", "refused", "expired"):
        p(f"- idempotent producers {name}: {total(f'kroute_idempotent_producers_{name}_total'):.0f}")
    p(f"- upstream disconnects {total('kroute_upstream_disconnects_total'):.0f}, connect failures "
      f"{total('kroute_upstream_connect_failures_total'):.0f}, unavailable {total('kroute_upstream_unavailable_total'):.0f}, "
      f"request timeouts {total('kroute_upstream_request_timeouts_total'):.0f}, connections cut at shutdown "
      f"{total('kroute_shutdown_connections_cut_total'):.0f}")
    print("\n".join(out))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
