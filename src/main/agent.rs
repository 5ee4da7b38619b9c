//! `meshpush agent`: its flags, and what it reads from the pod the way
//! pilot-agent does (the mesh config and ProxyConfig layers, the
//! downward-API labels and annotations, the `ISTIO_META_*` environment,
//! the application probes); `meshpush wait`: a `postStart` hook that
//! holds the application until the proxy is ready; `meshpush drain`: a
//! native sidecar's `preStop` hook.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use crate::{NodeArgs, parse_duration, trust_domain};

/// The flags of `meshpush drain`.
#[derive(Debug, clap::Args)]
pub(crate) struct DrainArgs {
    /// The agent's drain URL (its status port; plain HTTP).
    #[arg(long, default_value = "http://localhost:15020/drain")]
    url: String,
}

/// The flags of `meshpush wait`.
#[derive(Debug, clap::Args)]
pub(crate) struct WaitArgs {
    /// The readiness URL polled (plain HTTP).
    #[arg(long, default_value = "http://localhost:15021/healthz/ready")]
    url: String,
    /// How long to wait in all.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    timeout: Duration,
    /// How long between two polls (and each poll's own limit).
    #[arg(long, default_value = "500ms", value_parser = parse_duration)]
    period: Duration,
}

#[derive(Debug, clap::Args)]
pub(crate) struct AgentArgs {
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
    /// The readiness port (`/healthz/ready`, Istio's 15021).
    #[arg(long, default_value = "0.0.0.0:15021")]
    status_addr: SocketAddr,
    /// The status port, on the readiness port's address: readiness, and
    /// the application probes the injector pointed there (default: the
    /// pod's `status.sidecar.istio.io/port`, else the ProxyConfig's
    /// `statusPort`, Istio's 15020; 0: none).
    #[arg(long)]
    status_port: Option<u16>,
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
    /// The downward-API file of the pod's labels, the workload's labels
    /// under `--label` (default: `./etc/istio/pod/labels` when it exists).
    #[arg(long)]
    pod_labels: Option<PathBuf>,
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
    /// Write a proxyless gRPC application's bootstrap to this file (what
    /// it reads from `GRPC_XDS_BOOTSTRAP`, as Istio's grpc-agent template
    /// sets it): the application dials the agent's XDS socket, with
    /// `GENERATOR: grpc`, and its mTLS reads the `--output-certs` files.
    #[arg(long, env = "GRPC_XDS_BOOTSTRAP")]
    grpc_bootstrap: Option<PathBuf>,
    /// Keep the workload's certificate chain, key and mesh roots in this
    /// directory (`cert-chain.pem`, `key.pem`, `root-cert.pem`, Istio's
    /// `OUTPUT_CERTS`), rewritten at every renewal, for an application that
    /// does its own mTLS (a proxyless gRPC one). Default with
    /// `--grpc-bootstrap`: the bootstrap's directory.
    #[arg(long, env = "OUTPUT_CERTS")]
    output_certs: Option<PathBuf>,
    /// Run no Envoy (Istio's `DISABLE_ENVOY`, as its grpc-agent template
    /// sets it): the agent only keeps the certificate, the XDS socket and
    /// the files above; it is ready once it holds a certificate.
    #[arg(long, env = "DISABLE_ENVOY", num_args = 0..=1, default_value = "false",
          default_missing_value = "true", value_parser = meshpush::os::parse_switch)]
    disable_envoy: bool,
}

/// Where Istio mounts the mesh config for pilot-agent.
const AGENT_MESH_CONFIG: &str = "./etc/istio/config/mesh";
/// Where Istio's downward API writes the pod's annotations.
const AGENT_POD_ANNOTATIONS: &str = "./etc/istio/pod/annotations";

fn options(args: AgentArgs) -> Result<meshpush::agent::AgentOptions, String> {
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
    let pod_labels = existing(&args.pod_labels, AGENT_POD_LABELS);
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
        labels: labels(pod_labels.as_deref(), pairs("label", &args.node.labels)?)?,
        meta: meta(std::env::vars(), pairs("meta", &args.node.meta)?),
        interception: args.node.interception.unwrap_or_else(|| config.interception_mode().to_string()),
        delta: args.node.delta,
        admin_port: args.node.admin_port,
        socket_dir: args.socket_dir,
        status_addr: args.status_addr,
        status_port: args.status_port.unwrap_or(layers.status_port),
        app_probers: app_probers()?,
        proxy_config: config,
        envoy_args: args.envoy_args,
        xds_proxy_config,
        output_certs: args.output_certs.or_else(|| {
            // A proxyless application's mTLS needs the files: beside its bootstrap.
            let dir = args.grpc_bootstrap.as_deref()?.parent()?;
            Some(if dir.as_os_str().is_empty() { PathBuf::from(".") } else { dir.to_path_buf() })
        }),
        grpc_bootstrap: args.grpc_bootstrap,
        envoy: !args.disable_envoy,
    })
}

/// pilot-agent's switch for PCDS (the mesh's extra roots).
const PROXY_CONFIG_XDS_AGENT: &str = "PROXY_CONFIG_XDS_AGENT";

/// Where Istio's downward API writes the pod's labels.
const AGENT_POD_LABELS: &str = "./etc/istio/pod/labels";

/// The workload's labels: the downward-API file's, with `--label` over them.
fn labels(file: Option<&Path>, flags: BTreeMap<String, String>) -> Result<BTreeMap<String, String>, String> {
    let mut labels = match file {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
            meshpush::agent::proxy_config::parse_annotations(&text)
        }
        None => BTreeMap::new(),
    };
    labels.extend(flags);
    Ok(labels)
}

/// Node metadata from the environment's `ISTIO_META_*` variables (prefix
/// stripped, as pilot-agent reads them), with `--meta` over them; the keys
/// meshpush derives from its flags are left to those.
fn meta(env: impl Iterator<Item = (String, String)>, flags: BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut meta: BTreeMap<String, String> = env
        .filter_map(|(k, v)| Some((k.strip_prefix("ISTIO_META_")?.to_string(), v)))
        .filter(|(k, _)| !k.is_empty() && !meshpush::bootstrap::DERIVED_META.contains(&k.as_str()))
        .collect();
    meta.extend(flags);
    meta
}

/// The application probes the injector handed over, made against the
/// pod's address (`localhost` under Istio's legacy switch).
fn app_probers() -> Result<meshpush::agent::app_probe::AppProbers, String> {
    use meshpush::agent::app_probe::{APP_PROBERS_ENV, AppProbers};
    let Ok(text) = std::env::var(APP_PROBERS_ENV) else {
        return Ok(AppProbers::default());
    };
    let legacy = std::env::var("REWRITE_PROBE_LEGACY_LOCALHOST_DESTINATION")
        .ok()
        .map(|v| meshpush::os::parse_switch(&v))
        .transpose()
        .map_err(|e| format!("REWRITE_PROBE_LEGACY_LOCALHOST_DESTINATION: {e}"))?
        .unwrap_or(false);
    let target = match std::env::var("INSTANCE_IP") {
        Ok(ip) if !legacy && !ip.is_empty() => ip,
        _ => "localhost".to_string(),
    };
    AppProbers::parse(&text, &target)
}

/// Runs the agent until it is told to stop.
pub(crate) fn run(args: AgentArgs) -> ExitCode {
    let options = match options(args) {
        Ok(options) => options,
        Err(e) => {
            eprintln!("meshpush agent: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio runtime");
    match runtime.block_on(meshpush::agent::run(options)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("meshpush agent: {e}");
            eprintln!("meshpush agent: {e}");
            ExitCode::FAILURE
        }
    }
}

/// An `http://` URL's authority and path.
fn split_url(url: &str) -> Option<(&str, String)> {
    let rest = url.strip_prefix("http://")?;
    Some(rest.split_once('/').map_or((rest, "/".to_string()), |(a, p)| (a, format!("/{p}"))))
}

/// `meshpush drain`: asks the agent beside it to drain its proxy (a native
/// sidecar's `preStop` hook, as `pilot-agent request POST drain`).
pub(crate) fn drain(args: &DrainArgs) -> ExitCode {
    let Some((authority, path)) = split_url(&args.url) else {
        eprintln!("meshpush drain: --url {}: only http:// URLs", args.url);
        return ExitCode::from(2);
    };
    match request("POST", authority, &path, Duration::from_secs(5)) {
        Ok(200) => ExitCode::SUCCESS,
        Ok(status) => {
            eprintln!("meshpush drain: the agent answered HTTP {status}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("meshpush drain: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `meshpush wait`: polls the readiness URL until it answers 200.
pub(crate) fn wait(args: &WaitArgs) -> ExitCode {
    let Some((authority, path)) = split_url(&args.url) else {
        eprintln!("meshpush wait: --url {}: only http:// URLs are polled", args.url);
        return ExitCode::from(2);
    };
    let deadline = Instant::now() + args.timeout;
    let mut last = String::from("no answer yet");
    while Instant::now() < deadline {
        match request("GET", authority, &path, args.period) {
            Ok(200) => {
                eprintln!("meshpush wait: the proxy is ready");
                return ExitCode::SUCCESS;
            }
            Ok(status) => last = format!("HTTP {status}"),
            Err(e) => last = e,
        }
        std::thread::sleep(args.period);
    }
    eprintln!("meshpush wait: the proxy was not ready within {:?} ({last})", args.timeout);
    ExitCode::FAILURE
}

/// One request without a body: the status code.
fn request(method: &str, authority: &str, path: &str, limit: Duration) -> Result<u16, String> {
    use std::io::{Read as _, Write as _};
    use std::net::ToSocketAddrs as _;
    let address = authority.to_socket_addrs().map_err(|e| e.to_string())?.next().ok_or("no address")?;
    let mut stream = std::net::TcpStream::connect_timeout(&address, limit).map_err(|e| e.to_string())?;
    stream.set_read_timeout(Some(limit)).map_err(|e| e.to_string())?;
    write!(stream, "{method} {path} HTTP/1.1\r\nHost: {authority}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).map_err(|e| e.to_string())?;
    std::str::from_utf8(&head[9..12]).ok().and_then(|s| s.parse().ok()).ok_or_else(|| "not an HTTP answer".into())
}
