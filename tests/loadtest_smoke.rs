//! The loadtest harness's `smoke` scenario against the meshpush binary of
//! this build, on SotW and on delta xDS: 100 simulated Envoys sync, and
//! endpoint and VirtualService changes applied through the registry API
//! reach every stream that should see them. It holds the harness and the
//! registry API to working order in every `cargo test`; the sizing
//! scenarios (s1, s2, churn) run by hand (see perf.md).
//!
//! A test binary of its own: it measures convergence against deadlines, so
//! it runs alone, not beside the end-to-end tests' Envoys (test binaries
//! run one after another).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use loadtest::{Options, Protocol, Scenario};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smoke_scenario_syncs_every_stream_and_converges_every_change() {
    smoke(false).await;
}

/// The same on delta xDS: streams subscribe only what changed, and still
/// every stream syncs and every change reaches exactly the streams it should.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smoke_scenario_on_delta_syncs_every_stream_and_converges_every_change() {
    smoke(true).await;
}

async fn smoke(delta: bool) {
    let started = Instant::now();
    let options = Options {
        meshpush_bin: Some(PathBuf::from(env!("CARGO_BIN_EXE_meshpush"))),
        progress: false,
        delta,
        command: "cargo test --test loadtest_smoke".into(),
        ..Options::new(Scenario::Smoke)
    };
    let report = tokio::time::timeout(Duration::from_secs(120), loadtest::run(options))
        .await
        .expect("the smoke scenario stops by itself")
        .expect("the smoke scenario runs");
    let table = report.table();
    let protocol = if delta { Protocol::Delta } else { Protocol::Sotw };
    assert_eq!(report.protocol, protocol, "{table}");
    assert!(report.failures.is_empty(), "smoke failed:{table}");
    assert_eq!(report.phases.len(), 5, "{table}");
    for phase in &report.phases {
        assert_eq!(phase.converged, phase.expected, "{}: {table}", phase.name);
        assert!(phase.expected >= 50, "{}: too few streams expected: {table}", phase.name);
        assert_eq!(phase.unexpected, 0, "{}: reached streams outside its scope: {table}", phase.name);
    }
    eprintln!("{table}\nsmoke ({}) took {:?}", protocol.name(), started.elapsed());
}
