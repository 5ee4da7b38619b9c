//! Compiles the gRPC APIs meshpush serves (`proto/`) with protox, a
//! protobuf compiler in pure Rust: building meshpush needs no system
//! `protoc`. Its own registry API, Istio's certificate service (its
//! wire contract restated in `proto/istio/v1/auth/ca.proto`), and the
//! PCDS resource (`proto/istio/mesh/v1alpha1/proxy_config.proto`).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    const PROTOS: [&str; 3] = [
        "proto/meshpush/v1/registry.proto",
        "proto/istio/v1/auth/ca.proto",
        "proto/istio/mesh/v1alpha1/proxy_config.proto",
    ];
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={proto}");
    }
    let descriptors = protox::compile(PROTOS, ["proto"])?;
    tonic_prost_build::configure().build_server(true).build_client(true).compile_fds(descriptors)?;
    Ok(())
}
