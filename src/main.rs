//! The `meshpush` command: serve, validate, bootstrap, version.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

#[path = "main/agent.rs"]
mod agent;
#[path = "main/inject.rs"]
mod inject;
#[path = "main/iptables.rs"]
mod iptables;
#[path = "main/serve.rs"]
mod serve;

use serve::ServeArgs;

#[cfg(not(feature = "system-allocator"))]
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
    Agent(Box<agent::AgentArgs>),
    /// Wait until the proxy beside this process is ready: an injected pod's
    /// `postStart` hook that holds its application until then, as
    /// `pilot-agent wait`.
    Wait(agent::WaitArgs),
    /// Ask the agent beside this process to drain its proxy: a native
    /// sidecar's `preStop` hook, as `pilot-agent request POST drain`.
    Drain(agent::DrainArgs),
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
    /// Print a manifest's Pods, Deployments, StatefulSets, DaemonSets,
    /// ReplicaSets, Jobs and CronJobs with the sidecar injected, as
    /// `istioctl kube-inject` does.
    Inject(inject::InjectArgs),
    /// Capture a pod's traffic into its Envoy with iptables, as Istio's
    /// istio-iptables (the `istio-init` container) does; `clean` removes it.
    #[command(args_conflicts_with_subcommands = true)]
    Iptables {
        #[command(flatten)]
        args: Box<iptables::CaptureArgs>,
        #[command(subcommand)]
        action: Option<iptables::CaptureAction>,
    },
    /// Print the remote secret that lets a primary meshpush read a remote
    /// cluster, as `istioctl create-remote-secret` does: a kubeconfig of
    /// that cluster with its reader service account's token.
    CreateRemoteSecret {
        /// The remote cluster's kubeconfig (its current context).
        #[arg(long)]
        kubeconfig: PathBuf,
        /// The remote cluster's id in the mesh (a DNS label).
        #[arg(long)]
        name: String,
        /// The namespace of the reader service account in the remote
        /// cluster, and of the secret in the primary.
        #[arg(short = 'n', long, default_value = "istio-system")]
        namespace: String,
        /// The reader service account (the chart's with `remote: true`).
        #[arg(long, default_value = "meshpush-reader")]
        service_account: String,
        /// The API server address the primary dials (default: the kubeconfig's).
        #[arg(long)]
        server: Option<String>,
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
        /// Bind the token to this Pod (of the namespace), as Kubernetes binds a
        /// Pod's projected token; a node agent (ztunnel) needs one for the CA
        /// to know its node.
        #[arg(long)]
        pod: Option<String>,
        /// The bound Pod's UID (checked against the Pod's `metadata.uid`).
        #[arg(long, requires = "pod")]
        pod_uid: Option<String>,
    },
}

/// Who the Envoy is: the flags `bootstrap` and `agent` share.
#[derive(Debug, clap::Args)]
pub(crate) struct NodeArgs {
    /// Istio node id: `sidecar~IP~POD.NAMESPACE~NAMESPACE.svc.cluster.local` (or `router~…`, `waypoint~…`).
    #[arg(long)]
    pub(crate) node_id: String,
    /// Envoy admin port (on 127.0.0.1).
    #[arg(long, default_value_t = 15000)]
    pub(crate) admin_port: u16,
    /// Workload label `k=v` (repeatable).
    #[arg(long = "label")]
    pub(crate) labels: Vec<String>,
    /// Node metadata `K=V` (repeatable).
    #[arg(long = "meta")]
    pub(crate) meta: Vec<String>,
    /// Interception mode: REDIRECT (iptables set up outside meshpush, as
    /// istio-init does), TPROXY, or NONE (outbound listeners on 127.0.0.1).
    /// (Default: REDIRECT; for `agent`, the ProxyConfig's `interceptionMode`.)
    #[arg(long, value_parser = ["REDIRECT", "NONE", "TPROXY"])]
    pub(crate) interception: Option<String>,
    /// Use delta xDS (`api_type: DELTA_GRPC`) instead of state of the world.
    #[arg(long)]
    pub(crate) delta: bool,
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
    /// Serve the Gateway API Gateway NAMESPACE/NAME: the router (or
    /// waypoint) gets the labels Istio's automated deployment gives that
    /// Gateway's pods (`gateway.networking.k8s.io/gateway-name`). The node
    /// must be a router or waypoint of the Gateway's namespace.
    #[arg(long)]
    gateway: Option<String>,
    /// Print a proxyless gRPC application's bootstrap (the JSON gRPC reads
    /// from `GRPC_XDS_BOOTSTRAP`, node metadata `GENERATOR: grpc`) instead
    /// of Envoy's, dialling meshpush directly as Istio's `grpc-simple`
    /// template does: no certificates, so no mTLS (`meshpush agent
    /// --grpc-bootstrap` writes one that has them).
    #[arg(long, conflicts_with = "gateway")]
    grpc: bool,
}

pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
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
        Command::CreateRemoteSecret { kubeconfig, name, namespace, service_account, server } => {
            let request = meshpush::cli::remote_secret::RemoteSecretRequest {
                kubeconfig: &kubeconfig,
                name: &name,
                namespace: &namespace,
                service_account: &service_account,
                server: server.as_deref(),
            };
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
            match runtime.block_on(meshpush::cli::remote_secret::create(&request)) {
                Ok(yaml) => {
                    print!("{yaml}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("meshpush create-remote-secret: {e}");
                    ExitCode::FAILURE
                }
            }
        }
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
        Command::Jwt(JwtCommand::Issue { key, namespace, service_account, ttl, pod, pod_uid }) => {
            let pod = pod.map(|name| meshpush::ca::authn::CallerPod { name, uid: pod_uid });
            match meshpush::cli::jwt::issue_for_pod(&key, &namespace, &service_account, pod.as_ref(), ttl) {
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
            agent::run(*args)
        }
        Command::Wait(args) => agent::wait(&args),
        Command::Drain(args) => agent::drain(&args),
        Command::Serve(args) => serve::run(*args, &cli.log_level, cli.log_format),
        Command::Inject(args) => inject::run(&args),
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
        interception: args.node.interception.unwrap_or_else(|| "REDIRECT".into()),
        delta: args.node.delta,
        locality: args.locality,
        sds_socket: None,
        gateway: args.gateway,
        proxy_config: None,
    };
    if args.grpc {
        return meshpush::bootstrap::grpc::render(&opts, None);
    }
    meshpush::bootstrap::render(&opts)
}

/// A trust domain as Istio's mesh config validation takes one.
pub(crate) fn trust_domain(value: &str) -> Result<String, String> {
    meshpush::config::mesh::trust_anchors::check_trust_domain(value).map(|()| value.to_string())
}

/// A flag value that must not be empty.
fn non_empty(value: &str) -> Result<String, String> {
    if value.is_empty() { Err("must not be empty".to_string()) } else { Ok(value.to_string()) }
}
