// pdetcd is a test peer that stands in for PD where a real pd-server cannot be built (CI: the Go
// module proxy does not serve github.com/tikv/pd). It is what a real TiDB needs of PD when binlog is
// on: one address that answers etcd's KV/Watch API (TiDB's pump client lists and watches
// /tidb-binlog/v1/pumps/ there) and PD's gRPC methods a PD client calls (GetMembers, for the cluster
// id and the leader's address, then the Tso stream). Like PD, it embeds etcd's server and registers
// the PD service on etcd's own gRPC server, so both share one port.
//
// Usage: pdetcd -addr 127.0.0.1:2379 -peer-addr 127.0.0.1:2380 -data-dir DIR -cluster-id N
// It prints "ready <client url>" on stdout once both services answer, and stops on SIGTERM/SIGINT.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/pingcap/kvproto/pkg/pdpb"
	"go.etcd.io/etcd/server/v3/embed"
	"google.golang.org/grpc"
)

const physicalShiftBits = 18

// oracle hands out strictly increasing (physical ms, logical) pairs, as PD's TSO allocator does,
// offset from the wall clock by -offset-ms (default one millisecond behind). A tidb-server on unistore stamps its transactions from its own
// wall clock, not from PD: pumps stamp their fake binlogs (their watermark) from this one, and a
// watermark must never be above a ts TiDB gives a later commit. One millisecond behind, a fake
// binlog's ts is below every ts TiDB allocates after it (within one millisecond the two logical
// counters are unordered). A real PD, whose saved window can put it seconds ahead of the wall clock
// after a restart, breaks that in the same topology: the pumps log the late commits (-offset-ms above
// zero plays that PD).
type oracle struct {
	mu       sync.Mutex
	offset   int64
	physical int64
	logical  int64
}

// allocate reserves count timestamps and returns the last one.
func (o *oracle) allocate(count int64) (int64, int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := time.Now().UnixMilli() + o.offset
	if now > o.physical {
		o.physical, o.logical = now, 0
	}
	if o.logical+count >= 1<<physicalShiftBits {
		o.physical++
		o.logical = 0
	}
	o.logical += count
	return o.physical, o.logical
}

// pdService answers GetMembers and Tso; every other PD method is left unimplemented.
type pdService struct {
	pdpb.UnimplementedPDServer
	clusterID uint64
	clientURL string
	ts        oracle
}

func (s *pdService) header() *pdpb.ResponseHeader {
	return &pdpb.ResponseHeader{ClusterId: s.clusterID}
}

func (s *pdService) mismatch(got uint64) *pdpb.ResponseHeader {
	return &pdpb.ResponseHeader{ClusterId: s.clusterID, Error: &pdpb.Error{
		Type:    pdpb.ErrorType_UNKNOWN,
		Message: fmt.Sprintf("mismatch cluster id, need %d but got %d", s.clusterID, got),
	}}
}

func (s *pdService) member() *pdpb.Member {
	return &pdpb.Member{Name: "pdetcd", MemberId: 1, ClientUrls: []string{s.clientURL}, PeerUrls: []string{s.clientURL}}
}

// GetMembers names this one process as every member and the leader; its header carries the cluster id.
func (s *pdService) GetMembers(ctx context.Context, req *pdpb.GetMembersRequest) (*pdpb.GetMembersResponse, error) {
	m := s.member()
	return &pdpb.GetMembersResponse{Header: s.header(), Members: []*pdpb.Member{m}, Leader: m, EtcdLeader: m}, nil
}

// Tso answers each request with the last of count timestamps, refusing another cluster's requests.
func (s *pdService) Tso(stream pdpb.PD_TsoServer) error {
	for {
		req, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if got := req.GetHeader().GetClusterId(); got != s.clusterID {
			if err := stream.Send(&pdpb.TsoResponse{Header: s.mismatch(got)}); err != nil {
				return err
			}
			continue
		}
		count := int64(req.GetCount())
		if count < 1 {
			count = 1
		}
		physical, logical := s.ts.allocate(count)
		resp := &pdpb.TsoResponse{Header: s.header(), Count: uint32(count),
			Timestamp: &pdpb.Timestamp{Physical: physical, Logical: logical}}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

func mustURL(hostPort string) url.URL {
	u, err := url.Parse("http://" + hostPort)
	if err != nil {
		fmt.Fprintf(os.Stderr, "pdetcd: bad address %q: %v\n", hostPort, err)
		os.Exit(2)
	}
	return *u
}

func main() {
	addr := flag.String("addr", "127.0.0.1:2379", "client address: etcd's API and PD's gRPC methods")
	peerAddr := flag.String("peer-addr", "127.0.0.1:2380", "etcd's peer address (a single member)")
	dataDir := flag.String("data-dir", "pdetcd.data", "etcd's data directory")
	clusterID := flag.Uint64("cluster-id", 6800000000000000001, "the cluster id PD answers with")
	offset := flag.Int64("offset-ms", -1, "the TSO's distance from the wall clock, in ms")
	flag.Parse()

	client, peer := mustURL(*addr), mustURL(*peerAddr)
	service := &pdService{clusterID: *clusterID, clientURL: client.String(), ts: oracle{offset: *offset}}

	cfg := embed.NewConfig()
	cfg.Name = "pdetcd"
	cfg.Dir = *dataDir
	cfg.LogLevel = "error"
	cfg.LCUrls, cfg.ACUrls = []url.URL{client}, []url.URL{client}
	cfg.LPUrls, cfg.APUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ServiceRegister = func(gs *grpc.Server) { pdpb.RegisterPDServer(gs, service) }

	etcd, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "pdetcd: cannot start etcd: %v\n", err)
		os.Exit(1)
	}
	defer etcd.Close()
	select {
	case <-etcd.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		fmt.Fprintln(os.Stderr, "pdetcd: etcd did not become ready within 60 s")
		os.Exit(1)
	}
	fmt.Printf("ready %s\n", client.String())

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-signals:
	case err := <-etcd.Err():
		fmt.Fprintf(os.Stderr, "pdetcd: etcd stopped: %v\n", err)
		os.Exit(1)
	}
}
