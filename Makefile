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
# Real TiDB components for the test suite, built with Go from the Go module proxy into a git-ignored
# folder; a built binary is kept. A tidb-server per TiDB line that writes binlogs (tests/realtidb/versions.py):
# tests/peers/go.mod pins the tidb TiDB Binlog v7.1-v8.3 use (and builds pdetcd, pdts, pumpbench);
# tests/peers/tidb-<line>/go.mod each pin one more (tidb's own go.mod with the parser module required
# at its served version instead of tidb's ./parser replace; go.sum from the public go.sum that pins it).
PEERS := .peers
GO_ENV := GOTOOLCHAIN=go1.21.13 CGO_ENABLED=0 GOFLAGS='-mod=mod -buildvcs=false'
TIDB_LINES := v6.4 v7.0 v7.5 v8.3
TIDB_SERVERS := $(TIDB_LINES:%=$(PEERS)/tidb-server-%)
GO_TOOLS := $(PEERS)/pdetcd $(PEERS)/pdts $(PEERS)/pumpbench $(PEERS)/gocheck
PEER_BINS := $(TIDB_SERVERS) $(GO_TOOLS)

# Apache Iceberg's REST catalog server (org.apache.iceberg.rest.RESTCatalogServer, the main class of the
# apache/iceberg-rest-fixture image) for tests/sink/test_rest_catalog.py, run by the Java 17 the Makefile
# header assumes. Maven Central publishes it as iceberg-open-api's test-fixtures jar, which holds only
# the server's classes (the image's shadow jar is built from Iceberg's source), so its runtime classpath
# is listed here: the jars the Iceberg 1.10.1 build resolves for it (gradle/libs.versions.toml),
# each pinned by sha256 (checked against Maven Central's .sha1 when pinned), into the git-ignored .peers/.
MAVEN_CENTRAL := https://repo1.maven.org/maven2
ICEBERG_REST := $(PEERS)/iceberg-rest
ICEBERG_REST_JARS := \
	org/apache/iceberg/iceberg-open-api/1.10.1/iceberg-open-api-1.10.1-test-fixtures.jar@ec4dce1663933e3520227da8238a980d52b7eccac532c1953f337dc1e6ee597b \
	org/apache/iceberg/iceberg-core/1.10.1/iceberg-core-1.10.1-tests.jar@8c18111a61ea40ba23114e10e33bacfceca6cf36d2c9a932d880e0100f14af1e \
	org/apache/iceberg/iceberg-core/1.10.1/iceberg-core-1.10.1.jar@5dc1472e3a393d9d5a713aedee7007cebdf62cabbe82c72feb6d3da8e50d7216 \
	org/apache/iceberg/iceberg-api/1.10.1/iceberg-api-1.10.1.jar@9c806b96f20882d1e5e7a4b9a8d7bc1fa32917b509af4e6d139afaa09a288396 \
	org/apache/iceberg/iceberg-common/1.10.1/iceberg-common-1.10.1.jar@167791c08975f299ebae6c508ea872b899673c33dc2911e4c265f95b96a656f1 \
	org/apache/iceberg/iceberg-bundled-guava/1.10.1/iceberg-bundled-guava-1.10.1.jar@05b79072e19071b1bcf7a4e382d624b3b2ccad6eaf79627676219bb48e4e834d \
	org/apache/avro/avro/1.12.0/avro-1.12.0.jar@1f5fbfff9b7427d6832cc3031a3c81413d3e21d9e2551847d9231c28493f9492 \
	com/fasterxml/jackson/core/jackson-core/2.19.2/jackson-core-2.19.2.jar@aa77eaf29293a868c47372194f7c5287d77d9370b04ea25d3fffc1e4904b5880 \
	com/fasterxml/jackson/core/jackson-databind/2.19.2/jackson-databind-2.19.2.jar@0a1bd4e9b0d670e632d40ee8c625ad376233502f03c2f5889baea95d025b47a7 \
	com/fasterxml/jackson/core/jackson-annotations/2.19.2/jackson-annotations-2.19.2.jar@e516743a316dcf83c572ffc9cb6e8c5e8c134880c8c5155b02f7b34e9c5dc3cf \
	com/github/ben-manes/caffeine/caffeine/2.9.3/caffeine-2.9.3.jar@1e0a7bbef1dd791653143f3f05d0e489934bf5481e58a87c9e619cd46b68729b \
	org/roaringbitmap/RoaringBitmap/1.3.0/RoaringBitmap-1.3.0.jar@73443a71a2e2401c7d518a487983539fcaf5f9652efbd178f929e7b6d36881d0 \
	org/apache/httpcomponents/client5/httpclient5/5.5/httpclient5-5.5.jar@496b4b0e8d5f3a8139a5d2638486d304758bac3a9c39d76989f663cfd9354fc9 \
	org/apache/httpcomponents/core5/httpcore5/5.3.4/httpcore5-5.3.4.jar@f2b2fd7a0164e8c3120cd8437bc9fea439239e165c17262b3e907daa7e979f80 \
	org/apache/httpcomponents/core5/httpcore5-h2/5.3.4/httpcore5-h2-5.3.4.jar@1fb4f34e4b612e7c127ad693335583587850b17ce9b1c366f9de1ca49fe2c781 \
	org/eclipse/jetty/jetty-server/11.0.26/jetty-server-11.0.26.jar@3cc3b203b96c7115151ea94cad8af43c0914bfb6fe20cf2ca8378ec6822fa471 \
	org/eclipse/jetty/jetty-servlet/11.0.26/jetty-servlet-11.0.26.jar@c09469f1045f9e207732692b3bc56e8fe4d0599de52d3bd593927c4a9060e679 \
	org/eclipse/jetty/jetty-security/11.0.26/jetty-security-11.0.26.jar@1f0a1b58304741f243e2f6ac694e6506b1e26bb079cfc2baaa3f2a6ed4bf2d9f \
	org/eclipse/jetty/jetty-http/11.0.26/jetty-http-11.0.26.jar@de738c8cfd5701627b5373c42376453beb8276f989d75e5258e3b1ffe217e938 \
	org/eclipse/jetty/jetty-io/11.0.26/jetty-io-11.0.26.jar@ce0ef76071e361d97f102e5cb48928b3cc66ac899d12be3ef0af8d06b4f768a1 \
	org/eclipse/jetty/jetty-util/11.0.26/jetty-util-11.0.26.jar@1b61b875a6d40e8fd44cffb307bdb66f3459370a152a50a092a698c3737eeca9 \
	org/eclipse/jetty/toolchain/jetty-jakarta-servlet-api/5.0.2/jetty-jakarta-servlet-api-5.0.2.jar@efb20997729f32bfa6c8a8319037c353f7ad460d5d49f336bf232998ea2358db \
	org/xerial/sqlite-jdbc/3.50.3.0/sqlite-jdbc-3.50.3.0.jar@a3f53a2aa15ae9425a9e793bbe9c8e5288febeb4b65ef5c1a4e80d4c2045cf08 \
	org/apache/hadoop/hadoop-client-api/3.4.1/hadoop-client-api-3.4.1.jar@a964d4daa054c9615bbafb4553efbb140fa7fb9ac6f358a24393f183a5703438 \
	org/apache/hadoop/hadoop-client-runtime/3.4.1/hadoop-client-runtime-3.4.1.jar@f6a800a159f918670db533606d33560d6c13b7e13f14eda493280ae33b9eeb2f \
	org/slf4j/slf4j-api/2.0.17/slf4j-api-2.0.17.jar@7b751d952061954d5abfed7181c1f645d336091b679891591d63329c622eb832 \
	org/slf4j/slf4j-simple/2.0.17/slf4j-simple-2.0.17.jar@ddfea59ac074c6d3e24ac2c38622d2d963895e17f70b38ed4bdae4d780be6964

# binlake's processes set their own environment defaults (SPARK_LOCAL_IP, ...): binlake/process.py
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: demo demo-mysql test lint deps airflow-env system-deps peers iceberg-rest proto bench clean

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

# tidb-server of one TiDB line: $(1) line, $(2) its build module's folder, $(3) main package, $(4) the
# package holding TiDBReleaseVersion, $(5) the release it reports (SELECT VERSION()).
define TIDB_SERVER
$(PEERS)/tidb-server-$(1): $(2)/go.mod $(2)/go.sum
	cd $(2) && $(GO_ENV) go build -ldflags '-s -w -X $(4).TiDBReleaseVersion=$(5)' -o $(CURDIR)/$$@ $(3)
endef
TIDB := github.com/pingcap/tidb
$(eval $(call TIDB_SERVER,v6.4,tests/peers/tidb-v6.4,$(TIDB)/tidb-server,$(TIDB)/parser/mysql,v6.4.0-alpha))
$(eval $(call TIDB_SERVER,v7.0,tests/peers,$(TIDB)/tidb-server,$(TIDB)/parser/mysql,v7.0.0-alpha))
$(eval $(call TIDB_SERVER,v7.5,tests/peers/tidb-v7.5,$(TIDB)/cmd/tidb-server,$(TIDB)/pkg/parser/mysql,v7.5.0))
$(eval $(call TIDB_SERVER,v8.3,tests/peers/tidb-v8.3,$(TIDB)/cmd/tidb-server,$(TIDB)/pkg/parser/mysql,v8.3.0-alpha))

# The PD + etcd test peer, PD's Go client (pdts) and TiDB's pump client as a load (pumpbench,
# bench/pump_write_go.py). A cold tidb-server build takes 15-25 min on 2 cores, each further line less
# (the Go build cache keeps what they share); the README has the figures.
$(PEERS)/%: tests/peers/%/main.go tests/peers/go.mod
	cd tests/peers && $(GO_ENV) go build -o ../../$@ ./$*

peers: $(PEER_BINS)

# The REST catalog's jars, each downloaded once and checked against its pinned sha256; the classpath
# file lists them in order (tests/servers.py reads it).
$(ICEBERG_REST)/classpath: Makefile
	mkdir -p $(ICEBERG_REST)
	@for entry in $(ICEBERG_REST_JARS); do \
		path=$${entry%@*}; sum=$${entry#*@}; jar=$(ICEBERG_REST)/$${path##*/}; \
		if ! echo "$$sum  $$jar" | sha256sum -c --status 2>/dev/null; then \
			curl -fsSL --retry 3 -o "$$jar.part" "$(MAVEN_CENTRAL)/$$path"; \
			echo "$$sum  $$jar.part" | sha256sum -c --quiet >&2 || { rm -f "$$jar.part"; exit 1; }; \
			mv "$$jar.part" "$$jar"; \
		fi; \
		echo "$$jar"; \
	done > $@.part
	mv $@.part $@

iceberg-rest: $(ICEBERG_REST)/classpath

# Regenerate schemas/*_pb2*.py from the .proto files (tests/test_schemas.py checks they are current).
proto: deps
	$(BIN)/python -m schemas.generate

# Lint and types (configured in pyproject.toml: ruff on everything, mypy strict on the stages).
lint: deps
	$(BIN)/ruff check .
	$(BIN)/mypy

# Lint and types, then the whole suite; servers (etcd, pumps, TSO, tidb-server) are started and
# stopped by the tests. The tidb-servers build (about 20 min cold on 2 cores) at low priority while
# the tests that do not need them run, taking the CPU those leave idle; the real-TiDB tier runs once
# they are built. A pytest run that collects nothing (PYTEST_ARGS chose none of its tests) passes.
test: lint system-deps airflow-env iceberg-rest $(GO_TOOLS)
	@mkdir -p $(PEERS); \
	nice -n 15 $(MAKE) -s $(TIDB_SERVERS) > $(PEERS)/build.log 2>&1 & builder=$$!; \
	status=0; \
	$(BIN)/python -m pytest -q --ignore=tests/realtidb $(PYTEST_ARGS) || { s=$$?; [ $$s = 5 ] || status=$$s; }; \
	wait $$builder || { cat $(PEERS)/build.log; exit 1; }; \
	$(BIN)/python -m pytest -q tests/realtidb $(PYTEST_ARGS) || { s=$$?; [ $$s = 5 ] || status=$$s; }; \
	exit $$status

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
