// kroute-demo-producer: the example application of the sidecar manifests (docker/k8s). A
// static franz-go (github.com/twmb/franz-go) producer with the client's defaults (idempotent,
// acks=all, keyless records), which writes RECORDS records to TOPIC through the kroute sidecar
// on localhost and then stays up, as an application in a Deployment does, until SIGTERM.
//
// Settings (environment):
//
//	KAFKA_BOOTSTRAP  kroute's bootstrap address (default 127.0.0.1:9092)
//	TOPIC            topic to write to (required)
//	RECORDS          how many records (default 1000)
//	RECORD_BYTES     value size (default 512)
//	ID_PREFIX        each value starts with "<ID_PREFIX><i> " (default "app-")
//	EXIT_WHEN_DONE   "true": exit after the run instead of waiting for SIGTERM
//
// Output (stdout): one "ack id=<id> partition=<p> offset=<o>" or "error id=<id> err=<e>" line per
// record, then "done acked=<n> errors=<m>". Exit status 0 on SIGTERM (1 when EXIT_WHEN_DONE and
// a record failed).
package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func envInt(name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		fmt.Fprintf(os.Stderr, "%s=%q is not a count\n", name, v)
		os.Exit(2)
	}
	return n
}

func main() {
	bootstrap := env("KAFKA_BOOTSTRAP", "127.0.0.1:9092")
	topic := os.Getenv("TOPIC")
	records := envInt("RECORDS", 1000)
	size := envInt("RECORD_BYTES", 512)
	prefix := env("ID_PREFIX", "app-")
	if topic == "" {
		fmt.Fprintln(os.Stderr, "TOPIC is required")
		os.Exit(2)
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, syscall.SIGINT)

	client, err := kgo.NewClient(
		kgo.SeedBrokers(strings.Split(bootstrap, ",")...),
		kgo.DefaultProduceTopic(topic),
		kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelWarn, nil)),
		kgo.RecordDeliveryTimeout(2*time.Minute),
	)
	if err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		os.Exit(2)
	}

	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	acked, failed := 0, 0
	for i := 0; i < records; i++ {
		id := fmt.Sprintf("%s%d", prefix, i)
		value := make([]byte, max(size, len(id)+1))
		copy(value, id+" ")
		for j := len(id) + 1; j < len(value); j++ {
			value[j] = byte('a' + (i+j)%26)
		}
		client.Produce(context.Background(), &kgo.Record{Value: value}, func(r *kgo.Record, err error) {
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
	client.Close()
	mu.Lock()
	fmt.Fprintf(out, "done acked=%d errors=%d\n", acked, failed)
	out.Flush()
	mu.Unlock()

	if env("EXIT_WHEN_DONE", "false") == "true" {
		if failed > 0 {
			os.Exit(1)
		}
		return
	}
	<-term
}
