#!/usr/bin/env bash
# The GPU check kit (issue 28, docs/testing.md "On a real GPU"): checks tessera on a machine
# with an NVIDIA GPU and a driver, READ-ONLY on the GPU — it never changes MIG mode, creates or
# destroys instances, resets, or sets clocks or power (and writes nothing outside a temporary
# folder and the archive): it runs nvidia-smi only with -q and
# --query-gpu, the exporter (which only reads), `tessera mig profiles` (reads) and
# scripts/gpu-check-read.py (nvmlDeviceGet* only).
#
#   bash scripts/gpu-check.sh [--bin DIR] [--out DIR] [--seconds N] [--nvml-lib FILE]
#
# --bin DIR holds tessera-exporter and tessera, plain or compressed (NAME.xz, NAME.zst or NAME.gz:
# unpacked here; build and pack them with `scripts/gpu-check.sh --pack DIR`). Default: the
# release build, else the debug build. --seconds: how long /metrics is served under load
# (default 60). --nvml-lib: the libnvidia-ml to load (default: the system's; tests pass the
# fake one). It writes one archive, gpu-check-<host>-<UTC time>.tar.gz, in --out (default .),
# holding:
#   summary.txt         what ran, what was skipped and why, the differences found
#   exporter-once.json  tessera-exporter --once --format json
#   metrics-N.prom      /metrics every 10 s while a load runs (PyTorch matmul where installed)
#   reader-N.json       the same values through scripts/gpu-check-read.py (ctypes), every
#                       NVML call it made with its return code and value
#   nvidia-smi-q.xml, nvidia-smi-query-N.csv   nvidia-smi's view (when nvidia-smi exists)
#   compare.json        exporter vs reader vs nvidia-smi per GPU and field
#   gpm.json            under load, through nvidia-ml-py where installed: every GPM metric it
#                       names (per GPU instance too), the process list, utilisation and memory
#   mig-profiles.json   tessera mig profiles --format json (NVML's tables vs tessera's)
#   nvml-once.jsonl, nvml-serve.jsonl, nvml-mig-profiles.jsonl   every NVML call each binary
#                       made (TESSERA_NVML_TRACE): function, GPU, argument, return code, value, µs
#   scrapes.txt         per metrics-N.prom, which sample of nvml-serve.jsonl it served (counted
#                       from 1, matched by its last-sample timestamp)
#   timings.txt         the exporter's own sample durations from its self-metrics
#   timings.json        µs per NVML function and GPU, and per whole sample, from nvml-serve.jsonl
#   history/            the history the exporter recorded while serving, and history-ingest.json,
#                       history-analyze.json, history-report.json: tessera reading it back
#   logs/               stderr of every step
# Every step is bounded (timeout); a step that fails is recorded, never fatal. Under 4 minutes
# with the default 60 s.
set -uo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
bin="" out="." seconds=60 lib="" pack=""
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --nvml-lib) lib="$2"; shift 2 ;;
    --pack) pack="$2"; shift 2 ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    *) echo "gpu-check: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

if [ -n "$pack" ]; then
  # Here, with the toolchain: build release binaries and compress them for the GPU machine.
  cd "$here/.."
  cargo build --release -p tessera-exporter -p tessera >&2 || exit 2
  mkdir -p "$pack"
  for b in tessera-exporter tessera; do
    strip -o "$pack/$b" "target/release/$b" 2>/dev/null || cp "target/release/$b" "$pack/$b"
    # xz: python3's lzma unpacks it where no xz tool is installed.
    if command -v xz >/dev/null; then xz -9 -T0 -f "$pack/$b"; else gzip -9 -f "$pack/$b"; fi
  done
  cp scripts/gpu-check.sh scripts/gpu-check-read.py scripts/gpu-check-compare.py scripts/gpu-check-gpm.py "$pack/"
  du -ch "$pack"/* | tail -1 >&2
  exit 0
fi

case "$seconds" in '' | *[!0-9]*) echo "gpu-check: --seconds takes a whole number" >&2; exit 2 ;; esac
stamp="$(date -u +%Y%m%dT%H%M%SZ)"
host="$(hostname 2>/dev/null | tr -c 'A-Za-z0-9._\n-' '_' | head -c 40)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
rec="$work/gpu-check"
mkdir -p "$rec/logs" "$work/bin"
say() { echo "$*" | tee -a "$rec/summary.txt" >&2; }
say "tessera GPU check kit, $stamp, host $host"

# The binaries: plain, .zst or .gz.
if [ -z "$bin" ]; then
  for d in "$here/../target/release" "$here/../target/debug"; do
    [ -x "$d/tessera-exporter" ] && [ -x "$d/tessera" ] && { bin="$d"; break; }
  done
fi
for b in tessera-exporter tessera; do
  if [ -x "$bin/$b" ]; then
    ln -s "$(cd "$bin" && pwd)/$b" "$work/bin/$b"
  elif [ -f "$bin/$b.xz" ]; then
    python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
      "$bin/$b.xz" "$work/bin/$b" && chmod +x "$work/bin/$b"
  elif [ -f "$bin/$b.zst" ] && command -v zstd >/dev/null; then
    zstd -q -d -o "$work/bin/$b" "$bin/$b.zst" && chmod +x "$work/bin/$b"
  elif [ -f "$bin/$b.gz" ]; then
    gzip -dc "$bin/$b.gz" >"$work/bin/$b" && chmod +x "$work/bin/$b"
  else
    say "no $b in ${bin:-(none found)} (plain, .xz, .zst or .gz)"; exit 2
  fi
done
exporter="$work/bin/tessera-exporter"
tessera="$work/bin/tessera"
# The system's libnvidia-ml when the loader does not know it (a container with the driver mounted
# elsewhere): the usual places, else the loader's own search.
if [ -z "$lib" ] && ! ldconfig -p 2>/dev/null | grep -q 'libnvidia-ml.so.1 '; then
  for f in /usr/local/nvidia/lib64/libnvidia-ml.so.1 /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1 \
    /usr/lib64/libnvidia-ml.so.1; do
    [ -e "$f" ] && { lib="$f"; say "NVML: $lib (not in the loader's cache)"; break; }
  done
fi
libflag=()
[ -n "$lib" ] && libflag=(--nvml.lib-path "$lib")
readlib=()
[ -n "$lib" ] && readlib=(--lib "$lib")

step() { # step NAME SECONDS CMD... : bounded, recorded, never fatal
  local name="$1" t="$2"; shift 2
  timeout -k 5 "$t" "$@" 2>"$rec/logs/$name.err"
  local rc=$?
  [ $rc -ne 0 ] && say "step $name: exit $rc (see logs/$name.err)"
  return 0
}

# The driver's view, and the independent reader, around the exporter's --once.
smi=0
if command -v nvidia-smi >/dev/null; then
  smi=1
  step nvidia-smi-q 30 nvidia-smi -q -x >"$rec/nvidia-smi-q.xml"
else
  say "nvidia-smi: not found; the independent reader is scripts/gpu-check-read.py alone"
fi
query=index,uuid,name,memory.total,memory.used,power.draw,temperature.gpu,clocks.sm,clocks.mem,utilization.gpu,utilization.memory,mig.mode.current
step reader-0 30 python3 "$here/gpu-check-read.py" "${readlib[@]}" >"$rec/reader-0.json"
[ $smi = 1 ] && step nvidia-smi-query-0 30 nvidia-smi --query-gpu=$query --format=csv,noheader,nounits >"$rec/nvidia-smi-query-0.csv"
# Every NVML call each binary makes, with its return code, value and duration (core/src/nvml/trace.rs).
TESSERA_NVML_TRACE="$rec/nvml-once.jsonl" step exporter-once 60 "$exporter" --once --format json "${libflag[@]}" >"$rec/exporter-once.json"
TESSERA_NVML_TRACE="$rec/nvml-mig-profiles.jsonl" step mig-profiles 60 "$tessera" mig profiles --format json "${libflag[@]}" >"$rec/mig-profiles.json"
step compare 30 python3 "$here/gpu-check-compare.py" "$rec/exporter-once.json" "$rec/reader-0.json" \
  $([ $smi = 1 ] && echo "$rec/nvidia-smi-query-0.csv") >"$rec/compare.json"

# /metrics under load.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
# History goes to the kit's temporary folder: the kit writes nothing on the machine outside it.
TESSERA_NVML_TRACE="$rec/nvml-serve.jsonl" "$exporter" "${libflag[@]}" --web.listen-address "127.0.0.1:$port" --sample.interval 1s \
  --history.dir "$work/history" 2>"$rec/logs/exporter-serve.err" &
srv=$!
# Ready once the first sample is taken (/-/ready answers 200), at most 60 s.
ready=0
for _ in $(seq 1 120); do
  curl -fsS --max-time 2 "http://127.0.0.1:$port/-/ready" >/dev/null 2>&1 && { ready=1; break; }
  sleep 0.5
done
[ $ready = 1 ] || say "exporter: not ready after 60 s (see logs/exporter-serve.err)"
load=""
if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  python3 - "$seconds" >"$rec/logs/load.out" 2>&1 <<'EOF' &
import sys, time, torch
end = time.time() + int(sys.argv[1])
a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
while time.time() < end:
    (a @ a).sum().item()
EOF
  load=$!
  say "load: a PyTorch fp16 matmul for ${seconds}s"
else
  say "load: none (PyTorch with CUDA is not installed here); /metrics is captured idle"
fi
n=0
for ((t = 0; t <= seconds; t += 10)); do
  sleep $((t == 0 ? 1 : 10))
  curl -fsS --retry 3 --retry-all-errors --max-time 15 "http://127.0.0.1:$port/metrics" \
    >"$rec/metrics-$n.prom" 2>>"$rec/logs/curl.err" || say "scrape $n failed (see logs/curl.err)"
  step reader-$((n + 1)) 30 python3 "$here/gpu-check-read.py" "${readlib[@]}" >"$rec/reader-$((n + 1)).json"
  [ $smi = 1 ] && step nvidia-smi-query-$((n + 1)) 30 nvidia-smi --query-gpu=$query --format=csv,noheader,nounits >"$rec/nvidia-smi-query-$((n + 1)).csv"
  # Under load: every GPM metric and the process list through NVIDIA's binding (nvidia-ml-py).
  [ $n = $((seconds / 10 < 2 ? seconds / 10 : 2)) ] && step gpm 60 python3 "$here/gpu-check-gpm.py" "${readlib[@]}" --interval 1 >"$rec/gpm.json"
  n=$((n + 1))
done
[ -n "$load" ] && wait "$load"
kill "$srv" 2>/dev/null; wait "$srv" 2>/dev/null
grep -h '^tessera_exporter_sample_duration' "$rec"/metrics-*.prom >"$rec/timings.txt" 2>/dev/null \
  || say "timings: no tessera_exporter_sample_duration in the scrapes"
# Which recorded sample each scrape served (by its last-sample timestamp).
step scrapes 30 python3 "$here/gpu-check-compare.py" --scrapes "$rec/nvml-serve.jsonl" $(ls "$rec"/metrics-*.prom 2>/dev/null | sort -V) >"$rec/scrapes.txt"
step timings 30 python3 "$here/gpu-check-compare.py" --timings "$rec/nvml-serve.jsonl" >"$rec/timings.json"
# The history the exporter recorded from this GPU, read back by the analyzer (the format's strict
# reader, the detectors and the report on a real device's rows). Kept in the archive.
if [ -d "$work/history" ]; then
  cp -r "$work/history" "$rec/history"
  step history-ingest 60 "$tessera" ingest --source "history:$rec/history" --format json >"$rec/history-ingest.json"
  step history-analyze 60 "$tessera" analyze --source "history:$rec/history" --format json >"$rec/history-analyze.json"
  step history-report 60 "$tessera" report --source "history:$rec/history" --format json >"$rec/history-report.json"
  say "history: the exporter's recorded history read back by ingest, analyze and report (history-*.json)"
else
  say "history: the exporter wrote no history (see logs/exporter-serve.err)"
fi
say "timings: per-sample durations from the exporter's self-metrics (timings.txt); per NVML function and GPU from its recorded calls (timings.json)"

diffs=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["differences"], "of", d["compared"])' "$rec/compare.json" 2>/dev/null || echo "unknown")
say "compare: $diffs field comparisons differ beyond tolerance (compare.json)"

# One archive: letters, digits, ., _ and - only.
mkdir -p "$out"
archive="$out/gpu-check-$host-$stamp.tar.gz"
tar -C "$work" -czf "$archive" gpu-check
say "wrote $archive"
echo "$archive"
