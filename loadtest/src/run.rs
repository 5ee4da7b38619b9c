//! The run itself: start (or reach) the server, load the mesh, open every
//! stream at once (the connect storm) and wait until all are synced, then
//! run the scenario's change phases one at a time. Each change is made
//! through the registry API (or `--trigger`), and its phase ends when every
//! stream that should see it has ACKed a response carrying it, or at the
//! phase's limit. Every wait is bounded; the run stops by itself.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use indicatif::{ProgressBar, ProgressStyle};

use crate::ads;
use crate::fleet::{Identity, Shared};
use crate::mesh::{FreshAddresses, PORT, Shape};
use crate::registry::ChangesVia;
use crate::registry::{Registries, Registry};
use crate::report::{self, PhaseReport, ReplicaReport, Report, Sample};
use crate::scenario::{Options, Scenario, Step, steps};
use crate::server::{self, ServerProcess};
use crate::track::{Change, Expect, XdsType};
use sink::{Edit, Sink};

mod churn;
mod fairness;
mod paced;
mod restart;
mod sink;

/// How long one change may take to converge everywhere before the phase
/// gives up (and the run reports it as not converged).
const CHANGE_LIMIT: Duration = Duration::from_secs(20);

/// Churn: registry calls outstanding at once.
const MAX_APPLIES_IN_FLIGHT: usize = 512;

/// Churn: the step between the services changed one after the other; a
/// prime, so coprime with the service counts here, and larger than a
/// namespace, so consecutive changes land in different namespaces.
const CHURN_STRIDE: u64 = 7919;

/// Open files a process keeps beside its connections (logs, the config
/// directory's watches, the registry client, runtime internals).
const FILES_BESIDE_CONNECTIONS: u64 = 1024;

/// How long after a restart every stream may take to be synced again
/// before the phase gives up.
const RESTART_LIMIT: Duration = Duration::from_secs(60);

/// Quiet time after a phase, so that its trailing work (ACK handling) is
/// counted in its CPU figures and not in the next phase's.
const SETTLE: Duration = Duration::from_millis(300);

/// The server side of a run.
struct Target {
    process: Option<ServerProcess>,
    xds: SocketAddr,
    pid: Option<u32>,
    description: String,
    /// What the processes before a restart took: CPU, peak RSS.
    earlier: (Duration, u64),
}

impl Target {
    fn alive(&mut self) -> anyhow::Result<()> {
        match &mut self.process {
            Some(process) => process.check_running(),
            None => Ok(()),
        }
    }

    /// CPU time of the server, its processes before a restart included.
    fn cpu(&self) -> Option<Duration> {
        self.pid.and_then(|pid| server::cpu_time(&pid.to_string())).map(|cpu| cpu + self.earlier.0)
    }

    /// A memory figure of the server: `VmRSS` now, or `VmHWM` the peak over
    /// its processes before a restart too.
    fn memory(&self, field: &str) -> Option<u64> {
        let now = self.pid.and_then(|pid| server::memory(&pid.to_string(), field))?;
        Some(if field == "VmHWM" { now.max(self.earlier.1) } else { now })
    }

    /// Kills the server it started (SIGKILL), keeping what it took so far.
    fn kill(&mut self) -> anyhow::Result<()> {
        let (cpu, peak) = (self.cpu(), self.memory("VmHWM"));
        let process = self.process.as_mut().context("a restart needs the harness to start meshpush (no --target)")?;
        process.kill()?;
        self.earlier = (cpu.unwrap_or_default(), peak.unwrap_or_default());
        Ok(())
    }

    /// Starts the server it killed again.
    fn restart(&mut self) -> anyhow::Result<()> {
        let process = self.process.as_mut().context("a restart needs the harness to start meshpush")?;
        process.restart()?;
        self.pid = Some(process.pid());
        Ok(())
    }
}

/// Every target alive, or the first one's error.
fn all_alive(targets: &mut [Target]) -> anyhow::Result<()> {
    targets.iter_mut().try_for_each(Target::alive)
}

/// The sum of every target's figure, when each has one.
fn sum_all<T: std::iter::Sum<T>>(targets: &[Target], figure: impl Fn(&Target) -> Option<T>) -> Option<T> {
    targets.iter().map(figure).collect::<Option<Vec<T>>>().map(|figures| figures.into_iter().sum())
}

/// The run's moving parts.
struct Run {
    options: Options,
    shape: Shape,
    /// The server, or the replicas of one control plane: connection `c`
    /// goes to `targets[c % targets.len()]`.
    targets: Vec<Target>,
    /// Where changes go (the registry unless `--changes-via file`).
    sink: Option<Sink>,
    shared: Arc<Shared>,
    fresh: FreshAddresses,
    /// Services changed so far: how many times, and their addresses now.
    slices: HashMap<(u32, u32), (usize, Vec<Ipv4Addr>)>,
    changes: u32,
    node_common: bytes::Bytes,
}

/// Runs a scenario and returns its report. Fails only when the run itself
/// could not happen (no server, no binary); a server that misbehaves yields
/// a report whose `failures` say how.
pub async fn run(mut options: Options) -> anyhow::Result<Report> {
    let shape = options.shape();
    let streams = shape.streams();
    let mut per_connection = options.streams_per_connection.max(1);
    let mut notes = Vec::new();
    // Each process (the harness, a server it starts) holds one end of
    // every connection, beside its other files.
    notes.extend(server::raise_fd_limit(u64::from(streams.div_ceil(per_connection)) + FILES_BESIDE_CONNECTIONS));
    let room = server::fd_limit().saturating_sub(FILES_BESIDE_CONNECTIONS).max(1);
    if u64::from(streams.div_ceil(per_connection)) > room {
        per_connection = streams.div_ceil(room as u32);
        notes.push(format!(
            "the open-file limit ({}) leaves room for {room} connections: {per_connection} streams share each \
             connection (Envoys have one each)",
            server::fd_limit()
        ));
    }
    options.streams_per_connection = per_connection;
    notes.extend(options.pin.then(server::pinned_note));
    let connections = streams.div_ceil(per_connection);
    for note in &notes {
        eprintln!("loadtest: {note}");
    }

    let mut targets = start_targets(&options, &shape)?;
    // Received responses land in freshly grown buffers; with transparent huge
    // pages on ("always"), each growth faulted in and zeroed a 2 MiB page, and
    // that zeroing was half of the harness's CPU. Only the harness opts out,
    // after the server was started (children inherit the flag).
    match rustix::thread::disable_transparent_huge_pages(true) {
        Ok(()) => notes
            .push("the harness runs without transparent huge pages (the server keeps the machine's setting)".into()),
        Err(e) => notes.push(format!("could not turn transparent huge pages off for the harness: {e}")),
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    let registry = if options.trigger.is_some() && options.registries.is_empty() {
        None
    } else {
        let addresses: Vec<SocketAddr> = if options.registries.is_empty() {
            targets.iter().map(|t| t.xds).collect()
        } else {
            options.registries.clone()
        };
        let mut registries = Vec::with_capacity(addresses.len());
        for addr in addresses {
            let mut registry = Registry::connect(addr, deadline, || all_alive(&mut targets)).await?;
            let version = registry.wait_ready(deadline, || all_alive(&mut targets)).await?;
            if !options.targets.is_empty() && options.load_mesh && options.trigger.is_none() {
                load_mesh(&mut registry, &shape).await?;
            } else {
                eprintln!(
                    "loadtest: server {addr} ready (snapshot version {}, revision {})",
                    version.version, version.revision
                );
            }
            registries.push(registry);
        }
        Some(Registries::new(registries))
    };
    if registry.is_none() && options.expect.is_none() {
        bail!("--trigger needs --expect TYPE:RESOURCE:TOKEN to recognize the change");
    }
    let node_common = bytes::Bytes::from(Shape::node_common(options.lean_node));
    let server_rss_loaded = sum_all(&targets, |t| t.memory("VmRSS"));

    let config_dir = targets.first().and_then(|t| t.process.as_ref()).map(ServerProcess::config_dir);
    if options.changes_via == ChangesVia::File && config_dir.is_none() {
        bail!("--changes-via file edits the config directory of the meshpush the harness starts: run without --target");
    }
    let sink = Sink::new(options.changes_via, registry.as_ref(), config_dir);
    let mut run = Run {
        shape,
        targets,
        sink,
        shared: Shared::new(node_common.clone(), options.node_sending, options.scenario == Scenario::Restart),
        node_common: node_common.clone(),
        fresh: FreshAddresses::default(),
        slices: HashMap::new(),
        changes: 0,
        options: options.clone(),
    };
    let mut phases = Vec::new();
    let mut failures = Vec::new();

    let (sync, tasks) = run.connect_storm(connections, per_connection, &mut failures).await?;
    let synced = sync.converged == sync.expected;
    // Every stream synced, nothing in flight: the storm's closing figure is
    // what the connections themselves hold, over the loaded mesh.
    let server_rss_synced_mib = if synced { sync.server_rss_mib } else { None };
    phases.push(sync);
    if synced {
        for step in steps(options.scenario, &run.shape, &options) {
            let phase = run.change(step).await?;
            if phase.converged < phase.expected {
                failures.push(format!(
                    "{}: {} of {} streams converged within {:?}",
                    phase.name, phase.converged, phase.expected, CHANGE_LIMIT
                ));
            }
            phases.push(phase);
        }
        if options.scenario == Scenario::Restart && options.trigger.is_none() {
            let phase = run.restart().await?;
            if phase.converged < phase.expected {
                failures.push(format!(
                    "restart: {} of {} streams were not synced again within {RESTART_LIMIT:?}",
                    phase.expected - phase.converged,
                    phase.expected
                ));
            }
            phases.push(phase);
        }
        if options.scenario == Scenario::Fairness && options.trigger.is_none() {
            for phase in run.fairness().await? {
                failures.extend(changes_behind(&phase));
                phases.push(phase);
            }
        }
        if options.scenario == Scenario::Churn && options.trigger.is_none() {
            let phase = run.churn().await?;
            failures.extend(changes_behind(&phase));
            phases.push(phase);
            // Streams that lagged during churn must catch up once it stops:
            // one more change, of a service every stream watches.
            let step = Step::Endpoint { name: "after churn: a change every stream watches", namespace: 0, service: 1 };
            let phase = run.change(step).await?;
            if phase.converged < phase.expected {
                failures.push(format!(
                    "after churn: {} of {} streams never caught up (within {CHANGE_LIMIT:?})",
                    phase.expected - phase.converged,
                    phase.expected
                ));
            }
            phases.push(phase);
        }
    }

    // Stop every stream and wait for the tasks (bounded).
    run.shared.stop.send_replace(true);
    let _ = tokio::time::timeout(Duration::from_secs(10), futures::future::join_all(tasks)).await;

    let stats = &run.shared.stats;
    let lost = stats.streams_lost.load(std::sync::atomic::Ordering::Relaxed);
    let refused = stats.streams_refused.load(std::sync::atomic::Ordering::Relaxed);
    // A restart ends every stream, and their first retries may find the
    // server not yet listening: that is the scenario.
    if options.scenario != Scenario::Restart {
        if lost > 0 {
            failures.push(format!("{lost} streams ended before the run did"));
        }
        if refused > 0 {
            failures.push(format!("{refused} stream attempts were refused"));
        }
    }
    // With replicas, the sums: what the control plane as a whole took.
    let server_peak_rss = sum_all(&run.targets, |t| t.memory("VmHWM"));
    let server_cpu_total = sum_all(&run.targets, Target::cpu);
    let replicas = if run.targets.len() > 1 {
        run.targets
            .iter()
            .enumerate()
            .map(|(i, t)| ReplicaReport {
                address: t.xds.to_string(),
                streams: (0..streams).filter(|s| run.replica_of(*s) == i).count() as u32,
                cpu_total_s: t.cpu().map(|d| d.as_secs_f64()),
                peak_rss_mib: t.memory("VmHWM").map(report::mib),
            })
            .collect()
    } else {
        Vec::new()
    };
    let report = Report {
        scenario: options.scenario.name().into(),
        protocol: options.protocol(),
        command: options.command.clone(),
        machine: report::machine(),
        server: run.targets.iter().map(|t| t.description.as_str()).collect::<Vec<_>>().join("; "),
        shape: run.shape,
        streams,
        connections,
        streams_per_connection: per_connection,
        eds_lists: run.shared.names.distinct(XdsType::Endpoint),
        rds_lists: run.shared.names.distinct(XdsType::Route),
        server_rss_loaded_mib: server_rss_loaded.map(report::mib),
        server_rss_synced_mib,
        server_peak_rss_mib: server_peak_rss.map(report::mib),
        server_cpu_total_s: server_cpu_total.map(|d| d.as_secs_f64()),
        harness_cpu_total_s: server::cpu_time("self").map(|d| d.as_secs_f64()),
        harness_peak_rss_mib: server::memory("self", "VmHWM").map(report::mib),
        requests_sent: stats.requests.load(std::sync::atomic::Ordering::Relaxed),
        node_bytes: run.shape.node(0).len() + run.node_common.len(),
        lean_node: options.lean_node,
        node_sending: options.node_sending,
        changes_via: options.changes_via,
        notes,
        replicas,
        targets: Vec::new(),
        phases,
        failures,
    };
    let mut report = report;
    report.targets = crate::scenario::targets(options.scenario, &report);
    if let Some(process) = run.targets.first().and_then(|t| t.process.as_ref())
        && !report.failures.is_empty()
    {
        eprintln!("loadtest: meshpush log tail:\n{}", process.log_tail(20));
    }
    Ok(report)
}

/// The failure of a phase of many changes some of which did not reach
/// every stream that watches them.
fn changes_behind(phase: &PhaseReport) -> Option<String> {
    (phase.changes_converged < phase.changes).then(|| {
        format!(
            "{}: {} of {} changes did not reach every stream that watches them",
            phase.name,
            phase.changes - phase.changes_converged,
            phase.changes
        )
    })
}

fn start_targets(options: &Options, shape: &Shape) -> anyhow::Result<Vec<Target>> {
    if !options.targets.is_empty() {
        if !options.server_pids.is_empty() && options.server_pids.len() != options.targets.len() {
            bail!(
                "{} --server-pid for {} --target: give one per target, in the same order",
                options.server_pids.len(),
                options.targets.len()
            );
        }
        if !options.registries.is_empty() && options.registries.len() != options.targets.len() {
            bail!(
                "{} --registry for {} --target: give one per target, in the same order",
                options.registries.len(),
                options.targets.len()
            );
        }
        return Ok(options
            .targets
            .iter()
            .enumerate()
            .map(|(i, &xds)| {
                let pid = options.server_pids.get(i).copied();
                let description = match pid {
                    Some(pid) => format!("{xds} (pid {pid}, started by the user)"),
                    None => format!("{xds} (started by the user; no --server-pid: no server CPU or memory figures)"),
                };
                Target { process: None, xds, pid, description, earlier: Default::default() }
            })
            .collect());
    }
    let binary = options.meshpush_bin.clone().unwrap_or_else(server::default_meshpush_binary);
    if !binary.is_file() {
        bail!(
            "{} not found: build the server first with `cargo build --release` (or pass --meshpush-bin PATH, \
             or --target ADDR for a server already running)",
            binary.display()
        );
    }
    let built = std::fs::metadata(&binary).and_then(|m| m.modified()).ok();
    let age = built.and_then(|t| t.elapsed().ok()).map(|d| format!(", built {}s ago", d.as_secs())).unwrap_or_default();
    eprintln!(
        "loadtest: starting {}{age} on a generated mesh: {} services, {} endpoints, {} sidecars",
        binary.display(),
        shape.services(),
        shape.endpoints(),
        shape.streams()
    );
    let process = ServerProcess::start(&binary, &shape.files(), options.pin)?;
    let pid = Some(process.pid());
    let xds = process.xds;
    let description = format!("{} (started by the harness, pid {})", binary.display(), process.pid());
    Ok(vec![Target { process: Some(process), xds, pid, description, earlier: Default::default() }])
}

/// Loads the generated mesh into a running meshpush through the registry,
/// one namespace per batch, and waits until it is published.
async fn load_mesh(registry: &mut Registry, shape: &Shape) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut revision = 0;
    for ns in 0..shape.namespaces {
        revision = registry.apply(shape.namespace_documents(ns)).await.context("loading the mesh")?;
    }
    registry.wait_for_revision(revision, Duration::from_secs(60)).await?;
    eprintln!(
        "loadtest: loaded {} services and {} endpoints through the registry in {:.2}s",
        shape.services(),
        shape.endpoints(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// CPU and traffic counters at one moment.
struct Mark {
    at: Instant,
    server_cpu: Option<Duration>,
    /// The server's resident memory (`VmRSS`).
    server_rss: Option<u64>,
    harness_cpu: Option<Duration>,
    responses: u64,
    bytes: u64,
}

impl Run {
    fn mark(&self) -> Mark {
        let stats = &self.shared.stats;
        Mark {
            at: Instant::now(),
            server_cpu: sum_all(&self.targets, Target::cpu),
            server_rss: sum_all(&self.targets, |t| t.memory("VmRSS")),
            harness_cpu: server::cpu_time("self"),
            responses: stats.responses_total(),
            bytes: stats.bytes.load(std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// The replica serving stream `stream`: its connection's.
    fn replica_of(&self, stream: u32) -> usize {
        let per_connection = self.options.streams_per_connection.max(1);
        (stream / per_connection) as usize % self.targets.len().max(1)
    }

    /// A phase's report from its marks and latencies (`streams[i]` is the stream of `samples[i]`).
    fn phase(
        &self,
        name: &str,
        from: &Mark,
        to: &Mark,
        expected: usize,
        samples: Vec<Duration>,
        streams: &[u32],
    ) -> PhaseReport {
        let sub = |a: Option<Duration>, b: Option<Duration>| Some(b?.saturating_sub(a?).as_secs_f64());
        let mut phase = PhaseReport::new(
            name,
            expected,
            Sample::new(samples.clone()),
            to.at.duration_since(from.at).as_secs_f64(),
            sub(from.server_cpu, to.server_cpu),
            sub(from.harness_cpu, to.harness_cpu),
            to.responses - from.responses,
            to.bytes - from.bytes,
        );
        phase.server_rss_mib = to.server_rss.map(report::mib);
        phase.split_by_replica(self.targets.len(), &samples, streams, |s| self.replica_of(s));
        phase
    }

    /// Opens every stream at once and waits until all are synced.
    async fn connect_storm(
        &mut self,
        connections: u32,
        per_connection: u32,
        failures: &mut Vec<String>,
    ) -> anyhow::Result<(PhaseReport, Vec<tokio::task::JoinHandle<()>>)> {
        let streams = self.shape.streams();
        let identities: Vec<Identity> = (0..streams)
            .map(|id| Identity { id, namespace: self.shape.placement(id).namespace, node: self.shape.node(id) })
            .collect();
        tokio::time::sleep(SETTLE).await;
        let before = self.mark();
        self.shared = Shared::new(
            self.node_common.clone(),
            self.options.node_sending,
            self.options.scenario == Scenario::Restart,
        );
        let replicas: Vec<SocketAddr> = self.targets.iter().map(|t| t.xds).collect();
        let xds = |c: u32| replicas[c as usize % replicas.len()];
        let channels =
            futures::future::join_all((0..connections).map(|c| ads::connect(xds(c), ads::source_address(xds(c), c))))
                .await;
        let channels: Vec<_> = channels
            .into_iter()
            .enumerate()
            .map(|(c, channel)| channel.with_context(|| format!("connecting to {}", xds(c as u32))))
            .collect::<Result<_, _>>()?;
        let mut tasks = Vec::with_capacity(streams as usize);
        for identity in identities {
            let channel = channels[(identity.id / per_connection) as usize].clone();
            tasks.push(tokio::spawn(ads::run_stream(channel, identity, self.shared.clone(), self.options.protocol())));
        }
        let bar = self.bar(u64::from(streams), "streams synced");
        let limit = self.options.scenario.sync_limit();
        let mut synced = self.shared.sync.watch();
        let all = streams as usize;
        let waited = tokio::time::timeout(limit, async {
            loop {
                let n = *synced.borrow_and_update();
                bar.set_position(n as u64);
                if n >= all {
                    break;
                }
                if synced.changed().await.is_err() {
                    break;
                }
                // At most ten redraws a second.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await;
        bar.finish_and_clear();
        let last_synced = self.shared.sync.times().last().copied();
        tokio::time::sleep(SETTLE).await;
        let after = self.mark();
        let (streams, times): (Vec<u32>, Vec<Duration>) = self.shared.sync.stream_times().into_iter().unzip();
        if waited.is_err() || times.len() < all {
            failures.push(format!("connect storm: {} of {all} streams synced within {limit:?}", times.len()));
        }
        let mut phase = self.phase("connect storm → all synced", &before, &after, all, times, &streams);
        phase.wall_s = last_synced.map_or(phase.wall_s, |d| d.as_secs_f64());
        eprintln!("loadtest: {}", phase.one_line());
        Ok((phase, tasks))
    }

    fn bar(&self, length: u64, what: &str) -> ProgressBar {
        if !self.options.progress {
            return ProgressBar::hidden();
        }
        let bar = ProgressBar::new(length);
        let template = format!("{{elapsed_precise}} [{{bar:40}}] {{pos}}/{{len}} {what}");
        bar.set_style(ProgressStyle::with_template(&template).expect("a valid template").progress_chars("=> "));
        bar
    }

    /// The next change number (tokens stay unique within a run).
    fn next_change(&mut self) -> u32 {
        self.changes += 1;
        self.changes
    }

    /// A service's endpoints with one replaced by an unused address;
    /// returns the change and the new address. Successive
    /// changes of one service replace its endpoints in turn, so a change
    /// never removes the address of the one before it (which may still be on
    /// its way to some streams).
    fn moved_endpoint(&mut self, namespace: u32, service: u32) -> (Edit, Ipv4Addr) {
        let shape = self.shape;
        let (moves, addresses) = self.slices.entry((namespace, service)).or_insert_with(|| {
            (0, (0..shape.endpoints_per_service).map(|pod| shape.endpoint_ip(namespace, service, pod)).collect())
        });
        let fresh = self.fresh.take();
        let pod = *moves % addresses.len().max(1);
        *moves += 1;
        if let Some(slot) = addresses.get_mut(pod) {
            *slot = fresh;
        }
        (Edit::Endpoints { namespace, service, addresses: addresses.clone() }, fresh)
    }

    /// Runs one change phase.
    async fn change(&mut self, step: Step) -> anyhow::Result<PhaseReport> {
        let n = self.next_change();
        // What to apply (nothing for a trigger), and how to recognize it.
        let (name, edit, xds_type, resource, token, expect) = match &step {
            Step::Endpoint { name, namespace, service } => {
                let (edit, address) = self.moved_endpoint(*namespace, *service);
                let cluster = self.shape.cluster(*namespace, *service);
                (name.to_string(), Some(edit), XdsType::Endpoint, cluster, address.to_string(), Expect::Watchers)
            }
            Step::Route { name, namespace, expect } => {
                let token = format!("/loadtest-change-{n}");
                let edit = Edit::Route { namespace: *namespace, prefix: token.clone() };
                (name.to_string(), Some(edit), XdsType::Route, PORT.to_string(), token, expect.clone())
            }
            Step::Trigger { n } => {
                let spec = self.options.expect.clone().context("--trigger needs --expect")?;
                let token = spec.token.replace("%n", &n.to_string());
                let (resource, expect) =
                    if spec.resource == "*" { (String::new(), Expect::All) } else { (spec.resource, Expect::Watchers) };
                (format!("triggered change {n}"), None, spec.xds_type, resource, token, expect)
            }
        };
        let expected = match &expect {
            Expect::Watchers => self.shared.names.watchers(xds_type, &resource),
            other => self.expected(other),
        };
        tokio::time::sleep(SETTLE).await;
        let before = self.mark();
        let change = Arc::new(Change::new(name.clone(), xds_type, resource, &token, Instant::now(), expect, expected));
        self.shared.tracker.add(change.clone());
        let made = match (edit, &step) {
            (Some(edit), _) => match &mut self.sink {
                Some(sink) => sink.make(&self.shape, &edit).await,
                None => Err(anyhow::anyhow!("no registry API to make the change through")),
            },
            (None, Step::Trigger { n }) => trigger(self.options.trigger.as_deref().unwrap_or_default(), *n).await,
            (None, _) => Ok(()),
        };
        if let Err(e) = made {
            self.shared.tracker.retire(&change);
            return Err(e.context(format!("making the change of phase {name:?}")));
        }
        change.wait(CHANGE_LIMIT).await;
        self.shared.tracker.retire(&change);
        tokio::time::sleep(SETTLE).await;
        let after = self.mark();
        let outcome = change.outcome();
        let mut phase = self.phase(&name, &before, &after, change.expected, outcome.latencies, &outcome.streams);
        phase.unexpected = outcome.unexpected;
        phase.changes = 1;
        phase.changes_converged = usize::from(change.complete());
        eprintln!("loadtest: {}", phase.one_line());
        Ok(phase)
    }

    /// Which streams never got a churn change of a service in `namespace`:
    /// with Sidecar scoping, the streams of that namespace (every stream for
    /// the shared one), else every stream.
    fn missing(&self, change: &Change, namespace: u32, phase_start: Instant) -> String {
        let shape = &self.shape;
        let watching =
            |stream: &u32| !shape.scoped || namespace == 0 || shape.placement(*stream).namespace == namespace;
        let missing: Vec<u32> = (0..shape.streams()).filter(watching).filter(|s| !change.seen_by(*s)).collect();
        let sample: Vec<String> =
            missing.iter().take(6).map(|s| format!("{s} (ns-{})", shape.placement(*s).namespace)).collect();
        format!(
            "{} ({}, made {:.1}s into the phase): {} of {} watching streams never ACKed it, e.g. {}",
            change.label,
            change.resource,
            change.start.duration_since(phase_start).as_secs_f64(),
            missing.len(),
            change.expected,
            sample.join(", ")
        )
    }

    fn expected(&self, expect: &Expect) -> usize {
        match expect {
            Expect::All => self.shape.streams() as usize,
            Expect::Namespaces(list) => list.iter().map(|ns| self.shape.streams_in(*ns) as usize).sum(),
            Expect::Watchers => 0,
        }
    }
}

/// Runs the trigger command through `sh -c`, with `%n` replaced by the
/// change number (also in `LOADTEST_CHANGE`). Bounded to 60 s.
async fn trigger(command: &str, n: u32) -> anyhow::Result<()> {
    let command = command.replace("%n", &n.to_string());
    let child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(&command)
        .env("LOADTEST_CHANGE", n.to_string())
        .kill_on_drop(true)
        .status();
    match tokio::time::timeout(Duration::from_secs(60), child).await {
        Ok(Ok(status)) if status.success() => Ok(()),
        Ok(Ok(status)) => bail!("trigger {command:?} failed ({status})"),
        Ok(Err(e)) => bail!("trigger {command:?} could not run: {e}"),
        Err(_) => bail!("trigger {command:?} ran longer than 60s"),
    }
}
