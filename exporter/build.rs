//! Generates the kubelet pod-resources v1 gRPC client (`src/kubelet.rs`) from the vendored
//! `proto/kubelet/podresources/v1/api.proto`, with protox (a pure-Rust compiler: no `protoc`),
//! and records the commit the binary is built from (`TESSERA_COMMIT`, shown by `--version`; the
//! same rule as `analyzer/build.rs`: `git rev-parse --short=12 HEAD`, or `unknown`).

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
}

fn commit() {
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=TESSERA_COMMIT={commit}");
    for path in [
        Some("HEAD".to_string()),
        git(&["symbolic-ref", "-q", "HEAD"]),
    ]
    .into_iter()
    .flatten()
    .chain(std::iter::once("packed-refs".to_string()))
    {
        if let Some(p) = git(&["rev-parse", "--git-path", &path]) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    commit();
    let proto = "proto/kubelet/podresources/v1/api.proto";
    println!("cargo:rerun-if-changed={proto}");
    let files = protox::compile([proto], ["proto"])?;
    tonic_prost_build::configure()
        .build_server(false)
        .build_client(true)
        .build_transport(false)
        .compile_fds(files)?;
    Ok(())
}
