"""bench/join.sh's report: joining compressed batches, on and off, and join()'s CPU per codec.

Usage: join_report.py OUT_DIR DOCS (DOCS "none": print only).
"""

import statistics
import sys

from benchdoc import replace_section

START = "<!-- bench-join: start -->"
END = "<!-- bench-join: end -->"


def rows(path):
    lines = open(path).read().strip().splitlines()
    head = lines[0].split("\t")
    return [dict(zip(head, line.split("\t"))) for line in lines[1:]]


def main():
    out, docs = sys.argv[1], sys.argv[2]
    runs = rows(f"{out}/results.tsv")
    meta = open(f"{out}/meta").read().strip().replace("\n", ", ")
    table = [
        "| client | join_compressed | rounds | records/s (median, min-max) | kroute CPU s/GB (median) "
        "| batches joined / renumbered (median) |",
        "|---|---|---:|---:|---:|---:|",
    ]
    medians = {}
    for client in dict.fromkeys(r["client"] for r in runs):
        for join in ("true", "false"):
            mine = [r for r in runs if r["client"] == client and r["join_compressed"] == join]
            if not mine:
                continue
            rate = [float(r["records_per_s"]) for r in mine]
            cpu = [float(r["cpu_s_per_gb"]) for r in mine]
            joined = [int(r["joined"]) for r in mine]
            renumbered = [int(r["renumbered"]) for r in mine]
            medians[(client, join)] = statistics.median(rate)
            table.append(
                f"| {client} | {join} | {len(mine)} | {statistics.median(rate):,.0f} "
                f"({min(rate):,.0f}-{max(rate):,.0f}) | {statistics.median(cpu):.2f} "
                f"| {statistics.median(joined):.0f} / {statistics.median(renumbered):.0f} |"
            )
    ratios = [
        f"{client}: {medians[(client, 'true')] / medians[(client, 'false')]:.2f}x"
        for client in dict.fromkeys(r["client"] for r in runs)
        if (client, "true") in medians and (client, "false") in medians
    ]
    cost = rows(f"{out}/join_cost.tsv")
    cost_table = [
        "| records | codec | ms of CPU per MB joined | compression ratio of the joined batch |",
        "|---|---|---:|---:|",
    ] + [
        f"| {c['shape']} | {c['codec']} | {float(c['ms_per_mb']):.2f} | {float(c['ratio']):.2f} |"
        for c in cost
    ]
    text = (
        f"Run: {meta}. Command: `bench/join.sh`. Broker 2 answers 30 ms late; each run one fresh "
        "kroute sidecar and a fresh topic of 6 partitions (2 led by each broker); every record was "
        "counted on the brokers (end offsets). Throughput with joining on over off (medians): "
        + ", ".join(ratios)
        + ".\n\n"
        + "\n".join(table)
        + "\n\njoin() alone (`cargo run --release --example join_cost`: 4 batches of 16 records of "
        "1 KiB, random lowercase letters or words drawn from 64, joined 200 times; CPU of one "
        "core):\n\n"
        + "\n".join(cost_table)
        + "\n"
    )
    print(text)
    if docs != "none":
        replace_section(docs, START, END, text,
                        "## Joining compressed batches (bench/join.sh)")


main()
