//! The `meshpush` command: serve, validate, bootstrap, version.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

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

#[derive(Debug, clap::Args)]
struct ServeArgs {
    /// Directory of Kubernetes-style YAML (read recursively, watched).
    /// Default: `examples/bookinfo`, unless the mesh comes from Kubernetes.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Read the mesh from the Kubernetes API server of this kubeconfig's
    /// current context (alone, or together with --config).
    #[arg(long, conflicts_with = "in_cluster")]
    kubeconfig: Option<PathBuf>,
    /// Read the mesh from the Kubernetes API server of the Pod meshpush runs
    /// in (its service account; KUBERNETES_SERVICE_HOST).
    #[arg(long)]
    in_cluster: bool,
    /// With Kubernetes: read only the namespaces whose labels match this
    /// LabelSelector (YAML or JSON: `{matchLabels: {istio-discovery: enabled}}`,
    /// or `matchExpressions`), as MeshConfig's discoverySelectors; repeatable
    /// (a namespace matching any is read).
    #[arg(long = "discovery-selector", value_parser = meshpush::source::kube::parse_discovery_selector)]
    discovery_selectors: Vec<kube::core::Selector>,
    /// Istio's mesh config (the YAML of the `istio` ConfigMap's `mesh`
    /// key), followed while serving (an edit is pushed): trustDomain,
    /// rootNamespace, the ingress settings and discoverySelectors apply
    /// (trustDomain and discoverySelectors from startup); every other field
    /// it sets is reported. A flag below overrides the file's value.
    #[arg(long)]
    mesh_config: Option<PathBuf>,
    /// ADS gRPC address: `IP:PORT`, or `unix:PATH` for a Unix domain socket.
    #[arg(long, default_value = "127.0.0.1:15010")]
    xds_addr: meshpush::serve::ListenAddr,
    /// Admin HTTP address (`/ready`).
    #[arg(long, default_value = "127.0.0.1:15014")]
    admin_addr: SocketAddr,
    /// Quiet time that ends a burst of config changes.
    #[arg(long, default_value = "100ms", value_parser = parse_duration)]
    debounce_after: Duration,
    /// Longest a burst of config changes is held back.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    debounce_max: Duration,
    /// Config files larger than this are not read (an error that keeps what
    /// the file defined before; `16MiB`, `64MB`, bytes).
    #[arg(long, default_value = "16MiB", value_parser = parse_bytes)]
    max_config_file_bytes: u64,
    /// Largest ADS request accepted; a larger one ends its stream with RESOURCE_EXHAUSTED.
    #[arg(long, default_value = "4MiB", value_parser = parse_bytes)]
    max_request_bytes: u64,
    /// Request bytes all ADS streams together may be receiving or handling;
    /// a request waits for room, and is refused after 10 s.
    #[arg(long, default_value = "64MiB", value_parser = parse_bytes)]
    request_budget_bytes: u64,
    /// New ADS streams started per second, in arrival order (0: no pacing).
    /// Default: 1,000 per core.
    #[arg(long)]
    max_new_streams_per_second: Option<u32>,
    /// New streams that may start at once after a quiet spell (default: a second's worth).
    #[arg(long)]
    new_stream_burst: Option<u32>,
    /// Age at which an xDS connection is drained (GOAWAY; its streams end
    /// UNAVAILABLE and Envoy reconnects), jittered ±10 %; `0s`: never.
    #[arg(long, default_value = "30m", value_parser = parse_duration)]
    max_connection_age: Duration,
    /// How long a drained connection's streams have to end before it is closed.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    max_connection_age_grace: Duration,
    /// How often the key sets RequestAuthentications name by `jwksUri` (or
    /// by issuer) are fetched again (Istio's PILOT_JWT_PUB_KEY_REFRESH_INTERVAL).
    #[arg(long, default_value = "20m", value_parser = parse_duration)]
    jwks_refresh: Duration,
    /// Concurrent streams one xDS connection may open (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS).
    #[arg(long, default_value_t = 100)]
    max_streams_per_connection: u32,
    /// Time the admin port's expensive views (`/`, syncz, config_dump,
    /// connections, scopes, configz) may take per second, all clients
    /// together; beyond it they are answered 503 with Retry-After (`0s`: no limit).
    #[arg(long, default_value = "100ms", value_parser = parse_duration)]
    admin_render_budget: Duration,
    /// Expensive admin views one client address may ask for per second
    /// (twice that at once after a quiet spell; then 429); 0: no limit.
    #[arg(long, default_value_t = 20)]
    admin_views_per_client: u32,
    /// Be the mesh's certificate authority, with the key material of this
    /// directory: Istio's plug-in CA files (ca-cert.pem, ca-key.pem,
    /// root-cert.pem, cert-chain.pem), or, when it has none, a self-signed
    /// root created there. Turns the secure xDS port on.
    #[arg(long)]
    ca_dir: Option<PathBuf>,
    /// The secure xDS port (needs --ca-dir): ADS, the CA and the registry
    /// API over mutual TLS, as istiod's 15012; `IP:PORT` or `unix:PATH`.
    #[arg(long, default_value = "0.0.0.0:15012", requires = "ca_dir")]
    secure_xds_addr: meshpush::serve::ListenAddr,
    /// The mesh's trust domain: of the identities the CA issues, and of the
    /// SPIFFE names sidecars check each other's certificates for
    /// (spiffe://TRUST_DOMAIN/ns/NS/sa/SA).
    /// Default: the mesh config's, else cluster.local.
    #[arg(long, value_parser = trust_domain)]
    trust_domain: Option<String>,
    /// The mesh's root namespace (MeshConfig's rootNamespace): a
    /// PeerAuthentication without a selector there applies to the whole mesh.
    /// Default: the mesh config's, else istio-system.
    #[arg(long)]
    root_namespace: Option<String>,
    /// The Ingress class meshpush serves (MeshConfig's ingressClass): the
    /// `kubernetes.io/ingress.class` annotation value, and the
    /// `ingressClassName` that counts as Istio's without an IngressClass.
    /// Default: the mesh config's, else istio.
    #[arg(long, value_parser = non_empty)]
    ingress_class: Option<String>,
    /// Which Ingresses are served (MeshConfig's ingressControllerMode):
    /// OFF (none), STRICT (only of the ingress class) or DEFAULT (those of
    /// the class, and those that name no class).
    /// Default: the mesh config's, else STRICT.
    #[arg(long)]
    ingress_controller_mode: Option<meshpush::config::mesh::IngressControllerMode>,
    /// The `istio` label value of the routers that serve Ingresses
    /// (MeshConfig's ingressSelector).
    /// Default: the mesh config's, else ingressgateway.
    #[arg(long)]
    ingress_selector: Option<String>,
    /// The Service of istio-system whose addresses the served Ingresses
    /// report in their status (MeshConfig's ingressService).
    /// Default: the mesh config's, else istio-ingressgateway.
    #[arg(long, value_parser = non_empty)]
    ingress_service: Option<String>,
    /// Also authenticate certificate requests by JWTs signed by a key of
    /// this JSON Web Key Set (audience istio-ca, subject
    /// system:serviceaccount:NS:SA); re-read when it changes.
    #[arg(long, requires = "ca_dir")]
    jwks: Option<PathBuf>,
    /// A name the secure port's certificate carries (DNS name or IP);
    /// repeatable. Default: istiod.istio-system.svc, localhost, 127.0.0.1, ::1.
    #[arg(long = "server-san", requires = "ca_dir")]
    server_sans: Vec<String>,
    /// An identity that may use the registry API on the secure port
    /// (`spiffe://cluster.local/ns/NS/sa/SA`); repeatable.
    #[arg(long = "registry-writer", requires = "ca_dir")]
    registry_writers: Vec<meshpush::model::Identity>,
    /// Lifetime of a workload certificate when its request asks for none.
    #[arg(long, default_value = "24h", value_parser = parse_duration)]
    workload_cert_ttl: Duration,
    /// The longest lifetime a workload certificate request may ask for.
    #[arg(long, default_value = "2160h", value_parser = parse_duration)]
    max_workload_cert_ttl: Duration,
}

impl ServeArgs {
    /// The mesh settings: the mesh config file's, with the flags over them.
    fn mesh_settings(&self) -> Result<meshpush::config::mesh::MeshSettings, String> {
        let file = match &self.mesh_config {
            Some(path) => meshpush::config::mesh::MeshSettings::read(path)?,
            None => Default::default(),
        };
        Ok(file.over(self.mesh_flags()))
    }

    /// The mesh settings the flags set.
    fn mesh_flags(&self) -> meshpush::config::mesh::MeshSettings {
        meshpush::config::mesh::MeshSettings {
            trust_domain: self.trust_domain.clone(),
            root_namespace: self.root_namespace.clone(),
            ingress_class: self.ingress_class.clone(),
            ingress_controller_mode: self.ingress_controller_mode,
            ingress_selector: self.ingress_selector.clone(),
            ingress_service: self.ingress_service.clone(),
            discovery_selectors: (!self.discovery_selectors.is_empty()).then(|| self.discovery_selectors.clone()),
            ..Default::default()
        }
    }

    fn security(&self, mesh: &meshpush::config::mesh::MeshConfig) -> Option<meshpush::serve::SecureXds> {
        let ca_dir = self.ca_dir.clone()?;
        Some(meshpush::serve::SecureXds {
            addr: self.secure_xds_addr.clone(),
            ca_dir,
            trust_domain: mesh.trust_domain.to_string(),
            jwks: self.jwks.clone(),
            server_names: if self.server_sans.is_empty() {
                meshpush::ca::tls::DEFAULT_SERVER_NAMES.iter().map(ToString::to_string).collect()
            } else {
                self.server_sans.clone()
            },
            registry_writers: self.registry_writers.clone(),
            lifetimes: meshpush::ca::Lifetimes {
                default_ttl: self.workload_cert_ttl,
                max_ttl: self.max_workload_cert_ttl,
            },
        })
    }

    fn kube_access(&self) -> Option<meshpush::source::kube::KubeAccess> {
        use meshpush::source::kube::KubeAccess;
        match (&self.kubeconfig, self.in_cluster) {
            (Some(path), _) => Some(KubeAccess::Kubeconfig(path.clone())),
            (None, true) => Some(KubeAccess::InCluster),
            (None, false) => None,
        }
    }

    fn connections(&self) -> meshpush::serve::connections::ConnectionPolicy {
        meshpush::serve::connections::ConnectionPolicy {
            max_age: Some(self.max_connection_age).filter(|age| !age.is_zero()),
            grace: self.max_connection_age_grace,
            max_streams: self.max_streams_per_connection.max(1),
            ..Default::default()
        }
    }

    fn limits(&self) -> meshpush::xds::server::StreamLimits {
        use meshpush::xds::stream::admission::AdmissionRate;
        let default = AdmissionRate::default_for_this_machine();
        let admission = match self.max_new_streams_per_second {
            Some(0) => AdmissionRate::UNLIMITED,
            Some(rate) => {
                AdmissionRate { per_second: Some(f64::from(rate)), burst: self.new_stream_burst.unwrap_or(rate) }
            }
            None => AdmissionRate { burst: self.new_stream_burst.unwrap_or(default.burst), ..default },
        };
        meshpush::xds::server::StreamLimits {
            admission,
            max_request_bytes: usize::try_from(self.max_request_bytes).unwrap_or(usize::MAX),
            request_budget_bytes: usize::try_from(self.request_budget_bytes).unwrap_or(usize::MAX),
            ..Default::default()
        }
    }
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
    /// meshpush's secure port: `HOST:PORT` or `unix:PATH`.
    #[arg(long, default_value = "istiod.istio-system.svc:15012")]
    discovery_address: String,
    /// The name meshpush's certificate must carry (default: the host of
    /// --discovery-address; `istiod.istio-system.svc` for a socket).
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
    /// The mesh's trust domain.
    #[arg(long, default_value = "cluster.local")]
    trust_domain: String,
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
    /// Envoy's worker threads.
    #[arg(long, default_value_t = 2)]
    concurrency: u32,
    /// How long Envoy's listeners drain on SIGTERM before it is stopped.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    drain_duration: Duration,
    /// One more Envoy argument (repeatable), after the agent's own.
    #[arg(long = "envoy-arg", allow_hyphen_values = true)]
    envoy_args: Vec<String>,
}

fn agent(args: AgentArgs) -> Result<meshpush::agent::AgentOptions, String> {
    use meshpush::bootstrap::parse_key_value;
    let pairs = |flag, list: &[String]| {
        list.iter().map(|a| parse_key_value(flag, a)).collect::<Result<_, _>>().map_err(|e| e.to_string())
    };
    Ok(meshpush::agent::AgentOptions {
        node_id: args.node.node_id,
        discovery_address: meshpush::agent::upstream::DiscoveryAddress::parse(&args.discovery_address)
            .map_err(|e| format!("--discovery-address {e}"))?,
        discovery_server_name: args.discovery_server_name,
        root_cert: args.root_cert,
        token_file: args.token_file,
        service_account: args.service_account,
        trust_domain: args.trust_domain,
        cert_ttl: args.cert_ttl,
        envoy_binary: args.envoy_binary,
        labels: pairs("label", &args.node.labels)?,
        meta: pairs("meta", &args.node.meta)?,
        interception: args.node.interception,
        delta: args.node.delta,
        admin_port: args.node.admin_port,
        socket_dir: args.socket_dir,
        status_addr: args.status_addr,
        concurrency: args.concurrency,
        drain: args.drain_duration,
        envoy_args: args.envoy_args,
    })
}

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
        Command::Validate { dir, max_config_file_bytes } => {
            init_tracing(&cli.log_level, cli.log_format);
            let problems = meshpush::source::validate_dir(&dir, max_config_file_bytes);
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
        Command::Serve(args) => {
            if !args.discovery_selectors.is_empty() && args.kube_access().is_none() {
                eprintln!(
                    "meshpush serve: --discovery-selector selects Kubernetes namespaces: it needs --kubeconfig or --in-cluster"
                );
                return ExitCode::from(2);
            }
            let settings = match args.mesh_settings() {
                Ok(settings) if args.kube_access().is_none() => {
                    let file = args.mesh_config.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
                    settings.without_kubernetes(&file)
                }
                Ok(settings) => settings,
                Err(e) => {
                    eprintln!("meshpush serve: --mesh-config {e}");
                    return ExitCode::from(2);
                }
            };
            let mesh = settings.mesh_config();
            init_tracing(&cli.log_level, cli.log_format);
            meshpush::serve::opt_out_of_huge_pages();
            let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
            let options = meshpush::serve::ServeOptions {
                connections: args.connections(),
                limits: args.limits(),
                admin_limits: meshpush::admin::AdminLimits {
                    render_time_per_second: args.admin_render_budget,
                    per_client_per_second: args.admin_views_per_client,
                    per_client_burst: args.admin_views_per_client.saturating_mul(2),
                    ..Default::default()
                },
                max_file_bytes: args.max_config_file_bytes,
                kube: args.kube_access(),
                discovery_selectors: settings.discovery_selectors.clone().unwrap_or_default(),
                config_dir: match (args.config.clone(), args.kube_access()) {
                    (Some(dir), _) => Some(dir),
                    (None, None) => Some(PathBuf::from("examples/bookinfo")),
                    (None, Some(_)) => None,
                },
                secure: args.security(&mesh),
                mesh,
                mesh_problems: settings.problems,
                mesh_file: args
                    .mesh_config
                    .clone()
                    .map(|path| meshpush::serve::MeshFile { path, flags: args.mesh_flags() }),
                xds_addr: args.xds_addr,
                admin_addr: args.admin_addr,
                debounce: meshpush::push::DebounceConfig { after: args.debounce_after, max: args.debounce_max },
                jwks_refresh: args.jwks_refresh,
            };
            match runtime.block_on(meshpush::serve::run(options)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!("{e:#}");
                    ExitCode::FAILURE
                }
            }
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
    };
    meshpush::bootstrap::render(&opts)
}

/// A flag value that must not be empty.
/// A trust domain as Istio's mesh config validation takes one.
fn trust_domain(value: &str) -> Result<String, String> {
    meshpush::config::mesh::file::check_trust_domain(value).map(|()| value.to_string())
}

fn non_empty(value: &str) -> Result<String, String> {
    if value.is_empty() { Err("must not be empty".to_string()) } else { Ok(value.to_string()) }
}
