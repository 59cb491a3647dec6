# ttlctl — see README.md. Every target installs what it needs first (idempotent, fast when done).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DEMO   := build/demo

.PHONY: install test demo bench lint clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	@touch $(STAMP)

test: install
	$(BIN)/python -m pytest -q

demo: install
	$(BIN)/ttlctl ingest samples -o $(DEMO)/trace.parquet

bench: install
	$(BIN)/python bench/run.py

lint: install
	$(BIN)/ruff check ttlctl fitting replay profiles tests bench
	$(BIN)/mypy ttlctl fitting replay profiles

clean:
	rm -rf build .pytest_cache .mypy_cache .ruff_cache
