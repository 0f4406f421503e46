/*
 * SoakConsumer: M Apache Kafka Java consumers (threads) in one consumer group for bench/soak.sh.
 * They read the given topics from the earliest offset until a stop file appears, committing after
 * every poll once the poll's records are logged (and on revoke), so a rebalance re-delivers at
 * most what was logged but not committed (the checker deduplicates by topic, partition, offset).
 *
 *   java -cp "bench-dir:$(scripts/cluster.sh lib)/*" SoakConsumer --bootstrap H:P --group G
 *        --topics T1,T2 --members M --out PREFIX --stop FILE [--client-config k=v]...
 *
 * Member i writes PREFIX.<i> (times in epoch ms):
 *   r <topic> <partition> <offset> <key|-> <id> <seq>   a record (id, seq: the value's first
 *                                                       and third words, see SoakProducer)
 *   e <ms> <Exception>:<message>                         an exception from poll or commit (the
 *                                                       member carries on)
 *   done consumed=<n>                                    last line
 */

import java.io.BufferedWriter;
import java.io.FileWriter;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.StringDeserializer;

public class SoakConsumer {
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
        for (String k : List.of("--bootstrap", "--group", "--topics", "--members", "--out", "--stop")) {
            if (!a.containsKey(k)) {
                System.err.println("SoakConsumer: missing " + k);
                System.exit(2);
            }
        }
        int members = Integer.parseInt(a.get("--members"));
        Path stop = Path.of(a.get("--stop"));
        List<String> topics = Arrays.asList(a.get("--topics").split(","));
        List<Thread> threads = new ArrayList<>();
        for (int m = 0; m < members; m++) {
            final int member = m;
            Thread t = new Thread(() -> {
                try {
                    run(a, extra, topics, stop, a.get("--out") + "." + member, member);
                } catch (Exception e) {
                    e.printStackTrace();
                    System.exit(1);
                }
            });
            t.start();
            threads.add(t);
        }
        for (Thread t : threads) t.join();
    }

    static void run(Map<String, String> a, List<String> extra, List<String> topics, Path stop, String outPath, int member)
            throws IOException {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, a.get("--bootstrap"));
        p.put(ConsumerConfig.GROUP_ID_CONFIG, a.get("--group"));
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, "soak-consumer-" + member);
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        for (String kv : extra) {
            int eq = kv.indexOf('=');
            p.put(kv.substring(0, eq), kv.substring(eq + 1));
        }
        BufferedWriter out = new BufferedWriter(new FileWriter(outPath, StandardCharsets.UTF_8), 1 << 16);
        long consumed = 0;
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p)) {
            c.subscribe(topics, new ConsumerRebalanceListener() {
                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> parts) {
                    // everything polled so far is logged: commit the positions before they go
                    try {
                        out.flush();
                        c.commitSync();
                    } catch (Exception e) {
                        logError(out, e);
                    }
                }

                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> parts) {}
            });
            while (!Files.exists(stop)) {
                ConsumerRecords<String, String> recs;
                try {
                    recs = c.poll(Duration.ofMillis(500));
                } catch (WakeupException e) {
                    break;
                } catch (Exception e) {
                    logError(out, e);
                    continue;
                }
                if (recs.isEmpty()) continue;
                for (ConsumerRecord<String, String> r : recs) {
                    String[] w = r.value().split(" ", 4);
                    out.write("r " + r.topic() + " " + r.partition() + " " + r.offset() + " "
                        + (r.key() == null ? "-" : r.key()) + " " + w[0] + " " + (w.length > 2 ? w[2] : "-"));
                    out.newLine();
                    consumed++;
                }
                out.flush();
                try {
                    c.commitSync();
                } catch (Exception e) {
                    logError(out, e);
                }
            }
        }
        out.write("done consumed=" + consumed);
        out.newLine();
        out.close();
    }

    static void logError(BufferedWriter out, Exception e) {
        try {
            out.write("e " + System.currentTimeMillis() + " " + clean(e));
            out.newLine();
            out.flush();
        } catch (IOException io) {
            throw new RuntimeException(io);
        }
    }
}
