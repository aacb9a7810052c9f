# The environment of a release build, sourced (POSIX sh) by everything that builds tessera's
# release binaries: scripts/build-debs.sh, scripts/build-images.sh and deploy/images/Containerfile.
# tests/e2e/tests/release_binaries.rs builds a throwaway crate with it and checks the binary.
#
#   . scripts/release-env.sh && tessera_release_env [ROOT]
#
# tessera_release_env appends to RUSTFLAGS (keeping what the caller set) one --remap-path-prefix
# per build path, so that the paths rustc writes into the binary (panic locations, file!()) name
# no folder of the build machine:
#   ROOT (default: the current folder), the source tree     -> /build/tessera
#     (and its path without symbolic links, where that differs: cargo finds the tree from it)
#   $CARGO_TARGET_DIR, when set (generated code, OUT_DIR)   -> /build/target
#   $CARGO_HOME (default ~/.cargo), the dependencies' code -> /cargo
# Where two match, rustc applies the last, so the more specific folders come after the tree.
# The symbols are stripped by the workspace's [profile.release] (strip = "symbols"), not here.
#
# What it does not do: remap paths with white space (RUSTFLAGS splits at spaces; it refuses
# them), set CARGO_ENCODED_RUSTFLAGS (which, when set, makes cargo ignore RUSTFLAGS: it refuses
# that too), or touch anything but RUSTFLAGS.

tessera_release_env() {
  _tre_root=${1:-$PWD}
  _tre_target=${CARGO_TARGET_DIR:-}
  _tre_cargo_home=${CARGO_HOME:-$HOME/.cargo}
  if [ -n "${CARGO_ENCODED_RUSTFLAGS:-}" ]; then
    echo "release-env.sh: CARGO_ENCODED_RUSTFLAGS is set, and cargo would ignore the RUSTFLAGS this adds; unset it or put the flags into RUSTFLAGS" >&2
    return 2
  fi
  # Cargo makes relative folders absolute against the current folder.
  case $_tre_root in /*) ;; *) _tre_root=$PWD/$_tre_root ;; esac
  case $_tre_target in /* | "") ;; *) _tre_target=$PWD/$_tre_target ;; esac
  case $_tre_cargo_home in /*) ;; *) _tre_cargo_home=$PWD/$_tre_cargo_home ;; esac
  # Cargo finds the source tree from the current folder without symbolic links: the tree's
  # physical path too, where it differs.
  _tre_physical=$(cd "$_tre_root" && pwd -P) || return 2
  for _tre_dir in "$_tre_root" "$_tre_physical" "$_tre_target" "$_tre_cargo_home"; do
    case $_tre_dir in
      *[[:space:]]*)
        echo "release-env.sh: '$_tre_dir' has white space, which RUSTFLAGS cannot carry" >&2
        return 2
        ;;
    esac
  done
  _tre_flags="--remap-path-prefix=$_tre_root=/build/tessera"
  if [ "$_tre_physical" != "$_tre_root" ]; then
    _tre_flags="$_tre_flags --remap-path-prefix=$_tre_physical=/build/tessera"
  fi
  if [ -n "$_tre_target" ]; then
    _tre_flags="$_tre_flags --remap-path-prefix=$_tre_target=/build/target"
  fi
  _tre_flags="$_tre_flags --remap-path-prefix=$_tre_cargo_home=/cargo"
  RUSTFLAGS="${RUSTFLAGS:+$RUSTFLAGS }$_tre_flags"
  export RUSTFLAGS
  unset _tre_root _tre_physical _tre_target _tre_cargo_home _tre_dir _tre_flags
}
