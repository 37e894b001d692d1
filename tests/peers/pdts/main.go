// pdts asks a PD for its cluster id and one timestamp through PD's own Go client
// (github.com/tikv/pd/client, the version TiDB uses), as TiDB, binlogctl and TiDB's pump client do.
// Tests run it against binlake's PD-compatible TSO to show that real Go PD clients work against it.
//
// Usage: pdts -pd 127.0.0.1:2379   prints "cluster-id N ts T" and exits 0, or an error and exits 1.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	pd "github.com/tikv/pd/client"
)

func main() {
	addr := flag.String("pd", "127.0.0.1:2379", "PD address")
	flag.Parse()

	client, err := pd.NewClientWithContext(context.Background(), []string{*addr}, pd.SecurityOption{},
		pd.WithMaxErrorRetry(2))
	if err != nil {
		fmt.Fprintf(os.Stderr, "pdts: cannot create a PD client: %v\n", err)
		os.Exit(1)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	physical, logical, err := client.GetTS(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "pdts: GetTS: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("cluster-id %d ts %d\n", client.GetClusterID(ctx), physical<<18|logical)
}
