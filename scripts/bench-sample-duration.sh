#!/usr/bin/env bash
# How long one sample of a node takes through the NVML code path, on the fake libnvidia-ml
# (docs/performance.md "Sample duration"): runs EXPORTER against FAKE_LIB serving `node` of
# SCENARIO for SECONDS at a 100 ms interval with TESSERA_NVML_TRACE, and prints the median, 95th
# percentile and count of the whole-sample durations ("(sample)" lines), the GPM metrics-get
# call's median, and how many calls of the two slow functions (energy counter, per-process
# utilisation) a GPU-sample makes. Arguments after SECONDS go to the exporter (e.g.
# `--energy.interval 0s` to read them every sample, as before issue 51).
#
#   bash scripts/bench-sample-duration.sh EXPORTER FAKE_LIB [SCENARIO] [NODE] [SECONDS] [FLAGS...]
set -euo pipefail
exporter="$1" lib="$2"
scenario="${3:-fixtures/scenarios/demo.toml}" node="${4:-gpu-node-1}" seconds="${5:-30}"
shift $(($# < 5 ? $# : 5))
work="$(mktemp -d)"
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$work"' EXIT
TESSERA_NVML_TRACE="$work/trace.jsonl" TESSERA_FAKE_NVML_SCENARIO="$scenario" \
  TESSERA_FAKE_NVML_NODE="$node" TESSERA_FAKE_NVML_TIME=2026-11-02T14:00:00Z \
  TESSERA_FAKE_NVML_STEP_MS=1000 \
  "$exporter" --nvml.lib-path "$lib" --web.listen-address 127.0.0.1:0 --sample.interval 100ms \
  --history.dir "" "$@" 2>"$work/err" &
pid=$!
sleep "$seconds"
kill "$pid"; wait "$pid" 2>/dev/null || true
python3 - "$work/trace.jsonl" <<'PY'
import json, statistics, sys
s, g = [], []
gpu_samples, energy, util = 0, 0, 0
for line in open(sys.argv[1]):
    c = json.loads(line)
    if c["function"] == "(sample)":
        s.append(c["micros"])
        gpu_samples += c["value"]["gpus"]
    elif c["function"] == "nvmlGpmMetricsGet":
        g.append(c["micros"])
    elif c["function"] == "nvmlDeviceGetTotalEnergyConsumption":
        energy += 1
    elif c["function"] == "nvmlDeviceGetProcessUtilization":
        util += 1
s.sort()
print("samples %d  median %.0f us  p95 %.0f us  gpm-metrics-get median %.1f us (%d calls)" % (
    len(s), statistics.median(s), s[int(0.95 * (len(s) - 1))], statistics.median(g) if g else 0, len(g)))
print("per GPU-sample: %.3f energy-counter calls, %.3f process-utilisation calls (%d GPU-samples)" % (
    energy / max(gpu_samples, 1), util / max(gpu_samples, 1), gpu_samples))
PY
