/*
 * KrouteClient: drives the real Apache Kafka Java client (kafka-clients from the test cluster's
 * lib dir) so kroute's integration tests can check the proxy against it.
 *
 * Build + run:  dir=$(tests/java/build.sh)        # compiles into target/java-client/ if needed
 *               java -cp "$(cat "$dir/classpath")" KrouteClient SUBCOMMAND --bootstrap H:P ...
 *          or:  tests/java/run.sh SUBCOMMAND --bootstrap H:P ...
 *
 * OUTPUT FORMAT (stdout): one result per line, "<kind> key=value key=value ..." or a bare
 * "key=value ..." summary line. Values never contain spaces (ids are checked, error texts have
 * spaces replaced by '_'). "null" stands for an absent key. Client logging goes to stderr (WARN).
 * Exit code 0 on success, 1 on any failure (a line "error=<Exception>:<message>" is printed
 * first), 2 on bad usage.
 *
 * produce --topic T --count N [--idempotent true|false] [--acks all|1|0] [--keyed | --key-every K]
 *         [--id-prefix P] [--transactional-id X [--abort]] [--record-size BYTES]
 *         [--compression none|gzip|snappy|lz4|zstd] [--timeout-ms MS] [--linger-ms MS]
 *         [--per-second N] [--oversize-at I --oversize-bytes B] [--transactions T]
 *     value = id + (' ' + 'x' padding up to --record-size bytes), id = P + 8-digit sequence
 *     (default P "id-"); key = "key-<i % 10>" with --keyed (with --key-every K only for i a
 *     multiple of K: batches that mix keyed and keyless records), else null. Waits for every ack.
 *     --per-second N paces the sends to about N records/s (0, the default: unpaced).
 *     --oversize-at I --oversize-bytes B: record I (0-based) gets a B-byte value (id + padding)
 *     so that it is rejected as too large. For the BROKER to reject it, B must exceed the topic's
 *     max.message.bytes (default 1048588) but not the producer's max.request.size (default
 *     1048576; raise it with --client-config max.request.size=...), else the client rejects it
 *     itself; both fail it with RecordTooLargeException.
 *       ack id=<id> key=<key|null> partition=<p> offset=<o> at_ms=<t> latency_us=<l>
 *                                    (send order; offset -1 if acks=0; at_ms: when send() was
 *                                    called, from the first send; latency_us: send() to ack)
 *       fail id=<id> key=<key|null> error=<Exception>:<message>  (per failed record)
 *       txn=committed|aborted                        (transactional mode, after the acks)
 *       oversize-error=<Exception simple name|none>  (with --oversize-at; none: it was acked)
 *       client-metrics retries=<n> errors=<n>        (producer-metrics record-retry-total and
 *                                                     record-error-total; -1 if missing)
 *       produced=<acked> errors=<failed>             (always the last line)
 *     Exit 1 if errors > 0, not counting the oversize record when it failed with
 *     RecordTooLargeException (its fail line is printed all the same). --idempotent defaults to
 *     the client default (true) unless --acks is 1/0 (then false); --transactional-id forces
 *     idempotence and acks=all. --transactions T (with --transactional-id, default 1): the records
 *     go in T transactions of about N/T each, each committed before the next begins (the last is
 *     aborted with --abort).
 *
 * consume --topic T --expect N [--group G] [--timeout-ms MS] [--isolation read_committed|
 *         read_uncommitted] [--group-protocol classic|consumer] [--extra-wait-ms MS]
 *     Without --group: assign() all partitions and seek to the beginning. With --group:
 *     subscribe() with auto.offset.reset=earliest, commitSync() before exit. Polls until N
 *     records (then keeps polling --extra-wait-ms, default 0, to catch extra/duplicate records)
 *     or until --timeout-ms (default 30000).
 *       rec id=<id> key=<key|null> partition=<p> offset=<o>
 *       consumed=<n> unique=<distinct ids>
 *     Exit 1 if consumed < N.
 *
 * group-consume --topic T --group G --members M --expect N [--timeout-ms MS]
 *               [--group-protocol classic|consumer] [--isolation ...]
 *     M KafkaConsumer threads in group G (offsets committed after every poll and on revoke, so
 *     a rebalance does not re-deliver). Ends when N records are consumed in total AND
 *     min(M, partitions) members hold an assignment, or at the timeout (default 30000).
 *       assign member=<i> partitions=<p,p,...|none>    (each time member i's assignment changes)
 *       rec member=<i> id=<id> key=<key|null> partition=<p> offset=<o>
 *       member=<i> consumed=<n> partitions=<p,p,...|none>   (final, one per member)
 *       consumed=<n> unique=<distinct ids> members_with_assignment=<k>
 *     Exit 1 if consumed < N.
 *
 * Every subcommand also takes --client-config k=v (repeatable): any Kafka client property,
 * applied to every client it creates (e.g. security.protocol=SSL for a TLS listener).
 *
 * admin-create --topic T --partitions N --replication-factor R [--config k=v]...
 *       created topic=<T> partitions=<N> replication_factor=<R>
 * admin-describe --topic T
 *       partition topic=<T> partition=<p> leader=<id|-1> leader_addr=<host:port|none>
 *                 replicas=<id,id,...> isr=<id,id,...>
 *       node id=<id> host=<h> port=<p>        (describeCluster, as the admin client sees it)
 *       controller id=<id> host=<h> port=<p>
 *       cluster_id=<id>
 */

import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.DescribeTopicsResult;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class KrouteClient {

    // ------------------------------------------------------------------------------ arguments

    static final class UsageError extends RuntimeException {
        UsageError(String m) { super(m); }
    }

    static final Set<String> FLAGS = Set.of("keyed", "abort");

    static final class Args {
        final Map<String, String> one = new HashMap<>();
        final Map<String, List<String>> many = new HashMap<>();

        Args(String[] argv, int from) {
            for (int i = from; i < argv.length; i++) {
                String a = argv[i];
                if (!a.startsWith("--")) throw new UsageError("unexpected argument: " + a);
                String name = a.substring(2);
                String value;
                int eq = name.indexOf('=');
                if (eq >= 0) {
                    value = name.substring(eq + 1);
                    name = name.substring(0, eq);
                } else if (FLAGS.contains(name)) {
                    value = "true";
                } else {
                    if (i + 1 >= argv.length) throw new UsageError("missing value for --" + name);
                    value = argv[++i];
                }
                one.put(name, value);
                many.computeIfAbsent(name, k -> new ArrayList<>()).add(value);
            }
        }

        String req(String name) {
            String v = one.get(name);
            if (v == null) throw new UsageError("missing --" + name);
            return v;
        }
        String opt(String name, String dflt) { return one.getOrDefault(name, dflt); }
        int integer(String name, int dflt) {
            String v = one.get(name);
            try {
                return v == null ? dflt : Integer.parseInt(v);
            } catch (NumberFormatException e) {
                throw new UsageError("--" + name + " needs an integer, got " + v);
            }
        }
        boolean flag(String name) { return Boolean.parseBoolean(one.getOrDefault(name, "false")); }
        List<String> all(String name) { return many.getOrDefault(name, List.of()); }
    }

    // ------------------------------------------------------------------------------ output

    static synchronized void out(String line) {
        System.out.println(line);
        System.out.flush();
    }

    static String clean(Object o) {
        String s = String.valueOf(o);
        return s.replaceAll("\\s+", "_");
    }

    /** The exception that matters: without ExecutionException / plain RuntimeException wrappers. */
    static Throwable unwrap(Throwable t) {
        while ((t instanceof ExecutionException || t.getClass() == RuntimeException.class) && t.getCause() != null) {
            t = t.getCause();
        }
        return t;
    }

    static String err(Throwable t) {
        t = unwrap(t);
        return t.getClass().getSimpleName() + ":" + clean(t.getMessage());
    }

    static String idOf(String value) {
        if (value == null) return "null";
        int sp = value.indexOf(' ');
        return sp < 0 ? value : value.substring(0, sp);
    }

    static String partitionsList(Collection<TopicPartition> tps) {
        if (tps.isEmpty()) return "none";
        return tps.stream().map(TopicPartition::partition).sorted().map(String::valueOf)
                .collect(Collectors.joining(","));
    }

    // ------------------------------------------------------------------------------ main

    public static void main(String[] argv) {
        if (argv.length == 0) {
            System.err.println("usage: KrouteClient produce|consume|group-consume|admin-create|admin-describe --bootstrap HOST:PORT ...");
            System.exit(2);
        }
        int rc;
        try {
            Args a = new Args(argv, 1);
            switch (argv[0]) {
                case "produce": rc = produce(a); break;
                case "consume": rc = consume(a); break;
                case "group-consume": rc = groupConsume(a); break;
                case "admin-create": rc = adminCreate(a); break;
                case "admin-describe": rc = adminDescribe(a); break;
                default: throw new UsageError("unknown subcommand " + argv[0]);
            }
        } catch (UsageError e) {
            System.err.println("KrouteClient: " + e.getMessage());
            out("error=usage:" + clean(e.getMessage()));
            rc = 2;
        } catch (Throwable t) {
            out("error=" + err(t));
            t.printStackTrace();
            rc = 1;
        }
        System.out.flush();
        // don't wait for lingering client threads
        Runtime.getRuntime().halt(rc);
    }

    static Properties common(Args a) {
        Properties p = new Properties();
        p.put("bootstrap.servers", a.req("bootstrap"));
        p.put("client.id", "kroute-java-" + ProcessHandle.current().pid());
        // --client-config k=v (repeatable): any client property, e.g. security.protocol=SSL.
        for (String kv : a.all("client-config")) {
            int eq = kv.indexOf('=');
            if (eq < 1) throw new UsageError("--client-config needs k=v, got " + kv);
            p.put(kv.substring(0, eq), kv.substring(eq + 1));
        }
        return p;
    }

    // ------------------------------------------------------------------------------ produce

    static int produce(Args a) throws Exception {
        String topic = a.req("topic");
        int count = a.integer("count", -1);
        if (count < 0) throw new UsageError("missing --count");
        String acks = a.opt("acks", "all");
        String txnId = a.one.get("transactional-id");
        int transactions = a.integer("transactions", 1);
        if (transactions < 1 || transactions > Math.max(1, count)) {
            throw new UsageError("--transactions must be in 1.." + Math.max(1, count));
        }
        if (transactions > 1 && txnId == null) throw new UsageError("--transactions needs --transactional-id");
        boolean abort = a.flag("abort");
        boolean keyed = a.flag("keyed");
        int keyEvery = a.integer("key-every", 0);
        if (keyEvery < 0) throw new UsageError("--key-every must be >= 0");
        String prefix = a.opt("id-prefix", "id-");
        if (prefix.matches(".*\\s.*")) throw new UsageError("--id-prefix must not contain spaces");
        int recordSize = a.integer("record-size", 0);
        int timeoutMs = a.integer("timeout-ms", 30000);
        int perSecond = a.integer("per-second", 0);
        if (perSecond < 0) throw new UsageError("--per-second must be >= 0");
        int oversizeAt = a.integer("oversize-at", -1);
        int oversizeBytes = a.integer("oversize-bytes", -1);
        if (a.one.containsKey("oversize-at") != a.one.containsKey("oversize-bytes")) {
            throw new UsageError("--oversize-at and --oversize-bytes go together");
        }
        if (a.one.containsKey("oversize-at")) {
            if (oversizeAt < 0 || oversizeAt >= count) {
                throw new UsageError("--oversize-at must be in 0.." + (count - 1) + ", got " + oversizeAt);
            }
            if (oversizeBytes < 1) throw new UsageError("--oversize-bytes must be > 0");
        }

        Properties p = common(a);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.ACKS_CONFIG, acks);
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, a.opt("compression", "none"));
        p.put(ProducerConfig.LINGER_MS_CONFIG, a.opt("linger-ms", "5"));
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, String.valueOf(timeoutMs));
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, String.valueOf(Math.max(1000, Math.min(15000, timeoutMs - 1000))));
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, String.valueOf(timeoutMs));
        if (a.one.containsKey("idempotent")) {
            p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, a.one.get("idempotent"));
        } else if (!acks.equals("all") && !acks.equals("-1")) {
            p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "false");
        } else if (!p.containsKey(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG) && clientMajor() < 3) {
            // The tests' default producer is the default of clients 3.0 and later (idempotent,
            // acks=all). Clients before 3.0 are not idempotent by default: asked for here, so
            // that the same tests check idempotent routing with them too.
            p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        }
        if (txnId != null) {
            p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
            p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
            p.put(ProducerConfig.ACKS_CONFIG, "all");
            p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, String.valueOf(Math.max(timeoutMs, 10000)));
        } else if (abort) {
            throw new UsageError("--abort needs --transactional-id");
        }

        String[] ids = new String[count];
        String[] keys = new String[count];
        RecordMetadata[] metas = new RecordMetadata[count];
        Throwable[] errors = new Throwable[count];
        // send() call and acknowledgement times (ns), for per-record latency
        long[] sentAt = new long[count];
        long[] ackedAt = new long[count];
        List<Future<RecordMetadata>> futures = new ArrayList<>(count);
        int errCount = 0;
        String txnResult = null;
        String clientMetrics;
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            if (txnId != null) {
                producer.initTransactions();
                producer.beginTransaction();
            }
            long pacingStart = System.nanoTime();
            for (int i = 0; i < count; i++) {
                final int idx = i;
                if (perSecond > 0) {
                    // fixed schedule: record i is due i/N s after the first (after a stall, late ones go at once)
                    long due = pacingStart + (long) (i * (1_000_000_000.0 / perSecond));
                    long wait = due - System.nanoTime();
                    if (wait > 0) TimeUnit.NANOSECONDS.sleep(wait);
                }
                if (txnId != null && i > 0 && (long) i * transactions / count != (long) (i - 1) * transactions / count) {
                    producer.commitTransaction();   // flushes this transaction's records first
                    producer.beginTransaction();
                }
                String id = prefix + String.format(Locale.ROOT, "%08d", i);
                String value = id;
                int size = id.getBytes(StandardCharsets.UTF_8).length;
                int wantSize = i == oversizeAt ? oversizeBytes : recordSize;
                if (wantSize > size) value = id + " " + "x".repeat(wantSize - size - 1);
                ids[i] = id;
                keys[i] = keyed || (keyEvery > 0 && i % keyEvery == 0) ? "key-" + (i % 10) : null;
                sentAt[i] = System.nanoTime();
                futures.add(producer.send(new ProducerRecord<>(topic, keys[i], value), (md, ex) -> {
                    ackedAt[idx] = System.nanoTime();
                    metas[idx] = md;
                    errors[idx] = ex;
                }));
                if (errors[i] instanceof org.apache.kafka.common.errors.TimeoutException && futures.get(i).isDone()) {
                    // no metadata within max.block.ms (e.g. unknown topic): don't wait again per record
                    for (int j = i + 1; j < count; j++) {
                        ids[j] = prefix + String.format(Locale.ROOT, "%08d", j);
                        keys[j] = keyed || (keyEvery > 0 && j % keyEvery == 0) ? "key-" + (j % 10) : null;
                        errors[j] = errors[i];
                        futures.add(futures.get(i));
                    }
                    break;
                }
            }
            producer.flush();
            for (int i = 0; i < count; i++) {
                try {
                    futures.get(i).get(timeoutMs, TimeUnit.MILLISECONDS);
                } catch (ExecutionException | java.util.concurrent.TimeoutException e) {
                    if (errors[i] == null) errors[i] = e;
                }
            }
            for (Throwable t : errors) if (t != null) errCount++;
            if (txnId != null) {
                if (abort || errCount > 0) {
                    producer.abortTransaction();
                    txnResult = "txn=aborted";
                } else {
                    producer.commitTransaction();
                    txnResult = "txn=committed";
                }
            }
            // before close(): the producer's metrics go with it
            clientMetrics = "client-metrics retries=" + producerMetric(producer, "record-retry-total")
                    + " errors=" + producerMetric(producer, "record-error-total");
        }
        int acked = 0;
        long firstSend = count > 0 ? sentAt[0] : 0;
        for (int i = 0; i < count; i++) {
            String key = keys[i] == null ? "null" : keys[i];
            if (errors[i] == null && metas[i] != null) {
                acked++;
                out("ack id=" + ids[i] + " key=" + key + " partition=" + metas[i].partition()
                        + " offset=" + (metas[i].hasOffset() ? metas[i].offset() : -1)
                        + " at_ms=" + (sentAt[i] - firstSend) / 1_000_000
                        + " latency_us=" + (ackedAt[i] - sentAt[i]) / 1_000);
            } else {
                out("fail id=" + ids[i] + " key=" + key + " error="
                        + (errors[i] == null ? "NoMetadata:null" : err(errors[i])));
            }
        }
        if (txnResult != null) out(txnResult);
        // the oversize record's failure does not count for the exit status if it is the expected one
        boolean oversizeExpected = false;
        if (oversizeAt >= 0) {
            Throwable e = errors[oversizeAt] == null ? null : unwrap(errors[oversizeAt]);
            oversizeExpected = e instanceof org.apache.kafka.common.errors.RecordTooLargeException;
            boolean oversizeAcked = errors[oversizeAt] == null && metas[oversizeAt] != null;
            out("oversize-error=" + (oversizeAcked ? "none" : e == null ? "NoMetadata" : e.getClass().getSimpleName()));
        }
        out(clientMetrics);
        out("produced=" + acked + " errors=" + (count - acked));
        int unexpected = count - acked - (oversizeExpected ? 1 : 0);
        return unexpected == 0 ? 0 : 1;
    }

    /** A producer-metrics metric as an integer (the totals are doubles); -1 if absent. */
    static long producerMetric(KafkaProducer<?, ?> producer, String name) {
        for (Map.Entry<MetricName, ? extends Metric> m : producer.metrics().entrySet()) {
            if (m.getKey().name().equals(name) && m.getKey().group().equals("producer-metrics")) {
                Object v = m.getValue().metricValue();
                if (v instanceof Number) return Math.round(((Number) v).doubleValue());
            }
        }
        return -1;
    }

    // ------------------------------------------------------------------------------ consume

    static Properties consumerProps(Args a, String group) {
        Properties p = common(a);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, a.opt("isolation", "read_uncommitted"));
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        if (group != null) {
            p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
            // Set only when asked: clients before 3.7 do not know group.protocol (classic is the
            // default everywhere it exists).
            String protocol = a.opt("group-protocol", null);
            if (protocol != null) p.put("group.protocol", protocol);
        }
        return p;
    }

    static String recLine(ConsumerRecord<String, String> r) {
        return "id=" + idOf(r.value()) + " key=" + (r.key() == null ? "null" : clean(r.key()))
                + " partition=" + r.partition() + " offset=" + r.offset();
    }

    static int consume(Args a) {
        String topic = a.req("topic");
        int expect = a.integer("expect", -1);
        if (expect < 0) throw new UsageError("missing --expect");
        String group = a.one.get("group");
        long timeoutMs = a.integer("timeout-ms", 30000);
        long extraMs = a.integer("extra-wait-ms", 0);
        long deadline = System.currentTimeMillis() + timeoutMs;
        int consumed = 0;
        Set<String> unique = new HashSet<>();
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(consumerProps(a, group))) {
            if (group == null) {
                List<PartitionInfo> parts = null;
                while (parts == null || parts.isEmpty()) {
                    try {
                        parts = c.partitionsFor(topic, Duration.ofMillis(Math.max(1, Math.min(5000, deadline - System.currentTimeMillis()))));
                    } catch (org.apache.kafka.common.errors.TimeoutException e) {
                        parts = null;
                    }
                    if ((parts == null || parts.isEmpty()) && System.currentTimeMillis() >= deadline) {
                        throw new RuntimeException("no partitions found for topic " + topic);
                    }
                }
                List<TopicPartition> tps = parts.stream().map(pi -> new TopicPartition(topic, pi.partition()))
                        .collect(Collectors.toList());
                c.assign(tps);
                c.seekToBeginning(tps);
            } else {
                c.subscribe(List.of(topic));
            }
            long stopAt = deadline;
            while (System.currentTimeMillis() < stopAt) {
                ConsumerRecords<String, String> recs = c.poll(Duration.ofMillis(Math.max(1, Math.min(500, stopAt - System.currentTimeMillis()))));
                for (ConsumerRecord<String, String> r : recs) {
                    consumed++;
                    unique.add(idOf(r.value()));
                    out("rec " + recLine(r));
                }
                if (group != null && !recs.isEmpty()) c.commitSync(Duration.ofSeconds(15));
                if (consumed >= expect && stopAt == deadline) {
                    if (extraMs <= 0) break;
                    stopAt = Math.min(deadline, System.currentTimeMillis() + extraMs);
                }
            }
        }
        out("consumed=" + consumed + " unique=" + unique.size());
        return consumed >= expect ? 0 : 1;
    }

    // ------------------------------------------------------------------------------ group-consume

    static int groupConsume(Args a) throws Exception {
        String topic = a.req("topic");
        String group = a.req("group");
        int members = a.integer("members", -1);
        int expect = a.integer("expect", -1);
        if (members < 1) throw new UsageError("missing --members");
        if (expect < 0) throw new UsageError("missing --expect");
        long deadline = System.currentTimeMillis() + a.integer("timeout-ms", 30000);

        int partitions;
        try (Admin admin = Admin.create(adminProps(a))) {
            partitions = describeTopic(admin, topic).partitions().size();
        }
        int wantAssigned = Math.min(members, partitions);

        AtomicInteger total = new AtomicInteger();
        Set<String> unique = ConcurrentHashMap.newKeySet();
        List<AtomicReference<Set<TopicPartition>>> assignments = new ArrayList<>();
        int[] perMember = new int[members];
        AtomicReference<Throwable> failure = new AtomicReference<>();
        CountDownLatch done = new CountDownLatch(members);
        List<Thread> threads = new ArrayList<>();
        for (int m = 0; m < members; m++) {
            AtomicReference<Set<TopicPartition>> ref = new AtomicReference<>(Set.of());
            assignments.add(ref);
        }
        java.util.function.BooleanSupplier finished = () -> {
            if (total.get() < expect) return false;
            int k = 0;
            for (AtomicReference<Set<TopicPartition>> r : assignments) if (!r.get().isEmpty()) k++;
            return k >= wantAssigned;
        };
        for (int m = 0; m < members; m++) {
            final int me = m;
            Thread t = new Thread(() -> {
                try (KafkaConsumer<String, String> c = new KafkaConsumer<>(consumerPropsMember(a, group, me))) {
                    c.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                        @Override public void onPartitionsRevoked(Collection<TopicPartition> tps) {
                            try { c.commitSync(Duration.ofSeconds(15)); } catch (RuntimeException e) { /* rebalance in progress */ }
                        }
                        @Override public void onPartitionsAssigned(Collection<TopicPartition> tps) {
                            Set<TopicPartition> now = new TreeSet<>((x, y) -> Integer.compare(x.partition(), y.partition()));
                            now.addAll(c.assignment());
                            assignments.get(me).set(now);
                            out("assign member=" + me + " partitions=" + partitionsList(now));
                        }
                        @Override public void onPartitionsLost(Collection<TopicPartition> tps) {
                            assignments.get(me).set(Set.of());
                        }
                    });
                    while (System.currentTimeMillis() < deadline && !finished.getAsBoolean() && failure.get() == null) {
                        ConsumerRecords<String, String> recs = c.poll(Duration.ofMillis(200));
                        for (ConsumerRecord<String, String> r : recs) {
                            perMember[me]++;
                            total.incrementAndGet();
                            unique.add(idOf(r.value()));
                            out("rec member=" + me + " " + recLine(r));
                        }
                        if (!recs.isEmpty()) c.commitSync(Duration.ofSeconds(15));
                        Set<TopicPartition> now = new TreeSet<>((x, y) -> Integer.compare(x.partition(), y.partition()));
                        now.addAll(c.assignment());
                        assignments.get(me).set(now);
                    }
                } catch (Throwable e) {
                    failure.compareAndSet(null, e);
                } finally {
                    done.countDown();
                }
            }, "member-" + m);
            threads.add(t);
            t.start();
        }
        done.await();
        if (failure.get() != null) throw new RuntimeException(failure.get());
        int withAssignment = 0;
        for (int m = 0; m < members; m++) {
            Set<TopicPartition> s = assignments.get(m).get();
            if (!s.isEmpty()) withAssignment++;
            out("member=" + m + " consumed=" + perMember[m] + " partitions=" + partitionsList(s));
        }
        out("consumed=" + total.get() + " unique=" + unique.size() + " members_with_assignment=" + withAssignment);
        return total.get() >= expect ? 0 : 1;
    }

    static Properties consumerPropsMember(Args a, String group, int member) {
        Properties p = consumerProps(a, group);
        p.put("client.id", "kroute-java-" + ProcessHandle.current().pid() + "-m" + member);
        return p;
    }

    // ------------------------------------------------------------------------------ admin

    static Properties adminProps(Args a) {
        Properties p = common(a);
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, String.valueOf(a.integer("timeout-ms", 30000)));
        return p;
    }

    static int adminCreate(Args a) throws Exception {
        String topic = a.req("topic");
        int partitions = a.integer("partitions", -1);
        int rf = a.integer("replication-factor", -1);
        if (partitions < 1 || rf < 1) throw new UsageError("need --partitions and --replication-factor");
        Map<String, String> configs = new HashMap<>();
        for (String kv : a.all("config")) {
            int eq = kv.indexOf('=');
            if (eq < 1) throw new UsageError("--config needs k=v, got " + kv);
            configs.put(kv.substring(0, eq), kv.substring(eq + 1));
        }
        try (Admin admin = Admin.create(adminProps(a))) {
            admin.createTopics(List.of(new NewTopic(topic, partitions, (short) rf).configs(configs))).all().get();
        }
        out("created topic=" + topic + " partitions=" + partitions + " replication_factor=" + rf);
        return 0;
    }

    /**
     * One topic's description. allTopicNames() came with clients 3.1 and all() went with 4.0, so the
     * method is looked up by name: one source compiles and runs against clients 2.8 to 4.x.
     */
    static TopicDescription describeTopic(Admin admin, String topic) throws Exception {
        DescribeTopicsResult result = admin.describeTopics(List.of(topic));
        Method all;
        try {
            all = result.getClass().getMethod("allTopicNames");
        } catch (NoSuchMethodException e) {
            all = result.getClass().getMethod("all");
        }
        @SuppressWarnings("unchecked")
        KafkaFuture<Map<String, TopicDescription>> future = (KafkaFuture<Map<String, TopicDescription>>) all.invoke(result);
        return future.get().get(topic);
    }

    /**
     * The major version of the kafka-clients jar this runs with (e.g. 2 for 2.8.2), from the
     * version file every kafka-clients jar carries (AppInfoParser, which reads it, moved to an
     * internals package in 4.4).
     */
    static int clientMajor() {
        Properties p = new Properties();
        try (java.io.InputStream in = KafkaProducer.class.getResourceAsStream("/kafka/kafka-version.properties")) {
            if (in != null) p.load(in);
        } catch (java.io.IOException e) {
            throw new IllegalStateException("cannot read kafka/kafka-version.properties", e);
        }
        String version = p.getProperty("version", "");
        try {
            return Integer.parseInt(version.substring(0, version.indexOf('.')));
        } catch (RuntimeException e) {
            throw new IllegalStateException("cannot read the client version from '" + version + "'", e);
        }
    }

    static String ids(List<Node> nodes) {
        if (nodes.isEmpty()) return "none";
        return nodes.stream().map(n -> String.valueOf(n.id())).collect(Collectors.joining(","));
    }

    static int adminDescribe(Args a) throws Exception {
        String topic = a.req("topic");
        try (Admin admin = Admin.create(adminProps(a))) {
            TopicDescription d = describeTopic(admin, topic);
            for (TopicPartitionInfo pi : d.partitions()) {
                Node l = pi.leader();
                out("partition topic=" + topic + " partition=" + pi.partition()
                        + " leader=" + (l == null || l.isEmpty() ? -1 : l.id())
                        + " leader_addr=" + (l == null || l.isEmpty() ? "none" : l.host() + ":" + l.port())
                        + " replicas=" + ids(pi.replicas()) + " isr=" + ids(pi.isr()));
            }
            DescribeClusterResult c = admin.describeCluster();
            List<Node> nodes = new ArrayList<>(c.nodes().get());
            nodes.sort((x, y) -> Integer.compare(x.id(), y.id()));
            for (Node n : nodes) out("node id=" + n.id() + " host=" + n.host() + " port=" + n.port());
            Node ctl = c.controller().get();
            if (ctl != null && !ctl.isEmpty()) out("controller id=" + ctl.id() + " host=" + ctl.host() + " port=" + ctl.port());
            out("cluster_id=" + c.clusterId().get());
        }
        return 0;
    }

    private KrouteClient() {}
}
