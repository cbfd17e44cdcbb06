# mqlens: `make run` starts the console, `make test` runs the whole suite.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Two installs: what the console needs to run, and on top of it what the tests, benchmarks
# and lint need (pytest, Playwright, schemathesis...). `make run` takes only the first.
RUN_STAMP := $(VENV)/.run-installed-stamp
DEV_STAMP := $(VENV)/.dev-installed-stamp
HOST ?= 127.0.0.1
PORT ?= 8080
DATA ?= ./data

.PHONY: install install-dev run test fuzz bench soak lint build-deps system-deps clean

# Ends a recipe that collected Debian package names in the shell variable `missing`: installs them, if any.
APT_INSTALL_MISSING = if [ -n "$$missing" ]; then \
	echo "installing:$$missing"; \
	SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

install: $(RUN_STAMP)

install-dev: $(DEV_STAMP)

$(RUN_STAMP): pyproject.toml setup.py store/format/_recordio.c app/_ndjson.c $(wildcard app/grpc/protocol/*.proto)
	@$(MAKE) --no-print-directory build-deps
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e .
	@touch $(RUN_STAMP)

$(DEV_STAMP): $(RUN_STAMP)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $(DEV_STAMP)

# The store's compiled loops need a C compiler, zlib's and Python's headers: installed only when missing.
build-deps:
	@missing=""; \
	command -v cc >/dev/null 2>&1 || missing="$$missing gcc"; \
	test -f /usr/include/zlib.h || missing="$$missing zlib1g-dev"; \
	$(PYTHON) -c "import os, sysconfig, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')))" \
		|| missing="$$missing python3-dev"; \
	$(APT_INSTALL_MISSING)

# Debian packages the browser, PostgreSQL and Spark tests need, installed only when missing.
system-deps:
	@missing=""; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v java >/dev/null 2>&1 || missing="$$missing default-jre-headless"; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	$(APT_INSTALL_MISSING)

run: $(RUN_STAMP)
	$(BIN)/mqlens serve --data $(DATA) --host $(HOST) --port $(PORT) $(if $(DEMO),--demo,)

test: $(DEV_STAMP) system-deps
	$(BIN)/python -m pytest

# The REST API fuzz test of tests/fuzz at length: FUZZ_EXAMPLES generated requests per operation
# (`make test` runs it with 20 and a fixed seed), with a random seed unless MQLENS_FUZZ_SEED is set.
FUZZ_EXAMPLES ?= 200
fuzz: $(DEV_STAMP)
	MQLENS_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) MQLENS_FUZZ_SEED=$${MQLENS_FUZZ_SEED:-random} \
		$(BIN)/python -m pytest -o addopts="" -p no:cacheprovider -q -s tests/fuzz

bench: $(DEV_STAMP)
	$(BIN)/python -m bench.run_all

# The mixed-load soak of a real server (10 minutes): `make soak SOAK_SECONDS=60` for a shorter run.
soak: $(DEV_STAMP)
	$(BIN)/python -m bench.soak $(if $(SOAK_SECONDS),--seconds $(SOAK_SECONDS),)

lint: $(DEV_STAMP)
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
