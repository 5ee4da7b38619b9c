//! The `meshpush` command: serve, validate, bootstrap, version.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

#[path = "main/iptables.rs"]
mod iptables;
#[path = "main/serve.rs"]
mod serve;

use serve::ServeArgs;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// meshpush: an xDS control plane for Envoy service meshes.
#[derive(Debug, Parser)]
#[command(name = "meshpush", version, about)]
struct Cli {
    /// Log level or tracing filter (`info`, `debug`, `meshpush=debug,h2=info`).
    #[arg(long, global = true, default_value = "info", env = "MESHPUSH_LOG")]
    log_level: String,
    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve xDS for the mesh described by a directory of YAML.
    Serve(Box<ServeArgs>),
    /// Check a directory of YAML: print every problem, exit 1 on any error.
    Validate {
        /// The directory (read recursively).
        dir: PathBuf,
        /// Config files larger than this are not read (as `serve --max-config-file-bytes`).
        #[arg(long, default_value = "16MiB", value_parser = parse_bytes)]
        max_config_file_bytes: u64,
        /// Istio's mesh config to check against (the providers Telemetry
        /// objects name, the ingress settings); default: Istio's defaults.
        #[arg(long)]
        mesh_config: Option<PathBuf>,
    },
    /// Print an Envoy bootstrap that connects to meshpush.
    Bootstrap(BootstrapArgs),
    /// Run beside an Envoy, as Istio's pilot-agent: get its workload certificate
    /// from meshpush's CA, start and supervise Envoy, proxy its ADS stream to
    /// meshpush over mTLS, serve it SDS and answer readiness probes.
    Agent(Box<AgentArgs>),
    /// Make service-account tokens for a mesh without Kubernetes (`serve --jwks`).
    #[command(subcommand)]
    Jwt(JwtCommand),
    /// Show every connected proxy's sync state per type (like `istioctl proxy-status`).
    ProxyStatus {
        /// meshpush's admin address.
        #[arg(long, default_value = "127.0.0.1:15014")]
        admin: String,
    },
    /// Show what a proxy is sent (like `istioctl proxy-config`).
    ProxyConfig {
        /// Which part: clusters, listeners, routes, endpoints or secret.
        #[arg(value_enum)]
        section: meshpush::cli::proxy_config::Section,
        /// The proxy: its node id, `POD.NAMESPACE`, or a pod name.
        proxy: String,
        /// Output format.
        #[arg(short, long, value_enum, default_value = "short")]
        output: meshpush::cli::proxy_config::Output,
        /// meshpush's admin address.
        #[arg(long, default_value = "127.0.0.1:15014")]
        admin: String,
    },
    /// Apply the documents of files or directories through the registry API (like `kubectl apply`).
    Apply {
        /// A file or a directory (read recursively); repeatable.
        #[arg(short = 'f', long = "filename", required = true)]
        files: Vec<PathBuf>,
        /// meshpush's xDS address (the registry API is served there).
        #[arg(long, default_value = "127.0.0.1:15010")]
        xds_addr: String,
    },
    /// Delete one object through the registry API (like `kubectl delete`).
    Delete {
        /// Its kind (`Service`, `VirtualService`, …).
        kind: String,
        /// `NAMESPACE/NAME` (the namespace `default` when left out).
        object: String,
        /// meshpush's xDS address (the registry API is served there).
        #[arg(long, default_value = "127.0.0.1:15010")]
        xds_addr: String,
    },
    /// Capture a pod's traffic into its Envoy with iptables, as Istio's
    /// istio-iptables (the `istio-init` container) does; `clean` removes it.
    #[command(args_conflicts_with_subcommands = true)]
    Iptables {
        #[command(flatten)]
        args: Box<iptables::CaptureArgs>,
        #[command(subcommand)]
        action: Option<iptables::CaptureAction>,
    },
    /// Print the version.
    Version,
}

#[derive(Debug, Subcommand)]
enum JwtCommand {
    /// Create a signing key (DIR/jwt-key.pem, mode 0600) and its JWKS (DIR/jwks.json).
    Keygen {
        /// Where to write them.
        #[arg(long)]
        dir: PathBuf,
    },
    /// Print a token for a service account, signed by a `keygen` key.
    Issue {
        /// The signing key (`jwt-key.pem`).
        #[arg(long)]
        key: PathBuf,
        /// The service account's namespace.
        #[arg(long)]
        namespace: String,
        /// The service account.
        #[arg(long)]
        service_account: String,
        /// How long the token is valid.
        #[arg(long, default_value = "24h", value_parser = parse_duration)]
        ttl: Duration,
    },
}

/// Who the Envoy is: the flags `bootstrap` and `agent` share.
#[derive(Debug, clap::Args)]
struct NodeArgs {
    /// Istio node id: `sidecar~IP~POD.NAMESPACE~NAMESPACE.svc.cluster.local` (or `router~…`).
    #[arg(long)]
    node_id: String,
    /// Envoy admin port (on 127.0.0.1).
    #[arg(long, default_value_t = 15000)]
    admin_port: u16,
    /// Workload label `k=v` (repeatable).
    #[arg(long = "label")]
    labels: Vec<String>,
    /// Node metadata `K=V` (repeatable).
    #[arg(long = "meta")]
    meta: Vec<String>,
    /// Interception mode: REDIRECT (iptables set up outside meshpush, as
    /// istio-init does), TPROXY, or NONE (outbound listeners on 127.0.0.1).
    #[arg(long, default_value = "REDIRECT", value_parser = ["REDIRECT", "NONE", "TPROXY"])]
    interception: String,
    /// Use delta xDS (`api_type: DELTA_GRPC`) instead of state of the world.
    #[arg(long)]
    delta: bool,
}

#[derive(Debug, clap::Args)]
struct BootstrapArgs {
    #[command(flatten)]
    node: NodeArgs,
    /// Envoy `node.cluster` (default: the workload's `app.namespace`, as Istio).
    #[arg(long)]
    cluster: Option<String>,
    /// meshpush's ADS address: `HOST:PORT`, or `unix:PATH` for a Unix domain
    /// socket. Repeat it for replicas: Envoy balances over them and fails over.
    #[arg(long = "xds-addr", default_value = "127.0.0.1:15010")]
    xds_addrs: Vec<String>,
    /// Envoy `node.locality` as `REGION/ZONE/SUBZONE` (pilot-agent takes it
    /// from the node's topology labels); locality load balancing prefers
    /// endpoints near it.
    #[arg(long)]
    locality: Option<String>,
    /// Serve the Gateway API Gateway NAMESPACE/NAME: the router gets the
    /// labels Istio's automated deployment gives that Gateway's pods
    /// (`gateway.networking.k8s.io/gateway-name`). The node must be a
    /// router of the Gateway's namespace.
    #[arg(long)]
    gateway: Option<String>,
}

#[derive(Debug, clap::Args)]
struct AgentArgs {
    #[command(flatten)]
    node: NodeArgs,
    /// meshpush's secure port: `HOST:PORT` or `unix:PATH` (default: the
    /// ProxyConfig's `discoveryAddress`, Istio's `istiod.istio-system.svc:15012`).
    #[arg(long)]
    discovery_address: Option<String>,
    /// The name meshpush's certificate must carry (default: the host of
    /// the discovery address; `istiod.istio-system.svc` for a socket).
    #[arg(long)]
    discovery_server_name: Option<String>,
    /// The mesh root certificate meshpush's certificate chains to (PEM).
    #[arg(long)]
    root_cert: PathBuf,
    /// The service-account token that authenticates certificate requests
    /// (re-read for each; a projected Kubernetes token, or one from
    /// `meshpush jwt issue`).
    #[arg(long)]
    token_file: PathBuf,
    /// The workload's service account (default: the token's subject).
    #[arg(long)]
    service_account: Option<String>,
    /// The mesh's trust domain (default: the mesh config's `trustDomain`,
    /// else `cluster.local`).
    #[arg(long, value_parser = trust_domain)]
    trust_domain: Option<String>,
    /// The workload certificate's validity asked of the CA.
    #[arg(long, default_value = "24h", value_parser = parse_duration)]
    cert_ttl: Duration,
    /// The Envoy binary.
    #[arg(long, default_value = "envoy")]
    envoy_binary: PathBuf,
    /// Where the XDS and SDS sockets and Envoy's bootstrap go.
    #[arg(long, default_value = "./etc/istio/proxy")]
    socket_dir: PathBuf,
    /// The status port (readiness probe `/healthz/ready`).
    #[arg(long, default_value = "0.0.0.0:15021")]
    status_addr: SocketAddr,
    /// Istio's mesh config, whose `defaultConfig` is the proxy's ProxyConfig
    /// under `PROXY_CONFIG` and the pod's annotation (default:
    /// `./etc/istio/config/mesh` when it exists).
    #[arg(long)]
    mesh_config: Option<PathBuf>,
    /// The downward-API file of the pod's annotations (`proxy.istio.io/config`
    /// and the `sidecar.istio.io/` ones the agent reads; default:
    /// `./etc/istio/pod/annotations` when it exists).
    #[arg(long)]
    pod_annotations: Option<PathBuf>,
    /// Envoy's worker threads, over the ProxyConfig's `concurrency`.
    #[arg(long)]
    concurrency: Option<u32>,
    /// Envoy's `--drain-time-s`, over the ProxyConfig's `drainDuration` (45s).
    #[arg(long, value_parser = parse_duration)]
    drain_duration: Option<Duration>,
    /// How long listeners drain on SIGTERM before Envoy is stopped, over the
    /// ProxyConfig's `terminationDrainDuration` (5s).
    #[arg(long, value_parser = parse_duration)]
    termination_drain_duration: Option<Duration>,
    /// One more Envoy argument (repeatable), after the agent's own.
    #[arg(long = "envoy-arg", allow_hyphen_values = true)]
    envoy_args: Vec<String>,
}

/// Where Istio mounts the mesh config for pilot-agent.
const AGENT_MESH_CONFIG: &str = "./etc/istio/config/mesh";
/// Where Istio's downward API writes the pod's annotations.
const AGENT_POD_ANNOTATIONS: &str = "./etc/istio/pod/annotations";

fn agent(args: AgentArgs) -> Result<meshpush::agent::AgentOptions, String> {
    use meshpush::agent::proxy_config::{Sources, layered};
    use meshpush::bootstrap::parse_key_value;
    use meshpush::config::Duration as ConfigDuration;
    let pairs = |flag, list: &[String]| {
        list.iter().map(|a| parse_key_value(flag, a)).collect::<Result<_, _>>().map_err(|e| e.to_string())
    };
    let existing = |given: &Option<PathBuf>, default: &'static str| match given {
        Some(path) => Some(path.clone()),
        None => Some(PathBuf::from(default)).filter(|p| p.exists()),
    };
    let mesh_config = existing(&args.mesh_config, AGENT_MESH_CONFIG);
    let pod_annotations = existing(&args.pod_annotations, AGENT_POD_ANNOTATIONS);
    let layers = layered(&Sources {
        mesh_config: mesh_config.as_deref(),
        env_proxy_config: std::env::var("PROXY_CONFIG").ok(),
        pod_annotations: pod_annotations.as_deref(),
        cpu_limit: std::env::var("ISTIO_CPU_LIMIT").ok(),
    })?;
    for unapplied in &layers.unapplied {
        tracing::warn!("{unapplied}");
    }
    let mut config = layers.config;
    // The agent's own flags are the top layer.
    if let Some(address) = args.discovery_address {
        config.discovery_address = Some(address);
    }
    if let Some(n) = args.concurrency {
        config.concurrency = Some(i32::try_from(n).map_err(|_| format!("--concurrency {n}: too large"))?);
    }
    if let Some(d) = args.drain_duration {
        config.drain_duration = Some(ConfigDuration(d));
    }
    if let Some(d) = args.termination_drain_duration {
        config.termination_drain_duration = Some(ConfigDuration(d));
    }
    // A tracer on the node's own address, as Istio's injector writes it.
    if let (Some(tracing), Ok(host_ip)) = (config.tracing.as_mut(), std::env::var("HOST_IP")) {
        for tracer in [tracing.zipkin.as_mut(), tracing.datadog.as_mut()].into_iter().flatten() {
            tracer.address = tracer.address.replace("$(HOST_IP)", &host_ip);
        }
    }
    config.check().map_err(|(path, why)| format!("the ProxyConfig's {path} (or its flag): {why}"))?;
    // pilot-agent reads it from its environment, which the injector fills
    // from proxyMetadata: either turns it on here.
    let xds_proxy_config = match std::env::var(PROXY_CONFIG_XDS_AGENT)
        .ok()
        .or_else(|| config.proxy_metadata.get(PROXY_CONFIG_XDS_AGENT).cloned())
    {
        Some(value) => meshpush::os::parse_switch(&value).map_err(|e| format!("{PROXY_CONFIG_XDS_AGENT}: {e}"))?,
        None => false,
    };
    Ok(meshpush::agent::AgentOptions {
        node_id: args.node.node_id,
        discovery_address: meshpush::agent::upstream::DiscoveryAddress::of(&config)
            .map_err(|e| format!("--discovery-address {e}"))?,
        discovery_server_name: args.discovery_server_name,
        root_cert: args.root_cert,
        token_file: args.token_file,
        service_account: args.service_account,
        trust_domain: args
            .trust_domain
            .or(layers.trust_domain)
            .unwrap_or_else(|| meshpush::config::mesh::DEFAULT_TRUST_DOMAIN.into()),
        cert_ttl: args.cert_ttl,
        envoy_binary: args.envoy_binary,
        labels: pairs("label", &args.node.labels)?,
        meta: pairs("meta", &args.node.meta)?,
        interception: args.node.interception,
        delta: args.node.delta,
        admin_port: args.node.admin_port,
        socket_dir: args.socket_dir,
        status_addr: args.status_addr,
        proxy_config: config,
        envoy_args: args.envoy_args,
        xds_proxy_config,
    })
}

/// pilot-agent's switch for PCDS (the mesh's extra roots).
const PROXY_CONFIG_XDS_AGENT: &str = "PROXY_CONFIG_XDS_AGENT";

fn parse_duration(s: &str) -> Result<Duration, String> {
    s.parse::<meshpush::config::Duration>().map(|d| d.0).map_err(|e| e.to_string())
}

/// A size: bytes, or a number with a unit (`16MiB`, `64 MB`, `512KiB`).
fn parse_bytes(s: &str) -> Result<u64, String> {
    s.parse::<bytesize::ByteSize>()
        .map(|b| b.as_u64())
        .map_err(|e| format!("{s:?} is not a size (16MiB, 64MB, bytes): {e}"))
}

fn init_tracing(level: &str, format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_new(level).unwrap_or_else(|e| {
        eprintln!("meshpush: --log-level {level:?} is not a tracing filter ({e}); using info");
        tracing_subscriber::EnvFilter::new("info")
    });
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Version => {
            println!("meshpush {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Command::ProxyStatus { admin } => print_or_fail("proxy-status", meshpush::cli::proxy_status::run(&admin)),
        Command::ProxyConfig { section, proxy, output, admin } => {
            print_or_fail("proxy-config", meshpush::cli::proxy_config::run(&admin, section, &proxy, output))
        }
        Command::Apply { files, xds_addr } => registry_outcome("apply", meshpush::cli::apply::apply(&xds_addr, &files)),
        Command::Delete { kind, object, xds_addr } => {
            registry_outcome("delete", meshpush::cli::apply::delete(&xds_addr, &kind, &object))
        }
        Command::Validate { dir, max_config_file_bytes, mesh_config } => {
            init_tracing(&cli.log_level, cli.log_format);
            let mesh = match mesh_config.as_deref().map(meshpush::config::mesh::MeshSettings::read).transpose() {
                Ok(settings) => settings.unwrap_or_default(),
                Err(e) => {
                    eprintln!("meshpush validate: --mesh-config {e}");
                    return ExitCode::from(2);
                }
            };
            let mut problems = mesh.problems.clone();
            problems.extend(meshpush::source::validate_dir(&dir, max_config_file_bytes, &mesh.mesh_config()));
            ExitCode::from(meshpush::source::print_report(&problems) as u8)
        }
        Command::Jwt(JwtCommand::Keygen { dir }) => match meshpush::cli::jwt::keygen(&dir) {
            Ok((key, jwks)) => {
                println!("signing key: {}\nkey set (serve --jwks): {}", key.display(), jwks.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("meshpush jwt keygen: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Jwt(JwtCommand::Issue { key, namespace, service_account, ttl }) => {
            match meshpush::cli::jwt::issue(&key, &namespace, &service_account, ttl) {
                Ok(token) => {
                    println!("{token}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("meshpush jwt issue: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Bootstrap(args) => match bootstrap(args) {
            Ok(yaml) => {
                print!("{yaml}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("meshpush bootstrap: {e}");
                ExitCode::from(2)
            }
        },
        Command::Agent(args) => {
            init_tracing(&cli.log_level, cli.log_format);
            let options = match agent(*args) {
                Ok(options) => options,
                Err(e) => {
                    eprintln!("meshpush agent: {e}");
                    return ExitCode::from(2);
                }
            };
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("tokio runtime");
            match runtime.block_on(meshpush::agent::run(options)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!("meshpush agent: {e}");
                    eprintln!("meshpush agent: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Serve(args) => serve::run(*args, &cli.log_level, cli.log_format),
        Command::Iptables { args, action } => {
            let (args, clean) = match action {
                Some(iptables::CaptureAction::Clean(args)) => (args, true),
                None => (*args, false),
            };
            init_tracing(&args.log_level().unwrap_or(cli.log_level), cli.log_format);
            iptables::run(&args, clean)
        }
    }
}

/// Prints a registry command's outcome: exit 0 when applied, 1 when the
/// batch was refused (its problems printed), 2 when the server could not be asked.
fn registry_outcome(command: &str, outcome: Result<meshpush::cli::apply::Outcome, String>) -> ExitCode {
    match outcome {
        Ok(outcome) => {
            print!("{}", outcome.text);
            if outcome.applied { ExitCode::SUCCESS } else { ExitCode::from(1) }
        }
        Err(e) => {
            eprintln!("meshpush {command}: {e}");
            ExitCode::from(2)
        }
    }
}

/// Prints a command's output, or its error on stderr with exit code 1.
fn print_or_fail(command: &str, result: Result<String, meshpush::cli::CliError>) -> ExitCode {
    match result {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("meshpush {command}: {e}");
            ExitCode::FAILURE
        }
    }
}

fn bootstrap(args: BootstrapArgs) -> Result<String, meshpush::bootstrap::BootstrapError> {
    use meshpush::bootstrap::parse_key_value;
    let opts = meshpush::bootstrap::BootstrapOptions {
        node_id: args.node.node_id,
        cluster: args.cluster,
        xds_addrs: args.xds_addrs,
        admin_port: args.node.admin_port,
        labels: args.node.labels.iter().map(|l| parse_key_value("label", l)).collect::<Result<_, _>>()?,
        meta: args.node.meta.iter().map(|m| parse_key_value("meta", m)).collect::<Result<_, _>>()?,
        interception: args.node.interception,
        delta: args.node.delta,
        locality: args.locality,
        sds_socket: None,
        gateway: args.gateway,
        proxy_config: None,
    };
    meshpush::bootstrap::render(&opts)
}

/// A trust domain as Istio's mesh config validation takes one.
fn trust_domain(value: &str) -> Result<String, String> {
    meshpush::config::mesh::file::check_trust_domain(value).map(|()| value.to_string())
}

/// A flag value that must not be empty.
fn non_empty(value: &str) -> Result<String, String> {
    if value.is_empty() { Err("must not be empty".to_string()) } else { Ok(value.to_string()) }
}
