# binlake: `make demo` and `make test` bootstrap a fresh Debian machine (Python 3.11, Java 17, root).
SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev
AIRFLOW_VENV := .venv-airflow
AIRFLOW_STAMP := $(AIRFLOW_VENV)/.installed
APT_PACKAGES := etcd-server etcd-client mariadb-server mariadb-client postgresql
# present when every package above is installed (PostgreSQL's server binaries live off PATH)
HAVE_SYSTEM_DEPS := command -v etcd && command -v mariadbd && ls /usr/lib/postgresql/*/bin/postgres
PYTEST_ARGS ?=
# Real TiDB components for the test suite, built with Go from the Go module proxy (tests/peers/go.mod
# pins the tidb that TiDB Binlog v8.3.0 uses) into a git-ignored folder; a built binary is kept.
PEERS := .peers
GO_ENV := GOTOOLCHAIN=go1.21.13 CGO_ENABLED=0 GOFLAGS='-mod=mod -buildvcs=false'
PEER_BINS := $(PEERS)/tidb-server $(PEERS)/pdetcd $(PEERS)/pdts $(PEERS)/pumpbench

# binlake's processes set their own environment defaults (SPARK_LOCAL_IP, ...): binlake/process.py
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: demo demo-mysql test lint deps airflow-env system-deps peers proto bench clean

# Python environment: pinned by pyproject.toml (binlake) and emulator/pyproject.toml (the TiDB emulator and
# the demo harness, a distribution of their own: not in binlake's wheel), transitively frozen by constraints.txt.
$(STAMP): pyproject.toml emulator/pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -c constraints.txt -e '.[spark,iceberg,mysql,quality,dev]' -e ./emulator 2>&1 \
		| { grep -v '^WARNING: Location' || true; }
	cd / && $(CURDIR)/$(BIN)/python -c "import grpc, plyvel, pyarrow, pyspark, pyiceberg, pydantic, duckdb, pymysql, mysql_mimic, schemas.pump_pb2, upstream.demo"
	touch $@

deps: $(STAMP)

# Airflow for the DAG tests, in a virtualenv of its own (dags/requirements.txt, frozen by dags/constraints.txt):
# its tasks call binlake's CLI, as a deployment's Airflow would.
$(AIRFLOW_STAMP): dags/requirements.txt dags/constraints.txt
	test -x $(AIRFLOW_VENV)/bin/python || $(PYTHON) -m venv $(AIRFLOW_VENV)
	$(AIRFLOW_VENV)/bin/pip install -q -c dags/constraints.txt -r dags/requirements.txt
	$(AIRFLOW_VENV)/bin/python -c "import airflow.sdk, airflow.providers.standard"
	touch $@

airflow-env: $(AIRFLOW_STAMP)

# Debian packages the integration tests run (etcd, MariaDB for the MySQL sink, PostgreSQL for the
# shared catalog), only when missing. The tests start the servers themselves: a package's own
# service start may be refused in a container (policy-rc.d), which is fine once its files are there.
system-deps:
	@if ! { $(HAVE_SYSTEM_DEPS); } >/dev/null 2>&1; then \
		apt-get update -q && { DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
			--no-install-recommends $(APT_PACKAGES) || { $(HAVE_SYSTEM_DEPS); } >/dev/null 2>&1; }; \
	fi

# tidb-server (the first build takes 15-25 min on 2 cores, then seconds), the PD + etcd test peer, PD's
# Go client (pdts) and TiDB's pump client as a load (pumpbench, bench/pump_write_go.py).
$(PEERS)/tidb-server: tests/peers/go.mod
	cd tests/peers && $(GO_ENV) go build -o ../../$@ github.com/pingcap/tidb/tidb-server

$(PEERS)/%: tests/peers/%/main.go tests/peers/go.mod
	cd tests/peers && $(GO_ENV) go build -o ../../$@ ./$*

peers: $(PEER_BINS)

# Regenerate schemas/*_pb2*.py from the .proto files (tests/test_schemas.py checks they are current).
proto: deps
	$(BIN)/python -m schemas.generate

# Lint and types (configured in pyproject.toml: ruff on everything, mypy strict on the stages).
lint: deps
	$(BIN)/ruff check .
	$(BIN)/mypy

# Lint and types, then the whole suite; servers (etcd, pumps, TSO, tidb-server) are started and
# stopped by the tests.
test: lint system-deps airflow-env peers
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

# The demo also replicates into a local MariaDB when mariadbd is installed; demo-mysql installs it first.
demo: deps
	$(BIN)/binlake demo --dir demo

demo-mysql: deps
	@command -v mariadbd >/dev/null || { apt-get update -q && DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -q --no-install-recommends mariadb-server mariadb-client; }
	$(BIN)/binlake demo --dir demo

# Every benchmark at its reference size (pump_write writes 1 GiB: about 20-40 minutes).
bench: deps
	$(BIN)/python bench/decode.py --rows 1000000
	$(BIN)/python bench/pump_scan.py
	$(BIN)/python bench/upstream_load.py
	$(BIN)/python bench/pump_write.py

clean:
	rm -rf $(VENV) $(AIRFLOW_VENV) $(PEERS) demo .pytest_cache .mypy_cache .ruff_cache
