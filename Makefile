# The two commands that matter: `make dev` and `make test`. Everything they need
# is installed by the targets below, from PyPI and Debian's packages.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
SQL_FILES := $(wildcard sql/*.sql functions/*.sql migrations/*.sql)

.PHONY: help install dev test test-python lint pgtap extension clean

help:
	@echo "make dev        run Harvest end to end on an embedded PostgreSQL"
	@echo "make test       install what tests need, lint, run every suite"
	@echo "make lint       sqlfluff over the SQL, ruff over the Python"
	@echo "make extension  build harvest--<version>.sql and harvest.control"

# The virtualenv is rebuilt whenever pyproject.toml changes.
$(BIN)/.installed: pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11) and "Harvest needs Python 3.11 or newer")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $@

install: $(BIN)/.installed

dev: install
	$(BIN)/harvest dev

lint: install
	$(BIN)/ruff check harvest_py tests bench
	$(BIN)/sqlfluff lint --processes 2 $(SQL_FILES)

test: install lint test-python

test-python: install
	$(BIN)/pytest -q -p no:cacheprovider tests

# CREATE EXTENSION harvest: writes extension/harvest--<version>.sql and extension/harvest.control;
# copy both into the extension/ directory under `pg_config --sharedir` (docs/install.md).
extension: install
	$(PY) scripts/build_extension.py --output-dir extension

clean:
	rm -rf $(VENV) build dist extension *.egg-info harvest_py/*.egg-info
