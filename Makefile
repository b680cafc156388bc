# Everything starts from a fresh clone: the first target that needs the virtual
# environment builds it, so `make demo` and `make test` work on a new machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
BENCH_STAMP := $(VENV)/.bench-stamp
DEMO_STAMP  := $(VENV)/.demo-stamp

.PHONY: demo test lint typecheck unit bench bench-quick bench-against clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

# The demo needs only the services' extra, not the test and lint tools.
$(DEMO_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -e '.[demo]'
	touch $(DEMO_STAMP)

# --keep: the demo ends by printing the `ackledger console` line for the databases it kept.
demo: $(DEMO_STAMP)
	$(BIN)/ackledger demo --keep

test: lint typecheck unit

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest -q

$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(BIN)/pip install --quiet -e '.[bench]'
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(BIN)/python -m bench --full

bench-quick: $(BENCH_STAMP)
	$(BIN)/python -m bench --quick

# The quick run's figures against revision REV's, both measured in one run
# (make bench-against REV=5e5ad69 ONLY=floors,steps; ONLY is optional).
bench-against: $(BENCH_STAMP)
	$(if $(REV),,$(error bench-against needs REV=<git revision>, e.g. REV=5e5ad69))
	$(BIN)/python -m bench --quick --against $(REV) $(if $(ONLY),--only $(ONLY))

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
