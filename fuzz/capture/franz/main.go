// capture-franz: franz-go (github.com/twmb/franz-go) for scripts/capture-seeds.sh, which records
// the client's traffic as fuzz seeds (docs/hardening.md, "Seeds"). One short run: produce
// --count records with the codec, keys and idempotence asked for, or (--group) consume what is
// there in a consumer group and commit it. --max-produce-version 12 sends Produce v12, as
// franz-go does behind kroute (which offers clients Produce up to v12). Prints "produced=N" or "consumed=N"; exit 1 on an
// error.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kversion"
)

func main() {
	bootstrap := flag.String("bootstrap", "", "comma-separated bootstrap servers")
	topic := flag.String("topic", "", "topic")
	clientID := flag.String("client-id", "capture-franz", "client.id")
	count := flag.Int("count", 20, "records to produce, or to consume with --group")
	codec := flag.String("codec", "snappy", "none, gzip, snappy, lz4 or zstd")
	keyed := flag.Bool("keyed", false, "records carry a key")
	idempotent := flag.Bool("idempotent", true, "idempotent producer (franz-go's default)")
	group := flag.String("group", "", "consume in this group instead of producing")
	maxProduce := flag.Int("max-produce-version", 0, "cap Produce at this version, as kroute's ApiVersions clamp does (0: the broker's max)")
	flag.Parse()
	if *bootstrap == "" || *topic == "" {
		fmt.Fprintln(os.Stderr, "usage: capture-franz --bootstrap H:P --topic T [--client-id ID] [--count N] [--codec C] [--keyed] [--idempotent=false] [--group G]")
		os.Exit(2)
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(strings.Split(*bootstrap, ",")...),
		kgo.ClientID(*clientID),
		kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelWarn, nil)),
	}
	if *maxProduce > 0 {
		versions := kversion.Stable()
		versions.SetMaxKeyVersion(0, int16(*maxProduce))
		opts = append(opts, kgo.MaxVersions(versions))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if *group != "" {
		opts = append(opts,
			kgo.ConsumerGroup(*group),
			kgo.ConsumeTopics(*topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.DisableAutoCommit(),
		)
		client, err := kgo.NewClient(opts...)
		if err != nil {
			fmt.Fprintln(os.Stderr, "client:", err)
			os.Exit(2)
		}
		consumed := 0
		for consumed < *count && ctx.Err() == nil {
			fetches := client.PollFetches(ctx)
			fetches.EachError(func(t string, p int32, err error) {
				fmt.Fprintf(os.Stderr, "fetch %s/%d: %v\n", t, p, err)
			})
			consumed += fetches.NumRecords()
			if err := client.CommitUncommittedOffsets(ctx); err != nil {
				fmt.Fprintln(os.Stderr, "commit:", err)
			}
		}
		client.LeaveGroup()
		client.Close()
		fmt.Printf("consumed=%d\n", consumed)
		if consumed < *count {
			os.Exit(1)
		}
		return
	}
	var c kgo.CompressionCodec
	switch *codec {
	case "none":
		c = kgo.NoCompression()
	case "gzip":
		c = kgo.GzipCompression()
	case "snappy":
		c = kgo.SnappyCompression()
	case "lz4":
		c = kgo.Lz4Compression()
	case "zstd":
		c = kgo.ZstdCompression()
	default:
		fmt.Fprintln(os.Stderr, "unknown codec", *codec)
		os.Exit(2)
	}
	opts = append(opts, kgo.DefaultProduceTopic(*topic), kgo.ProducerBatchCompression(c))
	if !*idempotent {
		opts = append(opts, kgo.DisableIdempotentWrite())
	}
	client, err := kgo.NewClient(opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		os.Exit(2)
	}
	defer client.Close()
	records := make([]*kgo.Record, *count)
	for i := range records {
		r := &kgo.Record{Value: fmt.Appendf(nil, "%s-%d {\"n\":%d,\"pad\":\"%s\"}", *clientID, i, i, strings.Repeat("x", 40))}
		if *keyed {
			r.Key = fmt.Appendf(nil, "key-%d", i%5)
		}
		records[i] = r
	}
	if err := client.ProduceSync(ctx, records...).FirstErr(); err != nil {
		fmt.Fprintln(os.Stderr, "produce:", err)
		os.Exit(1)
	}
	fmt.Printf("produced=%d\n", *count)
}
