//! Generates the kubelet pod-resources v1 gRPC client (`src/kubelet.rs`) from the vendored
//! `proto/kubelet/podresources/v1/api.proto`, with protox (a pure-Rust compiler: no `protoc`),
//! and records the commit the binary is built from (`TESSERA_COMMIT`, shown by `--version`; the
//! rule both binaries share, `build-support/commit.rs`).

include!("../build-support/commit.rs");

fn main() -> Result<(), Box<dyn std::error::Error>> {
    record_commit();
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
