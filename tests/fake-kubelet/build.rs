//! Generates the pod-resources v1 gRPC server (and, for this crate's own tests, the client) from
//! the exporter's vendored proto, the same file the exporter's client is generated from.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let include = "../../exporter/proto";
    let proto = "../../exporter/proto/kubelet/podresources/v1/api.proto";
    println!("cargo:rerun-if-changed={proto}");
    let files = protox::compile([proto], [include])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .build_transport(false)
        .compile_fds(files)?;
    Ok(())
}
