//! `loadtest`: run a scenario against meshpush (started here) or a running
//! xDS server, print a summary table, optionally write JSON and an SVG plot.
//!
//! ```text
//! cargo build --release                       # the server binary it starts
//! cargo run --release -p loadtest -- s1 --plot perf/s1.svg --json s1.json
//! cargo run --release -p loadtest -- s1 --delta   # delta xDS instead of SotW
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use loadtest::{ChangesVia, ExpectSpec, NodeSending, Options, Scenario};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Simulated Envoys against an xDS server: convergence, CPU, memory.
#[derive(Debug, Parser)]
#[command(name = "loadtest", version, about)]
struct Cli {
    /// The scenario.
    #[arg(value_enum)]
    scenario: Scenario,
    /// A server already running (ADS address); without it, meshpush is started on the scenario's
    /// mesh. Repeat it for replicas of one control plane: the streams' connections go to each in
    /// turn, the mesh and every change are applied through each one's registry API, and the
    /// report adds a section per replica.
    #[arg(long = "target")]
    targets: Vec<SocketAddr>,
    /// meshpush's registry API address (default: each target's address); repeat it as --target.
    #[arg(long = "registry")]
    registries: Vec<SocketAddr>,
    /// With --target: do not load the generated mesh through the registry (it is loaded already).
    #[arg(long)]
    no_load: bool,
    /// A command (run with `sh -c`, `%n` replaced by the change number) that makes a change
    /// on a server that is not meshpush.
    #[arg(long, requires = "expect")]
    trigger: Option<String>,
    /// How to recognize a triggered change: TYPE:RESOURCE:TOKEN (type cds|eds|lds|rds; resource
    /// `*` for any; TOKEN is a whole string field of the resource, `%n` replaced by the change number).
    #[arg(long)]
    expect: Option<ExpectSpec>,
    /// How many triggered changes.
    #[arg(long, default_value_t = 1)]
    repeat: u32,
    /// The server's pid, for CPU and memory figures of a --target; repeat it, in the targets'
    /// order, for replicas.
    #[arg(long = "server-pid")]
    server_pids: Vec<u32>,
    /// The meshpush binary to start (default: target/release/meshpush beside this binary).
    #[arg(long)]
    meshpush_bin: Option<PathBuf>,
    /// ADS streams per HTTP/2 connection. 1 (the default) is how Envoys connect, each with a
    /// connection of its own; more multiplexes simulated Envoys onto fewer connections.
    #[arg(long, default_value_t = 1)]
    streams_per_connection: u32,
    /// Send the node on every request, ACKs included (Envoy's own default). Without it only the
    /// first request of each stream carries it, as from an Envoy that Istio (and `meshpush
    /// bootstrap`) bootstraps with set_node_on_first_message_only: true.
    #[arg(long)]
    node_every_request: bool,
    /// Churn: endpoint changes per second.
    #[arg(long, default_value_t = 200)]
    churn_rate: u32,
    /// Churn: how long, in seconds (default 60); fairness: how long each of its two parts lasts
    /// (default 30).
    #[arg(long)]
    churn_seconds: Option<u64>,
    /// Fairness: the noisy namespace's endpoint changes per second.
    #[arg(long, default_value_t = 100)]
    noisy_rate: u32,
    /// Write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Draw the convergence distributions as SVG here.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// No progress bars.
    #[arg(long)]
    no_progress: bool,
    /// Write the scenario's mesh (Kubernetes and Istio YAML: a directory per namespace, a file per
    /// service) into this directory and exit: to load the same mesh into another server.
    #[arg(long)]
    write_mesh: Option<PathBuf>,
    /// Leave Envoy's 516-extension list out of the node (Envoy 1.40 sends it); for comparison
    /// only.
    #[arg(long)]
    lean_node: bool,
    /// How changes are made: through meshpush's registry API, or as file edits of the config
    /// directory of the meshpush the harness starts (one service's file rewritten in place per
    /// endpoint change; the namespace's file per route change).
    #[arg(long, value_enum, default_value_t = ChangesVia::Registry)]
    changes_via: ChangesVia,
    /// Delta xDS: the simulated Envoys use DeltaAggregatedResources (Envoy's api_type DELTA_GRPC)
    /// instead of state-of-the-world StreamAggregatedResources.
    #[arg(long)]
    delta: bool,
    /// Run the harness on CPU 0 and the meshpush it starts on CPU 1 (through `taskset`), so that
    /// neither takes the other's core: each side's CPU share is then its own core's.
    #[arg(long, conflicts_with = "targets")]
    pin: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(dir) = &cli.write_mesh {
        return match write_mesh(cli.scenario, dir) {
            Ok(files) => {
                eprintln!("loadtest: wrote {files} files into {}", dir.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("loadtest: writing the mesh into {}: {e}", dir.display());
                ExitCode::from(2)
            }
        };
    }
    let defaults = Options::new(cli.scenario);
    let options = Options {
        targets: cli.targets,
        registries: cli.registries,
        trigger: cli.trigger,
        expect: cli.expect,
        repeat: cli.repeat,
        server_pids: cli.server_pids,
        meshpush_bin: cli.meshpush_bin,
        streams_per_connection: cli.streams_per_connection,
        node_sending: if cli.node_every_request { NodeSending::EveryRequest } else { NodeSending::FirstRequest },
        churn_rate: cli.churn_rate,
        churn_duration: cli.churn_seconds.map_or(defaults.churn_duration, Duration::from_secs),
        noisy_rate: cli.noisy_rate,
        load_mesh: !cli.no_load,
        progress: !cli.no_progress,
        lean_node: cli.lean_node,
        delta: cli.delta,
        changes_via: cli.changes_via,
        pin: cli.pin,
        command: std::env::args().collect::<Vec<_>>().join(" "),
        ..defaults
    };
    if options.pin
        && let Err(e) = loadtest::server::pin_harness()
    {
        eprintln!("loadtest: {e:#}");
        return ExitCode::from(2);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    let report = match runtime.block_on(loadtest::run(options)) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("loadtest: {e:#}");
            return ExitCode::from(2);
        }
    };
    print!("{}", report.table());
    for (path, written) in [
        (&cli.json, cli.json.as_ref().map(|p| report.write_json(p))),
        (&cli.plot, cli.plot.as_ref().map(|p| report.write_plot(p))),
    ] {
        match (path, written) {
            (Some(path), Some(Ok(()))) => eprintln!("loadtest: wrote {}", path.display()),
            (_, Some(Err(e))) => {
                eprintln!("loadtest: {e:#}");
                return ExitCode::from(2);
            }
            _ => {}
        }
    }
    if report.failures.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

/// Writes the scenario's mesh files into `dir` (created if missing).
fn write_mesh(scenario: Scenario, dir: &std::path::Path) -> std::io::Result<usize> {
    std::fs::create_dir_all(dir)?;
    let files = scenario.shape().files();
    for (name, text) in &files {
        let path = dir.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(path, text)?;
    }
    Ok(files.len())
}
