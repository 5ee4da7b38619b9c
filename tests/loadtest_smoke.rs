//! The loadtest harness's `smoke` scenario against the meshpush binary of
//! this build, on SotW and on delta xDS: 100 simulated Envoys sync, and
//! endpoint and VirtualService changes applied through the registry API
//! reach every stream that should see them. It holds the harness and the
//! registry API to working order in every `cargo test`; the sizing
//! scenarios (s1, s2, churn) run by hand (see perf.md).
//!
//! A reconnect storm of 5,000 streams checks the admission pacing: the
//! server lets new streams in at its configured rate, and every one syncs.
//! The restart and fairness scenarios run in a short form (100 streams):
//! after a SIGKILL and a start, every stream reconnects on its own and the
//! new server sends only what changed; the quiet and the noisy
//! namespaces' changes all converge.
//!
//! A test binary of its own: it measures convergence against deadlines, so
//! it runs alone, not beside the end-to-end tests' Envoys (test binaries
//! run one after another), and its tests take turns ([`SERIAL`]).

#[path = "support/mod.rs"]
mod support;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use loadtest::{ChangesVia, Options, Protocol, Scenario};
use meshpush::serve::ListenAddr;
use support::meshpush::Meshpush;

/// One scenario at a time: each measures against deadlines.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

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

/// The same with every change made as an edit of the server's config
/// directory: each endpoint change rewrites one service's file in place,
/// each route change its namespace's file; the file watcher reads each
/// once it is closed, and every change reaches exactly the streams it should.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smoke_scenario_with_file_edits_converges_every_change() {
    smoke_via(false, ChangesVia::File).await;
}

/// Runs a scenario, which must stop by itself within `limit`.
async fn run(options: Options, limit: Duration) -> loadtest::Report {
    let scenario = format!("{:?}", options.scenario);
    tokio::time::timeout(limit, loadtest::run(options))
        .await
        .unwrap_or_else(|_| panic!("the {scenario} scenario did not stop by itself within {limit:?}"))
        .unwrap_or_else(|e| panic!("the {scenario} scenario could not run: {e:#}"))
}

async fn smoke(delta: bool) {
    smoke_via(delta, ChangesVia::Registry).await;
}

async fn smoke_via(delta: bool, changes_via: ChangesVia) {
    let _turn = SERIAL.lock().await;
    let started = Instant::now();
    let options = Options {
        meshpush_bin: Some(PathBuf::from(env!("CARGO_BIN_EXE_meshpush"))),
        progress: false,
        delta,
        changes_via,
        command: "cargo test --test loadtest_smoke".into(),
        ..Options::new(Scenario::Smoke)
    };
    let report = run(options, Duration::from_secs(120)).await;
    let table = report.table();
    if changes_via == ChangesVia::File {
        assert!(table.contains("as edits of the config directory"), "{table}");
    }
    let protocol = if delta { Protocol::Delta } else { Protocol::Sotw };
    assert_eq!(report.protocol, protocol, "{table}");
    assert!(report.failures.is_empty(), "smoke failed:{table}");
    assert_eq!(report.phases.len(), 5, "{table}");
    assert!(report.server_rss_synced_mib.is_some(), "no RSS once synced: {table}");
    assert!(report.synced_kib_per_stream().is_some(), "no memory per synced stream: {table}");
    for phase in &report.phases {
        assert!(phase.server_rss_mib.is_some_and(|rss| rss > 0.0), "{}: no server RSS: {table}", phase.name);
        assert_eq!(phase.converged, phase.expected, "{}: {table}", phase.name);
        assert!(phase.expected >= 50, "{}: too few streams expected: {table}", phase.name);
        assert_eq!(phase.unexpected, 0, "{}: reached streams outside its scope: {table}", phase.name);
    }
    eprintln!("{table}\nsmoke ({}) took {:?}", protocol.name(), started.elapsed());
}

/// 5,000 simulated Envoys connect at once to a server that admits 500 new
/// streams a second, 50 at once. Sampled from the server's metrics during
/// the storm, the streams admitted between any two samples never exceed
/// what that rate allows (give or take 200 ms for a woken stream to run),
/// streams are seen waiting their turn, the storm takes at least as long
/// as the rate implies, and every stream syncs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnect_storm_is_admitted_at_the_configured_rate_and_every_stream_syncs() {
    const RATE: f64 = 500.0;
    const BURST: f64 = 50.0;
    let _turn = SERIAL.lock().await;
    let config = tempfile::tempdir().unwrap();
    let server = Arc::new(Meshpush::start_with_flags(
        config.path(),
        &["--max-new-streams-per-second", "500", "--new-stream-burst", "50"],
    ));
    let ListenAddr::Tcp(xds) = *server.xds_addr() else { unreachable!("TCP by default") };

    // (sent, answered, admitted, waiting) every 100 ms until stopped.
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = std::thread::spawn({
        let (server, stop) = (server.clone(), stop.clone());
        move || {
            let mut samples = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let sent = Instant::now();
                let admitted = server.metric("meshpush_xds_streams_admitted_total");
                let waiting = server.metric("meshpush_xds_streams_awaiting_admission");
                samples.push((sent, Instant::now(), admitted, waiting));
                std::thread::sleep(Duration::from_millis(100));
            }
            samples
        }
    });
    // The pacing is per stream. With a connection per simulated Envoy, the
    // 5,000 handshakes at once stall this debug build's runtime for over
    // 100 ms at a time, and the streams whose slots passed meanwhile wake
    // (and count) together, which the sampled counts see as a burst the
    // schedule never gave: the streams share connections here.
    let options = Options {
        targets: vec![xds],
        server_pids: vec![server.process().pid()],
        progress: false,
        streams_per_connection: 32,
        command: "cargo test --test loadtest_smoke".into(),
        ..Options::new(Scenario::Storm)
    };
    let report = run(options, Duration::from_secs(180)).await;
    stop.store(true, Ordering::Relaxed);
    let samples = sampler.join().unwrap();
    let table = report.table();
    assert!(report.failures.is_empty(), "storm failed:{table}\n{}", server.log_tail(20));
    let storm = &report.phases[0];
    assert_eq!((storm.converged, storm.expected), (5000, 5000), "{table}");

    // A stream counts as admitted when its task runs after its slot, which
    // on this debug build's two busy cores can be well after the slot: a
    // sample taken during such a stall reads low, and the streams whose
    // slots passed during it are counted in the next window. So each window
    // is allowed the slots of the stall before it as well (WAKE_LAG); a
    // server that did not pace would admit thousands in one window.
    const WAKE_LAG: f64 = 0.2;
    for (i, &(sent_i, _, admitted_i, _)) in samples.iter().enumerate() {
        for &(_, answered_j, admitted_j, _) in &samples[i + 1..] {
            let allowed = RATE * (answered_j.duration_since(sent_i).as_secs_f64() + WAKE_LAG) + BURST + 1.0;
            assert!(
                admitted_j - admitted_i <= allowed,
                "{} streams admitted within {:?}, more than {allowed:.0} at {RATE}/s with a burst of {BURST}",
                admitted_j - admitted_i,
                answered_j.duration_since(sent_i)
            );
        }
    }
    let most_waiting = samples.iter().map(|s| s.3).fold(0.0, f64::max);
    assert!(most_waiting >= 100.0, "the storm never had to wait its turn (at most {most_waiting} waiting)");
    let least = (5000.0 - BURST) / RATE;
    assert!(
        storm.wall_s >= least * 0.95,
        "the storm synced in {:.2} s, faster than the rate allows ({least:.1} s)",
        storm.wall_s
    );
    let admitted = server.metric("meshpush_xds_streams_admitted_total");
    assert!(admitted >= 5000.0, "only {admitted} streams admitted");
    eprintln!("{table}\nstorm: {most_waiting} streams waited at most at once; synced in {:.2} s", storm.wall_s);
}

/// Two replicas of one control plane, each fed the mesh and every change
/// through its own registry API: the harness spreads its connections over
/// both, every stream syncs and converges on the replica it is connected
/// to, and the report shows each replica's share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_smoke_scenario_spreads_over_two_replicas_and_reports_each() {
    let _turn = SERIAL.lock().await;
    let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let replicas = [Meshpush::start(one.path()), Meshpush::start(two.path())];
    let tcp = |m: &Meshpush| match *m.xds_addr() {
        ListenAddr::Tcp(addr) => addr,
        ListenAddr::Unix(_) => unreachable!("TCP by default"),
    };
    let options = Options {
        targets: replicas.iter().map(tcp).collect(),
        server_pids: replicas.iter().map(|m| m.process().pid()).collect(),
        streams_per_connection: 10,
        progress: false,
        command: "cargo test --test loadtest_smoke".into(),
        ..Options::new(Scenario::Smoke)
    };
    let report = run(options, Duration::from_secs(120)).await;
    let table = report.table();
    assert!(report.failures.is_empty(), "smoke over two replicas failed:{table}");
    // 100 streams, 10 a connection, connections alternating: 50 each.
    let shares: Vec<u32> = report.replicas.iter().map(|r| r.streams).collect();
    assert_eq!(shares, [50, 50], "{table}");
    assert!(report.replicas.iter().all(|r| r.cpu_total_s.is_some() && r.peak_rss_mib.is_some()), "{table}");
    for replica in &replicas {
        let admitted = replica.metric("meshpush_xds_streams_admitted_total");
        assert_eq!(admitted, 50.0, "each replica served its share of the streams:{table}");
    }
    for phase in &report.phases {
        assert_eq!(phase.converged, phase.expected, "{}: {table}", phase.name);
        let counts: Vec<usize> = phase.per_replica.iter().map(|s| s.as_ref().map_or(0, |s| s.count)).collect();
        assert_eq!(counts.len(), 2, "{}: {table}", phase.name);
        assert_eq!(counts.iter().sum::<usize>(), phase.converged, "{}: {table}", phase.name);
        assert!(counts.iter().all(|c| *c > 0), "{}: a replica converged no stream: {table}", phase.name);
    }
    assert!(table.contains("per replica"), "{table}");
    eprintln!("{table}");
}

/// The restart and fairness scenarios' short form: 100 streams in four
/// namespaces (`ns-0` shared, Sidecar-scoped).
fn short_shape() -> loadtest::mesh::Shape {
    loadtest::mesh::Shape {
        namespaces: 4,
        services_per_namespace: 10,
        endpoints_per_service: 3,
        sidecars_per_namespace: 25,
        scoped: true,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_every_stream_syncs_again_and_sotw_gets_no_type_at_the_version_it_holds() {
    restart(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_every_delta_stream_syncs_again_and_gets_no_resource_it_holds_unchanged() {
    restart(true).await;
}

/// The restart scenario, short: meshpush is killed with every stream
/// synced, an endpoint and a route change in its directory while it is
/// down, and it is started again. Every stream reconnects on its own and
/// gets both changes (which only the new process can have sent), and the
/// new server sends nothing the stream holds already: on delta no
/// resource with the content held, on SotW no type at the version held
/// (so no clusters and no listeners at all).
async fn restart(delta: bool) {
    let _turn = SERIAL.lock().await;
    let options = Options {
        meshpush_bin: Some(PathBuf::from(env!("CARGO_BIN_EXE_meshpush"))),
        shape: Some(short_shape()),
        progress: false,
        delta,
        command: "cargo test --test loadtest_smoke".into(),
        ..Options::new(Scenario::Restart)
    };
    let report = run(options, Duration::from_secs(180)).await;
    let table = report.table();
    assert!(report.failures.is_empty(), "restart failed:{table}");
    let restart = report.phases.iter().find(|p| p.name.starts_with("restart")).expect("a restart phase");
    assert_eq!((restart.converged, restart.expected), (100, 100), "{table}");
    let resends = restart.resends.expect("resends counted");
    // cds, eds, lds, rds: the one changed endpoint and route reached every stream.
    assert!(resends.resources[1] >= 100 && resends.resources[3] >= 100, "{resends:?}\n{table}");
    assert_eq!((resends.resources[0], resends.resources[2]), (0, 0), "clusters or listeners resent: {table}");
    if delta {
        assert_eq!(resends.unchanged, [0; 4], "resources resent unchanged: {table}");
        assert_eq!((resends.resources[1], resends.resources[3]), (100, 100), "exactly the changes: {table}");
    } else {
        assert_eq!(resends.same_version, [0; 4], "types resent at the version held: {table}");
    }
    assert!(report.targets.iter().all(|t| t.met == Some(true)), "{table}");
}

/// The fairness scenario, short: the quiet namespaces' endpoint changes
/// alone, then beside a namespace receiving 50 a second; every change of
/// both reaches every stream that watches it. (How the quiet p99 compares
/// is a figure of the release build's loadtest, in perf.md.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fairness_scenario_converges_every_quiet_and_noisy_change() {
    let _turn = SERIAL.lock().await;
    let options = Options {
        meshpush_bin: Some(PathBuf::from(env!("CARGO_BIN_EXE_meshpush"))),
        shape: Some(short_shape()),
        churn_duration: Duration::from_secs(3),
        noisy_rate: 50,
        progress: false,
        command: "cargo test --test loadtest_smoke".into(),
        ..Options::new(Scenario::Fairness)
    };
    let report = run(options, Duration::from_secs(180)).await;
    let table = report.table();
    assert!(report.failures.is_empty(), "fairness failed:{table}");
    let names: Vec<&str> = report.phases.iter().map(|p| p.name.split(':').next().unwrap_or("")).collect();
    assert_eq!(names, ["connect storm → all synced", "quiet baseline", "quiet beside noisy", "noisy namespace"]);
    for phase in &report.phases[1..] {
        assert!(phase.changes >= 20, "{}: too few changes: {table}", phase.name);
        assert_eq!(phase.changes_converged, phase.changes, "{}: {table}", phase.name);
        // Quiet changes reach their namespace's 25 streams; noisy ones ns-3's 25.
        assert_eq!(phase.expected, 25 * phase.changes, "{}: {table}", phase.name);
        assert_eq!(phase.converged, phase.expected, "{}: {table}", phase.name);
    }
    assert_eq!(report.phases[3].changes, 150, "50/s for 3 s: {table}");
}
