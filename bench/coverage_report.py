"""bench/coverage.sh's report: what routing could do with each client's keyless bytes.

Usage: coverage_report.py OUT LEADERS RECORDS DOCS
  OUT      target/bench-coverage (cells.tsv, meta, raw/<client>-<mode>-<case>.{offsets,metrics})
  LEADERS  the leader of each partition, comma-separated ("1,2,3,1,2,3")
  RECORDS  records each run sent (every one must be on the brokers)
  DOCS     docs/benchmarks.md, or "none"
Writes OUT/results.tsv and prints the table; with DOCS, replaces its bench-coverage section.
"""

import re
import sys

from benchdoc import replace_section

ELIGIBLE = ("no_better_broker", "no_partition")
NOT_ELIGIBLE = (
    "idempotent",
    "unsplittable",
    "no_client_connection",
    "policy",
    "uninspectable",
    "malformed",
    "unknown_topic",
    "transactional",
    "control",
)
START = "<!-- bench-coverage: start -->"
END = "<!-- bench-coverage: end -->"


def metric_sum(text, name, label=None):
    """Sum of the samples of `name` (whose labels contain `label`, if given)."""
    total = 0.0
    for line in text.splitlines():
        m = re.match(rf"^{name}(\{{[^}}]*\}})?\s+(\S+)$", line)
        if m and (label is None or label in (m.group(1) or "")):
            total += float(m.group(2))
    return total


def broker2_share(offsets_file, leaders, records):
    per = [0, 0, 0]
    total = 0
    for line in open(offsets_file):
        partition, end = (int(x) for x in line.split())
        per[leaders[partition] - 1] += end
        total += end
    if total < records:
        raise SystemExit(f"{offsets_file}: {total} records on the brokers, {records} sent")
    return per[1] / total


def routing(metrics_file):
    """Keyless bytes kroute saw, eligible, moved, and the biggest reason not eligible."""
    text = open(metrics_file).read()
    kept = lambda reason: metric_sum(text, "kroute_kept_bytes_total", f'reason="{reason}"')
    moved = metric_sum(text, "kroute_moved_bytes_total")
    total = moved + metric_sum(text, "kroute_kept_bytes_total")
    # kroute counts keyed bytes apart (batches whose records all have keys, and the keyed part
    # of a divided batch); a batch mixing keyed and keyless records that it keeps whole is
    # counted, keyless records included, under the reason it was kept. So the keyless bytes
    # are all the others, as kroute framed them.
    keyless = total - kept("keyed")
    eligible = moved + sum(kept(r) for r in ELIGIBLE)
    blocked = {r: kept(r) for r in NOT_ELIGIBLE}
    why = max(blocked, key=blocked.get) if sum(blocked.values()) > 0.005 * keyless else "-"
    return keyless, eligible, moved, why


def main():
    out, leaders, records, docs = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    leaders = [int(x) for x in leaders.split(",")]
    meta = dict(line.rstrip("\n").split("=", 1) for line in open(f"{out}/meta") if "=" in line)
    cells = [line.rstrip("\n").split("\t") for line in open(f"{out}/cells.tsv")][1:]
    rows = {}
    for client, mode, case, _topic in cells:
        stem = f"{out}/raw/{client}-{mode}-{case}"
        row = rows.setdefault((client, mode), {})
        row[case] = broker2_share(f"{stem}.offsets", leaders, records)
        if case == "kroute":
            row["routing"] = routing(f"{stem}.metrics")
    lines = [
        "| client | mode | keyless MB seen | eligible to move | moved | not eligible, mostly | "
        "broker 2 share through kroute | direct |",
        "|---|---|---:|---:|---:|---|---:|---:|",
    ]
    tsv = ["client\tmode\tkeyless_bytes\teligible\tmoved\tblocked_by\tshare_kroute\tshare_direct"]
    for (client, mode), row in rows.items():
        keyless, eligible, moved, why = row["routing"]
        frac = lambda x: x / keyless if keyless else 0.0
        lines.append(
            f"| {client} | {mode} | {keyless / 1e6:.1f} | {frac(eligible):.0%} | {frac(moved):.0%} "
            f"| {why} | {row['kroute']:.3f} | {row['direct']:.3f} |"
        )
        tsv.append(
            f"{client}\t{mode}\t{keyless:.0f}\t{frac(eligible):.4f}\t{frac(moved):.4f}\t{why}"
            f"\t{row['kroute']:.4f}\t{row['direct']:.4f}"
        )
    open(f"{out}/results.tsv", "w").write("\n".join(tsv) + "\n")
    table = "\n".join(lines)
    print(table)
    if docs != "none":
        text = (
            f"`{meta.get('command', 'bench/coverage.sh')}` ({meta.get('date', '?')}; kroute "
            f"{meta.get('kroute', '?')}; Kafka {meta.get('kafka', '?')}; {meta.get('nproc', '?')} "
            f"cores; {meta.get('elapsed', '?')} s). Broker 2 answers late by the run's "
            "BENCH_SLOW_MS (30 ms by default); shares are of the records on the brokers (end "
            "offsets per leader); 'eligible' and 'moved' are of the keyless bytes kroute saw "
            "(its kroute_moved_bytes_total and kroute_kept_bytes_total: all Produce bytes but "
            "those kept as keyed, which are batches whose records all have keys and the keyed "
            "parts of divided batches; a mixed batch kept whole counts under its own reason).\n\n"
            + table
            + "\n"
        )
        replace_section(docs, START, END, text, "## Routing coverage: keyless bytes routing can move (bench/coverage.sh)")


if __name__ == "__main__":
    main()
