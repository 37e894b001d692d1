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
GO_TOOLS := $(PEERS)/pdetcd $(PEERS)/pdts $(PEERS)/pumpbench $(PEERS)/gocheck $(PEERS)/kafkareader
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

# Apache Kafka's broker (main class kafka.Kafka, KRaft mode: broker and controller in one process) for
# the Kafka sink's tests (tests/servers.py KafkaServer), run by the same Java 17. Maven Central's
# org.apache.kafka:kafka_2.13 4.4.0 and its runtime dependencies as Maven resolves them, plus slf4j-simple
# as the log binding (they bring none: the broker's log would be dropped), each pinned by sha256
# (checked against Maven Central's .sha1 when pinned), into the git-ignored .peers/.
KAFKA := $(PEERS)/kafka
KAFKA_JARS := \
	org/apache/kafka/kafka_2.13/4.4.0/kafka_2.13-4.4.0.jar@76d3314f873571677ff98620ab9a431e508e3687f921a3df4f70d692a970475e \
	org/apache/kafka/kafka-clients/4.4.0/kafka-clients-4.4.0.jar@1ab07317eb6633241392449d329dbdc5d9251e6ffc4926860f42dd966e88bdf9 \
	org/apache/kafka/kafka-coordinator-common/4.4.0/kafka-coordinator-common-4.4.0.jar@e380267a17981edbadaa2e2e785f18dc1b5671abf2d1084eb7da06a765c71d0c \
	org/apache/kafka/kafka-group-coordinator-api/4.4.0/kafka-group-coordinator-api-4.4.0.jar@bf11d7586c7363ba72a16ac5ef80c65365de9166469f7f6fc4ac5d2e0a98213a \
	org/apache/kafka/kafka-group-coordinator/4.4.0/kafka-group-coordinator-4.4.0.jar@3fc830ace54f6a13f9f536bc0564bf39a68797365a4c4b194bd7db4fb893b2bc \
	org/apache/kafka/kafka-metadata/4.4.0/kafka-metadata-4.4.0.jar@6c52de74ecd670332e1e1324f5d40311275ac49b22699b6722e5fb07dd266fcb \
	org/apache/kafka/kafka-raft/4.4.0/kafka-raft-4.4.0.jar@687f278ce5d82b7f53644643e21e1a7452530f202826108990f0fe4f3d334d4f \
	org/apache/kafka/kafka-server-common/4.4.0/kafka-server-common-4.4.0.jar@e50931831a27a2f3eb6cf74e8d63cc325b4e98656f30e94f8829297951ca5080 \
	org/apache/kafka/kafka-server/4.4.0/kafka-server-4.4.0.jar@5f5456c2976203525080220212639f7033274b94458ceabf44197f4800bd615c \
	org/apache/kafka/kafka-share-coordinator/4.4.0/kafka-share-coordinator-4.4.0.jar@6969a7961ca98d37a039bbe0af0fe761d6b0dd07ca9666802f47821167afbb6e \
	org/apache/kafka/kafka-storage-api/4.4.0/kafka-storage-api-4.4.0.jar@edd47a86cdce283fc15d033090417a5dec29642eb807713f2e807e3c46b5ca46 \
	org/apache/kafka/kafka-storage/4.4.0/kafka-storage-4.4.0.jar@9eaa4dafacc251080ece0efa8511283da5de6931e843457f6af87f02f9b50039 \
	org/apache/kafka/kafka-tools-api/4.4.0/kafka-tools-api-4.4.0.jar@348b63a7d22739703ad34613a1154702568d462c3a8adb1dd655482251f4e529 \
	org/apache/kafka/kafka-transaction-coordinator/4.4.0/kafka-transaction-coordinator-4.4.0.jar@1d5324d59776d6b7f324cfdc87647b1e88f9823332201c0324e7ae9f210d915d \
	at/yawk/lz4/lz4-java/1.11.2/lz4-java-1.11.2.jar@8a7458657938e9b692224db83aac458c13abd7a59ab75c3d3b08bd2233a646a2 \
	com/dynatrace/hash4j/hash4j/0.22.0/hash4j-0.22.0.jar@23028a3fd006e530bf495f551083208187cafd8f80624d048eba56442f16a50e \
	com/fasterxml/jackson/core/jackson-annotations/2.21/jackson-annotations-2.21.jar@53ca085f4a150f703f49e1aabd935bd03b43e1ea3d55d135438292af22cef56b \
	com/fasterxml/jackson/core/jackson-core/2.21.7/jackson-core-2.21.7.jar@8c5623b98f32d5f7e1287ff61ed50e08ab7b11381e991fff89327faabba42261 \
	com/fasterxml/jackson/core/jackson-databind/2.21.7/jackson-databind-2.21.7.jar@1290c2795e93e8a6861a6c4d9ff0d844d32f5ea178362cb2721edf5561e828b1 \
	com/fasterxml/jackson/dataformat/jackson-dataformat-yaml/2.21.7/jackson-dataformat-yaml-2.21.7.jar@df2b3e6a194181dc067b7211d750926b4ae9e4f3c892a0005b8219a9b59be681 \
	com/fasterxml/jackson/datatype/jackson-datatype-jdk8/2.21.7/jackson-datatype-jdk8-2.21.7.jar@b8f62f98363ed9aa259b3a479a64fcbe7e081158a8bec6733972e900d12f4e47 \
	com/github/ben-manes/caffeine/caffeine/3.2.0/caffeine-3.2.0.jar@ec411dfdf0c03f25218648ce89861630b71680e5858a9a7278ebac8e55cab3d7 \
	com/github/luben/zstd-jni/1.5.7-17/zstd-jni-1.5.7-17.jar@c9043e2da8a16c13b6cd7661a5cb56685a573c3546ef4bd0ead67b0b67c2e107 \
	com/google/re2j/re2j/1.8/re2j-1.8.jar@7b52c72156dd7f98b3237a5b35c1d34fba381b21048c89208913ad80a45dfbd7 \
	com/typesafe/scala-logging/scala-logging_2.13/3.9.6/scala-logging_2.13-3.9.6.jar@0ad0c3f4d89d538b3b6c300158555e266aa69cf1b5f6522aba8b5bad238eb994 \
	com/yammer/metrics/metrics-core/2.2.0/metrics-core-2.2.0.jar@6b7a14a6f34c10f8683f7b5e2f39df0f07b58c7dff0e468ebbc713905c46979c \
	commons-beanutils/commons-beanutils/1.11.0/commons-beanutils-1.11.0.jar@9e44ba68ec9a3f21286fa2a8bbb003b735c0f69101bb43144b79f4f8aaa74709 \
	commons-collections/commons-collections/3.2.2/commons-collections-3.2.2.jar@eeeae917917144a68a741d4c0dff66aa5c5c5fd85593ff217bced3fc8ca783b8 \
	commons-digester/commons-digester/2.1/commons-digester-2.1.jar@e0b2b980a84fc6533c5ce291f1917b32c507f62bcad64198fff44368c2196a3d \
	commons-logging/commons-logging/1.3.5/commons-logging-1.3.5.jar@6d7a744e4027649fbb50895df9497d109f98c766a637062fe8d2eabbb3140ba4 \
	commons-validator/commons-validator/1.10.1/commons-validator-1.10.1.jar@ed74711a78d793ca37f6075e4a1e93d107233dfd20d0bb17e32bad88d38e56aa \
	net/sf/jopt-simple/jopt-simple/5.0.4/jopt-simple-5.0.4.jar@df26cc58f235f477db07f753ba5a3ab243ebe5789d9f89ecf68dd62ea9a66c28 \
	net/sourceforge/argparse4j/argparse4j/0.7.0/argparse4j-0.7.0.jar@65ceb669d88f63306c680f8088bbf765bbca72d288a61a03703000076c3d3f56 \
	org/apache/logging/log4j/log4j-api/2.25.5/log4j-api-2.25.5.jar@64777f73ea0b3104c04eb82befbdccc30a425a19e83ad06cb2f93aa303511863 \
	org/apache/logging/log4j/log4j-core/2.25.5/log4j-core-2.25.5.jar@050c4f85deb48b055e9c041ac39043fbb79ce477841a11a1eb2969c86c6a0072 \
	org/bitbucket/b_c/jose4j/0.9.6/jose4j-0.9.6.jar@7314af50cde9c99e8eaf43eee617a23edcc6bb43036221064355094999d837ef \
	org/hdrhistogram/HdrHistogram/2.2.2/HdrHistogram-2.2.2.jar@22d1d4316c4ec13a68b559e98c8256d69071593731da96136640f864fa14fad8 \
	org/jspecify/jspecify/1.0.0/jspecify-1.0.0.jar@1fad6e6be7557781e4d33729d49ae1cdc8fdda6fe477bb0cc68ce351eafdfbab \
	org/pcollections/pcollections/4.0.2/pcollections-4.0.2.jar@2bbeef5797a241300c4f7513cd546239629ed7deda4fc0c31df90bb95f5f13ef \
	org/scala-lang/scala-library/2.13.18/scala-library-2.13.18.jar@4e85d96ff7bc7dc627985523c3541b9917aaa08e956391380c42db21a2c4e5a0 \
	org/scala-lang/scala-reflect/2.13.18/scala-reflect-2.13.18.jar@6935ff1982b2ac93d695f15aa66921be2f602921277afe002f018fd8c7d6e29b \
	org/slf4j/slf4j-api/1.7.36/slf4j-api-1.7.36.jar@d3ef575e3e4979678dc01bf1dcce51021493b4d11fb7f1be8ad982877c16a1c0 \
	org/slf4j/slf4j-simple/1.7.36/slf4j-simple-1.7.36.jar@2f39bed943d624dfa8f4102d0571283a10870b6aa36f197a8a506f147010c10f \
	org/xerial/snappy/snappy-java/1.1.10.7/snappy-java-1.1.10.7.jar@4c766cb3f855415ee734b2392949a0b6f12a60879334a74518deaf6270d32e36 \
	org/yaml/snakeyaml/2.5/snakeyaml-2.5.jar@e6682acf1ace77508ef13649cbf4f8d09d2cf5457bdb61d25ffb6ac0233d78dd

# A Spark with Apache Iceberg's Java runtime, the reader of tests/sink/test_java_readers.py (Java Iceberg reads
# what binlake writes): Maven Central has no iceberg-spark-runtime for binlake's Spark 4.3 yet, so Spark 4.1
# (pyspark pinned, with the py4j it requires) in a virtualenv of its own, and the iceberg-spark-runtime for
# Spark 4.1 with SQLite's JDBC driver (the SQL catalog), each pinned by sha256 (checked against Maven
# Central's .sha1 when pinned), into the git-ignored .peers/.
ICEBERG_SPARK := $(PEERS)/iceberg-spark
ICEBERG_SPARK_VENV := $(ICEBERG_SPARK)/venv
ICEBERG_SPARK_STAMP := $(ICEBERG_SPARK_VENV)/.installed
ICEBERG_SPARK_PYSPARK := 4.1.4
ICEBERG_SPARK_PIP := pyspark==$(ICEBERG_SPARK_PYSPARK) py4j==0.10.9.9
ICEBERG_SPARK_JARS := \
	org/apache/iceberg/iceberg-spark-runtime-4.1_2.13/1.12.0/iceberg-spark-runtime-4.1_2.13-1.12.0.jar@3123c3798af642dd537230923548e013ef41cc28b6626e5225808cf5670a0f82 \
	org/xerial/sqlite-jdbc/3.50.3.0/sqlite-jdbc-3.50.3.0.jar@a3f53a2aa15ae9425a9e793bbe9c8e5288febeb4b65ef5c1a4e80d4c2045cf08

# binlake's processes set their own environment defaults (SPARK_LOCAL_IP, ...): binlake/process.py
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: demo demo-mysql test lint deps spark-archive bytecode airflow-env system-deps peers iceberg-rest iceberg-spark kafka proto bench clean

# Python environment: pinned by pyproject.toml (binlake) and emulator/pyproject.toml (the TiDB emulator and
# the demo harness, a distribution of their own: not in binlake's wheel), transitively frozen by constraints.txt.
$(STAMP): pyproject.toml emulator/pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -c constraints.txt -e '.[spark,iceberg,mysql,kafka,quality,dev]' -e ./emulator 2>&1 \
		| { grep -v '^WARNING: Location' || true; }
	cd / && $(CURDIR)/$(BIN)/python -c "import grpc, plyvel, pyarrow, pyspark, pyiceberg, pydantic, duckdb, pymysql, confluent_kafka, mysql_mimic, schemas.pump_pb2, upstream.demo"
	touch $@

deps: $(STAMP)

# The class-data sharing archive of Spark's classes every binlake command's JVM maps (under
# ~/.cache/binlake, built once per Java and pyspark: about 30 s). binlake builds it in the background
# on first use anyway; made here first, the tests and the demo start Spark faster from their start.
spark-archive: deps
	@$(BIN)/python -m transform.spark_archive 2>&1 | { grep -v 'WARN\|log4j\|setLogLevel' || true; }

# The repository's modules byte-compiled, as pip compiles a package it installs: where
# PYTHONDONTWRITEBYTECODE is set, imports never cache what they compile, and each of the hundreds of
# binlake processes the tests and the demo start would compile its modules again (about 0.25 s each).
# Only what changed is compiled again; a stale file is never read (its source's time is in it).
bytecode: deps
	@$(BIN)/python -m compileall -q -j 0 binlake ingest transform sink schemas emulator tests bench dags

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

# Jars from Maven Central into folder $(1), each downloaded once and checked against its pinned sha256
# ($(2): path@sha256 entries); $(1)/classpath lists them in order (tests/servers.py reads it).
define FETCH_JARS
	mkdir -p $(1)
	@for entry in $(2); do \
		path=$${entry%@*}; sum=$${entry#*@}; jar=$(1)/$${path##*/}; \
		if ! echo "$$sum  $$jar" | sha256sum -c --status 2>/dev/null; then \
			curl -fsSL --retry 3 -o "$$jar.part" "$(MAVEN_CENTRAL)/$$path"; \
			echo "$$sum  $$jar.part" | sha256sum -c --quiet >&2 || { rm -f "$$jar.part"; exit 1; }; \
			mv "$$jar.part" "$$jar"; \
		fi; \
		echo "$$jar"; \
	done > $(1)/classpath.part
	mv $(1)/classpath.part $(1)/classpath
endef

$(ICEBERG_REST)/classpath: Makefile
	$(call FETCH_JARS,$(ICEBERG_REST),$(ICEBERG_REST_JARS))

iceberg-rest: $(ICEBERG_REST)/classpath

$(KAFKA)/classpath: Makefile
	$(call FETCH_JARS,$(KAFKA),$(KAFKA_JARS))

kafka: $(KAFKA)/classpath

$(ICEBERG_SPARK)/classpath: Makefile
	$(call FETCH_JARS,$(ICEBERG_SPARK),$(ICEBERG_SPARK_JARS))

$(ICEBERG_SPARK_STAMP): Makefile
	test -x $(ICEBERG_SPARK_VENV)/bin/python || $(PYTHON) -m venv $(ICEBERG_SPARK_VENV)
	$(ICEBERG_SPARK_VENV)/bin/pip install -q $(ICEBERG_SPARK_PIP)
	cd / && $(CURDIR)/$(ICEBERG_SPARK_VENV)/bin/python -c \
		"import pyspark; assert pyspark.__version__ == '$(ICEBERG_SPARK_PYSPARK)', pyspark.__version__"
	touch $@

iceberg-spark: $(ICEBERG_SPARK)/classpath $(ICEBERG_SPARK_STAMP)

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
test: lint system-deps airflow-env iceberg-rest iceberg-spark kafka spark-archive bytecode $(GO_TOOLS)
	@mkdir -p $(PEERS); \
	nice -n 15 $(MAKE) -s $(TIDB_SERVERS) > $(PEERS)/build.log 2>&1 & builder=$$!; \
	status=0; \
	$(BIN)/python -m pytest -q --ignore=tests/realtidb $(PYTEST_ARGS) || { s=$$?; [ $$s = 5 ] || status=$$s; }; \
	wait $$builder || { cat $(PEERS)/build.log; exit 1; }; \
	$(BIN)/python -m pytest -q tests/realtidb $(PYTEST_ARGS) || { s=$$?; [ $$s = 5 ] || status=$$s; }; \
	exit $$status

# The demo also replicates into a local MariaDB when mariadbd is installed; demo-mysql installs it first.
demo: deps spark-archive bytecode
	$(BIN)/binlake-emulator demo --dir demo

demo-mysql: deps
	@command -v mariadbd >/dev/null || { apt-get update -q && DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -q --no-install-recommends mariadb-server mariadb-client; }
	$(BIN)/binlake-emulator demo --dir demo

# Every benchmark at its reference size (pump_write writes 1 GiB: about 20-40 minutes).
bench: deps
	$(BIN)/python bench/decode.py --rows 1000000
	$(BIN)/python bench/pump_scan.py
	$(BIN)/python bench/upstream_load.py
	$(BIN)/python bench/pump_write.py

clean:
	rm -rf $(VENV) $(AIRFLOW_VENV) $(PEERS) demo .pytest_cache .mypy_cache .ruff_cache
