#!/usr/bin/env bash
# Writes every analyzer command's output (table, JSON, Markdown, HTML, mig-parted YAML) on the
# demo history and on the fleet-64 scenario into OUT, so that a refactor can be checked
# byte-identical: run it before and after, then `bash scripts/outputs-diff.sh BEFORE AFTER`.
#
#   bash scripts/outputs-snapshot.sh OUT [TESSERA_BIN]
#
# TESSERA_BIN defaults to $CARGO_TARGET_DIR/debug/tessera (else target/, built here). Runs with
# NO_COLOR and no progress lines; the range is the data's own (both data sets start 2026-11-02),
# and every command that reads the clock is given a fixed time (--now, fixed --train/--test
# ranges, or a stopped clock), so that no output depends on it.
#
# Covered offline besides analyze, report, ingest and mig: `tessera replay` (every --format, the
# MIG plan of `mig plan` and the consolidation plan of `analyze --plan-out`, a fixed --config,
# --write-prediction into a copy of the plan, --train/--test out of sample of both kinds),
# `share plan` (text and JSON), the `notify --dry-run` body (notify has no --now, and its
# `endsAt`, now + --ttl, and the `startsAt` of a finding without a first span are the clock's: it
# runs under libfaketime's `faketime` with the clock stopped at 2026-11-06T12:00:00Z; without
# faketime its files say "not run").
#
# Not covered, and why: `share apply`'s and `scale-down`'s dry runs read the cluster (the device
# plugin's ConfigMap and the nodes; the pods' owners) and no Kubernetes API server runs here
# (their tests use tests/fake-kube in-process). They are run against a kubeconfig whose server
# refuses connections, which covers what they print before the cluster (the routes and why a node
# gets no config, the evidence check, the pods idle now) and the connection error, not the plan
# they print from the cluster's objects. On both data sets every share host node also has Slurm
# jobs, so `share apply` stops before the cluster.
set -euo pipefail
out=${1:?usage: outputs-snapshot.sh OUT [TESSERA_BIN]}
bin=${2:-}
root=$(cd "$(dirname "$0")/.." && pwd)
if [ -z "$bin" ]; then
  cargo build -q -p tessera -p tessera-exporter --manifest-path "$root/Cargo.toml"
  bin="${CARGO_TARGET_DIR:-$root/target}/debug/tessera"
fi
export NO_COLOR=1
# The progress line a long run prints on stderr every 10 s (with the seconds elapsed) depends on
# the machine's speed: never, here.
export TESSERA_PROGRESS_EVERY=520w
mkdir -p "$out"
# A kubeconfig whose API server refuses connections (port 1 on loopback): the dry runs that read
# the cluster stop there, the same way each run.
kubeconfig="$out/.kubeconfig"
cat >"$kubeconfig" <<'YAML'
apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "http://127.0.0.1:1"}}]
users: [{name: none, user: {}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
current-context: none
YAML
fleet="$out/.fleet-64"
if [ ! -d "$fleet" ]; then
  "$bin" simulate --scenario "$root/fixtures/scenarios/fleet-64.toml" --days 3 \
    --sample-interval 1m --history.interval 1m --out "$fleet" >/dev/null 2>&1
fi
for name in demo fleet; do
  case $name in
    demo) src="history:$root/fixtures/demo-history" ;;
    fleet) src="history:$fleet" ;;
  esac
  run() { # run FILE ARGS...: stdout to FILE, stderr beside it, exit code kept
    local f=$1; shift
    set +e
    "$bin" "$@" >"$out/$name.$f" 2>"$out/$name.$f.stderr"
    echo "exit $?" >>"$out/$name.$f.stderr"
    set -e
  }
  run_at() { # run_at FILE ARGS...: as run, the clock stopped at 2026-11-06T12:00:00Z
    local f=$1; shift
    if ! command -v faketime >/dev/null; then
      echo "not run: faketime (libfaketime) is not installed" | tee "$out/$name.$f" >"$out/$name.$f.stderr"
      return
    fi
    set +e
    FAKETIME_DONT_FAKE_MONOTONIC=1 faketime -f '2026-11-06 12:00:00' "$bin" "$@" \
      >"$out/$name.$f" 2>"$out/$name.$f.stderr"
    echo "exit $?" >>"$out/$name.$f.stderr"
    set -e
  }
  run analyze.txt analyze --source "$src"
  run analyze.json analyze --source "$src" --format json
  for fmt in table markdown html json; do
    run "report.$fmt" report --source "$src" --format "$fmt"
    run "report-berlin.$fmt" report --source "$src" --format "$fmt" --tz Europe/Berlin
  done
  run report-by-job.txt report --source "$src" --by job
  run report-by-job.json report --source "$src" --by job --format json
  # The plan actions' verdicts: replayed out of sample (the previous period's plans), or not.
  run report-out-of-sample.json report --source "$src" --format json --out-of-sample
  run report-no-replay.txt report --source "$src" --no-replay
  run ingest.txt ingest --source "$src"
  run mig-plan.txt mig plan --source "$src" -o "$out/$name.mig-plan.out.yaml"
  run mig-plan.json mig plan --source "$src" --format json -o "$out/$name.mig-plan-json.out.yaml"
  run mig-plan-schedule.txt mig plan --source "$src" -o "$out/$name.mig-plan-schedule.out.yaml" \
    --schedule "$out/$name.schedule.yaml" --mig-parted-config "$out/$name.mig-parted.yaml"
  # replay: both kinds of plan, every format, a fixed config, the prediction written into a
  # copy of the plan, and out of sample (fixed ranges: both data sets cover 2026-11-02..05).
  run analyze-plan-out.txt analyze --source "$src" --plan-out "$out/$name.consolidation.yaml"
  for fmt in table markdown html json; do
    run "replay.$fmt" replay --source "$src" --plan "$out/$name.mig-plan-schedule.out.yaml" --format "$fmt"
    run "replay-consolidation.$fmt" replay --source "$src" --plan "$out/$name.consolidation.yaml" --format "$fmt"
  done
  run replay-config.txt replay --source "$src" --plan "$out/$name.mig-plan-schedule.out.yaml" --config day
  cp "$out/$name.mig-plan.out.yaml" "$out/$name.replay-prediction.yaml"
  run replay-prediction.txt replay --source "$src" --plan "$out/$name.replay-prediction.yaml" --write-prediction
  for kind in mig consolidation; do
    run "replay-train-$kind.txt" replay --source "$src" --kind "$kind" \
      --train 2026-11-02T00:00:00Z..2026-11-04T00:00:00Z --test 2026-11-04T00:00:00Z..2026-11-05T00:00:00Z \
      --plan-out "$out/$name.replay-train-$kind.yaml"
  done
  # share: the plan (no cluster needed), then apply's dry run up to the cluster (see above).
  run share-plan.txt share plan --plan "$out/$name.consolidation.yaml" --source "$src"
  run share-plan.json share plan --plan "$out/$name.consolidation.yaml" --source "$src" --format json
  run share-apply.txt share apply --plan "$out/$name.consolidation.yaml" --source "$src" \
    --kubeconfig "$kubeconfig" --now 2026-11-06T12:00:00Z
  # scale-down's dry run up to the cluster, from the sources and from analyze's findings.
  run scale-down.txt scale-down --source "$src" --kubeconfig "$kubeconfig" --now 2026-11-06T00:10:00Z --allow-stale-evidence \
    --journal "$out/.scale-down-journal.json" --audit-log -
  run scale-down-findings.txt scale-down --findings "$out/$name.analyze.json" --kubeconfig "$kubeconfig" \
    --allow-stale-evidence --journal "$out/.scale-down-journal.json" --audit-log -
  # notify's dry run: the alerts' JSON body, on a stopped clock (see above).
  run_at notify-dry-run.json notify --source "$src" --dry-run
  run_at notify-dry-run-info.json notify --source "$src" --dry-run --min-severity info \
    --label cluster=snapshot --generator-url 'https://reports.example/t.html#{id}'
  run mig-profiles.txt mig profiles --backend sim
  run mig-export.yaml mig export --backend sim
done
exporter=${TESSERA_EXPORTER_BIN:-$(dirname "$bin")/tessera-exporter}
if [ -x "$exporter" ]; then
  for node in gpu-node-1 gpu-node-3; do
    "$exporter" --backend sim --once --sim.node "$node" --sim.time 2026-11-03T14:00:00Z >"$out/exporter.$node.txt" 2>&1 || true
    "$exporter" --backend sim --once --format json --sim.node "$node" --sim.time 2026-11-03T14:00:00Z >"$out/exporter.$node.json" 2>&1 || true
  done
fi
