# punctual's two set-up commands: `make run` and `make test` (see README.md).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: run test lint unit bench chaos clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev,temporal]'
	touch $(STAMP)

## run: serve the demo app on http://127.0.0.1:8080 with a SQLite file (punctual.db)
run: $(STAMP)
	$(BIN)/punctual serve

## lint: ruff, formatting, mypy and the import layers
lint: $(STAMP)
	$(BIN)/ruff check src tests examples $(wildcard bench)
	$(BIN)/ruff format --check src tests examples $(wildcard bench)
	$(BIN)/mypy
	$(BIN)/lint-imports

## test: every check and every test (SQLite always; PostgreSQL and Temporal when reachable, required with CI=true),
## in TEST_WORKERS processes (a test file stays in one process unless its tests are marked spread; TEST_WORKERS=0 runs them in this one)
TEST_WORKERS ?= 3
test: lint
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup

## unit: the fast tests only
unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit -q

bench: $(STAMP)
	$(BIN)/python -m bench

## chaos: a long chaos run by hand (docs/reliability.md): a real deployment under a seeded mix of faults,
## judged by the invariant checker; CHAOS_VARIANT=postgres|temporal|sqlite, CHAOS_MINUTES, CHAOS_SEED (default: new)
CHAOS_VARIANT ?= postgres
CHAOS_MINUTES ?= 10
CHAOS_SEED ?=
chaos: $(STAMP)
	$(BIN)/python -m tests.chaos --variant $(CHAOS_VARIANT) --minutes $(CHAOS_MINUTES) $(if $(CHAOS_SEED),--seed $(CHAOS_SEED))

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
