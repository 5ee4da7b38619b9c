//! `meshpush serve`: its flags, and how they become the server's options
//! (the mesh config read first, from its file or Istio's ConfigMap, with
//! the flags over it).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use meshpush::source::mesh_config::MeshOrigin;

use crate::{LogFormat, init_tracing, non_empty, parse_bytes, parse_duration, trust_domain};

/// The namespace of Istio's ConfigMap when --mesh-configmap names none
/// (istiod reads its own namespace's; Istio installs into this one).
const ISTIO_NAMESPACE: &str = "istio-system";

/// `NAMESPACE/NAME`.
fn parse_namespaced(value: &str) -> Result<(String, String), String> {
    match value.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns.to_string(), name.to_string()))
        }
        _ => Err(format!("{value:?} is not NAMESPACE/NAME")),
    }
}

#[derive(Debug, clap::Args)]
pub(crate) struct ServeArgs {
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
    /// key), followed while serving (an edit is pushed; trustDomain and
    /// discoverySelectors apply from startup); every field it sets that is
    /// not applied is reported. A flag below overrides the file's value.
    /// Without it, a server reading Kubernetes follows Istio's ConfigMap.
    #[arg(long)]
    mesh_config: Option<PathBuf>,
    /// Istio's `meshNetworks` (the YAML of the `istio` ConfigMap's
    /// `meshNetworks` key, istiod's `--networksConfig`): which network each
    /// cluster or address range is on, and the gateways that reach it;
    /// followed with --mesh-config. Without it, a server reading
    /// Kubernetes reads the ConfigMap's key.
    #[arg(long, requires = "mesh_config")]
    mesh_networks: Option<PathBuf>,
    /// The ConfigMap (`NAMESPACE/NAME`) whose `mesh` key is the mesh config,
    /// read and followed through the Kubernetes API when no --mesh-config
    /// is given. Default: `istio-system/istio`, or `istio-system/istio-REV`
    /// with --revision, as Istio names it.
    #[arg(long, value_parser = parse_namespaced, conflicts_with = "mesh_config")]
    mesh_configmap: Option<(String, String)>,
    /// The Istio revision this server is (`istio.io/rev`): its mesh config
    /// is the ConfigMap `istio-REV`, and Istio objects read from
    /// Kubernetes that are labelled for another revision are not served.
    #[arg(long)]
    revision: Option<String>,
    /// This cluster's id (Istio's `CLUSTER_ID`): a remote secret's key that
    /// names it is not read as a remote cluster.
    #[arg(long, env = "CLUSTER_ID", default_value = "Kubernetes")]
    cluster_id: String,
    /// meshpush's own namespace (Istio's `POD_NAMESPACE`): reading
    /// Kubernetes, the remote secrets (labelled `istio/multiCluster: "true"`)
    /// in it name the mesh's other clusters, and its
    /// `topology.istio.io/network` label in each cluster names that
    /// cluster's network.
    #[arg(long, env = "POD_NAMESPACE", default_value = "istio-system")]
    system_namespace: String,
    /// The service account meshpush runs as (istiod's is `istiod`): the
    /// mesh certificate meshpush gives itself names it, in
    /// `--system-namespace`. It presents that certificate to the
    /// `ISTIO_MUTUAL` config sources of the mesh config.
    #[arg(long, env = "SERVICE_ACCOUNT", default_value = "istiod")]
    service_account: String,
    /// Consul's HTTP API (`http://HOST:8500`): its catalog's services are
    /// served as `NAME.service.consul`, as Istio 1.7's Consul registry
    /// served them, and followed with blocking queries.
    #[arg(long, value_parser = parse_consul_address)]
    consul_address: Option<String>,
    /// A file holding the ACL token sent to Consul (`X-Consul-Token`),
    /// read for every request.
    #[arg(long, requires = "consul_address")]
    consul_token_file: Option<PathBuf>,
    /// How long readiness waits for a remote cluster's first lists (Istio's
    /// `PILOT_REMOTE_CLUSTER_TIMEOUT`); `0s`: for ever. A cluster that takes
    /// longer keeps syncing.
    #[arg(long, env = "PILOT_REMOTE_CLUSTER_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    remote_cluster_timeout: Duration,
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
    /// ADS streams that may be unanswered (arrived, first request not yet
    /// handled) at once: a new xDS connection is served, in arrival order,
    /// only when one of these places is free (0: no bound). Default: 256
    /// per core.
    #[arg(long)]
    max_unanswered_streams: Option<u32>,
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
    /// How often the SPIFFE bundles of the mesh config's
    /// `caCertificates[].spiffeBundleUrl` are fetched again, under
    /// --multi-root-mesh (istiod's fixed period: 30m); a URL is fetched as
    /// soon as the mesh config lists it. At least 1s.
    #[arg(long, default_value = "30m", value_parser = parse_duration)]
    spiffe_bundle_refresh: Duration,
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
    /// Default: the mesh config's, else the ingress Service's name when it
    /// is not istio-ingressgateway, else ingressgateway.
    #[arg(long)]
    ingress_selector: Option<String>,
    /// The Service of istio-system whose addresses the served Ingresses
    /// report in their status (MeshConfig's ingressService); without an
    /// ingress selector, its name labels the routers that serve them.
    /// Default: the mesh config's, else istio-ingressgateway.
    #[arg(long, value_parser = non_empty)]
    ingress_service: Option<String>,
    /// Also authenticate certificate requests by JWTs signed by a key of
    /// this JSON Web Key Set (audience istio-ca, subject
    /// system:serviceaccount:NS:SA); re-read when it changes.
    #[arg(long, requires = "ca_dir")]
    jwks: Option<PathBuf>,
    /// The admission webhooks' HTTPS port (needs --ca-dir): the sidecar
    /// injector (`/inject`) and the config validator (`/validate`), as
    /// istiod's 15017; `off` for none.
    #[arg(long, default_value = "0.0.0.0:15017", requires = "ca_dir")]
    webhook_addr: String,
    /// On Kubernetes: keep the self-signed root in this Secret
    /// (`NAMESPACE/NAME`, as istiod keeps `istio-ca-secret`) when --ca-dir
    /// holds no plug-in CA, so that every replica signs with one root; the
    /// first replica creates it, and a root istiod made is taken over.
    #[arg(long, requires = "ca_dir", value_parser = parse_namespaced)]
    ca_secret: Option<(String, String)>,
    /// The sidecar injector's settings (image, policy, selectors, the
    /// proxy's defaults; Istio's `istio-sidecar-injector` values), read at
    /// startup. Default: Istio's defaults with meshpush's proxy image.
    #[arg(long)]
    injector_config: Option<PathBuf>,
    /// A name the secure port's certificate carries (DNS name or IP);
    /// repeatable. Default: istiod.istio-system.svc, localhost, 127.0.0.1, ::1.
    #[arg(long = "server-san", requires = "ca_dir")]
    server_sans: Vec<String>,
    /// An identity that may use the registry API on the secure port
    /// (`spiffe://cluster.local/ns/NS/sa/SA`); repeatable.
    #[arg(long = "registry-writer", requires = "ca_dir")]
    registry_writers: Vec<meshpush::model::Identity>,
    /// Service accounts (`NAMESPACE/NAME`, comma-separated) trusted as node
    /// agents: with a Pod-bound token, they are issued the certificates of
    /// the workloads on their Pod's node (ztunnel's `ImpersonatedIdentity`).
    /// Istio's chart sets `istio-system/ztunnel`; none by default.
    #[arg(long = "ca-trusted-node-accounts", env = "CA_TRUSTED_NODE_ACCOUNTS", value_delimiter = ',',
          requires = "ca_dir", value_parser = parse_namespaced)]
    ca_trusted_node_accounts: Vec<(String, String)>,
    /// Trust the mesh config's `caCertificates` roots beside the CA's own,
    /// as istiod's ISTIO_MULTIROOT_MESH does: they are sent to each agent
    /// over PCDS (an agent uses them with PROXY_CONFIG_XDS_AGENT=true).
    #[arg(long, env = "ISTIO_MULTIROOT_MESH", num_args = 0..=1, default_value = "false",
          default_missing_value = "true", value_parser = meshpush::os::parse_switch)]
    multi_root_mesh: bool,
    /// Let sidecars accept a peer of any trust domain the roots sign for,
    /// as istiod's PILOT_SKIP_VALIDATE_TRUST_DOMAIN does. Default: only the
    /// mesh's trust domain, its aliases and caCertificates' trustDomains.
    #[arg(long, env = "PILOT_SKIP_VALIDATE_TRUST_DOMAIN", num_args = 0..=1, default_value = "false",
          default_missing_value = "true", value_parser = meshpush::os::parse_switch)]
    skip_validate_trust_domain: bool,
    /// Serve ambient mode's ztunnels (the workload API), as istiod does
    /// under PILOT_ENABLE_AMBIENT (Istio's ambient profile sets it).
    #[arg(long, env = "PILOT_ENABLE_AMBIENT", num_args = 0..=1, default_value = "false",
          default_missing_value = "true", value_parser = meshpush::os::parse_switch)]
    enable_ambient: bool,
    /// Send dry-run AuthorizationPolicies to ztunnel as dry runs, as istiod
    /// does under AMBIENT_ENABLE_DRY_RUN_AUTHORIZATION_POLICY (ztunnel
    /// 1.29 or later); without it they are not sent to ztunnel at all.
    #[arg(long, env = "AMBIENT_ENABLE_DRY_RUN_AUTHORIZATION_POLICY", num_args = 0..=1, default_value = "false",
          default_missing_value = "true", value_parser = meshpush::os::parse_switch)]
    ambient_dry_run_policies: bool,
    /// Lifetime of a workload certificate when its request asks for none.
    #[arg(long, default_value = "24h", value_parser = parse_duration)]
    workload_cert_ttl: Duration,
    /// The longest lifetime a workload certificate request may ask for.
    #[arg(long, default_value = "2160h", value_parser = parse_duration)]
    max_workload_cert_ttl: Duration,
}

impl ServeArgs {
    /// Where the mesh config is read: the file, else (reading Kubernetes)
    /// the ConfigMap.
    fn mesh_origin(&self) -> Option<MeshOrigin> {
        if let Some(path) = &self.mesh_config {
            return Some(MeshOrigin::File { mesh: path.clone(), networks: self.mesh_networks.clone() });
        }
        let access = self.kube_access()?;
        Some(match &self.mesh_configmap {
            Some((namespace, name)) => {
                MeshOrigin::ConfigMap { access, namespace: namespace.clone(), name: name.clone() }
            }
            None => MeshOrigin::istio_configmap(access, ISTIO_NAMESPACE, self.revision.as_deref()),
        })
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
            multi_root_mesh: Some(self.multi_root_mesh),
            skip_validate_trust_domain: Some(self.skip_validate_trust_domain),
            enable_ambient: Some(self.enable_ambient),
            ambient_dry_run_policies: Some(self.ambient_dry_run_policies),
            cluster_id: Some(self.cluster_id.clone()),
            system_namespace: Some(self.system_namespace.clone()),
            ..Default::default()
        }
    }

    fn security(
        &self,
        mesh: &meshpush::config::mesh::MeshConfig,
    ) -> Result<Option<meshpush::serve::SecureXds>, String> {
        let Some(ca_dir) = self.ca_dir.clone() else { return Ok(None) };
        Ok(Some(meshpush::serve::SecureXds {
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
            trusted_node_accounts: self.ca_trusted_node_accounts.iter().cloned().collect(),
            ca_secret: self.ca_secret.clone(),
            webhook_addr: match self.webhook_addr.as_str() {
                "off" => None,
                addr => Some(addr.parse().map_err(|_| format!("--webhook-addr {addr:?}: expected IP:PORT or off"))?),
            },
            injector: match &self.injector_config {
                Some(path) => {
                    meshpush::inject::InjectorSettings::read(path).map_err(|e| format!("--injector-config {e}"))?
                }
                None => Default::default(),
            },
            lifetimes: meshpush::ca::Lifetimes {
                default_ttl: self.workload_cert_ttl,
                max_ttl: self.max_workload_cert_ttl,
            },
        }))
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
        let max_unanswered = match self.max_unanswered_streams {
            Some(0) => None,
            Some(n) => Some(n),
            None => Some(meshpush::xds::stream::admission::default_max_unanswered()),
        };
        meshpush::xds::server::StreamLimits {
            admission,
            max_unanswered,
            max_request_bytes: usize::try_from(self.max_request_bytes).unwrap_or(usize::MAX),
            request_budget_bytes: usize::try_from(self.request_budget_bytes).unwrap_or(usize::MAX),
            ..Default::default()
        }
    }
}

/// Runs `meshpush serve`.
pub(crate) fn run(args: ServeArgs, log_level: &str, log_format: LogFormat) -> ExitCode {
    let kube = args.kube_access();
    if !args.discovery_selectors.is_empty() && kube.is_none() {
        eprintln!(
            "meshpush serve: --discovery-selector selects Kubernetes namespaces: it needs --kubeconfig or --in-cluster"
        );
        return ExitCode::from(2);
    }
    if (args.mesh_configmap.is_some() || args.revision.is_some()) && kube.is_none() {
        eprintln!(
            "meshpush serve: --mesh-configmap and --revision read Kubernetes: they need --kubeconfig or --in-cluster"
        );
        return ExitCode::from(2);
    }
    init_tracing(log_level, log_format);
    meshpush::serve::opt_out_of_huge_pages();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    let origin = args.mesh_origin();
    let read = match &origin {
        Some(origin) => runtime.block_on(origin.read()),
        None => Ok(Default::default()),
    };
    let file = origin.as_ref().map_or_else(|| "the command line".to_string(), |o| o.name());
    let settings = match read.and_then(|read| read.over(args.mesh_flags()).finish(&file)) {
        Ok(settings) => settings,
        Err(e) => {
            let flag = if args.mesh_config.is_some() { "--mesh-config " } else { "the mesh config " };
            eprintln!("meshpush serve: {flag}{e}");
            return ExitCode::from(2);
        }
    };
    let settings = match (&kube, &origin) {
        (None, Some(origin)) => settings.without_kubernetes(&origin.name()),
        _ => settings,
    };
    let mesh = settings.mesh_config();
    let secure = match args.security(&mesh) {
        Ok(secure) => secure,
        Err(e) => {
            eprintln!("meshpush serve: {e}");
            return ExitCode::from(2);
        }
    };
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
        kube: kube.clone(),
        revision: args.revision.clone(),
        discovery_selectors: settings.discovery_selectors.clone().unwrap_or_default(),
        cluster_id: args.cluster_id.clone(),
        system_namespace: args.system_namespace.clone(),
        service_account: args.service_account.clone(),
        consul: args.consul_address.clone().map(|address| meshpush::source::consul::ConsulOptions {
            address,
            token_file: args.consul_token_file.clone(),
        }),
        // As istiod's config source client names itself: its pod and IP.
        mcp_node: meshpush::source::mcp::node(
            &args.system_namespace,
            &std::env::var("POD_NAME").unwrap_or_else(|_| "meshpush".into()),
            &std::env::var("INSTANCE_IP").unwrap_or_else(|_| "127.0.0.1".into()),
            args.revision.as_deref().filter(|r| !r.is_empty()),
        ),
        remote_cluster_timeout: args.remote_cluster_timeout,
        config_dir: match (args.config.clone(), args.kube_access()) {
            (Some(dir), _) => Some(dir),
            (None, None) => Some(PathBuf::from("examples/bookinfo")),
            (None, Some(_)) => None,
        },
        secure,
        mesh,
        mesh_problems: settings.problems.clone(),
        mesh_source: origin.map(|origin| meshpush::serve::MeshSource {
            origin,
            flags: args.mesh_flags(),
            startup: settings.clone(),
        }),
        xds_addr: args.xds_addr,
        admin_addr: args.admin_addr,
        debounce: meshpush::push::DebounceConfig { after: args.debounce_after, max: args.debounce_max },
        jwks_refresh: args.jwks_refresh,
        spiffe_bundle_refresh: args.spiffe_bundle_refresh,
    };
    match runtime.block_on(meshpush::serve::run(options)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `--consul-address`: `http://HOST:PORT` or `https://HOST:PORT`.
fn parse_consul_address(text: &str) -> Result<String, String> {
    let uri: http::Uri = text.parse().map_err(|e| format!("not a URL ({e}): expected http://HOST:8500"))?;
    match (uri.scheme_str(), uri.host()) {
        (Some("http" | "https"), Some(_)) if uri.path() == "/" || uri.path().is_empty() => {
            Ok(text.trim_end_matches('/').to_string())
        }
        _ => Err("expected http://HOST:PORT or https://HOST:PORT (Consul's HTTP API), without a path".into()),
    }
}
