//! The stand-in Consul server (`meshpush::testing::consul`) checked with a
//! real Consul client: py-consul from PyPI, installed into
//! `.tools/consul-venv` on first use (`scripts/consul-venv.sh`). The
//! client registers through the catalog and the agent API, reads the
//! catalog, holds a blocking query until a registration lands, deregisters,
//! and is refused with a wrong token and a wait without a unit, each as
//! Consul answers it (`tests/support/consul_check.py`).

use std::path::{Path, PathBuf};
use std::process::Command;

use meshpush::testing::consul::ConsulStandIn;

/// The venv's python, installing it when missing.
fn python() -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/consul-venv.sh");
    let out = Command::new("bash").arg(&script).output().unwrap_or_else(|e| panic!("run {}: {e}", script.display()));
    let printed = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        out.status.success() && Path::new(&printed).is_file(),
        "{} failed ({}), so no py-consul for the test\nstderr: {}",
        script.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr),
    );
    PathBuf::from(printed)
}

#[test]
fn a_real_consul_client_finds_the_stand_in_behaves_as_consul() {
    let python = python();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let stand_in = runtime.block_on(ConsulStandIn::start(Some("s3cret")));
    let check = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/consul_check.py");
    let out = Command::new(python)
        .arg(&check)
        .args([stand_in.addr.ip().to_string(), stand_in.addr.port().to_string(), "s3cret".into()])
        // py-consul lets these override what it is given.
        .env_remove("CONSUL_HTTP_TOKEN")
        .env_remove("CONSUL_HTTP_ADDR")
        .env_remove("CONSUL_HTTP_SSL")
        .output()
        .expect("python runs");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && stdout.trim() == "ok", "py-consul's check failed:\n{stdout}\n{stderr}");
    assert!(stand_in.index() > 4, "the client's writes moved the index");
}
