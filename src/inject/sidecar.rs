//! What an injected pod holds, as Istio's sidecar template gives it, with
//! meshpush's agent in the proxy container:
//! - `istio-init` (unless interception is `NONE`): `meshpush iptables`
//!   with the flags Istio's injector passes istio-iptables, as root with
//!   `NET_ADMIN` and `NET_RAW`;
//! - `istio-proxy`: `meshpush agent`, which runs Envoy, as user 1337 on a
//!   read-only root (root with `NET_ADMIN` under `TPROXY`), with Istio's
//!   environment (`POD_NAME`, `INSTANCE_IP`, `PROXY_CONFIG`, the
//!   `ISTIO_META_*` node metadata, `proxyMetadata`), readiness and startup
//!   probes on the agent's `/healthz/ready` (15021);
//! - the volumes: Envoy's (`istio-envoy`, the agent's sockets and
//!   bootstrap, in memory), `istio-data`, the pod's labels and
//!   annotations (`istio-podinfo`), a service-account token for audience
//!   `istio-ca` (`istio-token`), and the mesh's root certificate from the
//!   `istio-ca-root-cert` ConfigMap (`istiod-ca-cert`);
//! - Istio's labels (`security.istio.io/tlsMode`, the canonical name and
//!   revision) and annotations (`istio.io/rev`, the default container).
//!
//! A pod that asks for Istio's `gateway` template
//! (`inject.istio.io/templates: gateway`, with its own `istio-proxy`,
//! `image: auto`, as Istio's gateway chart writes it) gets the proxy as a
//! router (`router~` node id), no `istio-init`, no startup probe, and the
//! pod may bind low ports (`net.ipv4.ip_unprivileged_port_start=0`) unless
//! it sets its own sysctls.
//!
//! Placement: as a native sidecar the proxy is an init container with
//! `restartPolicy: Always`, after `istio-init` and before the pod's own;
//! otherwise `istio-init` is the last init container and the proxy the
//! last container, or the first when the application is held until the
//! proxy is ready (then a `postStart` hook runs `meshpush wait`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMapVolumeSource, Container, DownwardAPIVolumeFile, DownwardAPIVolumeSource,
    EmptyDirVolumeSource, EnvVar, EnvVarSource, ExecAction, HTTPGetAction, Lifecycle, LifecycleHandler,
    ObjectFieldSelector, PodSpec, Probe, ProjectedVolumeSource, ResourceFieldSelector, ResourceRequirements,
    SecurityContext, ServiceAccountTokenProjection, Sysctl, Volume, VolumeMount, VolumeProjection,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::annotations as a;
use super::overrides::Overrides;
use super::probes::APP_PROBERS_ENV;
use super::status::{Rendered, revision};
use super::{INIT_CONTAINER, Injector, PROXY_CONTAINER, PROXY_UID, Workload};
use crate::config::mesh::proxy_config::{PROXY_CONFIG_METADATA, ProxyConfig};
use crate::source::ca_bundle::ROOT_CERT_CONFIG_MAP;

/// The agent's readiness port (`/healthz/ready`), which Istio's probes use.
pub const READINESS_PORT: u16 = 15021;
/// Where the agent finds the mesh's root certificate.
pub const ROOT_CERT: &str = "/var/run/secrets/istio/root-cert.pem";
/// Where the agent finds its service-account token.
pub const TOKEN: &str = "/var/run/secrets/tokens/istio-token";

/// Everything the injection of one pod depends on, worked out before the
/// pod is changed.
#[derive(Debug, Clone)]
pub struct Plan {
    /// `REDIRECT`, `TPROXY` or `NONE`.
    pub interception: String,
    /// The agent's status port, where probes go (0: none).
    pub status_port: u16,
    /// Whether application probes go through the agent.
    pub rewrite_probes: bool,
    /// Whether the proxy is a native sidecar.
    pub native: bool,
    /// Whether the application waits for the proxy.
    pub hold: bool,
    /// The proxy image.
    pub image: String,
    /// The proxy's (and istio-init's) resources.
    pub resources: ResourceRequirements,
    /// The ProxyConfig, as `PROXY_CONFIG` carries it.
    pub proxy_config: ProxyConfig,
    /// The workload.
    pub workload: Workload,
    /// The pod's annotations (before injection).
    pub annotations: BTreeMap<String, String>,
    /// Whether the pod asked for Istio's `gateway` template: the proxy is
    /// the pod's router, with no capture.
    pub gateway: bool,
    /// The pod's own proxy containers, laid over the injected ones.
    pub overrides: Overrides,
}

impl Plan {
    /// Works out the plan for a pod whose annotations passed the check.
    pub fn new(
        injector: &Injector,
        meta: &ObjectMeta,
        workload: &Workload,
        proxy_config: &ProxyConfig,
        overrides: Overrides,
    ) -> Plan {
        let settings = &injector.settings;
        let annotations = meta.annotations.clone().unwrap_or_default();
        let get = |name: &str| annotations.get(name).map(String::as_str);
        let switch = |name: &str| get(name).and_then(|v| crate::os::parse_switch(v).ok());
        let gateway = get(a::TEMPLATES).is_some_and(|t| t.split(',').any(|t| t.trim() == "gateway"));
        let native = switch(a::NATIVE_SIDECAR).unwrap_or(settings.native_sidecars) && !gateway;
        let hold = (proxy_config.hold_application_until_proxy_starts == Some(true)
            || settings.hold_application_until_proxy_starts)
            && !native
            && !gateway;
        Plan {
            interception: get(a::INTERCEPTION_MODE).unwrap_or(proxy_config.interception_mode()).to_string(),
            status_port: get(a::STATUS_PORT).and_then(|p| p.parse().ok()).unwrap_or_else(|| proxy_config.status_port()),
            rewrite_probes: switch(a::REWRITE_APP_HTTP_PROBERS).unwrap_or(settings.rewrite_app_http_probe),
            native,
            hold,
            image: get(a::PROXY_IMAGE).filter(|i| i.contains('/')).unwrap_or(&settings.proxy_image).to_string(),
            resources: resources(&annotations, settings),
            proxy_config: proxy_config.clone(),
            workload: workload.clone(),
            annotations,
            gateway,
            overrides,
        }
    }

    fn annotation_or<'a>(&'a self, name: &str, default: &'a str) -> &'a str {
        self.annotations.get(name).map_or(default, String::as_str)
    }
}

/// The proxy's resources: from the four annotations when any is set
/// (requests from `proxyCPU`/`proxyMemory`, limits from the `*Limit`
/// pair, nothing else), else the injector's.
fn resources(annotations: &BTreeMap<String, String>, settings: &super::InjectorSettings) -> ResourceRequirements {
    let quantities = |pairs: &[(&str, Option<&String>)]| -> Option<BTreeMap<String, Quantity>> {
        let map: BTreeMap<String, Quantity> =
            pairs.iter().filter_map(|(k, v)| Some((k.to_string(), Quantity((*v)?.clone())))).collect();
        (!map.is_empty()).then_some(map)
    };
    let names = [a::PROXY_CPU, a::PROXY_MEMORY, a::PROXY_CPU_LIMIT, a::PROXY_MEMORY_LIMIT];
    if names.iter().any(|n| annotations.contains_key(*n)) {
        return ResourceRequirements {
            requests: quantities(&[
                ("cpu", annotations.get(a::PROXY_CPU)),
                ("memory", annotations.get(a::PROXY_MEMORY)),
            ]),
            limits: quantities(&[
                ("cpu", annotations.get(a::PROXY_CPU_LIMIT)),
                ("memory", annotations.get(a::PROXY_MEMORY_LIMIT)),
            ]),
            ..Default::default()
        };
    }
    let own = |map: &BTreeMap<String, String>| {
        Some(map.iter().map(|(k, v)| (k.clone(), Quantity(v.clone()))).collect::<BTreeMap<_, _>>())
            .filter(|m| !m.is_empty())
    };
    ResourceRequirements {
        requests: own(&settings.resources.requests),
        limits: own(&settings.resources.limits),
        ..Default::default()
    }
}

/// Adds the sidecar of `plan` to the pod; returns what it added, by name.
pub fn render(
    injector: &Injector,
    plan: &Plan,
    meta: &mut ObjectMeta,
    spec: &mut PodSpec,
    probers: Option<String>,
) -> Rendered {
    label(injector, plan, meta, spec);
    let mut rendered = Rendered::default();
    let mut init = (plan.interception != "NONE" && !plan.gateway).then(|| capture_container(injector, plan));
    let mut proxy = proxy_container(injector, plan, meta, spec, probers);
    plan.overrides.apply(&mut proxy);
    if let Some(init) = init.as_mut() {
        plan.overrides.apply(init);
        exempt_own_user(init, plan);
    }
    if plan.gateway {
        let context = spec.security_context.get_or_insert_default();
        if context.sysctls.is_none() {
            // A router binds the ports its Gateways name, 80 and 443 too.
            let sysctl = Sysctl { name: "net.ipv4.ip_unprivileged_port_start".into(), value: "0".into() };
            context.sysctls = Some(vec![sysctl]);
        }
    }
    let init_containers = spec.init_containers.get_or_insert_default();
    init_containers.retain(|c| c.name != PROXY_CONTAINER && c.name != INIT_CONTAINER);
    spec.containers.retain(|c| c.name != PROXY_CONTAINER);
    if let Some(init) = init {
        rendered.init_containers.push(init.name.clone());
        match plan.native {
            true => init_containers.insert(0, init),
            false => init_containers.push(init),
        }
    }
    if plan.native {
        let at = usize::from(!rendered.init_containers.is_empty());
        rendered.init_containers.push(proxy.name.clone());
        init_containers.insert(at, proxy);
    } else {
        rendered.containers.push(proxy.name.clone());
        match plan.hold {
            true => spec.containers.insert(0, proxy),
            false => spec.containers.push(proxy),
        }
    }
    if init_containers.is_empty() {
        spec.init_containers = None;
    }
    let volumes = spec.volumes.get_or_insert_default();
    for volume in own_volumes() {
        rendered.volumes.push(volume.name.clone());
        volumes.retain(|v| v.name != volume.name);
        volumes.push(volume);
    }
    rendered
}

/// `istio-init` exempts the user and group the pod's own proxy runs as,
/// when it says (under TPROXY the proxy is root, and 1337 stays).
fn exempt_own_user(init: &mut Container, plan: &Plan) {
    if plan.interception == "TPROXY" {
        return;
    }
    let (user, group) = plan.overrides.proxy_user();
    let Some(args) = init.args.as_mut() else { return };
    for (flag, id) in [("-u", user), ("-g", group.or(user))] {
        if let (Some(id), Some(at)) = (id, args.iter().position(|a| a == flag))
            && let Some(value) = args.get_mut(at + 1)
        {
            *value = id.to_string();
        }
    }
}

/// Istio's labels and annotations on an injected pod.
fn label(injector: &Injector, plan: &Plan, meta: &mut ObjectMeta, spec: &PodSpec) {
    let labels = meta.labels.get_or_insert_default();
    if !plan.gateway {
        labels.entry("security.istio.io/tlsMode".into()).or_insert_with(|| "istio".into());
    }
    use crate::model::canonical;
    // A label value: at most 63 characters, not starting or ending with a separator.
    let name: String = canonical::name(labels, &plan.workload.name).chars().take(63).collect();
    let version = canonical::revision(labels).to_string();
    labels.insert(canonical::NAME_LABEL.into(), name.trim_matches(['-', '_', '.']).to_string());
    labels.insert(canonical::REVISION_LABEL.into(), version);
    let annotations = meta.annotations.get_or_insert_default();
    annotations.insert("istio.io/rev".into(), revision(&injector.settings).to_string());
    if let Some(app) = spec.containers.iter().find(|c| c.name != PROXY_CONTAINER) {
        for key in ["kubectl.kubernetes.io/default-container", "kubectl.kubernetes.io/default-logs-container"] {
            annotations.entry(key.into()).or_insert_with(|| app.name.clone());
        }
    }
    for (key, value) in &injector.settings.injected_annotations {
        annotations.insert(key.clone(), value.clone());
    }
}

/// `istio-init`: `meshpush iptables` with istio-iptables' flags.
fn capture_container(injector: &Injector, plan: &Plan) -> Container {
    let settings = &injector.settings;
    let uid = PROXY_UID.to_string();
    let mut args: Vec<String> =
        ["iptables", "-p", "15001", "-z", "15006", "-u", &uid, "-g", &uid, "-m"].map(str::to_string).to_vec();
    args.push(plan.interception.clone());
    let flags = [
        ("-i", plan.annotation_or(a::INCLUDE_OUTBOUND_IP_RANGES, &settings.include_ip_ranges)),
        ("-x", plan.annotation_or(a::EXCLUDE_OUTBOUND_IP_RANGES, &settings.exclude_ip_ranges)),
        ("-b", plan.annotation_or(a::INCLUDE_INBOUND_PORTS, &settings.include_inbound_ports)),
    ];
    for (flag, value) in flags {
        args.extend([flag.to_string(), value.to_string()]);
    }
    args.extend(["-d".into(), excluded_inbound(plan, &settings.exclude_inbound_ports)]);
    for (flag, annotation, default) in [
        ("-q", a::INCLUDE_OUTBOUND_PORTS, &settings.include_outbound_ports),
        ("-o", a::EXCLUDE_OUTBOUND_PORTS, &settings.exclude_outbound_ports),
    ] {
        if plan.annotations.contains_key(annotation) || !default.is_empty() {
            args.extend([flag.to_string(), plan.annotation_or(annotation, default).to_string()]);
        }
    }
    Container {
        name: INIT_CONTAINER.into(),
        image: Some(plan.image.clone()),
        args: Some(args),
        env: Some(plan.proxy_config.proxy_metadata.iter().map(|(k, v)| value_env(k, v)).collect())
            .filter(|e: &Vec<EnvVar>| !e.is_empty()),
        resources: Some(plan.resources.clone()),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            privileged: Some(false),
            capabilities: Some(Capabilities {
                add: Some(vec!["NET_ADMIN".into(), "NET_RAW".into()]),
                drop: Some(vec!["ALL".into()]),
            }),
            read_only_root_filesystem: Some(false),
            run_as_group: Some(0),
            run_as_non_root: Some(false),
            run_as_user: Some(0),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// `-d`: Envoy's and the agent's own ports, the pod's exclusions, and the
/// status port (unless listed already, or 0).
fn excluded_inbound(plan: &Plan, default: &str) -> String {
    let mut list = vec!["15090".to_string(), READINESS_PORT.to_string()];
    let own = plan.annotation_or(a::EXCLUDE_INBOUND_PORTS, default);
    list.extend(own.split(',').map(str::trim).filter(|p| !p.is_empty()).map(str::to_string));
    let status = plan.status_port.to_string();
    if plan.status_port != 0 && !list.contains(&status) {
        list.push(status);
    }
    list.join(",")
}

fn value_env(name: &str, value: &str) -> EnvVar {
    EnvVar { name: name.into(), value: Some(value.into()), value_from: None }
}

fn field_env(name: &str, path: &str) -> EnvVar {
    let field_ref = ObjectFieldSelector { field_path: path.into(), api_version: None };
    EnvVar {
        name: name.into(),
        value: None,
        value_from: Some(EnvVarSource { field_ref: Some(field_ref), ..Default::default() }),
    }
}

/// `istio-proxy`: the agent, and Envoy under it.
fn proxy_container(
    injector: &Injector,
    plan: &Plan,
    meta: &ObjectMeta,
    spec: &PodSpec,
    probers: Option<String>,
) -> Container {
    let settings = &injector.settings;
    let trust_domain = injector.mesh.trust_domain.to_string();
    let apps: Vec<&Container> = spec.containers.iter().filter(|c| c.name != PROXY_CONTAINER).collect();
    let mut env = vec![
        field_env("POD_NAME", "metadata.name"),
        field_env("POD_NAMESPACE", "metadata.namespace"),
        field_env("INSTANCE_IP", "status.podIP"),
        field_env("SERVICE_ACCOUNT", "spec.serviceAccountName"),
        field_env("HOST_IP", "status.hostIP"),
        EnvVar {
            name: "ISTIO_CPU_LIMIT".into(),
            value: None,
            value_from: Some(EnvVarSource {
                resource_field_ref: Some(ResourceFieldSelector {
                    resource: "limits.cpu".into(),
                    divisor: Some(Quantity("1".into())),
                    container_name: None,
                }),
                ..Default::default()
            }),
        },
        value_env(PROXY_CONFIG_METADATA, &proxy_config_env(&plan.proxy_config)),
        value_env("ISTIO_META_POD_PORTS", &pod_ports(&apps)),
        value_env("ISTIO_META_APP_CONTAINERS", &apps.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(",")),
        value_env("ISTIO_META_CLUSTER_ID", &settings.cluster_id),
        field_env("ISTIO_META_NODE_NAME", "spec.nodeName"),
    ];
    if !settings.network.is_empty() {
        env.push(value_env("ISTIO_META_NETWORK", &settings.network));
    }
    let workload_name = meta
        .labels
        .as_ref()
        .and_then(|l| l.get("service.istio.io/workload-name"))
        .cloned()
        .unwrap_or_else(|| plan.workload.name.clone());
    env.push(value_env("ISTIO_META_WORKLOAD_NAME", &workload_name));
    env.push(value_env("ISTIO_META_OWNER", &plan.workload.owner()));
    env.push(value_env("ISTIO_META_MESH_ID", &trust_domain));
    env.push(value_env("TRUST_DOMAIN", &trust_domain));
    env.extend(plan.proxy_config.proxy_metadata.iter().map(|(k, v)| value_env(k, v)));
    if let Some(probers) = probers {
        env.push(value_env(APP_PROBERS_ENV, &probers));
    }
    let domain = format!("$(POD_NAMESPACE).svc.{}", settings.cluster_domain);
    let kind = if plan.gateway { "router" } else { "sidecar" };
    let mut args = vec![
        "agent".to_string(),
        format!("--node-id={kind}~$(INSTANCE_IP)~$(POD_NAME).$(POD_NAMESPACE)~{domain}"),
        format!("--root-cert={ROOT_CERT}"),
        format!("--token-file={TOKEN}"),
        "--service-account=$(SERVICE_ACCOUNT)".into(),
        format!("--trust-domain={trust_domain}"),
        "--socket-dir=/etc/istio/proxy".into(),
        "--pod-annotations=/etc/istio/pod/annotations".into(),
        "--pod-labels=/etc/istio/pod/labels".into(),
        "--envoy-binary=/usr/local/bin/envoy".into(),
        "--envoy-arg=--log-level".into(),
        format!("--envoy-arg={}", plan.annotation_or(a::LOG_LEVEL, &settings.log_level)),
        "--envoy-arg=--component-log-level".into(),
        format!("--envoy-arg={}", plan.annotation_or(a::COMPONENT_LOG_LEVEL, &settings.component_log_level)),
    ];
    if !plan.gateway {
        args.insert(6, format!("--interception={}", plan.interception));
    }
    let with_probes = plan.annotations.get(a::STATUS_PORT).is_none_or(|p| p != "0");
    let readiness =
        |name: &str, default: i32| plan.annotations.get(name).and_then(|v| v.parse::<i32>().ok()).unwrap_or(default);
    let ready = |period, failure, delay| Probe {
        http_get: Some(HTTPGetAction {
            path: Some("/healthz/ready".into()),
            port: IntOrString::Int(i32::from(READINESS_PORT)),
            ..Default::default()
        }),
        initial_delay_seconds: Some(delay).filter(|d| *d > 0),
        period_seconds: Some(period),
        failure_threshold: Some(failure),
        timeout_seconds: Some(3),
        ..Default::default()
    };
    let tproxy = plan.interception == "TPROXY";
    Container {
        name: PROXY_CONTAINER.into(),
        image: Some(plan.image.clone()),
        args: Some(args),
        env: Some(env),
        lifecycle: lifecycle(plan),
        readiness_probe: with_probes.then(|| {
            ready(
                readiness(a::READINESS_PERIOD, settings.readiness_period_seconds),
                readiness(a::READINESS_FAILURE_THRESHOLD, settings.readiness_failure_threshold),
                readiness(a::READINESS_INITIAL_DELAY, settings.readiness_initial_delay_seconds),
            )
        }),
        startup_probe: (with_probes && settings.startup_probe && !plan.gateway).then(|| ready(1, 600, 0)),
        resources: Some(plan.resources.clone()),
        restart_policy: plan.native.then(|| "Always".to_string()),
        security_context: Some(if plan.gateway {
            SecurityContext { run_as_user: Some(PROXY_UID), run_as_group: Some(PROXY_UID), ..Default::default() }
        } else {
            SecurityContext {
                allow_privilege_escalation: Some(false),
                capabilities: Some(Capabilities {
                    add: tproxy.then(|| vec!["NET_ADMIN".to_string()]),
                    drop: Some(vec!["ALL".into()]),
                }),
                privileged: Some(false),
                read_only_root_filesystem: Some(true),
                run_as_group: Some(PROXY_UID),
                run_as_non_root: Some(!tproxy),
                run_as_user: Some(if tproxy { 0 } else { PROXY_UID }),
                ..Default::default()
            }
        }),
        volume_mounts: Some(
            [
                ("istio-envoy", "/etc/istio/proxy"),
                ("istio-data", "/var/lib/istio/data"),
                ("istio-podinfo", "/etc/istio/pod"),
                ("istio-token", "/var/run/secrets/tokens"),
                ("istiod-ca-cert", "/var/run/secrets/istio"),
            ]
            .map(|(name, path)| VolumeMount { name: name.into(), mount_path: path.into(), ..Default::default() })
            .to_vec(),
        ),
        ..Default::default()
    }
}

/// The proxy's hooks: held applications wait for it (`meshpush wait`); a
/// native sidecar starts draining as the pod goes (`meshpush drain`), as
/// Istio's template has them.
fn lifecycle(plan: &Plan) -> Option<Lifecycle> {
    let exec = |command: Vec<String>| LifecycleHandler {
        exec: Some(ExecAction { command: Some(command) }),
        ..Default::default()
    };
    if plan.hold {
        return Some(Lifecycle {
            post_start: Some(exec(vec!["meshpush".into(), "wait".into()])),
            ..Default::default()
        });
    }
    if plan.native && plan.status_port != 0 {
        let url = format!("--url=http://localhost:{}/drain", plan.status_port);
        return Some(Lifecycle {
            pre_stop: Some(exec(vec!["meshpush".into(), "drain".into(), url])),
            ..Default::default()
        });
    }
    None
}

/// `PROXY_CONFIG`: the pod's ProxyConfig, less what equals Istio's
/// defaults (the agent starts from those).
fn proxy_config_env(config: &ProxyConfig) -> String {
    let defaults = ProxyConfig::istio_default();
    let mut config = config.clone();
    if config.discovery_address == defaults.discovery_address {
        config.discovery_address = None;
    }
    if config.drain_duration == defaults.drain_duration {
        config.drain_duration = None;
    }
    if config.termination_drain_duration == defaults.termination_drain_duration {
        config.termination_drain_duration = None;
    }
    serde_json::to_string(&config).expect("a ProxyConfig serializes")
}

/// `ISTIO_META_POD_PORTS`: the application containers' ports, as JSON.
fn pod_ports(apps: &[&Container]) -> String {
    let ports: Vec<_> = apps.iter().flat_map(|c| c.ports.iter().flatten()).collect();
    serde_json::to_string(&ports).expect("ports serialize")
}

/// The volumes the proxy mounts.
fn own_volumes() -> [Volume; 5] {
    let field = |path: &str, field: &str| DownwardAPIVolumeFile {
        path: path.into(),
        field_ref: Some(ObjectFieldSelector { field_path: field.into(), api_version: None }),
        ..Default::default()
    };
    [
        Volume {
            name: "istio-envoy".into(),
            empty_dir: Some(EmptyDirVolumeSource { medium: Some("Memory".into()), size_limit: None }),
            ..Default::default()
        },
        Volume { name: "istio-data".into(), empty_dir: Some(EmptyDirVolumeSource::default()), ..Default::default() },
        Volume {
            name: "istio-podinfo".into(),
            downward_api: Some(DownwardAPIVolumeSource {
                items: Some(vec![field("labels", "metadata.labels"), field("annotations", "metadata.annotations")]),
                default_mode: None,
            }),
            ..Default::default()
        },
        Volume {
            name: "istio-token".into(),
            projected: Some(ProjectedVolumeSource {
                sources: Some(vec![VolumeProjection {
                    service_account_token: Some(ServiceAccountTokenProjection {
                        audience: Some("istio-ca".into()),
                        expiration_seconds: Some(43200),
                        path: "istio-token".into(),
                    }),
                    ..Default::default()
                }]),
                default_mode: None,
            }),
            ..Default::default()
        },
        Volume {
            name: "istiod-ca-cert".into(),
            config_map: Some(ConfigMapVolumeSource { name: ROOT_CERT_CONFIG_MAP.into(), ..Default::default() }),
            ..Default::default()
        },
    ]
}
