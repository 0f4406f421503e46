"""kafka-python as a real consumer for kroute's lag tests: a group member that keeps up and
commits on the client's own schedule (auto-commit, every --commit-interval-ms), until killed
or --seconds pass. Prints "assigned <topic>-<p>,..." when it first holds partitions, and
"done consumed=<n>" at the end. kafka-python's warnings go to stderr; with KAFKA_PYTHON_LOG=<file>
its debug log goes to that file too (how the stalled member below was found).
"""

import argparse
import logging
import os
import sys
import time

from kafka import KafkaConsumer

POLL_MS = 10_000


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--client-id", default="kafka-python-consumer")
    parser.add_argument("--commit-interval-ms", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=120)
    args = parser.parse_args()
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    if os.environ.get("KAFKA_PYTHON_LOG"):
        debug = logging.FileHandler(os.environ["KAFKA_PYTHON_LOG"])
        debug.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
        debug.setLevel(logging.DEBUG)
        logging.getLogger().handlers[0].setLevel(logging.WARNING)
        logging.getLogger().addHandler(debug)
        logging.getLogger().setLevel(logging.DEBUG)
    consumer = KafkaConsumer(
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        client_id=args.client_id,
        enable_auto_commit=True,
        auto_commit_interval_ms=args.commit_interval_ms,
        auto_offset_reset="earliest",
    )
    # The topic was just created: the broker kafka-python asks may not know it yet, and a
    # subscription to a topic without metadata gets no partitions until the next metadata
    # refresh (metadata.max.age.ms, 5 minutes). Wait until it is known, then subscribe.
    known_by = time.monotonic() + 30
    while not consumer.partitions_for_topic(args.topic):
        if time.monotonic() > known_by:
            sys.exit(f"topic {args.topic} unknown after 30 s")
        time.sleep(0.1)
    consumer.subscribe([args.topic])
    consumed, said_assigned = 0, False
    deadline = time.monotonic() + args.seconds
    while time.monotonic() < deadline:
        # A long poll, not a short one: kafka-python 3.0.12 can lose a rebalance that a poll's
        # timeout cuts short. The leader's first assignment often rests on metadata from before
        # the subscription, so the client rejoins at once; if the poll times out while that
        # JoinGroup/SyncGroup is in flight, the next poll finds nothing left to rejoin for and
        # never applies the SyncGroup's answer, and the member stays outside its group for good
        # (seen under CPU load, 2026-12-06). A poll still returns as soon as records arrive.
        for records in consumer.poll(timeout_ms=POLL_MS).values():
            consumed += len(records)
        if not said_assigned and consumer.assignment():
            names = ",".join(f"{tp.topic}-{tp.partition}" for tp in consumer.assignment())
            print(f"assigned {names}", flush=True)
            said_assigned = True
    consumer.close()
    print(f"done consumed={consumed}", flush=True)


if __name__ == "__main__":
    main()
