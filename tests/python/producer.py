"""kafka-python as a real, unmodified Kafka client for kroute's tests.

Produces keyless records with kafka-python's defaults (3.x: idempotent, acks=all; 2.0.x, the
old-protocol client: acks=1, no retries), each value
starting with a unique id followed by random letters, and prints one line per record:

    ack id=<id> partition=<p> offset=<o>
    error id=<id> err=<message>

then "done acked=<n> errors=<m>" (the Java test client's format). kafka-python's own warnings
go to stderr, where a test looks for sequence errors. Exit status 1 if any record failed.
"""

import argparse
import logging
import random
import string
import sys
import threading
import time

from kafka import KafkaProducer


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--rate", type=int, default=0, help="records/s at most (0: no limit)")
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--prefix", default="kp-")
    parser.add_argument("--compression", default=None, help="compression_type (e.g. gzip)")
    parser.add_argument("--key-every", type=int, default=0, metavar="K",
                        help="records 0, K, 2K, ... get a key, the others none (0: no keys)")
    parser.add_argument("--sasl", default=None, metavar="MECHANISM:USER:PASSWORD",
                        help="authenticate with SASL over plaintext")
    parser.add_argument("--api-version", default=None, metavar="MAJOR.MINOR",
                        help="speak this broker generation's protocol (e.g. 0.11: Produce v3) "
                             "instead of probing with ApiVersions")
    args = parser.parse_args()
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)

    security = {}
    if args.sasl:
        mechanism, user, password = args.sasl.split(":", 2)
        security = dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism,
                        sasl_plain_username=user, sasl_plain_password=password)
    options = dict(bootstrap_servers=args.bootstrap.split(","), **security)
    if args.compression:
        options["compression_type"] = args.compression
    if args.api_version:
        options["api_version"] = tuple(int(part) for part in args.api_version.split("."))
    # delivery_timeout_ms came with kafka-python 2.1; 2.0.x has no such bound.
    if "delivery_timeout_ms" in KafkaProducer.DEFAULT_CONFIG:
        options["delivery_timeout_ms"] = 120_000
    producer = KafkaProducer(**options)
    lock = threading.Lock()
    counts = {"acked": 0, "errors": 0}
    lines = []
    letters = random.Random(7)

    def on_ack(record_id, metadata):
        with lock:
            counts["acked"] += 1
            lines.append(f"ack id={record_id} partition={metadata.partition} offset={metadata.offset}")

    def on_error(record_id, err):
        with lock:
            counts["errors"] += 1
            lines.append(f"error id={record_id} err={type(err).__name__}:{err}")

    start = time.monotonic()
    for i in range(args.count):
        if args.rate > 0:
            # Offered load: record i is not handed over before start + i/rate.
            due = start + i / args.rate
            now = time.monotonic()
            if due > now:
                time.sleep(due - now)
        record_id = f"{args.prefix}{i}"
        filler = "".join(letters.choices(string.ascii_lowercase, k=max(0, args.size - len(record_id) - 1)))
        key = f"key-{i % 13}".encode() if args.key_every > 0 and i % args.key_every == 0 else None
        future = producer.send(args.topic, key=key, value=f"{record_id} {filler}".encode())
        future.add_callback(lambda md, rid=record_id: on_ack(rid, md))
        future.add_errback(lambda err, rid=record_id: on_error(rid, err))
    producer.flush()
    producer.close()
    with lock:
        lines.append(f"done acked={counts['acked']} errors={counts['errors']}")
        print("\n".join(lines))
    sys.exit(1 if counts["errors"] else 0)


if __name__ == "__main__":
    main()
