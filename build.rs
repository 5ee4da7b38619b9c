//! Compiles the protos meshpush needs with protox, a protobuf compiler in
//! pure Rust: building meshpush needs no system `protoc`.
//!
//! - The gRPC APIs it serves (`proto/`): its own registry API, Istio's
//!   certificate service (its wire contract restated in
//!   `proto/istio/v1/auth/ca.proto`), and the PCDS resource
//!   (`proto/istio/mesh/v1alpha1/proxy_config.proto`), as Rust types.
//! - ztunnel's workload API (`proto/ztunnel/`, vendored unchanged from
//!   istio/ztunnel: `istio.workload` and `istio.security`), the resources
//!   meshpush serves ztunnel, as Rust types.
//! - Istio's config API (`proto/istio-api/`, vendored unchanged from
//!   istio/api): the MCP envelope (`istio.mcp.v1alpha1.Resource`) as Rust
//!   types, and every body it carries (the networking, security and
//!   telemetry kinds) as one encoded `FileDescriptorSet`
//!   (`$OUT_DIR/istio_api.bin`) that `istio_api` reads bodies through.
//! - Envoy's whole API, from the `.proto` files envoy-types ships, as one
//!   encoded `FileDescriptorSet` (`$OUT_DIR/envoy_api.bin`) that
//!   `envoy_api` decodes into a descriptor pool at first use. The two
//!   `TypedStruct` files envoy-types leaves out are restated under `proto/`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use prost::Message;
use prost_types::FileDescriptorProto;

/// The encoded files (field 1) of an encoded `FileDescriptorSet`, as they are.
fn encoded_files(mut set: &[u8]) -> Vec<Vec<u8>> {
    let mut files = Vec::new();
    while !set.is_empty() {
        let (tag, wire) = prost::encoding::decode_key(&mut set).expect("a FileDescriptorSet key");
        assert!(tag == 1 && wire == prost::encoding::WireType::LengthDelimited, "a FileDescriptorSet holds files only");
        let len = prost::encoding::decode_varint(&mut set).expect("a file's length") as usize;
        files.push(set[..len].to_vec());
        set = &set[len..];
    }
    files
}

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
    // ztunnel's files import each other by bare name (`workload.proto`),
    // so their folder is the include root they are compiled from.
    const ZTUNNEL: [&str; 2] = ["workload.proto", "authorization.proto"];
    for proto in ZTUNNEL {
        println!("cargo:rerun-if-changed=proto/ztunnel/{proto}");
    }
    let descriptors = protox::compile(ZTUNNEL, ["proto/ztunnel"])?;
    tonic_prost_build::configure().build_server(false).build_client(false).compile_fds(descriptors)?;
    istio_api()?;
    envoy_api()
}

/// The files of `proto/istio-api/` whose messages meshpush reads and
/// writes: the MCP envelope and the config kinds' bodies (their imports
/// come along).
const ISTIO_API: [&str; 15] = [
    "mcp/v1alpha1/resource.proto",
    "networking/v1alpha3/destination_rule.proto",
    "networking/v1alpha3/envoy_filter.proto",
    "networking/v1alpha3/gateway.proto",
    "networking/v1alpha3/service_entry.proto",
    "networking/v1alpha3/sidecar.proto",
    "networking/v1alpha3/virtual_service.proto",
    "networking/v1alpha3/workload_entry.proto",
    "networking/v1alpha3/workload_group.proto",
    "networking/v1beta1/proxy_config.proto",
    "security/v1beta1/authorization_policy.proto",
    "security/v1beta1/peer_authentication.proto",
    "security/v1beta1/request_authentication.proto",
    "telemetry/v1alpha1/telemetry.proto",
    "type/v1beta1/selector.proto",
];

fn istio_api() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/istio-api");
    let descriptors = protox::compile(ISTIO_API, ["proto/istio-api"])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?).join("istio_api.bin");
    std::fs::write(out, descriptors.encode_to_vec())?;
    let envelope = protox::compile(["mcp/v1alpha1/resource.proto"], ["proto/istio-api"])?;
    // Its `name` field's comment holds indented examples of names, which
    // rustdoc would run as Rust: the proto file documents the field.
    let mut config = tonic_prost_build::Config::new();
    config.disable_comments(["istio.mcp.v1alpha1.Metadata.name"]);
    tonic_prost_build::configure().build_server(false).build_client(false).compile_fds_with_config(envelope, config)?;
    Ok(())
}

/// The include roots of envoy-types' `proto/` folder, and the files each holds.
const ENVOY_ROOTS: [&str; 8] = [
    "data-plane-api",
    "xds",
    "googleapis",
    "protoc-gen-validate",
    "cel-spec/proto",
    "opentelemetry-proto",
    "client_model",
    "ratelimit/api",
];

/// meshpush's restatements of the files envoy-types leaves out.
const EXTRA: [&str; 2] = ["xds/type/v3/typed_struct.proto", "udpa/type/v1/typed_struct.proto"];

fn envoy_api() -> Result<(), Box<dyn std::error::Error>> {
    for extra in EXTRA {
        println!("cargo:rerun-if-changed=proto/{extra}");
    }
    let shipped = envoy_types_protos()?;
    let mut includes: Vec<PathBuf> = ENVOY_ROOTS.iter().map(|r| shipped.join(r)).collect();
    includes.push(PathBuf::from("proto"));
    let mut files = Vec::new();
    for root in &includes[..ENVOY_ROOTS.len()] {
        collect_protos(root, root, &mut files)?;
    }
    files.extend(EXTRA.iter().map(|f| f.to_string()));
    files.sort();

    // protox compiles every file into one pool, so a file sees packages
    // it does not import: `common.tap.v3.X` written in package
    // `envoy.extensions.filters.http.tap.v3` resolves against a package
    // `envoy.extensions.filters.common` that protoc, seeing only the
    // file's imports, never considers. A file that fails so is compiled
    // again on its own, with only its imports in view; where even that
    // meets a package an import brings in, the name is written out in
    // full, as protoc resolves it (see `Rewrites`).
    let mut rewrites = Rewrites::default();
    let compiler = |rewrites: &Rewrites| -> protox::Compiler {
        let mut c =
            protox::Compiler::with_file_resolver(Resolver { includes: includes.clone(), rewrites: rewrites.clone() });
        c.include_imports(true).include_source_info(false);
        c
    };
    let mut shared = compiler(&rewrites);
    let mut alone = Vec::new();
    for file in &files {
        if shared.open_file(file).is_err() {
            alone.push(file);
        }
    }
    // Each file is kept as protox encoded it: its options keep their
    // extensions (`validate.rules`, `udpa.annotations.*`), which decoding
    // into prost_types would drop.
    let mut by_name: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut known: BTreeSet<String> = BTreeSet::new();
    let mut keep = |set: Vec<u8>, known: &mut BTreeSet<String>| {
        for raw in encoded_files(&set) {
            let file = FileDescriptorProto::decode(raw.as_slice()).expect("protox encodes what prost decodes");
            type_names(&file, known);
            by_name.entry(file.name().to_string()).or_insert(raw);
        }
    };
    keep(shared.encode_file_descriptor_set(), &mut known);
    for file in alone {
        loop {
            let mut own = compiler(&rewrites);
            match own.open_file(file) {
                Ok(_) => {
                    keep(own.encode_file_descriptor_set(), &mut known);
                    break;
                }
                Err(e) => {
                    let fix = e.file().and_then(|in_file| rewrites.fix(in_file, &e.to_string(), &known));
                    if !fix.unwrap_or(false) {
                        return Err(format!("{file}: {e}").into());
                    }
                }
            }
        }
    }
    // A FileDescriptorSet is its files as field 1, each length-delimited.
    let mut set = Vec::new();
    for raw in by_name.values() {
        prost::encoding::encode_key(1, prost::encoding::WireType::LengthDelimited, &mut set);
        prost::encoding::encode_varint(raw.len() as u64, &mut set);
        set.extend_from_slice(raw);
    }
    let out = PathBuf::from(std::env::var("OUT_DIR")?).join("envoy_api.bin");
    std::fs::write(out, set)?;
    Ok(())
}

/// Names written out in full, per file: `(as written, fully qualified)`.
#[derive(Clone, Default)]
struct Rewrites(BTreeMap<String, Vec<(String, String)>>);

impl Rewrites {
    /// From protox's "'X' resolves to 'Y', which is not defined" in
    /// `file`: the first scope outside the one that captured `X` where
    /// `X` names a known type is where protoc finds it. Records that and
    /// answers whether it is a new fix.
    fn fix(&mut self, file: &str, error: &str, known: &BTreeSet<String>) -> Option<bool> {
        let (_, rest) = error.split_once('\'')?;
        let (written, rest) = rest.split_once('\'')?;
        let (_, rest) = rest.split_once(" resolves to '")?;
        let (resolved, _) = rest.split_once('\'')?;
        let mut scope = resolved.strip_suffix(written)?.trim_end_matches('.').to_string();
        while let Some((outer, _)) = scope.rsplit_once('.') {
            scope = outer.to_string();
            let candidate = format!("{scope}.{written}");
            if known.contains(&candidate) {
                let list = self.0.entry(file.to_string()).or_default();
                let fresh = !list.iter().any(|(w, _)| w == written);
                list.push((written.to_string(), format!(".{candidate}")));
                return Some(fresh);
            }
        }
        known.contains(written).then(|| {
            self.0.entry(file.to_string()).or_default().push((written.to_string(), format!(".{written}")));
            true
        })
    }

    fn apply(&self, file: &str, source: String) -> String {
        let Some(list) = self.0.get(file) else { return source };
        list.iter().fold(source, |text, (written, full)| replace_name(&text, written, full))
    }
}

/// `text` with every whole occurrence of the type name `written` (not
/// part of a longer dotted name) replaced by `full`.
fn replace_name(text: &str, written: &str, full: &str) -> String {
    let part = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(written) {
        let before = rest[..at].chars().last().or_else(|| out.chars().last());
        let after = rest[at + written.len()..].chars().next();
        out.push_str(&rest[..at]);
        out.push_str(if part(before) || part(after) { written } else { full });
        rest = &rest[at + written.len()..];
    }
    out.push_str(rest);
    out
}

/// Files from the include roots, with [`Rewrites`] applied.
struct Resolver {
    includes: Vec<PathBuf>,
    rewrites: Rewrites,
}

impl protox::file::FileResolver for Resolver {
    fn open_file(&self, name: &str) -> Result<protox::file::File, protox::Error> {
        if let Ok(file) = protox::file::GoogleFileResolver::new().open_file(name) {
            return Ok(file);
        }
        for root in &self.includes {
            let path = root.join(name);
            if let Ok(source) = std::fs::read_to_string(&path) {
                return protox::file::File::from_source(name, &self.rewrites.apply(name, source));
            }
        }
        Err(protox::Error::file_not_found(name))
    }
}

/// Adds the full names of the messages and enums `file` defines.
fn type_names(file: &FileDescriptorProto, out: &mut BTreeSet<String>) {
    fn message(scope: &str, m: &prost_types::DescriptorProto, out: &mut BTreeSet<String>) {
        let name = format!("{scope}.{}", m.name());
        for nested in &m.nested_type {
            message(&name, nested, out);
        }
        for e in &m.enum_type {
            out.insert(format!("{name}.{}", e.name()));
        }
        out.insert(name);
    }
    for m in &file.message_type {
        message(file.package(), m, out);
    }
    for e in &file.enum_type {
        out.insert(format!("{}.{}", file.package(), e.name()));
    }
}

/// Paths (relative to `root`) of the `.proto` files under `dir`.
fn collect_protos(root: &Path, dir: &Path, out: &mut Vec<String>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect_protos(root, &path, out)?;
        } else if path.extension().is_some_and(|e| e == "proto") {
            let relative = path.strip_prefix(root).expect("under its root");
            out.push(relative.to_string_lossy().replace('\\', "/"));
        }
    }
    Ok(())
}

/// envoy-types' `proto/` folder: in cargo's registry, at the version
/// `Cargo.lock` names (no other process runs); failing that (a vendored or
/// patched source), where `cargo metadata` says the crate is. The crate is
/// already fetched when its dependent's build script runs, so neither
/// needs the network.
fn envoy_types_protos() -> Result<PathBuf, Box<dyn std::error::Error>> {
    let dir = match registry_protos() {
        Some(dir) => dir,
        None => metadata_protos()?,
    };
    println!("cargo:rerun-if-changed={}", dir.display());
    println!("cargo:rerun-if-changed=Cargo.lock");
    Ok(dir)
}

/// `$CARGO_HOME/registry/src/*/envoy-types-VERSION/proto`, the version read
/// from `Cargo.lock`.
fn registry_protos() -> Option<PathBuf> {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").ok()?);
    let lock = std::fs::read_to_string(root.join("Cargo.lock")).ok()?;
    let version = lock
        .split("[[package]]")
        .find(|p| p.contains("name = \"envoy-types\"") && p.contains("registry+"))?
        .lines()
        .find_map(|l| l.strip_prefix("version = \""))?
        .trim_end_matches('"')
        .to_string();
    let home = std::env::var("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|_| std::env::var("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .ok()?;
    let mut found: Vec<PathBuf> = std::fs::read_dir(home.join("registry/src"))
        .ok()?
        .filter_map(|index| Some(index.ok()?.path().join(format!("envoy-types-{version}/proto"))))
        .filter(|dir| dir.is_dir())
        .collect();
    found.sort();
    found.pop()
}

/// The folder through `cargo metadata`, run with a clean environment: a
/// cargo started with the variables cargo hands a build script (its
/// jobserver among them) has been seen to feed its rustc garbage.
fn metadata_protos() -> Result<PathBuf, Box<dyn std::error::Error>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let target = std::env::var("TARGET")?;
    let manifest = std::env::var("CARGO_MANIFEST_PATH")
        .unwrap_or_else(|_| format!("{}/Cargo.toml", std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default()));
    let mut command = std::process::Command::new(cargo);
    command.env_clear();
    for keep in ["PATH", "HOME", "CARGO_HOME", "RUSTUP_HOME", "RUSTUP_TOOLCHAIN"] {
        if let Ok(value) = std::env::var(keep) {
            command.env(keep, value);
        }
    }
    let own_target = PathBuf::from(std::env::var("OUT_DIR")?).join("metadata-target");
    let output = command
        .args(["metadata", "--format-version", "1", "--offline", "--filter-platform", &target, "--manifest-path"])
        .arg(&manifest)
        .env("CARGO_TARGET_DIR", &own_target)
        .output()?;
    if !output.status.success() {
        return Err(format!("cargo metadata: {}", String::from_utf8_lossy(&output.stderr)).into());
    }
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    let manifest = metadata["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == "envoy-types")
        .and_then(|p| p["manifest_path"].as_str())
        .ok_or("cargo metadata lists no envoy-types package")?;
    Ok(Path::new(manifest).parent().ok_or("envoy-types' manifest has no folder")?.join("proto"))
}
