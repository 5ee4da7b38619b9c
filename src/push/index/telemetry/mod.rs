//! What each proxy logs and traces: the Telemetry API and the mesh
//! config resolved per side of a proxy: its client side (a sidecar's
//! outbound listeners, every listener of a router; Istio's `CLIENT` mode)
//! and its server side (a sidecar's inbound listeners; `SERVER`).
//!
//! Role: the generators attach what [`AppliedTelemetry`] lists to every
//! HTTP connection manager and TCP proxy of that side, and to its
//! listeners for the connections no chain takes. The scope key carries the
//! client side's and the inbound key the server side's, so proxies that log
//! and trace alike share their generated resources, and a mesh without
//! Telemetry carries one shared value.
//!
//! How istiod decides it (`pilot/pkg/model/telemetry.go`), and so meshpush:
//! * The layers of a workload, later over earlier: the root namespace's
//!   namespace-wide Telemetry, its own namespace's, then each Telemetry of
//!   its namespace whose `selector` matches its labels (or, for a Gateway
//!   API gateway, whose `targetRefs` name its Gateway), oldest first. Of
//!   several namespace-wide Telemetries in a namespace only the oldest
//!   counts.
//! * Access logs, per side: the providers the most specific layer names
//!   for that side replace those below (starting from
//!   `defaultProviders.accessLogging`), each with the `filter` of the entry
//!   that named it; `disabled` turns them off. No Telemetry logging and no
//!   default provider (or nothing left for the side) falls back to the
//!   mesh config's `accessLogFile`.
//! * Tracing: the first provider of the latest entry for the side (from
//!   `defaultProviders.tracing`), each setting overriding the one below; a
//!   side without a provider, or with span reporting disabled, traces
//!   nothing. A setting no layer makes falls back to the proxy's
//!   ProxyConfig (`tracing.sampling`, `customTags`, `maxPathTagLength`).
//! * No Telemetry tracing and no default provider at all: with
//!   `enableTracing` (the default), Istio's legacy path traces with the
//!   bootstrap's tracer at the ProxyConfig's sampling. meshpush gives this
//!   tracing block only to a proxy whose ProxyConfig names a tracer (its
//!   agent starts Envoy with it); without one Envoy has nothing to trace
//!   with, so the block Istio adds everywhere would change nothing.
//!   The proxy's ProxyConfig is its node's (`PROXY_CONFIG`), else the
//!   mesh's `defaultConfig`.
//!
//! Invariant: a format here is the one Envoy is given: an empty format is
//! already Istio's default, and a text format ends in a newline.

mod resolve;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::Serialize;

pub use resolve::{Collector, GrpcLog, LogSink, Tracer};

use super::ServiceIndex;
use crate::config::istio::{AccessLogging, ModeSelector, Side, Telemetry, TelemetrySpec, Tracing};
use crate::config::mesh::providers::{self, ExtensionProvider};
use crate::config::mesh::proxy_config::{ProxyConfig, TracingConfig};
use crate::config::mesh::{AccessLogEncoding, AccessLogSettings, MeshConfig, json_labels};
use crate::config::{ConfigKind, ConfigObject};
use crate::model::{Proxy, ProxyKind, StoreSnapshot};

/// Istio's default text access log format (its `EnvoyTextLogFormat`): one
/// line per request or connection.
pub const DEFAULT_TEXT_FORMAT: &str = "[%START_TIME%] \"%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%\" \
%RESPONSE_CODE% %RESPONSE_FLAGS% %RESPONSE_CODE_DETAILS% %CONNECTION_TERMINATION_DETAILS% \
\"%UPSTREAM_TRANSPORT_FAILURE_REASON%\" %BYTES_RECEIVED% %BYTES_SENT% %DURATION% \
%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% \"%REQ(X-FORWARDED-FOR)%\" \"%REQ(USER-AGENT)%\" \"%REQ(X-REQUEST-ID)%\" \
\"%REQ(:AUTHORITY)%\" \"%UPSTREAM_HOST%\" %UPSTREAM_CLUSTER_RAW% %UPSTREAM_LOCAL_ADDRESS% \
%DOWNSTREAM_LOCAL_ADDRESS% %DOWNSTREAM_REMOTE_ADDRESS% %REQUESTED_SERVER_NAME% %ROUTE_NAME%\n";

/// Istio's default JSON access log labels, each the command operator its
/// text format logs in that place.
pub const DEFAULT_JSON_LABELS: [(&str, &str); 24] = [
    ("start_time", "%START_TIME%"),
    ("route_name", "%ROUTE_NAME%"),
    ("method", "%REQ(:METHOD)%"),
    ("path", "%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%"),
    ("protocol", "%PROTOCOL%"),
    ("response_code", "%RESPONSE_CODE%"),
    ("response_flags", "%RESPONSE_FLAGS%"),
    ("response_code_details", "%RESPONSE_CODE_DETAILS%"),
    ("connection_termination_details", "%CONNECTION_TERMINATION_DETAILS%"),
    ("bytes_received", "%BYTES_RECEIVED%"),
    ("bytes_sent", "%BYTES_SENT%"),
    ("duration", "%DURATION%"),
    ("upstream_service_time", "%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)%"),
    ("x_forwarded_for", "%REQ(X-FORWARDED-FOR)%"),
    ("user_agent", "%REQ(USER-AGENT)%"),
    ("request_id", "%REQ(X-REQUEST-ID)%"),
    ("authority", "%REQ(:AUTHORITY)%"),
    ("upstream_host", "%UPSTREAM_HOST%"),
    ("upstream_cluster", "%UPSTREAM_CLUSTER_RAW%"),
    ("upstream_local_address", "%UPSTREAM_LOCAL_ADDRESS%"),
    ("downstream_local_address", "%DOWNSTREAM_LOCAL_ADDRESS%"),
    ("downstream_remote_address", "%DOWNSTREAM_REMOTE_ADDRESS%"),
    ("requested_server_name", "%REQUESTED_SERVER_NAME%"),
    ("upstream_transport_failure_reason", "%UPSTREAM_TRANSPORT_FAILURE_REASON%"),
];

/// What one side of a proxy logs and traces.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct AppliedTelemetry {
    /// The access loggers of its connection managers and TCP proxies.
    pub access_logs: Vec<AccessLogger>,
    /// Whether its listeners log, with the same loggers, the connections
    /// no filter chain takes (Envoy's `NR` response flag).
    pub listener_log: bool,
    /// How its connection managers trace, if they do.
    pub tracing: Option<Arc<AppliedTracing>>,
}

/// One access logger.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct AccessLogger {
    /// Where it writes.
    pub sink: LogSink,
    /// Which entries it writes: a CEL expression (none: all).
    pub filter: Option<Arc<str>>,
}

/// The format of an access log entry, as Envoy is given it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum LogFormat {
    /// A line of text with Envoy's command operators, ending in a newline.
    Text(Arc<str>),
    /// A JSON object per entry: the labels, as JSON text of an object whose
    /// values hold command operators.
    Json(Arc<str>),
}

impl LogFormat {
    /// The format of the mesh config's settings: Istio's default where the
    /// mesh sets none (or, for JSON, none that is an object of labels); a
    /// text format gets its newline, as Istio adds it.
    pub fn of_mesh(settings: &AccessLogSettings) -> LogFormat {
        match settings.encoding {
            AccessLogEncoding::Text if settings.format.is_empty() => LogFormat::Text(DEFAULT_TEXT_FORMAT.into()),
            AccessLogEncoding::Text => LogFormat::text(&settings.format),
            AccessLogEncoding::Json => match json_labels(&settings.format) {
                Ok(labels) if !labels.is_empty() => {
                    LogFormat::Json(serde_json::Value::Object(labels).to_string().into())
                }
                _ => LogFormat::default_json(),
            },
        }
    }

    /// A text format, its newline added when missing.
    pub fn text(text: &str) -> LogFormat {
        if text.ends_with('\n') { LogFormat::Text(text.into()) } else { LogFormat::Text(format!("{text}\n").into()) }
    }

    /// Istio's default JSON labels.
    pub fn default_json() -> LogFormat {
        let labels: serde_json::Map<String, serde_json::Value> =
            DEFAULT_JSON_LABELS.iter().map(|(k, v)| (k.to_string(), serde_json::Value::from(*v))).collect();
        LogFormat::Json(serde_json::Value::Object(labels).to_string().into())
    }
}

/// How a side traces.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct AppliedTracing {
    /// The tracer.
    pub tracer: Tracer,
    /// The share of requests traced, in percent.
    pub random_sampling: Percent,
    /// The tags added to every span, by name: the user's, then Istio's
    /// own when they are on.
    pub custom_tags: Vec<(Arc<str>, TagValue)>,
    /// Whether Istio's tags (canonical service and revision, namespace,
    /// mesh and cluster ids, the dry-run authorization results) are added.
    pub istio_tags: bool,
    /// The longest path tag (0: Envoy's default).
    pub max_path_tag_length: u32,
    /// Whether the request id decides sampling.
    pub use_request_id_for_trace_sampling: bool,
    /// Whether trace context is not propagated.
    pub disable_context_propagation: bool,
    /// Whether the proxy starts an upstream span (routers).
    pub spawn_upstream_span: bool,
    /// The proxy's service name, for tracers that report one (its xDS
    /// cluster); empty for those that do not.
    pub service_name: Arc<str>,
}

/// A percentage, exactly as given (hashable, ordered).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Percent(u64);

impl Percent {
    /// `value` percent (0–100).
    pub fn new(value: f64) -> Percent {
        Percent(value.clamp(0.0, 100.0).to_bits())
    }

    /// The percentage.
    pub fn value(self) -> f64 {
        f64::from_bits(self.0)
    }
}

/// A span tag's value.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum TagValue {
    /// A fixed value.
    Literal(Arc<str>),
    /// An environment variable of the proxy, with a default.
    Environment(Arc<str>, Option<Arc<str>>),
    /// A request header, with a default.
    Header(Arc<str>, Option<Arc<str>>),
    /// A format string (Envoy's command operators).
    Formatter(Arc<str>),
    /// A value of the request's dynamic metadata: filter and path.
    RequestMetadata(Arc<str>, Arc<str>),
}

/// The sampling istiod applies when neither a Telemetry nor the proxy's
/// config sets one (`PILOT_TRACE_SAMPLING`'s default).
const DEFAULT_SAMPLING: f64 = 1.0;

/// The sampling a ProxyConfig's tracing gives: its own unless 0 (unset),
/// a value above 100 read as Istio reads it (1 %), else the default.
fn proxy_sampling(tracing: Option<&TracingConfig>) -> f64 {
    match tracing.and_then(|t| t.sampling).map(|p| p.0) {
        Some(p) if p > 100.0 => DEFAULT_SAMPLING,
        Some(p) if p != 0.0 => p,
        _ => DEFAULT_SAMPLING,
    }
}

/// The tags every span gets: the user's `tags`, and Istio's own when
/// `istio_tags`, by name.
fn span_tags(
    tags: Option<&BTreeMap<String, crate::config::istio::CustomTag>>,
    istio_tags: bool,
    proxy: &Proxy,
) -> Vec<(Arc<str>, TagValue)> {
    let mut out: Vec<(Arc<str>, TagValue)> = tags
        .into_iter()
        .flatten()
        .filter_map(|(name, tag)| Some((Arc::from(name.as_str()), tag_value(tag)?)))
        .collect();
    if istio_tags {
        out.extend(istio_tag_values(proxy));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Istio's legacy tracing of a proxy whose ProxyConfig has `tracing`: the
/// bootstrap's tracer, that config's sampling, custom tags and path length.
fn legacy_tracing(tracing: &TracingConfig, proxy: &Proxy) -> AppliedTracing {
    let istio_tags = tracing.enable_istio_tags.unwrap_or(true);
    let custom_tags = span_tags(Some(&tracing.custom_tags), istio_tags, proxy);
    AppliedTracing {
        tracer: Tracer::Bootstrap,
        random_sampling: Percent::new(proxy_sampling(Some(tracing))),
        custom_tags,
        istio_tags,
        max_path_tag_length: tracing.max_path_tag_length.unwrap_or(0),
        use_request_id_for_trace_sampling: true,
        disable_context_propagation: false,
        spawn_upstream_span: false,
        service_name: Arc::from(""),
    }
}

/// One Telemetry object, as the index keeps it.
#[derive(Debug)]
struct Policy {
    name: String,
    spec: TelemetrySpec,
}

impl Policy {
    fn namespace_wide(&self) -> bool {
        self.spec.selector.as_ref().is_none_or(|s| s.match_labels.is_empty())
            && self.spec.target_ref.is_none()
            && self.spec.target_refs.is_empty()
    }

    /// Whether the policy (not namespace-wide) applies to `proxy`.
    fn selects(&self, proxy: &Proxy) -> bool {
        let gateway = proxy.labels.get(GATEWAY_NAME_LABEL);
        let refs: Vec<&crate::config::istio::TargetRef> = if self.spec.target_refs.is_empty() {
            self.spec.target_ref.iter().collect()
        } else {
            self.spec.target_refs.iter().collect()
        };
        if !refs.is_empty() {
            // Sidecars and Istio's own gateways take no policy with targets;
            // a Gateway API gateway takes one naming its Gateway.
            let Some(gateway) = gateway else { return false };
            return refs.iter().any(|r| {
                r.kind == "Gateway"
                    && r.group.as_deref() == Some(crate::config::gateway_api::GROUP)
                    && r.name == *gateway
                    && r.namespace.as_deref().is_none_or(|ns| ns == &*proxy.namespace)
            });
        }
        self.spec.selector.as_ref().is_some_and(|s| s.match_labels.iter().all(|(k, v)| proxy.labels.get(k) == Some(v)))
    }
}

/// The label a Gateway API gateway's proxies carry: their Gateway's name.
const GATEWAY_NAME_LABEL: &str = "gateway.networking.k8s.io/gateway-name";

/// What the proxies of the mesh log and trace.
#[derive(Debug)]
pub struct TelemetryIndex {
    root_namespace: Arc<str>,
    /// Telemetries by namespace, oldest first (then by name).
    by_namespace: HashMap<Arc<str>, Vec<Policy>>,
    /// The mesh's providers: the built-ins with its own merged in.
    providers: Arc<[ExtensionProvider]>,
    defaults: crate::config::mesh::providers::DefaultProviders,
    /// Each provider resolved as a logger and as a tracer, by lowercase name.
    sinks: HashMap<String, Result<LogSink, String>>,
    tracers: HashMap<String, Result<Tracer, String>>,
    /// Whether listeners log unrouted connections.
    listener_log: bool,
    /// What a side logs under the mesh config alone.
    fallback: Arc<AppliedTelemetry>,
    /// Whether nothing but the mesh config decides (no Telemetry, no
    /// default log or tracing provider): every proxy gets `fallback`,
    /// but for the legacy tracing of a proxy whose ProxyConfig names a tracer.
    mesh_only: bool,
    /// `enableTracing`.
    enable_tracing: bool,
    /// The ProxyConfig of a proxy whose node sends none.
    default_proxy_config: Arc<ProxyConfig>,
}

impl TelemetryIndex {
    /// The index of the Telemetries of `store` in a mesh configured as
    /// `mesh`, its providers' collectors found in `services`.
    pub fn build(store: &StoreSnapshot, mesh: &MeshConfig, services: &ServiceIndex) -> TelemetryIndex {
        let mut all: Vec<(Option<String>, Arc<str>, Policy)> = store
            .kind(ConfigKind::Telemetry)
            .values()
            .filter_map(|stored| match &*stored.object {
                ConfigObject::Telemetry(t) => Some(policy_of(t)),
                _ => None,
            })
            .collect();
        // Oldest first; objects of a file have no timestamp and sort by name.
        all.sort_by(|a, b| (&a.0, &a.2.name).cmp(&(&b.0, &b.2.name)));
        let mut by_namespace: HashMap<Arc<str>, Vec<Policy>> = HashMap::new();
        for (_, namespace, policy) in all {
            by_namespace.entry(namespace).or_default().push(policy);
        }
        let settings = &mesh.access_log;
        let fallback = if settings.file.is_empty() {
            AppliedTelemetry::default()
        } else {
            AppliedTelemetry {
                access_logs: vec![AccessLogger {
                    sink: LogSink::File {
                        path: settings.file.clone(),
                        format: LogFormat::of_mesh(settings),
                        omit_empty_values: false,
                    },
                    filter: None,
                }],
                listener_log: settings.listener_log,
                tracing: None,
            }
        };
        let providers = mesh.extension_providers.clone();
        let mut sinks = HashMap::new();
        let mut tracers = HashMap::new();
        for provider in providers.iter() {
            let name = provider.name.to_ascii_lowercase();
            let sink = if provider.name == providers::ENVOY_PROVIDER && is_plain_envoy(provider) {
                // The built-in `envoy` provider without a format of its own logs as the mesh config says.
                Ok(LogSink::File {
                    path: provider.envoy_file_access_log.as_ref().map_or("/dev/stdout".into(), |f| {
                        if f.path.is_empty() { "/dev/stdout".into() } else { f.path.as_str().into() }
                    }),
                    format: LogFormat::of_mesh(settings),
                    omit_empty_values: false,
                })
            } else {
                resolve::log_sink(provider, services)
            };
            sinks.insert(name.clone(), sink);
            tracers.insert(name, resolve::tracer(provider, services));
        }
        let defaults = mesh.default_providers.clone();
        let mesh_only = by_namespace.is_empty() && defaults.access_logging.is_empty() && defaults.tracing.is_empty();
        TelemetryIndex {
            root_namespace: mesh.root_namespace.clone(),
            by_namespace,
            providers,
            defaults,
            sinks,
            tracers,
            listener_log: settings.listener_log,
            fallback: Arc::new(fallback),
            mesh_only,
            enable_tracing: mesh.enable_tracing,
            default_proxy_config: mesh.default_proxy_config.clone(),
        }
    }

    /// Whether the index holds Telemetry objects.
    pub fn has_objects(&self) -> bool {
        !self.by_namespace.is_empty()
    }

    /// What the client side of `proxy` logs and traces (a sidecar's
    /// outbound listeners, every listener of a router).
    pub fn client(&self, proxy: &Proxy) -> Arc<AppliedTelemetry> {
        self.applied(proxy, Side::Client)
    }

    /// What the server side of `proxy` logs and traces (a sidecar's inbound listeners).
    pub fn server(&self, proxy: &Proxy) -> Arc<AppliedTelemetry> {
        self.applied(proxy, Side::Server)
    }

    fn applied(&self, proxy: &Proxy, side: Side) -> Arc<AppliedTelemetry> {
        if self.mesh_only && self.legacy_tracer(proxy).is_none() {
            return self.fallback.clone();
        }
        let layers = self.layers(proxy);
        let access_logs = match self.access_logs(&layers, side) {
            Some(logs) => logs,
            None => self.fallback.access_logs.clone(),
        };
        let tracing = self.tracing(&layers, side, proxy).map(Arc::new);
        if tracing.is_none() && access_logs == self.fallback.access_logs {
            return self.fallback.clone();
        }
        Arc::new(AppliedTelemetry { access_logs, listener_log: self.listener_log, tracing })
    }

    /// The specs that apply to `proxy`, lowest layer first.
    fn layers(&self, proxy: &Proxy) -> Vec<&TelemetrySpec> {
        let mut layers = Vec::new();
        let namespace_wide =
            |ns: &str| self.by_namespace.get(ns).and_then(|all| all.iter().find(|p| p.namespace_wide()));
        if let Some(root) = namespace_wide(&self.root_namespace) {
            layers.push(&root.spec);
        }
        if *proxy.namespace != *self.root_namespace
            && let Some(own) = namespace_wide(&proxy.namespace)
        {
            layers.push(&own.spec);
        }
        for policy in self.by_namespace.get(&*proxy.namespace).into_iter().flatten() {
            if !policy.namespace_wide() && policy.selects(proxy) {
                layers.push(&policy.spec);
            }
        }
        layers
    }

    /// The loggers of `side`, or `None` when the mesh config decides.
    fn access_logs(&self, layers: &[&TelemetrySpec], side: Side) -> Option<Vec<AccessLogger>> {
        let logging: Vec<&[AccessLogging]> =
            layers.iter().map(|l| l.access_logging.as_slice()).filter(|l| !l.is_empty()).collect();
        if logging.is_empty() && self.defaults.access_logging.is_empty() {
            return None;
        }
        let merged = merge_logs(&logging, &self.defaults.access_logging, side);
        // Each provider the merge kept that resolves; a disabled one still
        // counts (it is not the fallback) but writes nothing.
        let mut kept: Vec<(String, Option<AccessLogger>)> = Vec::new();
        for (name, spec) in merged {
            let Some(provider) = providers::find(&self.providers, &name) else { continue };
            let Some(Ok(sink)) = self.sinks.get(&provider.name.to_ascii_lowercase()) else { continue };
            let logger = (!spec.disabled).then(|| AccessLogger { sink: sink.clone(), filter: spec.filter });
            kept.push((provider.name.clone(), logger));
        }
        if kept.is_empty() {
            return None;
        }
        kept.sort_by(|a, b| a.0.cmp(&b.0));
        Some(kept.into_iter().filter_map(|(_, logger)| logger).collect())
    }

    /// How `side` traces: `None` when no Telemetry and no default provider
    /// configures tracing, or when the side ends without a provider or
    /// with span reporting disabled.
    fn tracing(&self, layers: &[&TelemetrySpec], side: Side, proxy: &Proxy) -> Option<AppliedTracing> {
        let entries: Vec<&Tracing> = layers.iter().flat_map(|l| l.tracing.iter()).collect();
        let own = self.proxy_config(proxy).tracing.as_ref();
        if entries.is_empty() && self.defaults.tracing.is_empty() {
            return self.legacy_tracer(proxy).map(|config| legacy_tracing(config, proxy));
        }
        let mut provider: Option<&ExtensionProvider> =
            self.defaults.tracing.first().and_then(|name| providers::find(&self.providers, name));
        let (mut disabled, mut tags, mut sampling) = (false, None, None);
        let (mut request_id, mut istio_tags, mut no_propagation) = (true, true, false);
        for entry in entries.iter().filter(|e| ModeSelector::names(e.match_.as_ref(), side)) {
            if let Some(first) = entry.providers.first() {
                provider = providers::find(&self.providers, &first.name);
            }
            disabled = entry.disable_span_reporting.unwrap_or(disabled);
            if !entry.custom_tags.is_empty() {
                tags = Some(&entry.custom_tags);
            }
            sampling = entry.random_sampling_percentage.or(sampling);
            request_id = entry.use_request_id_for_trace_sampling.unwrap_or(request_id);
            istio_tags = entry.enable_istio_tags.unwrap_or(istio_tags);
            no_propagation = entry.disable_context_propagation.unwrap_or(no_propagation);
        }
        let provider = provider?;
        if disabled {
            return None;
        }
        let tracer = match self.tracers.get(&provider.name.to_ascii_lowercase()) {
            Some(Ok(tracer)) => tracer.clone(),
            _ => return None,
        };
        // No tags of the Telemetry's own: the ProxyConfig's.
        let custom_tags = span_tags(tags.or(own.map(|t| &t.custom_tags)), istio_tags, proxy);
        let service_name = match tracer {
            Tracer::Datadog { .. } | Tracer::OpenTelemetry { .. } => service_name(proxy),
            _ => Arc::from(""),
        };
        let max_path_tag_length = match tracer.max_tag_length() {
            0 => own.and_then(|t| t.max_path_tag_length).unwrap_or(0),
            set => set,
        };
        Some(AppliedTracing {
            tracer,
            random_sampling: Percent::new(sampling.unwrap_or_else(|| proxy_sampling(own))),
            custom_tags,
            istio_tags,
            max_path_tag_length,
            use_request_id_for_trace_sampling: request_id,
            disable_context_propagation: no_propagation,
            spawn_upstream_span: proxy.kind == ProxyKind::Router,
            service_name,
        })
    }

    /// The ProxyConfig `proxy` runs by: its node's, else the mesh's.
    fn proxy_config<'a>(&'a self, proxy: &'a Proxy) -> &'a ProxyConfig {
        proxy.proxy_config.as_deref().unwrap_or(&self.default_proxy_config)
    }

    /// The tracing settings of `proxy`'s ProxyConfig when the legacy path
    /// traces it: `enableTracing` is on and the ProxyConfig names a tracer.
    fn legacy_tracer<'a>(&'a self, proxy: &'a Proxy) -> Option<&'a TracingConfig> {
        let tracing = self.proxy_config(proxy).tracing.as_ref()?;
        (self.enable_tracing && tracing.has_tracer()).then_some(tracing)
    }

    /// Why a provider the mesh lists cannot be served as what it is for,
    /// by name: shown once per build in the log.
    pub fn provider_problems(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .providers
            .iter()
            .filter_map(|p| {
                let name = p.name.to_ascii_lowercase();
                match p.used_for() {
                    providers::ProviderUse::AccessLog => self.sinks.get(&name)?.as_ref().err().cloned(),
                    providers::ProviderUse::Tracing => self.tracers.get(&name)?.as_ref().err().cloned(),
                    _ => None,
                }
            })
            .collect();
        out.sort();
        out
    }
}

/// What a merge decided for one provider.
#[derive(Debug, Default, Clone)]
struct LogSpec {
    filter: Option<Arc<str>>,
    disabled: bool,
}

/// Istio's access log merge for `side`: the providers in scope, each with
/// its filter or turned off (see the module docs).
fn merge_logs(layers: &[&[AccessLogging]], defaults: &[String], side: Side) -> BTreeMap<String, LogSpec> {
    let mut out: BTreeMap<String, LogSpec> = BTreeMap::new();
    if layers.is_empty() {
        for name in defaults {
            out.insert(name.clone(), LogSpec::default());
        }
        return out;
    }
    let mut in_scope: Vec<String> = defaults.to_vec();
    let mut filters: HashMap<String, Option<Arc<str>>> = HashMap::new();
    for layer in layers {
        let mut named: Vec<String> = Vec::new();
        for entry in layer.iter().filter(|e| ModeSelector::names(e.match_.as_ref(), side)) {
            for provider in &entry.providers {
                named.push(provider.name.clone());
                filters.insert(provider.name.clone(), entry.filter.as_ref().map(|f| Arc::from(f.expression.as_str())));
            }
        }
        if !named.is_empty() {
            in_scope = named;
        }
    }
    let mut parent: Vec<String> = defaults.to_vec();
    for layer in layers {
        for entry in layer.iter() {
            let names: Vec<String> = if entry.providers.is_empty() {
                parent.clone()
            } else {
                entry.providers.iter().map(|p| p.name.clone()).collect()
            };
            parent = names.clone();
            if !ModeSelector::names(entry.match_.as_ref(), side) {
                continue;
            }
            for name in names.into_iter().filter(|n| in_scope.contains(n)) {
                let spec = if entry.disabled == Some(true) {
                    LogSpec { filter: None, disabled: true }
                } else {
                    LogSpec { filter: filters.get(&name).cloned().flatten(), disabled: false }
                };
                out.insert(name, spec);
            }
        }
    }
    out
}

fn tag_value(tag: &crate::config::istio::CustomTag) -> Option<TagValue> {
    let named =
        |n: &crate::config::istio::NamedTag| (Arc::from(n.name.as_str()), n.default_value.as_deref().map(Arc::from));
    if let Some(l) = &tag.literal {
        Some(TagValue::Literal(l.value.as_str().into()))
    } else if let Some(e) = &tag.environment {
        let (name, default) = named(e);
        Some(TagValue::Environment(name, default))
    } else if let Some(h) = &tag.header {
        let (name, default) = named(h);
        Some(TagValue::Header(name, default))
    } else {
        tag.formatter.as_ref().map(|f| TagValue::Formatter(f.value.as_str().into()))
    }
}

/// Istio's own span tags for `proxy`: its canonical service and revision,
/// namespace, mesh and cluster ids, and the results of dry-run
/// authorization policies (left in the request's metadata by the RBAC filter).
fn istio_tag_values(proxy: &Proxy) -> Vec<(Arc<str>, TagValue)> {
    let label = |name: &str, default: &str| Arc::from(proxy.labels.get(name).map_or(default, String::as_str));
    let meta = |name: &str| Arc::from(proxy.metadata.get(name).unwrap_or("unknown"));
    let literal = |name: &str, value: Arc<str>| (Arc::from(name), TagValue::Literal(value));
    let mut tags = vec![
        literal("istio.canonical_revision", label("service.istio.io/canonical-revision", "latest")),
        literal("istio.canonical_service", label("service.istio.io/canonical-name", "unknown")),
        literal("istio.cluster_id", meta("CLUSTER_ID")),
        literal("istio.mesh_id", meta("MESH_ID")),
        literal("istio.namespace", proxy.namespace.clone()),
    ];
    for (action, kind) in [("allow", "allow"), ("deny", "deny")] {
        let rbac: Arc<str> = Arc::from("envoy.filters.http.rbac");
        tags.push((
            format!("istio.authorization.dry_run.{action}_policy.name").into(),
            TagValue::RequestMetadata(rbac.clone(), format!("istio_dry_run_{kind}_shadow_effective_policy_id").into()),
        ));
        tags.push((
            format!("istio.authorization.dry_run.{action}_policy.result").into(),
            TagValue::RequestMetadata(rbac, format!("istio_dry_run_{kind}_shadow_engine_result").into()),
        ));
    }
    tags
}

/// The service name a proxy reports spans under: its xDS cluster, which
/// Istio's agent sets to `APP.NAMESPACE` (its `app` label, else
/// `istio-proxy`); the same when the node names none.
fn service_name(proxy: &Proxy) -> Arc<str> {
    if !proxy.cluster.is_empty() {
        return proxy.cluster.clone();
    }
    let app = proxy.labels.get("app").map_or("istio-proxy", String::as_str);
    format!("{app}.{}", proxy.namespace).into()
}

/// Whether the built-in `envoy` provider is as Istio ships it (no format of
/// its own): then it logs as the mesh config says.
fn is_plain_envoy(provider: &ExtensionProvider) -> bool {
    provider.envoy_file_access_log.as_ref().is_some_and(|f| f.log_format.is_none() && !f.omit_empty_values)
}

/// A Telemetry object's creation time, namespace and policy.
fn policy_of(telemetry: &Telemetry) -> (Option<String>, Arc<str>, Policy) {
    (
        telemetry.metadata.creation_timestamp.clone(),
        Arc::from(telemetry.metadata.namespace()),
        Policy { name: telemetry.metadata.name.clone(), spec: telemetry.spec.clone() },
    )
}

#[cfg(test)]
mod test;
