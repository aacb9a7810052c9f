#!/usr/bin/env bash
# Serving benchmarks (docs/performance.md): sustained scrapes per second with the exporter pinned
# to one core (wrk on the other) and no missed sample tick, and resident memory after an hour's
# worth of samples. Uses the release binary on the simulator; needs wrk and curl (Debian).
# Usage: bash scripts/bench-serve.sh [SCENARIO]   (default: fixtures/scenarios/big-node.toml)
set -euo pipefail
cd "$(dirname "$0")/.."
scenario=${1:-fixtures/scenarios/big-node.toml}
for tool in wrk curl taskset; do
  command -v "$tool" >/dev/null || { echo "$tool is missing: apt-get install -y wrk curl util-linux" >&2; exit 1; }
done
cargo build --release -p tessera-exporter >&2
bin=target/release/tessera-exporter
log=$(mktemp)
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -f "$log"' EXIT

start() { # start ARGS...: run the exporter on CPU 0, wait until ready, set $addr
  : >"$log"
  taskset -c 0 "$bin" --backend sim --sim.scenario "$scenario" --web.listen-address 127.0.0.1:0 \
    --web.max-requests 0 "$@" 2>"$log" &
  pid=$!
  addr=""
  for _ in $(seq 200); do
    addr=$(grep -o 'listening on [0-9.:]*' "$log" | head -1 | awk '{print $3}') || true
    [ -n "$addr" ] && curl -sf "http://$addr/-/ready" >/dev/null && return
    sleep 0.05
  done
  echo "exporter did not start:" >&2; cat "$log" >&2; exit 1
}
metric() { curl -s "http://$addr/metrics" | awk -v m="$1" '$1 == m {print $2}'; }

echo "== scrapes: exporter on CPU 0 (1 s samples), wrk on CPU 1, 8 connections, 20 s"
start --sample.interval 1s
for accept in "text/plain" "application/openmetrics-text; version=1.0.0"; do
  echo "-- Accept: $accept"
  taskset -c 1 wrk -t1 -c8 -d20s -H "Accept: $accept" "http://$addr/metrics" | grep -E 'Requests/sec|Latency|requests in|Non-2xx'
done
echo "missed sample ticks: $(metric tessera_exporter_sampler_missed_ticks_total)"
echo "body bytes (0.0.4): $(curl -s "http://$addr/metrics" | wc -c)"
kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""

echo "== memory: 3600 samples (an hour at the default 1 s interval) taken at 10 ms, scraped every 100 ms"
start --sample.interval 10ms
for _ in $(seq 360); do curl -s -o /dev/null "http://$addr/metrics"; sleep 0.1; done
seq_now=$(metric tessera_exporter_last_sample_timestamp_seconds)
echo "resident memory: $(metric process_resident_memory_bytes) bytes; missed ticks: $(metric tessera_exporter_sampler_missed_ticks_total); last sample at virtual time $seq_now"
kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""
