// pumpbench writes transactions' binlogs to the pumps registered in PD's etcd through TiDB's own pump
// client (github.com/pingcap/tidb/tidb-binlog/pump_client, the version tests/peers/go.mod pins), the
// way tidb-server does with binlog on: NewPumpsClient on PD's URLs, then per transaction a prewrite
// binlog and, once it is acknowledged, a commit binlog, both through PumpsClient.WriteBinlog.
// Timestamps come from PD's TSO through PD's Go client: start_ts before the prewrite, commit_ts after
// the prewrite's acknowledgement. bench/pump_write_go.py drives it.
//
// Usage: pumpbench -pd http://127.0.0.1:2379 -goroutines 8 -duration 10s [-count N] [-payload 1024]
//
//	[-warmup 1s] [-pump NODE_ID] [-write-timeout 15s]
//
// It prints "measuring" when the measured window starts, "stopped" when it ends (the goroutines then
// finish the transaction they are in, so every prewrite gets its commit), and then one JSON object:
// binlogs and transactions written in the window, seconds, binlogs/s, WriteBinlog latency percentiles
// in ms, errors. With -pump it refuses to run unless that node is the only pump the client may use.
package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pingcap/log"
	pumpcli "github.com/pingcap/tidb/tidb-binlog/pump_client"
	pb "github.com/pingcap/tipb/go-binlog"
	pd "github.com/tikv/pd/client"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

const physicalShiftBits = 18

// Phases of a run, read by every writer goroutine.
const (
	phaseWarmup int32 = iota
	phaseMeasure
	phaseStop
)

// result is the JSON line printed at the end.
type result struct {
	Goroutines    int     `json:"goroutines"`
	Payload       int     `json:"payload"`
	Pump          string  `json:"pump"`
	PumpAddr      string  `json:"pump_addr"`
	ClusterID     uint64  `json:"cluster_id"`
	Binlogs       int     `json:"binlogs"`
	Txns          int     `json:"txns"`
	Seconds       float64 `json:"seconds"`
	BinlogsPerSec float64 `json:"binlogs_per_s"`
	P50Ms         float64 `json:"p50_ms"`
	P99Ms         float64 `json:"p99_ms"`
	PrewriteP50Ms float64 `json:"prewrite_p50_ms"`
	CommitP50Ms   float64 `json:"commit_p50_ms"`
	TsoP50Ms      float64 `json:"tso_p50_ms"`
	WarmupBinlogs int     `json:"warmup_binlogs"`
	Errors        int     `json:"errors"`
	FirstError    string  `json:"first_error,omitempty"`
}

// writerStats is what one goroutine measured inside the window (latencies in nanoseconds).
type writerStats struct {
	prewrite []int64
	commit   []int64
	tso      []int64
	warmup   int // binlogs acknowledged outside the window
}

// bench holds the shared state of a run.
type bench struct {
	client    *pumpcli.PumpsClient
	pdClient  pd.Client
	value     []byte
	phase     atomic.Int32
	countMode bool         // -count: the window is a number of transactions, not a duration
	budget    atomic.Int64 // transactions left to start in the window of a -count run
	errors    atomic.Int64
	errMu     sync.Mutex
	firstErr  string
}

func (b *bench) fail(format string, args ...any) {
	b.errors.Add(1)
	b.errMu.Lock()
	if b.firstErr == "" {
		b.firstErr = fmt.Sprintf(format, args...)
	}
	b.errMu.Unlock()
}

// ts asks PD for one timestamp (physical << 18 | logical), as TiDB's oracle does.
func (b *bench) ts() (int64, time.Duration, error) {
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	physical, logical, err := b.pdClient.GetTS(ctx)
	return physical<<physicalShiftBits | logical, time.Since(t0), err
}

// take reports whether the goroutine should begin another transaction, and whether it is measured.
func (b *bench) take() (run, measured bool) {
	switch b.phase.Load() {
	case phaseWarmup:
		return true, false
	case phaseMeasure:
		if !b.countMode {
			return true, true
		}
		return b.budget.Add(-1) >= 0, true
	default:
		return false, false
	}
}

// counted reports whether a WriteBinlog acknowledged now belongs to the window: in a -duration run,
// every acknowledgement while the window is open; in a -count run, those of the counted transactions.
func (b *bench) counted(measured bool) bool {
	if b.countMode {
		return measured
	}
	return b.phase.Load() == phaseMeasure
}

// writer runs transactions until the run stops: prewrite binlog, then (after its ack) commit binlog.
func (b *bench) writer(id int, out *writerStats, done func()) {
	defer done()
	for n := 0; ; n++ {
		run, measured := b.take()
		if !run {
			return
		}
		startTS, tsoLat, err := b.ts()
		if err != nil {
			b.fail("GetTS: %v", err)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		bin := &pb.Binlog{
			Tp:            pb.BinlogType_Prewrite,
			StartTs:       startTS,
			PrewriteKey:   []byte(fmt.Sprintf("pumpbench-%d-%d", id, n)),
			PrewriteValue: b.value,
		}
		t0 := time.Now()
		err = b.client.WriteBinlog(bin)
		lat := time.Since(t0)
		if err != nil {
			// TiDB aborts the transaction and writes a rollback binlog in its place.
			b.fail("prewrite %d: %v", startTS, err)
			bin.Tp, bin.PrewriteValue = pb.BinlogType_Rollback, nil
			_ = b.client.WriteBinlog(bin)
			continue
		}
		if b.counted(measured) {
			out.prewrite = append(out.prewrite, int64(lat))
			out.tso = append(out.tso, int64(tsoLat))
		} else {
			out.warmup++
		}
		commitTS, tsoLat, err := b.ts()
		if err != nil {
			// no commit ts: the transaction is rolled back, as TiDB would
			b.fail("GetTS for commit: %v", err)
			bin.Tp, bin.PrewriteValue = pb.BinlogType_Rollback, nil
			_ = b.client.WriteBinlog(bin)
			continue
		}
		// TiDB's commit binlog is its prewrite binlog with the type and commit ts set and the value cleared.
		bin.Tp, bin.CommitTs, bin.PrewriteValue = pb.BinlogType_Commit, commitTS, nil
		t0 = time.Now()
		err = b.client.WriteBinlog(bin)
		lat = time.Since(t0)
		if err != nil {
			b.fail("commit %d/%d: %v", startTS, commitTS, err)
			continue
		}
		if b.counted(measured) {
			out.commit = append(out.commit, int64(lat))
			out.tso = append(out.tso, int64(tsoLat))
		} else {
			out.warmup++
		}
	}
}

// percentileMs is the q quantile (nearest rank) of ascending nanosecond values, in milliseconds.
func percentileMs(sorted []int64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	k := int(q*float64(len(sorted)-1) + 0.5)
	return float64(sorted[k]) / 1e6
}

func sortedCopy(parts ...[]int64) []int64 {
	var all []int64
	for _, p := range parts {
		all = append(all, p...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	return all
}

func die(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "pumpbench: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	pdURLs := flag.String("pd", "http://127.0.0.1:2379", "PD (and its etcd) URLs, comma separated, as TiDB's -path")
	goroutines := flag.Int("goroutines", 1, "transactions written concurrently")
	duration := flag.Duration("duration", 10*time.Second, "length of the measured window (when -count is 0)")
	count := flag.Int64("count", 0, "transactions to measure instead of a duration (0: use -duration)")
	payload := flag.Int("payload", 1024, "bytes of prewrite_value per prewrite binlog")
	warmup := flag.Duration("warmup", time.Second, "transactions written before the window, not counted")
	pumpID := flag.String("pump", "", "node id of the only pump the client may choose (checked, not forced)")
	writeTimeout := flag.Duration("write-timeout", pumpcli.DefaultBinlogWriteTimeout, "TiDB's binlog write-timeout")
	strategy := flag.String("strategy", pumpcli.Range, "TiDB's binlog strategy (range or hash)")
	logLevel := flag.String("L", "warn", "log level of the pump client and PD client")
	flag.Parse()
	if *goroutines < 1 || *payload < 0 {
		die("-goroutines must be >= 1 and -payload >= 0")
	}

	// the clients' logs go to stderr: stdout carries this program's own lines
	stderr := zapcore.Lock(os.Stderr)
	logger, props, err := log.InitLoggerWithWriteSyncer(&log.Config{Level: *logLevel}, stderr, stderr)
	if err != nil {
		die("logger: %v", err)
	}
	log.ReplaceGlobals(logger, props)

	client, err := pumpcli.NewPumpsClient(*pdURLs, *strategy, *writeTimeout, pd.SecurityOption{})
	if err != nil {
		die("NewPumpsClient: %v", err)
	}
	defer client.Close()

	res := result{Goroutines: *goroutines, Payload: *payload, ClusterID: client.ClusterID}
	client.RLock()
	usable := make([]string, 0, len(client.Pumps.AvaliablePumps))
	for id, p := range client.Pumps.AvaliablePumps {
		usable = append(usable, id)
		res.Pump, res.PumpAddr = id, p.Addr
	}
	client.RUnlock()
	if *pumpID != "" && (len(usable) != 1 || usable[0] != *pumpID) {
		die("the pump client may choose %v, not only %q: register exactly one pump online", usable, *pumpID)
	}
	log.Info("pumpbench: pumps", zap.Strings("available", usable))

	pdClient, err := pd.NewClientWithContext(context.Background(), splitURLs(*pdURLs), pd.SecurityOption{})
	if err != nil {
		die("PD client: %v", err)
	}
	defer pdClient.Close()

	b := &bench{client: client, pdClient: pdClient, value: make([]byte, *payload)}
	if _, err := rand.Read(b.value); err != nil {
		die("random payload: %v", err)
	}
	b.countMode = *count > 0
	b.budget.Store(*count)

	stats := make([]writerStats, *goroutines)
	var wg sync.WaitGroup
	wg.Add(*goroutines)
	// closed when every writer has quit (the end of a -count run, or after the window)
	finished := make(chan struct{})
	for i := 0; i < *goroutines; i++ {
		go b.writer(i, &stats[i], wg.Done)
	}
	go func() { wg.Wait(); close(finished) }()

	time.Sleep(*warmup)
	b.phase.Store(phaseMeasure)
	start := time.Now()
	fmt.Println("measuring")
	if *count > 0 {
		<-finished
	} else {
		select {
		case <-time.After(*duration):
		case <-finished:
		}
	}
	b.phase.Store(phaseStop)
	elapsed := time.Since(start)
	fmt.Println("stopped")
	<-finished

	var pre, com, tso [][]int64
	for i := range stats {
		pre, com, tso = append(pre, stats[i].prewrite), append(com, stats[i].commit), append(tso, stats[i].tso)
		res.Txns += len(stats[i].commit)
		res.WarmupBinlogs += stats[i].warmup
	}
	all := sortedCopy(append(append([][]int64{}, pre...), com...)...)
	preSorted, comSorted, tsoSorted := sortedCopy(pre...), sortedCopy(com...), sortedCopy(tso...)
	if *count > 0 {
		// the window of a -count run ends with its last acknowledgement
		elapsed = time.Since(start)
	}
	res.Binlogs = len(all)
	res.Seconds = elapsed.Seconds()
	res.BinlogsPerSec = float64(res.Binlogs) / res.Seconds
	res.P50Ms, res.P99Ms = percentileMs(all, 0.5), percentileMs(all, 0.99)
	res.PrewriteP50Ms, res.CommitP50Ms = percentileMs(preSorted, 0.5), percentileMs(comSorted, 0.5)
	res.TsoP50Ms = percentileMs(tsoSorted, 0.5)
	res.Errors, res.FirstError = int(b.errors.Load()), b.firstErr
	out, err := json.Marshal(res)
	if err != nil {
		die("json: %v", err)
	}
	fmt.Println(string(out))
}

// splitURLs turns "http://a:1,http://b:2" into the address list PD's client takes.
func splitURLs(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			if i > start {
				out = append(out, s[start:i])
			}
			start = i + 1
		}
	}
	return out
}
