//! The loadtest harness's `smoke` scenario against the meshpush binary of
//! this build: 100 simulated Envoys sync, and endpoint and VirtualService
//! changes applied through the registry API reach every stream that should
//! see them. It holds the harness and the registry API to working order in
//! every `cargo test`; the sizing scenarios (s1, s2, churn) run by hand
//! (see perf.md).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use loadtest::{Options, Scenario};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smoke_scenario_syncs_every_stream_and_converges_every_change() {
    let started = Instant::now();
    let options = Options {
        meshpush_bin: Some(PathBuf::from(env!("CARGO_BIN_EXE_meshpush"))),
        progress: false,
        command: "cargo test --test loadtest_smoke".into(),
        ..Options::new(Scenario::Smoke)
    };
    let report = tokio::time::timeout(Duration::from_secs(120), loadtest::run(options))
        .await
        .expect("the smoke scenario stops by itself")
        .expect("the smoke scenario runs");
    let table = report.table();
    assert!(report.failures.is_empty(), "smoke failed:{table}");
    assert_eq!(report.phases.len(), 5, "{table}");
    for phase in &report.phases {
        assert_eq!(phase.converged, phase.expected, "{}: {table}", phase.name);
        assert!(phase.expected >= 50, "{}: too few streams expected: {table}", phase.name);
        assert_eq!(phase.unexpected, 0, "{}: reached streams outside its scope: {table}", phase.name);
    }
    eprintln!("{table}\nsmoke took {:?}", started.elapsed());
}
