//! Scenarios: which mesh, which phases, which targets; and the run itself.
//!
//! A run starts (or reaches) the server, loads the mesh, opens every stream
//! at once (the connect storm) and waits until all are synced, then runs the
//! scenario's change phases one at a time: each change is made through the
//! registry API (or `--trigger`), and the phase ends when every stream that
//! should see it has ACKed a response carrying it, or at the phase's limit.
//! Every wait is bounded; the run stops by itself.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use indicatif::{ProgressBar, ProgressStyle};
use tokio::sync::Semaphore;

use crate::ads::{self, Identity, Shared};
use crate::mesh::{FreshAddresses, PORT, Shape};
use crate::registry::Registry;
use crate::report::{self, PhaseReport, Report, Sample, TargetCheck};
use crate::server::{self, ServerProcess};
use crate::track::{Change, Expect, XdsType};

/// The scenarios of issue 6.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scenario {
    /// 100 streams in two namespaces, a few changes; fails unless every
    /// stream syncs and every change converges (CI runs it).
    Smoke,
    /// Peer parity: 1,000 services × 5 endpoints, 1,000 sidecars, no Sidecar scoping.
    S1,
    /// Large mesh: 10,000 services, 100,000 endpoints, 10,000 sidecars in 100 namespaces.
    S2,
    /// S2's mesh with 200 endpoint changes per second for 60 seconds.
    Churn,
}

impl Scenario {
    /// The mesh.
    pub fn shape(self) -> Shape {
        match self {
            Scenario::Smoke => Shape {
                namespaces: 2,
                services_per_namespace: 25,
                endpoints_per_service: 3,
                sidecars_per_namespace: 50,
                scoped: true,
            },
            Scenario::S1 => Shape {
                namespaces: 1,
                services_per_namespace: 1000,
                endpoints_per_service: 5,
                sidecars_per_namespace: 1000,
                scoped: false,
            },
            Scenario::S2 | Scenario::Churn => Shape {
                namespaces: 100,
                services_per_namespace: 100,
                endpoints_per_service: 10,
                sidecars_per_namespace: 100,
                scoped: true,
            },
        }
    }

    fn name(self) -> &'static str {
        match self {
            Scenario::Smoke => "smoke",
            Scenario::S1 => "s1",
            Scenario::S2 => "s2",
            Scenario::Churn => "churn",
        }
    }

    /// How long the connect storm may take before the run fails.
    fn sync_limit(self) -> Duration {
        match self {
            Scenario::Smoke => Duration::from_secs(30),
            Scenario::S1 => Duration::from_secs(60),
            Scenario::S2 | Scenario::Churn => Duration::from_secs(120),
        }
    }
}

/// What `--expect` says about a triggered change: the carrying response is
/// of type `xds_type`; resource `resource` (`*`: any) holds `token` as a
/// whole string field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectSpec {
    /// Type of the carrying response.
    pub xds_type: XdsType,
    /// Resource name, or `*`.
    pub resource: String,
    /// The token; `{n}` is replaced by the change number.
    pub token: String,
}

impl std::str::FromStr for ExpectSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut parts = s.splitn(3, ':');
        let (Some(t), Some(resource), Some(token)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(format!(
                "{s:?}: expected TYPE:RESOURCE:TOKEN, e.g. eds:outbound|9080||a.ns.svc.cluster.local:127.9.0.{{n}}"
            ));
        };
        let xds_type = XdsType::parse_short(t).ok_or_else(|| format!("{t:?} is not one of cds, eds, lds, rds"))?;
        if token.is_empty() {
            return Err("the token is empty".into());
        }
        Ok(ExpectSpec { xds_type, resource: resource.into(), token: token.into() })
    }
}

/// Everything a run needs.
#[derive(Debug, Clone)]
pub struct Options {
    /// The scenario.
    pub scenario: Scenario,
    /// A server already running (else meshpush is started).
    pub target: Option<SocketAddr>,
    /// Where the registry API is (default: the target's address).
    pub registry: Option<SocketAddr>,
    /// A command that makes a change on a server that is not meshpush.
    pub trigger: Option<String>,
    /// How to recognize a triggered change.
    pub expect: Option<ExpectSpec>,
    /// How many times to run the trigger.
    pub repeat: u32,
    /// The server's pid, for CPU and memory figures of a `--target`.
    pub server_pid: Option<u32>,
    /// The meshpush binary to start (default: `target/release/meshpush`).
    pub meshpush_bin: Option<PathBuf>,
    /// ADS streams per HTTP/2 connection.
    pub streams_per_connection: u32,
    /// Endpoint changes per second (churn).
    pub churn_rate: u32,
    /// How long churn lasts.
    pub churn_duration: Duration,
    /// Whether to load the generated mesh into a `--target` through the registry.
    pub load_mesh: bool,
    /// Whether to draw progress bars (they draw only on a terminal anyway).
    pub progress: bool,
    /// Leave Envoy's extension list out of the node (unlike Envoy 1.40; for comparison only).
    pub lean_node: bool,
    /// The command line, for the report.
    pub command: String,
}

impl Options {
    /// Defaults for a scenario.
    pub fn new(scenario: Scenario) -> Options {
        Options {
            scenario,
            target: None,
            registry: None,
            trigger: None,
            expect: None,
            repeat: 1,
            server_pid: None,
            meshpush_bin: None,
            streams_per_connection: 32,
            churn_rate: 200,
            churn_duration: Duration::from_secs(60),
            load_mesh: true,
            progress: true,
            lean_node: false,
            command: String::new(),
        }
    }
}

/// How long one change may take to converge everywhere before the phase
/// gives up (and the run reports it as not converged).
const CHANGE_LIMIT: Duration = Duration::from_secs(20);

/// Quiet time after a phase, so that its trailing work (ACK handling) is
/// counted in its CPU figures and not in the next phase's.
const SETTLE: Duration = Duration::from_millis(300);

/// One change phase of a scenario.
#[derive(Debug, Clone)]
enum Step {
    /// Replace one endpoint of `svc-<service>` in `ns-<namespace>`.
    Endpoint { name: &'static str, namespace: u32, service: u32 },
    /// Change the match prefix of `svc-0`'s VirtualService in `ns-<namespace>`.
    Route { name: &'static str, namespace: u32, expect: Expect },
    /// Run `--trigger`.
    Trigger { n: u32 },
}

fn steps(scenario: Scenario, shape: &Shape, options: &Options) -> Vec<Step> {
    if options.trigger.is_some() {
        return (0..options.repeat.max(1)).map(|n| Step::Trigger { n }).collect();
    }
    let one = shape.one_namespace();
    match scenario {
        Scenario::Smoke => vec![
            Step::Endpoint { name: "endpoint change (one namespace)", namespace: one, service: 3 },
            Step::Endpoint { name: "endpoint change (shared namespace)", namespace: 0, service: 2 },
            Step::Route { name: "VirtualService change (shared namespace)", namespace: 0, expect: Expect::All },
            Step::Route {
                name: "VirtualService change (one namespace)",
                namespace: one,
                expect: Expect::Namespaces(vec![one]),
            },
        ],
        Scenario::S1 => vec![
            Step::Endpoint { name: "endpoint change", namespace: 0, service: shape.services_per_namespace / 2 },
            Step::Route { name: "VirtualService change", namespace: 0, expect: Expect::All },
        ],
        Scenario::S2 => vec![
            Step::Endpoint { name: "endpoint change", namespace: one, service: shape.services_per_namespace / 2 },
            Step::Route { name: "shared-namespace change", namespace: 0, expect: Expect::All },
            Step::Route { name: "one-namespace change", namespace: one, expect: Expect::Namespaces(vec![one]) },
        ],
        Scenario::Churn => Vec::new(),
    }
}

/// The server side of a run.
struct Target {
    process: Option<ServerProcess>,
    xds: SocketAddr,
    pid: Option<u32>,
    description: String,
}

impl Target {
    fn alive(&mut self) -> anyhow::Result<()> {
        match &mut self.process {
            Some(process) => process.check_running(),
            None => Ok(()),
        }
    }

    fn cpu(&self) -> Option<Duration> {
        self.pid.and_then(|pid| server::cpu_time(&pid.to_string()))
    }
}

/// The run's moving parts.
struct Run {
    options: Options,
    shape: Shape,
    target: Target,
    registry: Option<Registry>,
    shared: Arc<Shared>,
    fresh: FreshAddresses,
    /// Addresses of services changed so far.
    slices: HashMap<(u32, u32), Vec<Ipv4Addr>>,
    changes: u32,
    node_common: bytes::Bytes,
}

/// Runs a scenario and returns its report. Fails only when the run itself
/// could not happen (no server, no binary); a server that misbehaves yields
/// a report whose `failures` say how.
pub async fn run(options: Options) -> anyhow::Result<Report> {
    let shape = options.scenario.shape();
    let streams = shape.streams();
    let per_connection = options.streams_per_connection.max(1);
    let connections = streams.div_ceil(per_connection);
    let mut notes = Vec::new();
    notes.extend(server::raise_fd_limit(u64::from(connections) * 2 + 1024));
    for note in &notes {
        eprintln!("loadtest: {note}");
    }

    let mut target = start_target(&options, &shape)?;
    let deadline = Instant::now() + Duration::from_secs(120);
    let registry = match (&options.trigger, options.registry.unwrap_or(target.xds)) {
        (Some(_), _) if options.registry.is_none() => None,
        (_, addr) => {
            let mut registry = Registry::connect(addr, deadline, || target.alive()).await?;
            let version = registry.wait_ready(deadline, || target.alive()).await?;
            if options.target.is_some() && options.load_mesh && options.trigger.is_none() {
                load_mesh(&mut registry, &shape).await?;
            } else {
                eprintln!(
                    "loadtest: server ready (snapshot version {}, revision {})",
                    version.version, version.revision
                );
            }
            Some(registry)
        }
    };
    if registry.is_none() && options.expect.is_none() {
        bail!("--trigger needs --expect TYPE:RESOURCE:TOKEN to recognize the change");
    }
    let node_common = bytes::Bytes::from(Shape::node_common(options.lean_node));
    let server_rss_loaded = target.pid.and_then(|pid| server::memory(&pid.to_string(), "VmRSS"));

    let mut run = Run {
        shape,
        target,
        registry,
        shared: Shared::new(node_common.clone()),
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
        if options.scenario == Scenario::Churn && options.trigger.is_none() {
            let phase = run.churn().await?;
            if phase.changes_converged < phase.changes {
                failures.push(format!(
                    "churn: {} of {} changes did not reach every stream that watches them",
                    phase.changes - phase.changes_converged,
                    phase.changes
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
    if lost > 0 {
        failures.push(format!("{lost} streams ended before the run did"));
    }
    if refused > 0 {
        failures.push(format!("{refused} streams could not be opened"));
    }
    let pid = run.target.pid.map(|p| p.to_string());
    let server_peak_rss = pid.as_deref().and_then(|p| server::memory(p, "VmHWM"));
    let server_cpu_total = run.target.cpu();
    let report = Report {
        scenario: options.scenario.name().into(),
        command: options.command.clone(),
        machine: report::machine(),
        server: run.target.description.clone(),
        shape: run.shape,
        streams,
        connections,
        streams_per_connection: per_connection,
        eds_lists: run.shared.names.distinct(XdsType::Endpoint),
        rds_lists: run.shared.names.distinct(XdsType::Route),
        server_rss_loaded_mib: server_rss_loaded.map(report::mib),
        server_peak_rss_mib: server_peak_rss.map(report::mib),
        server_cpu_total_s: server_cpu_total.map(|d| d.as_secs_f64()),
        harness_cpu_total_s: server::cpu_time("self").map(|d| d.as_secs_f64()),
        harness_peak_rss_mib: server::memory("self", "VmHWM").map(report::mib),
        requests_sent: stats.requests.load(std::sync::atomic::Ordering::Relaxed),
        node_bytes: run.shape.node(0).len() + run.node_common.len(),
        lean_node: options.lean_node,
        notes,
        targets: Vec::new(),
        phases,
        failures,
    };
    let mut report = report;
    report.targets = targets(options.scenario, &report);
    if let Some(process) = &run.target.process
        && !report.failures.is_empty()
    {
        eprintln!("loadtest: meshpush log tail:\n{}", process.log_tail(20));
    }
    Ok(report)
}

fn start_target(options: &Options, shape: &Shape) -> anyhow::Result<Target> {
    if let Some(xds) = options.target {
        let description = match options.server_pid {
            Some(pid) => format!("{xds} (pid {pid}, started by the user)"),
            None => format!("{xds} (started by the user; no --server-pid: no server CPU or memory figures)"),
        };
        return Ok(Target { process: None, xds, pid: options.server_pid, description });
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
    let process = ServerProcess::start(&binary, &shape.files())?;
    let pid = Some(process.pid());
    let xds = process.xds;
    let description = format!("{} (started by the harness, pid {})", binary.display(), process.pid());
    Ok(Target { process: Some(process), xds, pid, description })
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
    harness_cpu: Option<Duration>,
    responses: u64,
    bytes: u64,
}

impl Run {
    fn mark(&self) -> Mark {
        let stats = &self.shared.stats;
        Mark {
            at: Instant::now(),
            server_cpu: self.target.cpu(),
            harness_cpu: server::cpu_time("self"),
            responses: stats.responses_total(),
            bytes: stats.bytes.load(std::sync::atomic::Ordering::Relaxed),
        }
    }

    fn phase(&self, name: &str, from: &Mark, to: &Mark, expected: usize, samples: Vec<Duration>) -> PhaseReport {
        let sub = |a: Option<Duration>, b: Option<Duration>| Some(b?.saturating_sub(a?).as_secs_f64());
        PhaseReport::new(
            name,
            expected,
            Sample::new(samples),
            to.at.duration_since(from.at).as_secs_f64(),
            sub(from.server_cpu, to.server_cpu),
            sub(from.harness_cpu, to.harness_cpu),
            to.responses - from.responses,
            to.bytes - from.bytes,
        )
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
        self.shared = Shared::new(self.node_common.clone());
        let xds = self.target.xds;
        let channels = futures::future::join_all((0..connections).map(|_| ads::connect(xds))).await;
        let channels: Vec<_> =
            channels.into_iter().collect::<Result<_, _>>().with_context(|| format!("connecting to {xds}"))?;
        let mut tasks = Vec::with_capacity(streams as usize);
        for identity in identities {
            let channel = channels[(identity.id / per_connection) as usize].clone();
            tasks.push(tokio::spawn(ads::run_stream(channel, identity, self.shared.clone())));
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
        let times = self.shared.sync.times();
        if waited.is_err() || times.len() < all {
            failures.push(format!("connect storm: {} of {all} streams synced within {limit:?}", times.len()));
        }
        let mut phase = self.phase("connect storm → all synced", &before, &after, all, times);
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

    /// A new EndpointSlice for a service with one endpoint replaced by an
    /// unused address; returns the document and the new address.
    fn moved_endpoint(&mut self, namespace: u32, service: u32) -> (String, Ipv4Addr) {
        let shape = self.shape;
        let addresses = self.slices.entry((namespace, service)).or_insert_with(|| {
            (0..shape.endpoints_per_service).map(|pod| shape.endpoint_ip(namespace, service, pod)).collect()
        });
        let fresh = self.fresh.next();
        let pod = (fresh.octets()[3] as usize) % addresses.len().max(1);
        if let Some(slot) = addresses.get_mut(pod) {
            *slot = fresh;
        }
        (shape.slice_document(namespace, service, addresses), fresh)
    }

    /// Runs one change phase.
    async fn change(&mut self, step: Step) -> anyhow::Result<PhaseReport> {
        let n = self.next_change();
        // What to apply (nothing for a trigger), and how to recognize it.
        let (name, document, xds_type, resource, token, expect) = match &step {
            Step::Endpoint { name, namespace, service } => {
                let (document, address) = self.moved_endpoint(*namespace, *service);
                let cluster = self.shape.cluster(*namespace, *service);
                (name.to_string(), Some(document), XdsType::Endpoint, cluster, address.to_string(), Expect::Watchers)
            }
            Step::Route { name, namespace, expect } => {
                let token = format!("/loadtest-change-{n}");
                let document = self.shape.virtual_service_document(*namespace, 0, &token);
                (name.to_string(), Some(document), XdsType::Route, PORT.to_string(), token, expect.clone())
            }
            Step::Trigger { n } => {
                let spec = self.options.expect.clone().context("--trigger needs --expect")?;
                let token = spec.token.replace("{n}", &n.to_string());
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
        let made = match (document, &step) {
            (Some(document), _) => match &mut self.registry {
                Some(registry) => registry.apply(vec![document]).await.map(|_| ()),
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
        let mut phase = self.phase(&name, &before, &after, change.expected, outcome.latencies);
        phase.unexpected = outcome.unexpected;
        phase.changes = 1;
        phase.changes_converged = usize::from(change.complete());
        eprintln!("loadtest: {}", phase.one_line());
        Ok(phase)
    }

    fn expected(&self, expect: &Expect) -> usize {
        match expect {
            Expect::All => self.shape.streams() as usize,
            Expect::Namespaces(list) => list.iter().map(|ns| self.shape.streams_in(*ns) as usize).sum(),
            Expect::Watchers => 0,
        }
    }

    /// Endpoint changes at a fixed rate for a fixed time, each tracked to
    /// every stream that watches its cluster.
    async fn churn(&mut self) -> anyhow::Result<PhaseReport> {
        let Some(registry) = self.registry.clone() else { bail!("churn needs the registry API") };
        let rate = self.options.churn_rate.max(1);
        let duration = self.options.churn_duration;
        let total = (u64::from(rate) * duration.as_millis() as u64 / 1000).max(1);
        let interval = Duration::from_secs_f64(1.0 / f64::from(rate));
        // Applies in flight at once; a tick that finds none free is skipped (and counted).
        let in_flight = Arc::new(Semaphore::new(64));
        let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
        tokio::time::sleep(SETTLE).await;
        let before = self.mark();
        let bar = self.bar(total, "endpoint changes made");
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        let mut changes = Vec::with_capacity(total as usize);
        let mut watchers = Vec::with_capacity(total as usize);
        let mut skipped = 0u64;
        let mut apply_errors = 0u64;
        let errors = Arc::new(std::sync::atomic::AtomicU64::new(0));
        for i in 0..total {
            ticker.tick().await;
            let Ok(permit) = in_flight.clone().try_acquire_owned() else {
                skipped += 1;
                continue;
            };
            let pick = rng.next() % u64::from(self.shape.services());
            let namespace = (pick / u64::from(self.shape.services_per_namespace)) as u32;
            let service = (pick % u64::from(self.shape.services_per_namespace)) as u32;
            let (document, address) = self.moved_endpoint(namespace, service);
            let cluster = self.shape.cluster(namespace, service);
            let expected = self.shared.names.watchers(XdsType::Endpoint, &cluster);
            let change = Arc::new(Change::new(
                format!("churn {i}"),
                XdsType::Endpoint,
                cluster,
                &address.to_string(),
                Instant::now(),
                Expect::Watchers,
                expected,
            ));
            self.shared.tracker.add(change.clone());
            let mut registry = registry.clone();
            let shared = self.shared.clone();
            let errors = errors.clone();
            let tracked = change.clone();
            watchers.push(tokio::spawn(async move {
                let applied = registry.apply(vec![document]).await;
                drop(permit);
                if applied.is_err() {
                    errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                } else {
                    tracked.wait(CHANGE_LIMIT).await;
                }
                shared.tracker.retire(&tracked);
            }));
            changes.push(change);
            bar.set_position(i + 1);
        }
        bar.finish_and_clear();
        let made = Instant::now();
        let _ = tokio::time::timeout(CHANGE_LIMIT + Duration::from_secs(5), futures::future::join_all(watchers)).await;
        let drained = made.elapsed();
        apply_errors += errors.load(std::sync::atomic::Ordering::Relaxed);
        tokio::time::sleep(SETTLE).await;
        let after = self.mark();
        let start = before.at;
        let mut all = Vec::new();
        let mut expected = 0;
        let mut converged_changes = 0;
        let mut windows: Vec<Vec<Duration>> = Vec::new();
        for change in &changes {
            let outcome = change.outcome();
            expected += outcome.expected;
            converged_changes += usize::from(change.complete());
            let window = (change.start.duration_since(start).as_secs() / 10) as usize;
            if windows.len() <= window {
                windows.resize(window + 1, Vec::new());
            }
            windows[window].extend(&outcome.latencies);
            all.extend(outcome.latencies);
        }
        let mut phase = self.phase(
            &format!("churn: {rate}/s endpoint changes for {}s", duration.as_secs()),
            &before,
            &after,
            expected,
            all,
        );
        phase.changes = changes.len();
        phase.changes_converged = converged_changes;
        phase.windows = windows.into_iter().map(Sample::new).map(|s| s.summary()).collect();
        phase.notes.push(format!(
            "{} changes made ({skipped} ticks skipped: 64 applies in flight), {apply_errors} refused; last change converged {:.2}s after the last was made",
            changes.len(),
            drained.as_secs_f64()
        ));
        eprintln!("loadtest: {}", phase.one_line());
        Ok(phase)
    }
}

/// Runs the trigger command through `sh -c`, with `{n}` replaced by the
/// change number (also in `LOADTEST_CHANGE`). Bounded to 60 s.
async fn trigger(command: &str, n: u32) -> anyhow::Result<()> {
    let command = command.replace("{n}", &n.to_string());
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

/// A small deterministic generator for picking what churn changes.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// The targets for a scenario, checked against the report.
fn targets(scenario: Scenario, report: &Report) -> Vec<TargetCheck> {
    let phase = |name: &str| report.phases.iter().find(|p| p.name.starts_with(name));
    let ms = |v: f64| format!("{v:.1} ms");
    let s = |v: f64| format!("{v:.2} s");
    let mut checks = Vec::new();
    let mut check = |what: &str, target: &str, limit: f64, measured: Option<f64>, show: &dyn Fn(f64) -> String| {
        checks.push(TargetCheck {
            what: what.into(),
            target: target.into(),
            measured: measured.map(show).unwrap_or_else(|| "n/a".into()),
            met: measured.map(|m| m <= limit),
        });
    };
    let storm = phase("connect storm");
    let p99 = |name: &str| phase(name).and_then(|p| p.latency.as_ref().map(|l| l.p99_ms));
    let rss = report.server_peak_rss_mib;
    match scenario {
        Scenario::S1 => {
            check("initial sync of all streams", "≤ 1.2 s", 1.2, storm.map(|p| p.wall_s), &s);
            check("server CPU, initial sync", "≤ 0.5 s", 0.5, storm.and_then(|p| p.server_cpu_s), &s);
            check("endpoint change p99", "≤ 60 ms", 60.0, p99("endpoint change"), &ms);
            let cpu = phase("endpoint change").and_then(|p| p.server_cpu_s).map(|c| c * 1e3);
            check("server CPU, one endpoint change", "≤ 60 ms", 60.0, cpu, &ms);
            check("VirtualService change p99", "≤ 300 ms", 300.0, p99("VirtualService change"), &ms);
            check("server peak RSS", "≤ 160 MiB", 160.0, rss, &|v| format!("{v:.0} MiB"));
        }
        Scenario::S2 => {
            check("all synced after the storm starts", "≤ 10 s", 10.0, storm.map(|p| p.wall_s), &s);
            check("endpoint change p99", "≤ 100 ms", 100.0, p99("endpoint change"), &ms);
            check("shared-namespace change p99", "≤ 2 s", 2000.0, p99("shared-namespace change"), &ms);
            check("one-namespace change p99", "≤ 200 ms", 200.0, p99("one-namespace change"), &ms);
            check("server peak RSS", "≤ 1 GiB", 1024.0, rss, &|v| format!("{v:.0} MiB"));
        }
        Scenario::Churn => {
            let churn = phase("churn");
            check("churn p99", "≤ 200 ms", 200.0, p99("churn"), &ms);
            let worst = churn.and_then(|p| p.windows.iter().map(|w| w.p99_ms).reduce(f64::max));
            check("churn p99, worst 10 s window", "≤ 200 ms", 200.0, worst, &ms);
            let behind = churn.map(|p| (p.changes - p.changes_converged) as f64);
            check("changes that never reached every watcher", "0", 0.0, behind, &|v| format!("{v:.0}"));
        }
        Scenario::Smoke => {
            let all = report.phases.iter().all(|p| p.converged == p.expected);
            check("every stream synced, every change converged", "all", 0.0, Some(if all { 0.0 } else { 1.0 }), &|v| {
                if v == 0.0 { "all".into() } else { "not all".into() }
            });
        }
    }
    checks
}
