#!/usr/bin/env bash
# The report of a large fleet through two metric stores (issue 61 item 2; docs/performance.md
# "10,240 GPUs through Prometheus and VictoriaMetrics"): simulates GPUS GPUs
# (scripts/gen-fleet.py: 8 per node, MIG instances, processes with pods) for a day at 60-s
# samples and rows, writes them as exporter series (analyzer/examples/history-openmetrics.rs:
# tessera-exporter's names, every DCGM_EVERY-th node dcgm-exporter's) a batch of nodes at a
# time, backfills each batch into Prometheus (`promtool tsdb create-blocks-from openmetrics`,
# NODES_PER_FILE nodes per promtool run) and imports it into VictoriaMetrics
# (`/api/v1/import/prometheus`), then deletes it, so the text (~2.4 MB per GPU-day) never fills
# the disk. Then it serves both, evaluates the advisor's recording rules
# (`promtool tsdb create-blocks-from rules`), and measures `tessera report --format json`
# (wall and peak RSS from /usr/bin/time, tessera's user+system CPU, the server's CPU from
# /proc) from the local history, from Prometheus raw (query_range and remote read), from
# Prometheus with the rules (both APIs) and from VictoriaMetrics (query_range), over the day
# less its first and last half hour (whole minutes: the rows align alike everywhere). Each
# store's report is compared with the history's: GPUs and GPU-hours exactly, busy GPU-hours,
# activity, peak memory and each team's GPU-hours within 1%, energy within 2%
# (analyzer/tests/metric_stores.rs); differences are printed. Results go to WORK/results.txt,
# copied to WORK.txt when the work folder is removed.
#
#   scripts/bench-stores.sh                         # 10,240 GPUs, the issue's benchmark
#   GPUS=512 scripts/bench-stores.sh                # a pilot
#   GPUS=512 DCGM_EVERY=1 scripts/bench-stores.sh   # every node as dcgm-exporter
#
# Environment: GPUS (10240), DCGM_EVERY (0: none; K: nodes 0, K, 2K, … as dcgm-exporter;
# tessera reads each family on the nodes the ones before it do not name, so a mixed fleet is
# reported whole), BATCH_NODES (64: nodes written, backfilled and deleted at once), NODES_PER_FILE
# (32), WORK (target/bench-data/stores-$GPUS), TESSERA (the release binary; built with cargo
# when unset), CONVERT (history-openmetrics beside it), CONCURRENCY (4), NODES_PER_QUERY (1),
# PROM_FLAGS (extra Prometheus flags), VM_FLAGS (extra victoria-metrics flags), REPORT_FLAGS
# ("--no-replay --trend.weeks 0"), SKIP_VM=1, KEEP=1 keeps the work folder (a rerun then
# reuses what is done). Needs python3, curl, bc, /usr/bin/prometheus, /usr/bin/promtool,
# /usr/bin/victoria-metrics and /usr/bin/time.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
GPUS=${GPUS:-10240}
DCGM_EVERY=${DCGM_EVERY:-0}
BATCH_NODES=${BATCH_NODES:-64}
NODES_PER_FILE=${NODES_PER_FILE:-32}
CONCURRENCY=${CONCURRENCY:-4}
NODES_PER_QUERY=${NODES_PER_QUERY:-1}
REPORT_FLAGS=${REPORT_FLAGS:---no-replay --trend.weeks 0}
WORK=${WORK:-target/bench-data/stores-$GPUS}
TARGET=${CARGO_TARGET_DIR:-target}
if [[ -z "${TESSERA:-}" ]]; then
  cargo build --release -p tessera --offline --bin tessera --example history-openmetrics
  TESSERA=$TARGET/release/tessera
fi
CONVERT=${CONVERT:-$(dirname "$TESSERA")/examples/history-openmetrics}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
RESULTS=$WORK/results.txt
log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" | tee -a "$RESULTS" >&2; }
# timed NAME CMD...: runs CMD under /usr/bin/time, logs wall, user+sys CPU and peak RSS.
timed() {
  local name=$1
  shift
  local rc=0
  /usr/bin/time -f "%e %U %S %M" -o "$WORK/time.txt" "$@" || rc=$?
  read -r wall usr sys kb < <(tail -1 "$WORK/time.txt")
  log "$(printf '%-24s %8.1f s wall  %7.1f s cpu  %7.0f MiB peak' "$name" "$wall" \
    "$(echo "$usr + $sys" | bc)" "$((kb / 1024))")"
  return "$rc"
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# CPU seconds (user + system) and peak RSS (MiB) of a running process.
cpu_of() { awk -v hz="$(getconf CLK_TCK)" '{printf "%.1f", ($14 + $15) / hz}' "/proc/$1/stat" 2>/dev/null || echo 0; }
hwm_of() { awk '/VmHWM/ {printf "%d", $2 / 1024}' "/proc/$1/status" 2>/dev/null || echo 0; }
wait_ready() { # URL PATH PID NAME
  for _ in $(seq 1200); do
    curl -sf "$1$2" >/dev/null 2>&1 && return 0
    kill -0 "$3" 2>/dev/null || { log "$4 exited"; exit 1; }
    sleep 0.5
  done
  log "$4 not ready"
  exit 1
}

NODES=$((GPUS / 8))
python3 scripts/gen-fleet.py --gpus "$GPUS" -o "$WORK/fleet.toml"
START=$(sed -n 's/^start = "\([^"]*\)".*/\1/p' "$WORK/fleet.toml" | head -1)
DAY0=$(date -u -d "$START" +%s)
iso() { date -u -d "@$1" +%Y-%m-%dT%H:%M:%SZ; }
SINCE=$(iso $((DAY0 + 1800)))
UNTIL=$(iso $((DAY0 + 86400 - 1800)))
RULES_START=$(iso $((DAY0 - 3600)))
RULES_END=$(iso $((DAY0 + 86400 + 3600)))
log "# $GPUS GPUs ($NODES nodes), one day at 60 s from $START; report $SINCE .. $UNTIL; dcgm every $DCGM_EVERY; $BATCH_NODES nodes per batch, $NODES_PER_FILE per block; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"

if [[ ! -f "$WORK/history/.done" ]]; then
  rm -rf "$WORK/history"
  timed simulate "$TESSERA" simulate --scenario "$WORK/fleet.toml" --days 1 --out "$WORK/history" \
    --sample-interval 60s --history.interval 60s >/dev/null
  touch "$WORK/history/.done"
fi
log "history: $(du -sh "$WORK/history" | cut -f1)"

# VictoriaMetrics, running through the import (its own data folder).
VM_PID=
VM_URL=
start_vm() {
  local port
  port=$(free_port)
  VM_URL=http://127.0.0.1:$port
  # shellcheck disable=SC2086
  /usr/bin/victoria-metrics -storageDataPath="$WORK/vm" -httpListenAddr="127.0.0.1:$port" \
    -retentionPeriod=100y -search.latencyOffset=0s ${VM_FLAGS:-} "$@" \
    >>"$WORK/victoria.log" 2>&1 &
  VM_PID=$!
  wait_ready "$VM_URL" /health "$VM_PID" victoria-metrics
}
stop_vm() { if [[ -n "$VM_PID" ]]; then kill "$VM_PID" 2>/dev/null; wait "$VM_PID" 2>/dev/null || true; VM_PID=; fi; }
PROM_PID=
PROM_URL=
start_prometheus() {
  local port
  port=$(free_port)
  PROM_URL=http://127.0.0.1:$port
  printf 'global:\n  scrape_interval: 1m\n' >"$WORK/prometheus.yml"
  # shellcheck disable=SC2086
  prometheus --storage.tsdb.path="$WORK/tsdb" --web.listen-address="127.0.0.1:$port" \
    --config.file="$WORK/prometheus.yml" --storage.tsdb.retention.time=100y ${PROM_FLAGS:-} \
    >/dev/null 2>>"$WORK/prometheus.log" &
  PROM_PID=$!
  wait_ready "$PROM_URL" /-/ready "$PROM_PID" prometheus
}
stop_prometheus() { if [[ -n "$PROM_PID" ]]; then kill "$PROM_PID" 2>/dev/null; wait "$PROM_PID" 2>/dev/null || true; PROM_PID=; fi; }
trap 'stop_prometheus; stop_vm' EXIT

if [[ ! -f "$WORK/stores.done" ]]; then
  rm -rf "$WORK/tsdb" "$WORK/vm" "$WORK/batch"
  mkdir -p "$WORK/tsdb"
  [[ "${SKIP_VM:-}" == 1 ]] || start_vm
  conv=0 back=0 imp=0 bytes=0 prss=0 crss=0
  for ((a = 0; a < NODES; a += BATCH_NODES)); do
    b=$((a + BATCH_NODES < NODES ? a + BATCH_NODES : NODES))
    rm -rf "$WORK/batch"
    t0=$(date +%s.%N)
    /usr/bin/time -f "%M" -o "$WORK/time.txt" "$CONVERT" --nodes "$a:$b" \
      --nodes-per-file "$NODES_PER_FILE" --dcgm-every "$DCGM_EVERY" --slurm-job-id \
      --prometheus-text "$WORK/history" "$WORK/batch" 2>/dev/null
    crss=$(( $(cat "$WORK/time.txt") > crss ? $(cat "$WORK/time.txt") : crss ))
    t1=$(date +%s.%N)
    bytes=$((bytes + $(cat "$WORK"/batch/*.om | wc -c)))
    # The backfill and the import side by side (two cores).
    (
      for f in "$WORK"/batch/*.om; do
        /usr/bin/time -f "%M" -a -o "$WORK/promtool-rss.txt" promtool tsdb create-blocks-from \
          openmetrics --max-block-duration=24h "$f" "$WORK/tsdb" >/dev/null
      done
    ) &
    bf=$!
    if [[ -n "$VM_PID" ]]; then
      ti=$(date +%s.%N)
      for f in "$WORK"/batch/*.prom; do
        code=$(curl -s -o "$WORK/import.out" -w '%{http_code}' --data-binary "@$f" \
          "$VM_URL/api/v1/import/prometheus")
        [[ "$code" == 204 || "$code" == 200 ]] || { log "import of $f: HTTP $code $(head -c 300 "$WORK/import.out")"; exit 1; }
      done
      imp=$(echo "$imp + $(date +%s.%N) - $ti" | bc)
    fi
    wait "$bf"
    t2=$(date +%s.%N)
    conv=$(echo "$conv + $t1 - $t0" | bc)
    back=$(echo "$back + $t2 - $t1" | bc)
    log "nodes $a..$b: convert $(echo "$t1 - $t0" | bc | cut -c1-6) s, backfill+import $(echo "$t2 - $t1" | bc | cut -c1-6) s; $(df -h --output=avail "$WORK" | tail -1 | tr -d ' ') free"
  done
  rm -rf "$WORK/batch"
  prss=$(sort -n "$WORK/promtool-rss.txt" | tail -1)
  log "$(printf 'convert %.0f s (peak %d MiB), backfill+import %.0f s (import alone %.0f s; promtool peak %d MiB); %d MB of OpenMetrics (as much again of Prometheus text)' \
    "$conv" "$((crss / 1024))" "$back" "$imp" "$((prss / 1024))" "$((bytes / 1000000))")"
  if [[ -n "$VM_PID" ]]; then
    curl -sf "$VM_URL/internal/force_flush" >/dev/null || true
    log "victoria-metrics through the import: cpu $(cpu_of "$VM_PID") s, peak $(hwm_of "$VM_PID") MiB"
    stop_vm
  fi
  touch "$WORK/stores.done"
fi
log "on disk: tsdb $(du -sh "$WORK/tsdb" | cut -f1) ($(find "$WORK/tsdb" -name meta.json | wc -l) blocks), victoria-metrics $(du -sh "$WORK/vm" 2>/dev/null | cut -f1)"

PFLAGS=(--prometheus.concurrency "$CONCURRENCY" --prometheus.nodes-per-query "$NODES_PER_QUERY")
read -r -a RFLAGS <<<"$REPORT_FLAGS"
# report NAME SERVER_PID SOURCE FLAGS...: the report as WORK/NAME.json, one line of figures.
report() {
  local name=$1 pid=$2 src=$3
  shift 3
  local c0=0 rc=0
  [[ -n "$pid" ]] && c0=$(cpu_of "$pid")
  /usr/bin/time -f "%e %U %S %M" -o "$WORK/time.txt" "$TESSERA" report --source "$src" \
    --since "$SINCE" --until "$UNTIL" --format json "${RFLAGS[@]}" "$@" \
    >"$WORK/$name.json" 2>"$WORK/$name.err" || rc=$?
  read -r wall usr sys kb < <(tail -1 "$WORK/time.txt")
  local scpu=- shwm=-
  [[ -n "$pid" ]] && scpu=$(echo "$(cpu_of "$pid") - $c0" | bc) && shwm=$(hwm_of "$pid")
  local req mib
  req=$(grep -o '[0-9]* request(s)' "$WORK/$name.err" | head -1 | cut -d' ' -f1 || true)
  mib=$(grep -o '[0-9.]* MiB received' "$WORK/$name.err" | head -1 | cut -d' ' -f1 || true)
  log "$(printf '%-22s %8.1f s wall  %7.1f s tessera cpu  %6d MiB peak  server cpu %s s (server peak %s MiB)  requests %s  received %s MiB%s' \
    "$name" "$wall" "$(echo "$usr + $sys" | bc)" "$((kb / 1024))" "$scpu" "$shwm" "${req:--}" "${mib:--}" \
    "$([[ $rc == 0 ]] || echo "  FAILED (exit $rc): $(grep -v '^$' "$WORK/$name.err" | tail -2 | cut -c1-400 | tr '\n' ' ')")")"
  return 0
}
compare() { # NAME: the store's report against the history's
  [[ -s "$WORK/$1.json" ]] || { log "$1: no report to compare"; return 0; }
  python3 - "$WORK/history.json" "$WORK/$1.json" "$1" <<'EOF' | tee -a "$RESULTS" >&2
import json, sys
h, s, name = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3]
bad = []
def near(what, g, w, rel):
    if g is None or w is None:
        if g != w: bad.append(f"{what}: {g} from the store vs {w} from the history")
        return
    if abs(g - w) > rel * max(abs(w), 1e-9):
        bad.append(f"{what}: {g:.6g} from the store vs {w:.6g} from the history ({(g - w) / max(abs(w), 1e-9) * 100:+.3f}%)")
hf, sf = h["fleet"], s["fleet"]
if hf["gpus"] != sf["gpus"]: bad.append(f"GPUs: {sf['gpus']} vs {hf['gpus']}")
for k in ["gpu_hours_observed", "gpu_hours_available", "cost_gpu_hours"]: near("fleet " + k, sf.get(k), hf.get(k), 1e-9)
for k in ["gpu_hours_busy", "activity_mean", "memory_peak_gib"]: near("fleet " + k, sf.get(k), hf.get(k), 0.01)
near("fleet energy_kwh", sf.get("energy_kwh"), hf.get("energy_kwh"), 0.02)
hm = {m["key"]: m for m in h["by_model"]}; sm = {m["key"]: m for m in s["by_model"]}
if sorted(hm) != sorted(sm): bad.append(f"models: {sorted(sm)} vs {sorted(hm)}")
for k in sorted(set(hm) & set(sm)):
    near(f"{k} GPU-hours", sm[k]["gpu_hours_observed"], hm[k]["gpu_hours_observed"], 1e-9)
    near(f"{k} busy", sm[k]["gpu_hours_busy"], hm[k]["gpu_hours_busy"], 0.01)
ht = {t["team"]: t["gpu_hours"] for t in h["teams"]["rows"]}; st = {t["team"]: t["gpu_hours"] for t in s["teams"]["rows"]}
if sorted(ht) != sorted(st):
    bad.append(f"teams only in the store: {sorted(set(st) - set(ht))[:8]}; only in the history: {sorted(set(ht) - set(st))[:8]} ({len(st)} vs {len(ht)})")
for t in sorted(set(ht) & set(st)): near(f"team {t} GPU-hours", st[t], ht[t], 0.01)
print(f"{name}: fleet {sf['gpus']} GPUs, {sf['gpu_hours_observed']:.1f} GPU-h, busy {sf['gpu_hours_busy']:.1f}, activity {sf['activity_mean']:.4f}, energy {sf['energy_kwh']:.1f} kWh, {len(st)} teams; "
      + ("agrees with the history within the tolerance" if not bad else f"{len(bad)} difference(s):"))
for b in bad[:20]: print("   ", b)
if len(bad) > 20: print(f"    ... {len(bad) - 20} more")
EOF
}

report history "" "history:$WORK/history"
python3 -c 'import json,sys; f=json.load(open(sys.argv[1]))["fleet"]; print("history: fleet %d GPUs, %.1f GPU-h, busy %.1f, activity %.4f, energy %.1f kWh" % (f["gpus"], f["gpu_hours_observed"], f["gpu_hours_busy"], f["activity_mean"], f["energy_kwh"]))' "$WORK/history.json" | tee -a "$RESULTS" >&2

if [[ "${SKIP_VM:-}" != 1 ]]; then
  start_vm
  report vm-query-range "$VM_PID" "prometheus:$VM_URL" --interval 60s "${PFLAGS[@]}"
  compare vm-query-range
  log "victoria-metrics: peak $(hwm_of "$VM_PID") MiB over the reads"
  stop_vm
fi

t0=$(date +%s)
start_prometheus
log "prometheus ready in $(($(date +%s) - t0)) s"
report prom-raw-query-range "$PROM_PID" "prometheus:$PROM_URL" --interval 60s "${PFLAGS[@]}" --prometheus.api query-range
compare prom-raw-query-range
report prom-raw-remote-read "$PROM_PID" "prometheus:$PROM_URL" --interval 60s "${PFLAGS[@]}" --prometheus.api remote-read
compare prom-raw-remote-read

if [[ ! -f "$WORK/recorded.done" ]]; then
  rm -rf "$WORK/rules" "$WORK/recorded"
  mkdir -p "$WORK/rules"
  cp "$REPO/rules/tessera-advisor.rules.yml" "$WORK/rules/"
  c0=$(cpu_of "$PROM_PID")
  timed rules sh -c 'cd "$1/rules" && exec promtool tsdb create-blocks-from rules --url="$2" \
    --start="$3" --end="$4" --output-dir="$1/recorded" tessera-advisor.rules.yml \
    >/dev/null 2>"$1/rules.err"' sh "$WORK" "$PROM_URL" "$RULES_START" "$RULES_END" ||
    { log "rules failed: $(tail -3 "$WORK/rules.err")"; exit 1; }
  log "rules: prometheus cpu $(echo "$(cpu_of "$PROM_PID") - $c0" | bc) s, prometheus peak $(hwm_of "$PROM_PID") MiB"
  stop_prometheus
  for b in "$WORK"/recorded/*/; do
    [[ -f "$b/meta.json" ]] && mv "$b" "$WORK/tsdb/"
  done
  touch "$WORK/recorded.done"
  t0=$(date +%s)
  start_prometheus
  log "prometheus ready in $(($(date +%s) - t0)) s"
fi
log "on disk: tsdb with the rules $(du -sh "$WORK/tsdb" | cut -f1)"
report prom-rules-query-range "$PROM_PID" "prometheus:$PROM_URL" --interval 60s "${PFLAGS[@]}" --prometheus.api query-range
compare prom-rules-query-range
report prom-rules-remote-read "$PROM_PID" "prometheus:$PROM_URL" --interval 60s "${PFLAGS[@]}" --prometheus.api remote-read
compare prom-rules-remote-read
grep -h "recorded\|reading" "$WORK/prom-rules-query-range.err" | head -2 | cut -c1-200 | tee -a "$RESULTS" >&2 || true
log "prometheus: cpu $(cpu_of "$PROM_PID") s, peak $(hwm_of "$PROM_PID") MiB since its last start; tsdb $(du -sh "$WORK/tsdb" | cut -f1) ($(find "$WORK/tsdb" -name meta.json | wc -l) blocks)"
stop_prometheus
if [[ "${KEEP:-}" != 1 ]]; then
  cp "$RESULTS" "$WORK.txt"
  rm -rf "$WORK"
fi
