//! Helpers for tessera's end-to-end tests: run the real binaries (`tessera-exporter`, `tessera`)
//! as a user would, with a temporary directory, and check their output and exit codes.
//!
//! Binaries are looked up in the cargo target directory of the running test. Once per test
//! process, [`bin`] runs `cargo build -p PACKAGE --bin NAME` (a no-op when up to date) so a test
//! never runs a stale binary, also under `cargo test -p tessera-e2e`, which does not build other
//! packages' binaries. Cargo releases its build lock before running tests, so this nests safely.
//!
//! [`promql`] lexes just enough PromQL to find the metrics an expression reads; [`monitoring`]
//! loads the rules and dashboards and runs the exporter, Prometheus and Debian's tools for the
//! monitoring tests.
//!
//! This crate holds no product code.

pub mod monitoring;
pub mod promql;
pub mod replay;

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::Mutex;

/// Directory holding the binaries and `deps/` of the current build profile.
pub fn target_profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    // target/<profile>/deps/<test-binary>
    exe.parent()
        .and_then(|d| d.parent())
        .expect("target dir")
        .to_path_buf()
}

/// Path of the fake `libnvidia-ml.so` built beside the tests.
pub fn fake_nvml() -> PathBuf {
    let p = target_profile_dir().join("deps").join("libnvidia_ml.so");
    assert!(p.exists(), "fake NVML library not built at {}", p.display());
    p
}

/// Repository root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

static BUILT: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// A `Command` for workspace binary `name` (package `package`), building it if missing.
pub fn bin(package: &str, name: &str) -> Command {
    let path = target_profile_dir().join(name);
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    if !built.iter().any(|b| b == name) {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut build = Command::new(cargo);
        // Drop the variables cargo set for this test binary: build scripts that watch them (ring's
        // does) would otherwise rebuild here, and again in the next outer build.
        for (key, _) in std::env::vars_os() {
            let k = key.to_string_lossy();
            if [
                "CARGO_PKG_",
                "CARGO_MANIFEST_",
                "CARGO_CRATE_",
                "CARGO_BIN_",
                "CARGO_PRIMARY_",
                "CARGO_TARGET_TMPDIR",
            ]
            .iter()
            .any(|p| k.starts_with(p))
                || k == "OUT_DIR"
            {
                build.env_remove(&key);
            }
        }
        let status = build
            .args(["build", "-p", package, "--bin", name])
            .current_dir(repo_root())
            .status()
            .expect("running cargo build");
        assert!(status.success(), "cargo build of {name} failed");
        built.push(name.to_string());
    }
    drop(built);
    let mut cmd = Command::new(path);
    cmd.current_dir(repo_root()).env_remove("NO_COLOR");
    cmd
}

/// Run a command and return its output, stdout and stderr as strings.
pub fn run(mut cmd: Command) -> (Output, String, String) {
    let out = cmd.output().expect("spawning binary");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, stdout, stderr)
}

/// `tessera-exporter` with arguments.
#[macro_export]
macro_rules! exporter {
    ($($arg:expr),* $(,)?) => {{
        let mut c = $crate::bin("tessera-exporter", "tessera-exporter");
        $(c.arg($arg);)*
        c
    }};
}

/// `tessera` with arguments.
#[macro_export]
macro_rules! tessera {
    ($($arg:expr),* $(,)?) => {{
        let mut c = $crate::bin("tessera", "tessera");
        $(c.arg($arg);)*
        c
    }};
}

/// The fake NVML library of an old driver (`tests/fake-nvml-old`: no placements, no MIG writes).
pub fn fake_nvml_old() -> PathBuf {
    let p = target_profile_dir()
        .join("deps")
        .join("libnvidia_ml_old.so");
    assert!(
        p.exists(),
        "old-driver fake NVML library not built at {}",
        p.display()
    );
    p
}

/// The fake NVML library that replays a recording of a real GPU (`tests/fake-nvml-recorded`).
pub fn fake_nvml_recorded() -> PathBuf {
    let p = target_profile_dir()
        .join("deps")
        .join("libnvidia_ml_recorded.so");
    assert!(
        p.exists(),
        "recorded fake NVML library not built at {}",
        p.display()
    );
    p
}
