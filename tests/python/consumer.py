"""kafka-python as a real consumer for kroute's lag tests: a group member that keeps up and
commits on the client's own schedule (auto-commit, every --commit-interval-ms), until killed
or --seconds pass. Prints "assigned <topic>-<p>,..." when it first holds partitions, and
"done consumed=<n>" at the end. kafka-python's warnings go to stderr.
"""

import argparse
import logging
import sys
import time

from kafka import KafkaConsumer


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
        for records in consumer.poll(timeout_ms=200).values():
            consumed += len(records)
        if not said_assigned and consumer.assignment():
            names = ",".join(f"{tp.topic}-{tp.partition}" for tp in consumer.assignment())
            print(f"assigned {names}", flush=True)
            said_assigned = True
    consumer.close()
    print(f"done consumed={consumed}", flush=True)


if __name__ == "__main__":
    main()
