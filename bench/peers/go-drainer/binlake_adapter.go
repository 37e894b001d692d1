// Binlake's adapter for TiDB Binlog's drainer (added to package drainer by build.sh).
//
// The drainer reads TiKV for metadata only: the latest timestamp and the DDL jobs. With no TiKV
// (a tidb-server on unistore beside binlake's pumps), this file serves both from what there is:
// the timestamp from PD (any server with PD's Tso and GetMembers), the DDL jobs from the
// tidb-server's status API, GET {BINLAKE_TIDB_STATUS_URL}/ddl/history. build.sh renames the two
// TiKV functions it replaces (createTiStore, loadHistoryDDLJobs); everything on the data path,
// pumps to downstream, is the drainer's own code.
package drainer

import (
	"encoding/json"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/pingcap/errors"
	"github.com/pingcap/tidb/kv"
	"github.com/pingcap/tidb/parser/model"
	pd "github.com/tikv/pd/client"

	"github.com/pingcap/tidb-binlog/pkg/security"
	"github.com/pingcap/tidb-binlog/pkg/util"
)

// statusURLEnv names the tidb-server status URL the DDL jobs are read from.
const statusURLEnv = "BINLAKE_TIDB_STATUS_URL"

// pdStore is the kv.Storage the drainer gets instead of a TiKV store: CurrentVersion asks PD,
// Close closes the PD client. The drainer calls nothing else on it once getDDLJob and
// loadHistoryDDLJobs are served over HTTP (any other method would panic on the nil embedded
// Storage).
type pdStore struct {
	kv.Storage
	pd pd.Client
}

func (s *pdStore) CurrentVersion(txnScope string) (kv.Version, error) {
	ts, err := util.GetTSO(s.pd)
	if err != nil {
		return kv.Version{}, errors.Trace(err)
	}
	return kv.NewVersion(uint64(ts)), nil
}

// GetSnapshot has nothing to read: only load-schema-snapshot = true asks for one.
func (s *pdStore) GetSnapshot(ver kv.Version) kv.Snapshot {
	panic("binlake adapter: there is no TiKV to read a snapshot from; load-schema-snapshot = true is not supported")
}

func (s *pdStore) Close() error {
	s.pd.Close()
	return nil
}

// openPDStore opens a pdStore on the PD endpoints of a "tikv://host1,host2?params" path.
func openPDStore(path string) (kv.Storage, error) {
	hosts := strings.TrimPrefix(path, "tikv://")
	if i := strings.IndexByte(hosts, '?'); i >= 0 {
		hosts = hosts[:i]
	}
	urls := make([]string, 0)
	for _, h := range strings.Split(hosts, ",") {
		urls = append(urls, "http://"+h)
	}
	cli, err := util.GetPdClient(strings.Join(urls, ","), security.Config{})
	if err != nil {
		return nil, errors.Trace(err)
	}
	return &pdStore{pd: cli}, nil
}

// createTiStore replaces the drainer's TiKV store for the syncer (createTiStoreOnTiKV).
func createTiStore(urls string) (kv.Storage, error) {
	hosts := make([]string, 0)
	for _, u := range strings.Split(urls, ",") {
		u = strings.TrimPrefix(strings.TrimPrefix(strings.TrimSpace(u), "http://"), "https://")
		hosts = append(hosts, u)
	}
	return openPDStore("tikv://" + strings.Join(hosts, ","))
}

var httpClient = &http.Client{Timeout: 30 * time.Second}

// historyJobs reads every DDL job of the tidb-server's history.
func historyJobs() ([]*model.Job, error) {
	base := strings.TrimRight(os.Getenv(statusURLEnv), "/")
	if base == "" {
		return nil, errors.Errorf("%s is not set: the adapter reads the DDL jobs from a tidb-server's status API", statusURLEnv)
	}
	resp, err := httpClient.Get(base + "/ddl/history")
	if err != nil {
		return nil, errors.Trace(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, errors.Errorf("GET %s/ddl/history: %s", base, resp.Status)
	}
	var jobs []*model.Job
	if err := json.NewDecoder(resp.Body).Decode(&jobs); err != nil {
		return nil, errors.Annotatef(err, "GET %s/ddl/history", base)
	}
	return jobs, nil
}

// loadHistoryDDLJobs replaces the drainer's read of the history from TiKV
// (loadHistoryDDLJobsFromTiKV): the same jobs, sorted by schema version as it sorts them.
func loadHistoryDDLJobs(tiStore kv.Storage) ([]*model.Job, error) {
	jobs, err := historyJobs()
	if err != nil {
		return nil, errors.Trace(err)
	}
	kept := jobs[:0]
	for _, j := range jobs {
		if j.BinlogInfo != nil {
			kept = append(kept, j)
		}
	}
	sort.Slice(kept, func(i, j int) bool {
		return kept[i].BinlogInfo.SchemaVersion < kept[j].BinlogInfo.SchemaVersion
	})
	return kept, nil
}

// ddlJobOverHTTP replaces getDDLJob: one job of the history by id; nil when it is not there yet
// (the collector then waits and asks again, as it does when TiKV has no such job).
func ddlJobOverHTTP(tiStore kv.Storage, id int64) (*model.Job, error) {
	jobs, err := historyJobs()
	if err != nil {
		return nil, errors.Trace(err)
	}
	for _, j := range jobs {
		if j.ID == id {
			return j, nil
		}
	}
	return nil, nil
}

func init() {
	newStore = openPDStore
	fDDLJobGetter = ddlJobOverHTTP
}
