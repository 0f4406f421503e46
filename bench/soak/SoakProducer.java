/*
 * SoakProducer: one Apache Kafka Java producer with the client's defaults (idempotent, acks=all)
 * for bench/soak.sh. It sends paced records until a stop file appears, then flushes, closes and
 * exits; every outcome is logged.
 *
 *   java -cp "bench-dir:$(scripts/cluster.sh lib)/*" SoakProducer --bootstrap H:P --topic T
 *        --prefix P --rate N --keys K --value-bytes B --stop FILE --out FILE [--client-config k=v]...
 *
 * Record i (from 0): id = P-<i, 9 digits>; with --keys K > 0 key = P-k<i % K> and seq = the
 * record's number among its key's records (0, 1, ...), keyless (K = 0): key null, seq = i.
 * Value: "<id> <key|-> <seq> " padded with 'x' to B bytes. --rate N: records/s (send() at
 * start + i/N). Lines of --out (one per record, as the callbacks come; times in epoch ms):
 *   a <id> <partition> <offset> <send_ms> <ack_ms>     acknowledged (offset -1: unknown, e.g.
 *                                                      a batch kroute moved)
 *   f <id> <send_ms> <fail_ms> <Exception>:<message>   failed (send() threw or the callback had
 *                                                      an exception); message spaces are '_'
 *   done sent=<n> acked=<n> failed=<n> retries=<n> errors=<n>   last line (client metrics
 *                                                      record-retry-total, record-error-total)
 * Exit 0 (failures are for the checker to judge), 2 on bad usage.
 */

import java.io.BufferedWriter;
import java.io.FileWriter;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.serialization.StringSerializer;

public class SoakProducer {
    static String arg(Map<String, String> a, String k) {
        String v = a.get(k);
        if (v == null) {
            System.err.println("SoakProducer: missing " + k);
            System.exit(2);
        }
        return v;
    }

    static String clean(Throwable e) {
        String m = e.getMessage() == null ? "" : e.getMessage();
        return (e.getClass().getSimpleName() + ":" + m).replaceAll("\\s+", "_");
    }

    public static void main(String[] argv) throws Exception {
        Map<String, String> a = new java.util.HashMap<>();
        List<String> extra = new ArrayList<>();
        for (int i = 0; i + 1 < argv.length; i += 2) {
            if (argv[i].equals("--client-config")) extra.add(argv[i + 1]);
            else a.put(argv[i], argv[i + 1]);
        }
        String bootstrap = arg(a, "--bootstrap"), topic = arg(a, "--topic"), prefix = arg(a, "--prefix");
        double rate = Double.parseDouble(arg(a, "--rate"));
        int keys = Integer.parseInt(arg(a, "--keys"));
        int valueBytes = Integer.parseInt(arg(a, "--value-bytes"));
        Path stop = Path.of(arg(a, "--stop"));
        BufferedWriter out = new BufferedWriter(new FileWriter(arg(a, "--out"), StandardCharsets.UTF_8), 1 << 16);

        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.CLIENT_ID_CONFIG, "soak-" + prefix);
        for (String kv : extra) {
            int eq = kv.indexOf('=');
            p.put(kv.substring(0, eq), kv.substring(eq + 1));
        }
        KafkaProducer<String, String> producer = new KafkaProducer<>(p);
        AtomicLong acked = new AtomicLong(), failed = new AtomicLong();
        long[] perKey = new long[Math.max(keys, 1)];
        long start = System.nanoTime();
        long i = 0;
        // flush the log now and then so a look at it mid-run (or after a crash) is near current
        long lastFlush = System.nanoTime();
        while (!Files.exists(stop)) {
            long due = start + (long) (i * 1e9 / rate);
            long now = System.nanoTime();
            if (now < due) {
                Thread.sleep(Math.min(100, Math.max(1, (due - now) / 1_000_000)));
                continue;
            }
            String id = String.format("%s-%09d", prefix, i);
            String key = null;
            long seq = i;
            if (keys > 0) {
                int k = (int) (i % keys);
                key = prefix + "-k" + k;
                seq = perKey[k]++;
            }
            StringBuilder v = new StringBuilder(valueBytes);
            v.append(id).append(' ').append(key == null ? "-" : key).append(' ').append(seq).append(' ');
            while (v.length() < valueBytes) v.append('x');
            long sendMs = System.currentTimeMillis();
            try {
                producer.send(new ProducerRecord<>(topic, key, v.toString()), (md, e) -> {
                    long t = System.currentTimeMillis();
                    String line;
                    if (e == null) {
                        acked.incrementAndGet();
                        line = "a " + id + " " + md.partition() + " " + (md.hasOffset() ? md.offset() : -1) + " " + sendMs + " " + t;
                    } else {
                        failed.incrementAndGet();
                        line = "f " + id + " " + sendMs + " " + t + " " + clean(e);
                    }
                    synchronized (out) {
                        try {
                            out.write(line);
                            out.newLine();
                        } catch (IOException io) {
                            throw new RuntimeException(io);
                        }
                    }
                });
            } catch (Exception e) {
                failed.incrementAndGet();
                synchronized (out) {
                    out.write("f " + id + " " + sendMs + " " + System.currentTimeMillis() + " " + clean(e));
                    out.newLine();
                }
            }
            i++;
            if (System.nanoTime() - lastFlush > 1_000_000_000L) {
                synchronized (out) { out.flush(); }
                lastFlush = System.nanoTime();
            }
        }
        producer.flush();
        double retries = -1, errors = -1;
        for (Map.Entry<MetricName, ? extends Metric> m : producer.metrics().entrySet()) {
            MetricName n = m.getKey();
            if (!n.group().equals("producer-metrics")) continue;
            if (n.name().equals("record-retry-total")) retries = ((Number) m.getValue().metricValue()).doubleValue();
            if (n.name().equals("record-error-total")) errors = ((Number) m.getValue().metricValue()).doubleValue();
        }
        producer.close();
        synchronized (out) {
            out.write("done sent=" + i + " acked=" + acked.get() + " failed=" + failed.get()
                + " retries=" + (long) retries + " errors=" + (long) errors);
            out.newLine();
            out.close();
        }
    }
}
