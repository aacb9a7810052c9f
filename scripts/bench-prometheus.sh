#!/usr/bin/env bash
# The prometheus: source against a real Prometheus (issue 15 item 4; docs/performance.md):
# simulates GPUS GPUs (scripts/gen-fleet.py: 8 per node, MIG instances, processes with pods)
# for DAYS days at 30 s rows, writes them as tessera-exporter series (one sample per row, one
# OpenMetrics file per node: analyzer/examples/history-openmetrics.rs), backfills them with
# `promtool tsdb create-blocks-from openmetrics`, serves them, and measures `tessera analyze`
# and `tessera report` (wall time and peak RSS from /usr/bin/time; requests and bytes received
# from the source's own warnings) against it: raw, then with the advisor's recording rules
# evaluated over the range (`promtool tsdb create-blocks-from rules`); and the same commands on
# the local history, for comparison. Each Prometheus measurement is taken through
# `/api/v1/query_range` (the default) and through the remote-read API (`-rr`), with the server's
# CPU seconds beside tessera's.
#
#   GPUS=256 DAYS=7 scripts/bench-prometheus.sh        # the issue's benchmark
#   GPUS=32 DAYS=1 scripts/bench-prometheus.sh         # a quick one
#
# Environment: GPUS (256), DAYS (7), WORK (target/bench-data/prom-$GPUS-$DAYS), TESSERA (the
# release binary; built with cargo when unset), CONCURRENCY (4), NODES_PER_QUERY (1),
# KEEP=1 keeps the work folder. Needs python3, /usr/bin/prometheus, /usr/bin/promtool and
# /usr/bin/time.
set -euo pipefail
cd "$(dirname "$0")/.."
GPUS=${GPUS:-256}
DAYS=${DAYS:-7}
CONCURRENCY=${CONCURRENCY:-4}
NODES_PER_QUERY=${NODES_PER_QUERY:-1}
WORK=${WORK:-target/bench-data/prom-$GPUS-$DAYS}
TARGET=${CARGO_TARGET_DIR:-target}
if [[ -z "${TESSERA:-}" ]]; then
  cargo build --release -p tessera --offline --bin tessera --example history-openmetrics
  TESSERA=$TARGET/release/tessera
fi
CONVERT=${CONVERT:-$(dirname "$TESSERA")/examples/history-openmetrics}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

python3 scripts/gen-fleet.py --gpus "$GPUS" -o "$WORK/fleet.toml"
START=$(sed -n 's/^start = "\([^"]*\)".*/\1/p' "$WORK/fleet.toml" | head -1)
SINCE_S=$(date -u -d "$START" +%s)
UNTIL_S=$((SINCE_S + DAYS * 86400))
SINCE=$(date -u -d "@$SINCE_S" +%Y-%m-%dT%H:%M:%SZ)
UNTIL=$(date -u -d "@$UNTIL_S" +%Y-%m-%dT%H:%M:%SZ)
# The rules are evaluated from an hour before the range to an hour after it: rows end at its
# start and at its end, and the source wants recorded minutes wherever raw samples are
# (docs/recording-rules.md).
RULES_START=$(date -u -d "@$((SINCE_S - 3600))" +%Y-%m-%dT%H:%M:%SZ)
RULES_END=$(date -u -d "@$((UNTIL_S + 3600))" +%Y-%m-%dT%H:%M:%SZ)

if [[ ! -f "$WORK/history/.done" ]]; then
  log "simulating $GPUS GPUs for $DAYS days at 30 s"
  rm -rf "$WORK/history"
  /usr/bin/time -f "simulate: %e s %M KB" "$TESSERA" simulate --scenario "$WORK/fleet.toml" \
    --days "$DAYS" --out "$WORK/history" --sample-interval 30s --history.interval 30s >/dev/null
  touch "$WORK/history/.done"
fi
if [[ ! -f "$WORK/om/.done" ]]; then
  log "writing OpenMetrics"
  rm -rf "$WORK/om"
  /usr/bin/time -f "openmetrics: %e s %M KB" "$CONVERT" "$WORK/history" "$WORK/om"
  touch "$WORK/om/.done"
fi
if [[ ! -f "$WORK/tsdb/.done" ]]; then
  log "backfilling"
  rm -rf "$WORK/tsdb"
  mkdir -p "$WORK/tsdb"
  for f in "$WORK"/om/*.om; do
    promtool tsdb create-blocks-from openmetrics --max-block-duration=24h "$f" "$WORK/tsdb" >/dev/null
  done
  touch "$WORK/tsdb/.done"
fi
du -sh "$WORK/om" "$WORK/tsdb" >&2

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
URL=http://127.0.0.1:$PORT
printf 'global:\n  scrape_interval: 1m\n' >"$WORK/prometheus.yml"
PROM_PID=
start_prometheus() {
  prometheus --storage.tsdb.path="$WORK/tsdb" --web.listen-address="127.0.0.1:$PORT" \
    --config.file="$WORK/prometheus.yml" --storage.tsdb.retention.time=100y \
    --query.max-samples=200000000 >/dev/null 2>"$WORK/prometheus.log" &
  PROM_PID=$!
  for _ in $(seq 600); do
    curl -sf "$URL/-/ready" >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  echo "prometheus not ready" >&2
  exit 1
}
stop_prometheus() { [[ -n "$PROM_PID" ]] && kill "$PROM_PID" && wait "$PROM_PID" 2>/dev/null || true; PROM_PID=; }
trap stop_prometheus EXIT

# The server's CPU seconds so far (user + system), 0 when it is not running.
server_cpu() {
  if [[ -n "$PROM_PID" ]]; then
    awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f", ($14 + $15) / hz}' "/proc/$PROM_PID/stat"
  else
    echo 0
  fi
}

# measure NAME CMD...: one line: name, wall time, peak RSS, requests, bytes, server CPU.
measure() {
  local name=$1
  shift
  local cpu0
  cpu0=$(server_cpu)
  /usr/bin/time -f "%e s %M KB (cpu %U+%S s)" -o "$WORK/time.txt" "$@" >/dev/null 2>"$WORK/$name.err"
  local req mib scpu
  scpu=$(awk -v a="$cpu0" -v b="$(server_cpu)" 'BEGIN {printf "%.1f", b - a}')
  req=$(grep -o '[0-9]* request(s)' "$WORK/$name.err" | head -1 | cut -d' ' -f1 || true)
  mib=$(grep -o '[0-9.]* MiB received' "$WORK/$name.err" | head -1 | cut -d' ' -f1 || true)
  printf '%-28s %-40s requests %-6s received %-8s MiB  server cpu %s s\n' "$name" \
    "$(tail -1 "$WORK/time.txt")" "${req:--}" "${mib:--}" "$scpu"
}

PFLAGS=(--prometheus.concurrency "$CONCURRENCY" --prometheus.nodes-per-query "$NODES_PER_QUERY")
echo "# $GPUS GPUs, $DAYS days at 30 s, $SINCE .. $UNTIL; concurrency $CONCURRENCY, $NODES_PER_QUERY node(s) per query"
measure history-analyze "$TESSERA" analyze --source "history:$WORK/history" --since "$SINCE" --until "$UNTIL" --format json
measure history-report "$TESSERA" report --source "history:$WORK/history" --since "$SINCE" --until "$UNTIL" --format json
start_prometheus
# Raw: `--interval 30s` (the data's own period, the rows auto would choose) is finer than the
# recorded minute, so the raw series are read even when a kept work folder has the rules' blocks.
measure prom-raw-analyze "$TESSERA" analyze --source "prometheus:$URL" --since "$SINCE" --until "$UNTIL" --format json --interval 30s "${PFLAGS[@]}"
measure prom-raw-report "$TESSERA" report --source "prometheus:$URL" --since "$SINCE" --until "$UNTIL" --format json --interval 30s "${PFLAGS[@]}"
# The same through the remote-read API (raw samples, reduced by tessera).
measure prom-raw-analyze-rr "$TESSERA" analyze --source "prometheus:$URL" --since "$SINCE" --until "$UNTIL" --format json --interval 30s --prometheus.api remote-read "${PFLAGS[@]}"
measure prom-raw-report-rr "$TESSERA" report --source "prometheus:$URL" --since "$SINCE" --until "$UNTIL" --format json --interval 30s --prometheus.api remote-read "${PFLAGS[@]}"

# The advisor's recording rules, evaluated by this Prometheus over the range.
if [[ ! -f "$WORK/recorded.done" ]]; then
  log "evaluating the recording rules"
  rm -rf "$WORK/rules" "$WORK/recorded"
  mkdir -p "$WORK/rules"
  cp rules/tessera-advisor.rules.yml "$WORK/rules/"
  (cd "$WORK/rules" && promtool tsdb create-blocks-from rules --url="$URL" --start="$RULES_START" \
    --end="$RULES_END" --output-dir="$WORK/recorded" tessera-advisor.rules.yml >/dev/null)
  stop_prometheus
  for b in "$WORK"/recorded/*/; do
    [[ -f "$b/meta.json" ]] && mv "$b" "$WORK/tsdb/"
  done
  touch "$WORK/recorded.done"
  start_prometheus
fi
measure prom-rules-analyze "$TESSERA" analyze --source "prometheus:$URL" --since "$SINCE" --until "$UNTIL" --format json "${PFLAGS[@]}"
measure prom-rules-report "$TESSERA" report --source "prometheus:$URL" --since "$SINCE" --until "$UNTIL" --format json "${PFLAGS[@]}"
measure prom-rules-analyze-rr "$TESSERA" analyze --source "prometheus:$URL" --since "$SINCE" --until "$UNTIL" --format json --prometheus.api remote-read "${PFLAGS[@]}"
measure prom-rules-report-rr "$TESSERA" report --source "prometheus:$URL" --since "$SINCE" --until "$UNTIL" --format json --prometheus.api remote-read "${PFLAGS[@]}"
grep -h "maxima from" "$WORK/prom-rules-report.err" | head -1 | cut -c1-160 >&2 || true
if [[ "${KEEP:-}" != 1 ]]; then
  stop_prometheus
  rm -rf "$WORK"
fi
