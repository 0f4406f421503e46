"""The Python-driven capture clients of scripts/capture-seeds.sh: kafka-python (pure Python)
and librdkafka (through confluent-kafka's bundled librdkafka), each a few short runs against
the cluster, every client with a client.id starting "capture-<client>" so that
fuzz/capture/convert.py keeps only their connections.

    clients.py kafka-python|librdkafka --bootstrap H:P,... --topic T [--count N]

Runs, for the client named: producers in every codec (none, gzip, snappy, lz4, zstd),
idempotent and plain, keyed and keyless, acks all/1 (and 0 for librdkafka); an admin client
(metadata, describe cluster); a consumer group that consumes what is there and commits it.
Prints one line per run; exit 1 if a run failed.
"""

import argparse
import logging
import sys
import time

# (codec, idempotent, keyed, acks)
PRODUCE_RUNS = [
    ("none", True, False, "all"),
    ("gzip", False, True, "all"),
    ("snappy", True, True, "all"),
    ("lz4", False, False, "1"),
    ("zstd", True, False, "all"),
]


def value(client_id, i):
    return f'{client_id}-{i} {{"n":{i},"pad":"{"x" * 40}"}}'.encode()


def key(i, keyed):
    return f"key-{i % 5}".encode() if keyed else None


def kafka_python(args):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import KafkaAdminClient

    bootstrap = args.bootstrap.split(",")
    failures = 0
    for codec, idempotent, keyed, acks in PRODUCE_RUNS:
        cid = f"capture-kafka-python-{codec}"
        producer = KafkaProducer(
            bootstrap_servers=bootstrap,
            client_id=cid,
            compression_type=None if codec == "none" else codec,
            enable_idempotence=idempotent,
            acks=-1 if acks == "all" else int(acks),
            linger_ms=5,
        )
        futures = [producer.send(args.topic, value=value(cid, i), key=key(i, keyed))
                   for i in range(args.count)]
        producer.flush(timeout=20)
        ok = sum(1 for f in futures if f.succeeded())
        producer.close(timeout=5)
        print(f"{cid} produced={ok}/{args.count} idempotent={idempotent} keyed={keyed} acks={acks}")
        failures += ok != args.count

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="capture-kafka-python-admin")
    try:
        admin.describe_cluster()
        admin.describe_topics([args.topic])
        print("capture-kafka-python-admin ok")
    except Exception as e:  # noqa: BLE001 - report and go on
        print(f"capture-kafka-python-admin error={e!r}")
        failures += 1
    finally:
        admin.close()

    cid = "capture-kafka-python-consumer"
    consumer = KafkaConsumer(
        args.topic,
        bootstrap_servers=bootstrap,
        client_id=cid,
        group_id="capture-kafka-python-group",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    consumed = 0
    deadline = time.monotonic() + 20
    while consumed < args.count and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            consumed += len(records)
        if consumed:
            consumer.commit()
    consumer.close()
    print(f"{cid} consumed={consumed}")
    failures += consumed < args.count
    return failures


def librdkafka(args):
    from confluent_kafka import Consumer, Producer, libversion
    from confluent_kafka.admin import AdminClient

    print(f"librdkafka {libversion()[0]}")
    failures = 0
    runs = PRODUCE_RUNS + [("none", False, False, "0")]
    for codec, idempotent, keyed, acks in runs:
        cid = f"capture-librdkafka-{codec}-acks{acks}"
        producer = Producer({
            "bootstrap.servers": args.bootstrap,
            "client.id": cid,
            "compression.codec": codec,
            "enable.idempotence": idempotent,
            "acks": acks,
            "linger.ms": 5,
        })
        delivered = []
        for i in range(args.count):
            producer.produce(args.topic, value=value(cid, i), key=key(i, keyed),
                             on_delivery=lambda err, _msg: delivered.append(err is None))
        producer.flush(20)
        ok = sum(delivered)
        print(f"{cid} produced={ok}/{args.count} idempotent={idempotent} keyed={keyed} acks={acks}")
        failures += ok != args.count

    admin = AdminClient({"bootstrap.servers": args.bootstrap, "client.id": "capture-librdkafka-admin"})
    try:
        admin.list_topics(topic=args.topic, timeout=10)
        admin.describe_cluster(request_timeout=10).result()
        print("capture-librdkafka-admin ok")
    except Exception as e:  # noqa: BLE001 - report and go on
        print(f"capture-librdkafka-admin error={e!r}")
        failures += 1

    cid = "capture-librdkafka-consumer"
    consumer = Consumer({
        "bootstrap.servers": args.bootstrap,
        "client.id": cid,
        "group.id": "capture-librdkafka-group",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    })
    consumer.subscribe([args.topic])
    consumed = 0
    deadline = time.monotonic() + 20
    while consumed < args.count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            consumed += 1
    if consumed:
        consumer.commit(asynchronous=False)
    consumer.close()
    print(f"{cid} consumed={consumed}")
    failures += consumed < args.count
    return failures


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("client", choices=["kafka-python", "librdkafka"])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--count", type=int, default=10)
    args = parser.parse_args()
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    failures = (kafka_python if args.client == "kafka-python" else librdkafka)(args)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
