// kafkareader reads a TiDB Binlog Kafka topic through TiDB's own consumer library,
// github.com/pingcap/tidb/tidb-binlog/driver/reader (the version tests/peers/go.mod pins), as
// TiDB Binlog's consumers do: reader.NewReader on the brokers and the cluster id (topic
// <cluster-id>_obinlog, partition 0) or a topic name, from a commit ts or a Kafka offset.
//
// Usage: kafkareader -addrs 127.0.0.1:9092 (-cluster-id N | -topic NAME) [-commit-ts TS] [-offset N]
//
//	-count N [-timeout 60s]
//
// It prints one JSON object per message as the library hands it over, {"offset": N, "binlog": {…}}
// (the secondary binlog as the library parsed it), and stops after -count messages; fewer within
// -timeout is an error (exit status 1).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/pingcap/tidb/tidb-binlog/driver/reader"
)

func main() {
	addrs := flag.String("addrs", "127.0.0.1:9092", "the brokers, comma separated")
	clusterID := flag.String("cluster-id", "", "the upstream cluster id (topic <cluster-id>_obinlog)")
	topic := flag.String("topic", "", "the topic (over -cluster-id)")
	commitTS := flag.Int64("commit-ts", 0, "read the binlogs committed after this ts")
	offset := flag.Int64("offset", 0, "the Kafka offset to start at (without -commit-ts)")
	count := flag.Int("count", 0, "messages to read")
	timeout := flag.Duration("timeout", 60*time.Second, "how long to wait for them")
	flag.Parse()

	r, err := reader.NewReader(&reader.Config{
		KafkaAddr: strings.Split(*addrs, ","),
		CommitTS:  *commitTS,
		Offset:    *offset,
		Topic:     *topic,
		ClusterID: *clusterID,
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "kafkareader: %v\n", err)
		os.Exit(1)
	}
	defer r.Close()
	out := json.NewEncoder(os.Stdout)
	deadline := time.After(*timeout)
	for read := 0; read < *count; read++ {
		select {
		case msg := <-r.Messages():
			if err := out.Encode(map[string]interface{}{"offset": msg.Offset, "binlog": msg.Binlog}); err != nil {
				fmt.Fprintf(os.Stderr, "kafkareader: %v\n", err)
				os.Exit(1)
			}
		case <-deadline:
			fmt.Fprintf(os.Stderr, "kafkareader: %d of %d messages within %v\n", read, *count, *timeout)
			os.Exit(1)
		}
	}
}
