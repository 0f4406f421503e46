// franz-producer: franz-go (github.com/twmb/franz-go) as a real, unmodified Kafka client for
// kroute's tests. It produces keyless records with its defaults (idempotent, acks=all, snappy
// compression), each value starting with a unique id, and prints one line per record:
//
//	ack id=<id> partition=<p> offset=<o>
//	error id=<id> err=<message>
//
// then "done acked=<n> errors=<m>". franz-go's own warnings and errors go to stderr, where a
// test looks for sequence errors. Exit status 1 if any record failed.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
)

func main() {
	bootstrap := flag.String("bootstrap", "", "comma-separated bootstrap servers")
	topic := flag.String("topic", "", "topic to produce to")
	count := flag.Int("count", 1000, "records to produce")
	rate := flag.Int("rate", 0, "records per second at most (0: as fast as it can)")
	size := flag.Int("size", 1024, "bytes per record value")
	prefix := flag.String("prefix", "fg-", "id prefix")
	keyEvery := flag.Int("key-every", 0, "records 0, K, 2K, ... get a key, the others none (0: no keys)")
	compression := flag.String("compression", "", "none, gzip, snappy, lz4 or zstd (default: franz-go's, snappy)")
	saslPlain := flag.String("sasl-plain", "", "USER:PASSWORD: authenticate with SASL PLAIN (over plaintext)")
	flag.Parse()
	if *bootstrap == "" || *topic == "" {
		fmt.Fprintln(os.Stderr, "usage: franz-producer --bootstrap HOST:PORT --topic T [--count N] [--rate R] [--size B]")
		os.Exit(2)
	}

	opts := []kgo.Opt{
		kgo.SeedBrokers(strings.Split(*bootstrap, ",")...),
		kgo.DefaultProduceTopic(*topic),
		kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelWarn, nil)),
		kgo.RecordDeliveryTimeout(2 * time.Minute),
	}
	if *compression != "" {
		codec, ok := map[string]kgo.CompressionCodec{
			"none":   kgo.NoCompression(),
			"gzip":   kgo.GzipCompression(),
			"snappy": kgo.SnappyCompression(),
			"lz4":    kgo.Lz4Compression(),
			"zstd":   kgo.ZstdCompression(),
		}[*compression]
		if !ok {
			fmt.Fprintln(os.Stderr, "unknown --compression", *compression)
			os.Exit(2)
		}
		opts = append(opts, kgo.ProducerBatchCompression(codec))
	}
	if *saslPlain != "" {
		user, pass, ok := strings.Cut(*saslPlain, ":")
		if !ok {
			fmt.Fprintln(os.Stderr, "--sasl-plain wants USER:PASSWORD")
			os.Exit(2)
		}
		opts = append(opts, kgo.SASL(plain.Auth{User: user, Pass: pass}.AsMechanism()))
	}
	client, err := kgo.NewClient(opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		os.Exit(2)
	}
	defer client.Close()

	random := rand.New(rand.NewPCG(1, 2))
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	acked, failed := 0, 0
	start := time.Now()
	for i := 0; i < *count; i++ {
		if *rate > 0 {
			// Offered load: record i is not handed over before start + i/rate.
			due := start.Add(time.Duration(i) * time.Second / time.Duration(*rate))
			if wait := time.Until(due); wait > 0 {
				time.Sleep(wait)
			}
		}
		id := fmt.Sprintf("%s%d", *prefix, i)
		// "<id> " then random letters: franz-go compresses (snappy) by default, and the
		// tests measure brokers' shares in bytes, which a compressible filler would hide.
		value := make([]byte, *size)
		copy(value, id+" ")
		for j := len(id) + 1; j < len(value); j++ {
			value[j] = byte('a' + random.IntN(26))
		}
		record := &kgo.Record{Value: value}
		if *keyEvery > 0 && i%*keyEvery == 0 {
			record.Key = []byte(fmt.Sprintf("key-%d", i%13))
		}
		client.Produce(context.Background(), record, func(r *kgo.Record, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed++
				fmt.Fprintf(out, "error id=%s err=%v\n", id, err)
				return
			}
			acked++
			fmt.Fprintf(out, "ack id=%s partition=%d offset=%d\n", id, r.Partition, r.Offset)
		})
	}
	if err := client.Flush(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "flush:", err)
	}
	mu.Lock()
	fmt.Fprintf(out, "done acked=%d errors=%d\n", acked, failed)
	out.Flush()
	mu.Unlock()
	if failed > 0 {
		os.Exit(1)
	}
}
