//! Compiles the registry API's client from meshpush's `proto/` with protox
//! (pure Rust, no system `protoc`). The harness shares no code with the
//! server: it drives meshpush as any other client would.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    const PROTO: &str = "../proto/meshpush/v1/registry.proto";
    println!("cargo:rerun-if-changed={PROTO}");
    let descriptors = protox::compile([PROTO], ["../proto"])?;
    tonic_prost_build::configure().build_server(false).build_client(true).compile_fds(descriptors)?;
    Ok(())
}
