#!/bin/sh
# Build TiDB Binlog's drainer (v8.3.0) with binlake's adapter for a cluster without TiKV.
#
#   bench/peers/go-drainer/build.sh SOURCE OUT
#
# SOURCE: a git repository of github.com/pingcap/tidb-binlog holding the tag v8.3.0 (a clone, or
# the bare mirror a fetch leaves); OUT: the drainer binary to write. The source is exported from the
# tag into a scratch directory, the two functions the adapter replaces are renamed (nothing else
# of TiDB Binlog's code changes), binlake_adapter.go is added to package drainer, and
# ./cmd/drainer is built with the Go toolchain binlake's Makefile builds its peers with (cgo on:
# the drainer links godror, the Oracle driver, which needs it).
set -eu
SOURCE=${1:?usage: build.sh SOURCE OUT}
OUT=${2:?usage: build.sh SOURCE OUT}
TAG=${TIDB_BINLOG_TAG:-v8.3.0}
HERE=$(cd "$(dirname "$0")" && pwd)
case $OUT in /*) ;; *) OUT=$(pwd)/$OUT ;; esac
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
if [ -d "$SOURCE/.git" ]; then GIT_DIR=$SOURCE/.git; else GIT_DIR=$SOURCE; fi
git --git-dir "$GIT_DIR" archive "$TAG" | tar -x -C "$WORK"
# the two TiKV readers the adapter replaces keep their code under another name
sed -i 's/^func createTiStore(/func createTiStoreOnTiKV(/' "$WORK/drainer/server.go"
sed -i 's/^func loadHistoryDDLJobs(/func loadHistoryDDLJobsFromTiKV(/' "$WORK/drainer/util.go"
grep -q '^func createTiStoreOnTiKV(' "$WORK/drainer/server.go"
grep -q '^func loadHistoryDDLJobsFromTiKV(' "$WORK/drainer/util.go"
cp "$HERE/binlake_adapter.go" "$WORK/drainer/"
cd "$WORK"
GOTOOLCHAIN=${GOTOOLCHAIN:-go1.21.13} CGO_ENABLED=1 GOFLAGS='-mod=mod -buildvcs=false' \
    go build -o "$OUT" ./cmd/drainer
echo "built $OUT from $TAG with binlake_adapter.go"
