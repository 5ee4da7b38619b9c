//! Compiles meshpush's own gRPC API (`proto/`) with protox, a protobuf
//! compiler in pure Rust: building meshpush needs no system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    const PROTO: &str = "proto/meshpush/v1/registry.proto";
    println!("cargo:rerun-if-changed={PROTO}");
    let descriptors = protox::compile([PROTO], ["proto"])?;
    tonic_prost_build::configure().build_server(true).build_client(true).compile_fds(descriptors)?;
    Ok(())
}
