#!/usr/bin/env bash
# Builds the container images of tessera-exporter and tessera with buildah, from scratch: no base
# image, nothing pulled from a registry. Each image holds its binary in /usr/bin, the shared
# libraries it links (as ldd lists them, at the same paths, with the dynamic loader), CA
# certificates, /etc/passwd and /etc/group with the non-root user 65532 ("tessera"), and
# org.opencontainers.image.* labels. NVML is not in the image: the NVIDIA container toolkit
# injects libnvidia-ml.so.1 at run time (deploy/images/README.md). deploy/images/Containerfile
# builds images of the same configuration with Docker or Podman (tests/e2e/tests/images.rs
# compares them).
#
#   bash scripts/build-images.sh [--profile release|debug] [--bin-dir DIR] [--out DIR]
#
# Output: OUT/tessera-exporter-VERSION.oci.tar and OUT/tessera-VERSION.oci.tar (OCI archives:
# `podman load -i`, `docker load -i`, `skopeo copy oci-archive:FILE docker://REGISTRY/NAME:TAG`),
# and OUT/images.txt (name, file, size). --bin-dir uses binaries already built there instead of
# running cargo. A release build strips the symbols (the workspace's [profile.release]) and
# remaps the build paths (scripts/release-env.sh, appended to RUSTFLAGS). Needs root (buildah's storage) or rootless buildah.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
profile=release
bin_dir=""
out="$root/target/images"
while [ $# -gt 0 ]; do
  case $1 in
    --profile) profile=$2; shift 2 ;;
    --bin-dir) bin_dir=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "build-images.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
command -v buildah >/dev/null || { echo "build-images.sh: buildah not found (apt-get install buildah)" >&2; exit 2; }
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -1)
revision=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)
source=$(sed -n 's/^repository = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -1)
if [ -z "$bin_dir" ]; then
  flag=""
  if [ "$profile" = release ]; then
    flag="--release"
    # No build paths in the binaries (the symbols go by the workspace's strip = "symbols").
    . "$root/scripts/release-env.sh"
    tessera_release_env "$root"
  fi
  cargo build -q $flag -p tessera-exporter -p tessera --manifest-path "$root/Cargo.toml"
  bin_dir="$root/target/$profile"
fi
mkdir -p "$out"
: >"$out/images.txt"

build() { # build NAME DESCRIPTION [ENV...]
  local name=$1 description=$2; shift 2
  local ctr mnt lib
  ctr=$(buildah from scratch)
  trap 'buildah rm "$ctr" >/dev/null 2>&1 || true' RETURN
  mnt=$(buildah mount "$ctr")
  install -D -m 0755 "$bin_dir/$name" "$mnt/usr/bin/$name"
  # The libraries the binary links, and the loader, at the paths the binary names.
  for lib in $(ldd "$bin_dir/$name" | grep -o '/[^ ]*'); do
    install -D -m 0644 "$(readlink -f "$lib")" "$mnt$lib"
  done
  chmod 0755 "$mnt"/lib64/ld-linux-x86-64.so.2 2>/dev/null || true
  install -D -m 0644 /etc/ssl/certs/ca-certificates.crt "$mnt/etc/ssl/certs/ca-certificates.crt"
  printf 'root:x:0:0:root:/root:/usr/sbin/nologin\ntessera:x:65532:65532:tessera:/nonexistent:/usr/sbin/nologin\n' >"$mnt/etc/passwd"
  printf 'root:x:0:\ntessera:x:65532:\n' >"$mnt/etc/group"
  install -d -m 1777 "$mnt/tmp"
  local envs=()
  for e in "$@"; do envs+=(--env "$e"); done
  buildah config \
    --entrypoint "[\"/usr/bin/$name\"]" --cmd '' \
    --user 65532:65532 --workingdir /tmp \
    --env PATH=/usr/local/bin:/usr/bin:/bin \
    --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt "${envs[@]}" \
    --label "org.opencontainers.image.title=$name" \
    --label "org.opencontainers.image.description=$description" \
    --label "org.opencontainers.image.version=$version" \
    --label "org.opencontainers.image.revision=$revision" \
    --label "org.opencontainers.image.source=$source" \
    --label "org.opencontainers.image.licenses=Apache-2.0" \
    --label "org.opencontainers.image.created=$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
    "$ctr"
  buildah unmount "$ctr" >/dev/null
  local file="$out/$name-$version.oci.tar"
  rm -f "$file"
  buildah commit -q --format oci "$ctr" "oci-archive:$file:$name:$version" >/dev/null
  echo "$name:$version $file $(stat -c %s "$file")" | tee -a "$out/images.txt"
}

build tessera-exporter "GPU telemetry exporter: NVML samples as a Prometheus scrape target" \
  NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=utility
build tessera "GPU utilization advisor: reports, findings, MIG plans and their rollout"
