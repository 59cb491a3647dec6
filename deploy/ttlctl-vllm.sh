#!/bin/sh
# The entrypoint of deploy/Dockerfile: vLLM's OpenAI server with ttlctl's TTL scheduler.
#   ttlctl-vllm MODEL [vLLM options]          (the arguments of `vllm serve`)
# The bundle is $TTLCTL_BUNDLE (default /etc/ttlctl/bundle.json): a missing or damaged one
# leaves the engine serving as stock vLLM, with one warning and ttlctl:bundle_active 0.
set -eu
: "${TTLCTL_BUNDLE:=/etc/ttlctl/bundle.json}"
: "${PROMETHEUS_MULTIPROC_DIR:=/tmp/ttlctl-prom}"
export TTLCTL_BUNDLE PROMETHEUS_MULTIPROC_DIR
# The scheduler runs in vLLM's engine-core process: its ttlctl:* series reach /metrics only
# through this folder. A restarted container keeps it (an emptyDir outlives the container),
# so the last run's files go first: counters start from zero and no dead process's gauge
# is added in.
mkdir -p "$PROMETHEUS_MULTIPROC_DIR"
find "$PROMETHEUS_MULTIPROC_DIR" -mindepth 1 -maxdepth 1 -name '*.db' -exec rm -f {} +
exec vllm serve "$@" --scheduler-cls ttlctl.engine.TTLScheduler
