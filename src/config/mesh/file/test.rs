//! Reading Istio's mesh config file: what is applied, what is reported
//! with its path, what refuses the file, and the flags over it.

use kube::core::SelectorExt as _;

use super::*;

fn problem_paths(settings: &MeshSettings) -> Vec<(&str, &str)> {
    settings.problems.iter().map(|p| (p.path.as_str(), p.message.as_str())).collect()
}

#[test]
fn the_applied_fields_become_the_mesh_config_and_the_rest_keeps_istio_defaults() {
    let text = "trustDomain: example.org\nroot_namespace: mesh-root\ningressClass: edge\n\
                ingressControllerMode: DEFAULT\ningressSelector: edge-gw\ningressService: edge-svc\n";
    let settings = MeshSettings::parse("mesh.yaml", text).unwrap();
    assert!(settings.problems.is_empty(), "{:?}", settings.problems);
    let mesh = settings.mesh_config();
    assert_eq!((&*mesh.trust_domain, &*mesh.root_namespace), ("example.org", "mesh-root"), "snake_case keys too");
    assert_eq!(mesh.ingress.mode, IngressControllerMode::Default);
    assert_eq!(
        (&*mesh.ingress.class, &*mesh.ingress.selector, &*mesh.ingress.service),
        ("edge", "edge-gw", "edge-svc")
    );
    assert_eq!(MeshSettings::parse("mesh.yaml", "").unwrap().mesh_config(), MeshConfig::default(), "empty: defaults");
}

#[test]
fn every_other_field_is_reported_with_its_path_and_what_it_is() {
    let text = "enablePrometheusMerge: false\ndefaultConfig:\n  proxyMetadata: {ISTIO_META_DNS_CAPTURE: \"true\"}\n\
                \x20 proxyBootstrapTemplatePath: /t.json\n\
                extensionProviders:\n- name: otel\n  opentelemetry: {service: otel.observability.svc, port: 4317}\n\
                mixerCheckServer: old:9091\ntrustDomian: typo.org\n";
    let settings = MeshSettings::parse("mesh.yaml", text).unwrap();
    let not_applied = "not applied by meshpush yet: served as if it were unset (Istio's default)";
    assert_eq!(
        problem_paths(&settings),
        vec![
            ("enablePrometheusMerge", not_applied),
            ("defaultConfig.proxyBootstrapTemplatePath", not_applied),
            ("mixerCheckServer", "Istio removed this field and ignores it (Mixer is gone)"),
            ("trustDomian", "not a field of Istio's MeshConfig: ignored"),
        ]
    );
    let proxy = &settings.mesh_config().default_proxy_config;
    assert_eq!(proxy.proxy_metadata.get("ISTIO_META_DNS_CAPTURE").map(String::as_str), Some("true"));
    assert_eq!(proxy.drain_duration.map(|d| d.0.as_secs()), Some(45), "Istio's default under the file's");
    let snake =
        MeshSettings::parse("mesh.yaml", "default_config: {drain_duration: 9s}\nenable_tracing: false\n").unwrap();
    assert!(snake.problems.is_empty(), "{:?}", snake.problems);
    let mesh = snake.mesh_config();
    assert_eq!(mesh.default_proxy_config.drain_duration.map(|d| d.0.as_secs()), Some(9));
    assert!(!mesh.enable_tracing);
    let err = MeshSettings::parse("mesh.yaml", "defaultConfig: {concurrency: -2}\n").unwrap_err();
    assert!(err.starts_with("mesh.yaml: defaultConfig.concurrency: "), "{err}");
    assert!(settings.problems.iter().all(|p| !p.is_error() && &*p.source.file == "mesh.yaml"));
    assert_eq!(&*settings.mesh_config().trust_domain, "cluster.local", "the typo applies nothing");
}

#[test]
fn a_broken_file_is_refused_saying_where() {
    let syntax = MeshSettings::parse("mesh.yaml", "trustDomain: a\n  rootNamespace: [\n").unwrap_err();
    assert!(syntax.starts_with("mesh.yaml: ") && syntax.contains("line 2"), "{syntax}");
    let typed = MeshSettings::parse("mesh.yaml", "rootNamespace: [a, b]\n").unwrap_err();
    assert!(typed.starts_with("mesh.yaml: rootNamespace: "), "{typed}");
    let mode = MeshSettings::parse("mesh.yaml", "ingressControllerMode: SOMETIMES\n").unwrap_err();
    assert!(mode.contains("ingressControllerMode") && mode.contains("OFF, DEFAULT or STRICT"), "{mode}");
    let domain = MeshSettings::parse("mesh.yaml", "trustDomain: Not_A.Domain\n").unwrap_err();
    assert!(domain.starts_with("mesh.yaml: trustDomain: \"Not_A.Domain\" is not a trust domain"), "{domain}");
    let selector = MeshSettings::parse(
        "mesh.yaml",
        "discoverySelectors:\n- matchExpressions: [{key: env, operator: Sometimes, values: [a]}]\n",
    )
    .unwrap_err();
    assert!(selector.starts_with("mesh.yaml: discoverySelectors[0]: "), "{selector}");
    assert!(MeshSettings::parse("mesh.yaml", "- a list\n").is_err());
}

#[test]
fn discovery_selectors_are_label_selectors() {
    let text = "discoverySelectors:\n- matchLabels: {istio-discovery: enabled}\n\
                - matchExpressions: [{key: env, operator: In, values: [prod, staging]}]\n";
    let selectors = MeshSettings::parse("mesh.yaml", text).unwrap().discovery_selectors.expect("set");
    let labels = |pairs: &[(&str, &str)]| -> std::collections::BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    };
    assert!(selectors[0].matches(&labels(&[("istio-discovery", "enabled")])));
    assert!(!selectors[0].matches(&labels(&[("env", "prod")])));
    assert!(selectors[1].matches(&labels(&[("env", "staging")])));
}

#[test]
fn flags_are_laid_over_the_file() {
    let file = MeshSettings::parse("mesh.yaml", "trustDomain: file.org\nrootNamespace: file-root\nfoo: 1\n").unwrap();
    let flags = MeshSettings { trust_domain: Some("flag.org".into()), ..Default::default() };
    let merged = file.over(flags);
    let mesh = merged.mesh_config();
    assert_eq!((&*mesh.trust_domain, &*mesh.root_namespace), ("flag.org", "file-root"));
    assert_eq!(merged.problems.len(), 1, "the file's problems are kept");
}

#[test]
fn a_snake_case_path_is_read_as_the_table_writes_it() {
    assert_eq!(camel_path("default_config.proxy_metadata.ISTIO_META_X"), "defaultConfig.proxyMetadata.ISTIOMETAX");
    assert_eq!(camel_path("extensionProviders[0].envoy_file_access_log"), "extensionProviders[0].envoyFileAccessLog");
}

#[test]
fn discovery_selectors_without_kubernetes_are_reported_not_applied() {
    let text = "discoverySelectors:\n- matchLabels: {istio-discovery: enabled}\n";
    let settings = MeshSettings::parse("mesh.yaml", text).unwrap().without_kubernetes("mesh.yaml");
    assert!(settings.discovery_selectors.is_none());
    assert_eq!(problem_paths(&settings)[0].0, "discoverySelectors");
    assert!(problem_paths(&settings)[0].1.contains("no effect without --kubeconfig"));
}

#[test]
fn traffic_defaults_are_read_and_checked_as_istiod_checks_them() {
    let text = "connectTimeout: 3s\ntcp_keepalive: {probes: 3, time: 60s}\n";
    let settings = MeshSettings::parse("mesh.yaml", text).unwrap();
    assert!(settings.problems.is_empty(), "{:?}", settings.problems);
    let traffic = settings.mesh_config().traffic;
    assert_eq!(traffic.connect_timeout, "3s".parse().unwrap());
    assert_eq!(traffic.tcp_keepalive.and_then(|k| k.probes), Some(3), "snake_case keys too");
    assert_eq!(MeshConfig::default().traffic.connect_timeout, "10s".parse().unwrap(), "Istio's default");

    for (bad, field) in [("connectTimeout: 0s", "connectTimeout"), ("connectTimeout: 2h", "connectTimeout")] {
        let error = MeshSettings::parse("mesh.yaml", bad).unwrap_err();
        assert!(error.starts_with(&format!("mesh.yaml: {field}: ")), "{error}");
    }
    let unknown = MeshSettings::parse("mesh.yaml", "tcpKeepalive: {probes: 3, tries: 4}\n").unwrap();
    assert_eq!(problem_paths(&unknown), [("tcpKeepalive.tries", "not a field of Istio's MeshConfig: ignored")]);
}

#[test]
fn outbound_cluster_defaults_are_read_and_a_refresh_rate_envoy_refuses_is_replaced() {
    let text = "h2UpgradePolicy: UPGRADE\nenable_auto_mtls: false\ndnsRefreshRate: 30s\n";
    let traffic = MeshSettings::parse("mesh.yaml", text).unwrap().mesh_config().traffic;
    assert_eq!(traffic.h2_upgrade, crate::config::mesh::H2UpgradePolicy::Upgrade);
    assert!(!traffic.auto_mtls);
    assert_eq!(traffic.dns_refresh_rate, "30s".parse().unwrap());

    let error = MeshSettings::parse("mesh.yaml", "h2UpgradePolicy: SOMETIMES\n").unwrap_err();
    assert!(
        error.starts_with("mesh.yaml: h2UpgradePolicy: ") && error.contains("DO_NOT_UPGRADE or UPGRADE"),
        "{error}"
    );
    let zero = MeshSettings::parse("mesh.yaml", "dnsRefreshRate: 0s\n").unwrap();
    assert_eq!(problem_paths(&zero)[0].0, "dnsRefreshRate");
    assert!(problem_paths(&zero)[0].1.contains("Istio's default (60s) is served"), "{:?}", zero.problems);
    assert_eq!(zero.mesh_config().traffic.dns_refresh_rate, "60s".parse().unwrap());
}

#[test]
fn inbound_defaults_are_read_and_checked_as_istiod_checks_them() {
    let text = "protocolDetectionTimeout: 100ms\ninbound_traffic_policy: {mode: LOCALHOST}\n";
    let traffic = MeshSettings::parse("mesh.yaml", text).unwrap().mesh_config().traffic;
    assert_eq!(traffic.protocol_detection_timeout, "100ms".parse().unwrap());
    assert_eq!(traffic.inbound, crate::config::mesh::InboundTrafficMode::Localhost);
    let empty = MeshSettings::parse("mesh.yaml", "inboundTrafficPolicy: {}\n").unwrap().mesh_config();
    assert_eq!(empty.traffic.inbound, crate::config::mesh::InboundTrafficMode::Passthrough, "enum value 0");

    let timeout = MeshSettings::parse("mesh.yaml", "protocolDetectionTimeout: 1.5ms\n").unwrap_err();
    assert!(timeout.starts_with("mesh.yaml: protocolDetectionTimeout: "), "{timeout}");
    let mode = MeshSettings::parse("mesh.yaml", "inboundTrafficPolicy: {mode: LOOPBACK}\n").unwrap_err();
    assert!(mode.starts_with("mesh.yaml: inboundTrafficPolicy.mode: ") && mode.contains("LOCALHOST"), "{mode}");
}

#[test]
fn an_outbound_traffic_policy_without_a_mode_is_registry_only_and_dynamic_dns_is_reported() {
    use crate::config::mesh::OutboundTrafficMode;
    let mode = |text: &str| MeshSettings::parse("mesh.yaml", text).unwrap().mesh_config().traffic.outbound;
    assert_eq!(mode(""), OutboundTrafficMode::AllowAny, "Istio's default");
    assert_eq!(mode("outboundTrafficPolicy: {}\n"), OutboundTrafficMode::RegistryOnly, "enum value 0, as in istiod");
    assert_eq!(mode("outbound_traffic_policy: {mode: ALLOW_ANY}\n"), OutboundTrafficMode::AllowAny);

    let dynamic = MeshSettings::parse(
        "mesh.yaml",
        "outboundTrafficPolicy:\n  mode: ALLOW_ANY_DYNAMIC_DNS\n  tls: {mode: SIMPLE}\n",
    )
    .unwrap();
    let paths = problem_paths(&dynamic);
    assert_eq!(
        paths.iter().map(|p| p.0).collect::<Vec<_>>(),
        ["outboundTrafficPolicy.tls", "outboundTrafficPolicy.mode"]
    );
    assert!(paths[1].1.contains("not applied by meshpush yet: served as ALLOW_ANY"), "{paths:?}");
    assert_eq!(dynamic.mesh_config().traffic.outbound, OutboundTrafficMode::AllowAny);
    let bad = MeshSettings::parse("mesh.yaml", "outboundTrafficPolicy: {mode: DENY}\n").unwrap_err();
    assert!(bad.starts_with("mesh.yaml: outboundTrafficPolicy.mode: "), "{bad}");
}

#[test]
fn default_export_to_lists_replace_istio_s_and_an_empty_one_is_everywhere() {
    let text = "defaultServiceExportTo: [., istio-system]\ndefault_virtual_service_export_to: [.]\n\
                defaultDestinationRuleExportTo: []\n";
    let export_to = MeshSettings::parse("mesh.yaml", text).unwrap().mesh_config().export_to;
    assert_eq!(export_to.services, [".", "istio-system"]);
    assert_eq!(export_to.virtual_services, ["."]);
    assert_eq!(export_to.destination_rules, ["*"], "an empty list is none, as istiod reads it");
    assert_eq!(MeshConfig::default().export_to.services, ["*"], "Istio's default");
}

#[test]
fn providers_istio_generates_nothing_for_are_reported() {
    let text = "extensionProviders:\n- name: ls\n  lightstep: {service: ls.example.com, port: 8080, accessToken: t}\n\
                - name: sd\n  stackdriver: {maxTagLength: 100}\n";
    let settings = MeshSettings::parse("mesh.yaml", text).unwrap();
    let paths: Vec<&str> = problem_paths(&settings).into_iter().map(|(p, _)| p).collect();
    assert_eq!(paths, ["extensionProviders[0].lightstep", "extensionProviders[1].stackdriver"]);
    assert!(settings.problems.iter().all(|p| p.message.contains("has no effect (in Istio either)")));
}

#[test]
fn what_the_providers_set_and_meshpush_does_not_send_or_make_is_reported() {
    let text = "extensionProviders:\n- name: sw\n  skywalking: {service: sw.example.com, port: 11800, accessToken: t}\n\
                - name: prom\n  prometheus: {}\n";
    let settings = MeshSettings::parse("mesh.yaml", text).unwrap();
    let found = problem_paths(&settings);
    assert_eq!(found[0].0, "extensionProviders[0].skywalking.accessToken");
    assert!(found[0].1.starts_with("is not sent"), "{found:?}");
    assert_eq!(found[1].0, "extensionProviders[1].prometheus");
    assert!(found[1].1.contains("istio.stats"), "{found:?}");
    assert_eq!(found.len(), 2, "{found:?}");
}

#[test]
fn default_providers_that_give_nothing_are_reported_with_what_happens() {
    let text = "extensionProviders:\n- name: zipkin\n  zipkin: {service: zipkin.example.com, port: 9411}\n\
                defaultProviders:\n  tracing: [envoy, zipkin]\n  accessLogging: [envoy, zipkin, nosuch, ENVOY]\n  \
                metrics: [prometheus]\n";
    let settings = MeshSettings::parse("mesh.yaml", text).unwrap();
    let found = problem_paths(&settings);
    let paths: Vec<&str> = found.iter().map(|(p, _)| *p).collect();
    assert_eq!(
        paths,
        [
            "defaultProviders.tracing[0]",
            "defaultProviders.tracing[1]",
            "defaultProviders.accessLogging[1]",
            "defaultProviders.accessLogging[2]",
            "defaultProviders.metrics",
        ],
        "built-ins count, names ignore case: {found:#?}"
    );
    assert!(found[0].1.starts_with("provider \"envoy\" is not a tracing provider: where no Telemetry"));
    assert!(found[1].1.contains("only the first tracing provider"));
    assert!(found[3].1.starts_with("the mesh config defines no extension provider \"nosuch\": ignored"));
    assert!(found[4].1.contains("istio.stats"));
    // The metrics list Istio's chart writes is reported alone, and no list is no problem.
    let chart = MeshSettings::parse(
        "mesh.yaml",
        "defaultProviders: {metrics: [prometheus]}
",
    )
    .unwrap();
    assert_eq!(chart.problems.len(), 1);
    assert!(
        MeshSettings::parse(
            "mesh.yaml",
            "defaultProviders: {metrics: []}
"
        )
        .unwrap()
        .problems
        .is_empty()
    );
}

#[test]
fn ingress_settings_under_mode_off_are_reported_as_without_effect() {
    let text = "ingressControllerMode: \"OFF\"\ningressClass: edge\ningressService: edge-gw\n";
    let settings = MeshSettings::parse("mesh.yaml", text).unwrap();
    let found = problem_paths(&settings);
    assert_eq!(found.iter().map(|(p, _)| *p).collect::<Vec<_>>(), ["ingressClass", "ingressService"]);
    assert!(found.iter().all(|(_, m)| m.contains("has no effect: ingressControllerMode is OFF")));
    let on = MeshSettings::parse("mesh.yaml", "ingressControllerMode: STRICT\ningressClass: edge\n").unwrap();
    assert!(on.problems.is_empty());
}

#[test]
fn an_ingress_service_of_its_own_names_the_routers_when_no_selector_does() {
    let routers =
        |text: &str| MeshSettings::parse("mesh.yaml", text).unwrap().mesh_config().ingress.router_label().to_string();
    assert_eq!(routers(""), "ingressgateway", "Istio's default routers");
    assert_eq!(routers("ingressService: edge-gw\n"), "edge-gw");
    assert_eq!(routers("ingressService: edge-gw\ningressSelector: edge\n"), "edge");
    assert_eq!(routers("ingressService: istio-ingressgateway\n"), "ingressgateway");
}

#[test]
fn a_provider_of_several_kinds_keeps_istio_s_and_one_named_again_is_replaced() {
    let text = "extensionProviders:\n- name: t\n  zipkin: {service: z.example.com, port: 9411}\n\
                - name: t\n  envoyOtelAls: {service: o.example.com, port: 4317}\n  \
                zipkin: {service: z.example.com, port: 9411}\n  datadog: {service: d.example.com, port: 8126}\n";
    let settings = MeshSettings::parse("mesh.yaml", text).unwrap();
    let found = problem_paths(&settings);
    let paths: Vec<&str> = found.iter().map(|(p, _)| *p).collect();
    assert_eq!(paths, ["extensionProviders[1].zipkin", "extensionProviders[1].datadog", "extensionProviders[0]"]);
    assert!(found[0].1.contains("also sets envoyOtelAls, the kind Istio keeps"), "{found:?}");
    assert!(found[2].1.contains("extensionProviders[1] has the same name \"t\" and replaces it"), "{found:?}");
    let mesh = settings.mesh_config();
    let kept = providers::find(&mesh.extension_providers, "t").unwrap();
    assert_eq!(kept.kinds(), ["envoyOtelAls"], "the later provider, of the kind Istio keeps");
}

#[test]
fn authorizers_are_read_whole_and_what_istiod_refuses_or_ignores_is_reported_with_its_path() {
    let text = "extensionProviders:\n\
                - name: ext-authz-http\n  envoyExtAuthzHttp:\n    service: ext-authz.foo.svc.cluster.local\n    port: \"8000\"\n    \
                  timeout: 10s\n    pathPrefix: /check\n    failOpen: true\n    statusOnError: \"503\"\n    \
                  includeRequestHeadersInCheck: [x-ext-authz]\n    includeAdditionalHeadersInCheck: {x-a: b}\n    \
                  includeRequestBodyInCheck: {maxRequestBytes: 1024, allowPartialMessage: true}\n    \
                  headersToUpstreamOnAllow: [x-user]\n    headersToDownstreamOnDeny: [x-reason]\n    headersToDownstreamOnAllow: [x-ok]\n\
                - name: ext-authz-grpc\n  envoy_ext_authz_grpc: {service: foo/ext-authz.foo.svc.cluster.local, port: 9000, \
                  fail_open: true, include_request_body_in_check: {max_request_bytes: 512, pack_as_bytes: true}}\n\
                - name: Bad_Name\n  envoyExtAuthzHttp: {service: '', port: 70000, statusOnError: nope, pathPrefix: check, \
                  clearRouteCache: true, includeHeadersInCheck: ['*'], colour: blue}\n";
    let settings = MeshSettings::parse("mesh.yaml", text).unwrap();
    let paths: Vec<&str> = problem_paths(&settings).into_iter().map(|(p, _)| p).collect();
    assert_eq!(
        paths,
        [
            "extensionProviders[2].envoyExtAuthzHttp.colour",
            "extensionProviders[2].name",
            "extensionProviders[2].envoyExtAuthzHttp.service",
            "extensionProviders[2].envoyExtAuthzHttp.port",
            "extensionProviders[2].envoyExtAuthzHttp.statusOnError",
            "extensionProviders[2].envoyExtAuthzHttp.pathPrefix",
            "extensionProviders[2].envoyExtAuthzHttp.includeHeadersInCheck",
            "extensionProviders[2].envoyExtAuthzHttp.clearRouteCache",
            "extensionProviders[2].envoyExtAuthzHttp.includeHeadersInCheck",
        ],
        "the two good providers set every field and are reported nothing: {:#?}",
        settings.problems
    );
    assert!(settings.problems[1].message.contains("a CUSTOM policy naming this provider denies"));
    assert!(settings.problems[7].message.contains("not applied: istiod sets no clear_route_cache"));
    let mesh = settings.mesh_config();
    let grpc = providers::find(&mesh.extension_providers, "ext-authz-grpc").unwrap();
    let grpc = grpc.envoy_ext_authz_grpc.as_ref().expect("snake_case keys too");
    assert!(grpc.fail_open && grpc.include_request_body_in_check.as_ref().unwrap().pack_as_bytes);
    let http = providers::find(&mesh.extension_providers, "ext-authz-http").unwrap();
    assert_eq!(http.used_for(), providers::ProviderUse::Authorization);
    assert_eq!(http.envoy_ext_authz_http.as_ref().unwrap().port, 8000, "a port written as a string");
}

#[test]
fn service_settings_are_resolved_over_istios_defaults() {
    let text = "defaultConfig: {discoveryAddress: meshpush.mesh.svc:15012}\n\
                service_settings:\n- settings: {clusterLocal: false}\n  hosts: [kubernetes.default.svc.cluster.local]\n\
                - settings: {cluster_local: true}\n  hosts: ['*.prod.svc.cluster.local']\n";
    let settings = MeshSettings::parse("mesh.yaml", text).unwrap();
    assert!(settings.problems.is_empty(), "applied, nothing to report: {:?}", settings.problems);
    let hosts = settings.mesh_config().cluster_local_hosts;
    assert!(hosts.is_cluster_local("reviews.prod.svc.cluster.local"));
    assert!(!hosts.is_cluster_local("kubernetes.default.svc.cluster.local"), "the default is removed");
    assert!(hosts.is_cluster_local("meshpush.mesh.svc.cluster.local"), "the file's discovery address");
    assert!(!hosts.is_cluster_local("istiod.istio-system.svc.cluster.local"));
    let configz = serde_json::to_value(settings.mesh_config()).unwrap();
    assert_eq!(configz["clusterLocalHosts"]["*.prod.svc.cluster.local"], true, "{configz}");
    assert_eq!(configz["clusterLocalHosts"]["kubernetes.default.svc.cluster.local"], false, "{configz}");

    let flags = MeshSettings { service_settings: Some(Vec::new()), ..Default::default() };
    let over = settings.over(flags).mesh_config().cluster_local_hosts;
    assert_eq!(over, cluster_local::ClusterLocalHosts::resolve(&[], Some("meshpush.mesh.svc:15012")), "flags win");
    let empty = MeshSettings::parse("mesh.yaml", "serviceSettings: []\n").unwrap();
    assert!(empty.problems.is_empty(), "an empty list is Istio's default: nothing to say");
    assert_eq!(empty.mesh_config(), MeshConfig::default());
}

#[test]
fn a_service_settings_host_that_is_no_host_name_refuses_the_file_naming_it() {
    let text = "serviceSettings:\n- hosts: [a.example.com]\n- settings: {clusterLocal: true}\n  hosts: [ok.example.com, 'not a host']\n";
    let error = MeshSettings::parse("mesh.yaml", text).unwrap_err();
    assert!(
        error.starts_with("mesh.yaml: serviceSettings[1].hosts[1]: \"not a host\" is not a host name or wildcard"),
        "{error}"
    );
    let typed = MeshSettings::parse("mesh.yaml", "serviceSettings: [{settings: {clusterLocal: maybe}}]\n").unwrap_err();
    assert!(typed.starts_with("mesh.yaml: serviceSettings[0].settings.clusterLocal: "), "{typed}");
    let typo = MeshSettings::parse("mesh.yaml", "serviceSettings: [{settings: {clusterLocl: true}, hosts: [a]}]\n");
    assert_eq!(
        problem_paths(&typo.unwrap())[0],
        ("serviceSettings[0].settings.clusterLocl", "not a field of Istio's MeshConfig: ignored")
    );
}

#[test]
fn certificates_are_reported_as_removed_by_istio() {
    let text = "certificates: [{secretName: dns-cert, dnsNames: [istiod.example]}]\n";
    let settings = MeshSettings::parse("mesh.yaml", text).unwrap();
    let [(path, message)] = problem_paths(&settings)[..] else { panic!("{:?}", settings.problems) };
    assert_eq!(path, "certificates");
    assert_eq!(
        message,
        "Istio removed this field and ignores it (it has had no effect since Istio 1.18 removed chiron, the \
         controller that read it; meshpush's serving names are `--server-san`)"
    );
}

/// A root (`ca`), or a leaf certificate, PEM.
fn root_pem(ca: bool) -> String {
    let (root, issuer) = crate::testing::certs::ca("root");
    if ca { root } else { crate::testing::certs::leaf(&issuer, &[]).0 }
}

#[test]
fn ca_certificates_roots_apply_under_the_multi_root_flag_and_their_trust_domains_always() {
    let root = serde_json::to_string(&root_pem(true)).unwrap();
    let text = format!("trustDomainAliases: [old.td]\ncaCertificates:\n- {{pem: {root}, trustDomains: [other.td]}}\n");
    let flags = |multi_root: bool, skip: bool| MeshSettings {
        multi_root_mesh: Some(multi_root),
        skip_validate_trust_domain: Some(skip),
        ..Default::default()
    };
    let served = |multi_root: bool, skip: bool| {
        MeshSettings::parse("mesh.yaml", &text).unwrap().over(flags(multi_root, skip)).finish("mesh.yaml").unwrap()
    };

    let off = served(false, false);
    let paths: Vec<&str> = off.problems.iter().map(|p| p.path.as_str()).collect();
    assert_eq!(paths, ["caCertificates[0].pem"], "reported without the flag");
    assert!(off.problems[0].message.contains("ISTIO_MULTIROOT_MESH"), "{}", off.problems[0].message);
    let mesh = off.mesh_config();
    assert!(mesh.trust_anchors.roots.is_empty() && !mesh.trust_anchors.multi_root);
    let domains: Vec<String> = mesh.trust_domains_for_validation().iter().map(|d| d.to_string()).collect();
    assert_eq!(domains, ["cluster.local", "old.td", "other.td"], "trust domains apply without the flag");

    let on = served(true, false);
    assert!(on.problems.is_empty(), "{:?}", on.problems);
    assert_eq!(on.mesh_config().trust_anchors.roots.len(), 1);

    let skipped = served(true, true).mesh_config();
    assert!(skipped.trust_domains_for_validation().is_empty(), "PILOT_SKIP_VALIDATE_TRUST_DOMAIN: any trust domain");
}

#[test]
fn a_root_that_is_not_a_ca_refuses_the_mesh_config_under_the_flag_naming_it() {
    let leaf = serde_json::to_string(&root_pem(false)).unwrap();
    let text = format!("caCertificates:\n- {{trustDomains: [a.td]}}\n- {{pem: {leaf}}}\n");
    let flags = MeshSettings { multi_root_mesh: Some(true), ..Default::default() };
    let error = MeshSettings::parse("mesh.yaml", &text).unwrap().over(flags).finish("mesh.yaml").unwrap_err();
    assert!(error.starts_with("mesh.yaml: caCertificates[1].pem: is not a CA certificate"), "{error}");
    let off = MeshSettings::parse("mesh.yaml", &text).unwrap().finish("mesh.yaml");
    assert!(off.is_ok(), "istiod reads no root without the flag");
}
