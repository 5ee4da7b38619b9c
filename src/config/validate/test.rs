//! Validation is exercised through the parser, as a user meets it: YAML in,
//! located problems out.

use crate::config::Severity;
use crate::config::parse::parse_documents;

/// `(severity, path, message)` of every problem in `yaml`.
fn findings(yaml: &str) -> Vec<(Severity, String, String)> {
    parse_documents("t.yaml", yaml).problems.into_iter().map(|p| (p.severity, p.path, p.message)).collect()
}

/// Paths of the Errors in `yaml`.
fn error_paths(yaml: &str) -> Vec<String> {
    findings(yaml).into_iter().filter(|f| f.0 == Severity::Error).map(|f| f.1).collect()
}

fn message_at(yaml: &str, path: &str) -> String {
    let found = findings(yaml);
    found
        .iter()
        .find(|f| f.1 == path)
        .map(|f| f.2.clone())
        .unwrap_or_else(|| panic!("no problem at {path}: {found:#?}"))
}

fn vs(spec: &str) -> String {
    format!("apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: r}}\nspec:\n{spec}")
}

#[test]
fn a_valid_virtual_service_has_no_problems() {
    let yaml = vs(
        "  hosts: [reviews]\n  http:\n  - route:\n    - {destination: {host: reviews, subset: v1}, weight: 90}\n    - {destination: {host: reviews, subset: v2}, weight: 10}\n",
    );
    assert_eq!(findings(&yaml), vec![]);
}

#[test]
fn weights_that_do_not_add_up_to_100_are_refused() {
    let yaml = vs(
        "  hosts: [reviews]\n  http:\n  - route:\n    - {destination: {host: a}, weight: 60}\n    - {destination: {host: b}, weight: 60}\n",
    );
    assert_eq!(message_at(&yaml, "spec.http[0].route"), "weights add up to 120 (60 + 60), not 100");
}

#[test]
fn weights_on_some_destinations_only_is_a_warning() {
    let yaml = vs(
        "  hosts: [reviews]\n  http:\n  - route:\n    - {destination: {host: a}, weight: 60}\n    - {destination: {host: b}}\n",
    );
    let found = findings(&yaml);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!((found[0].0, found[0].1.as_str()), (Severity::Warning, "spec.http[0].route"));
}

#[test]
fn virtual_service_rules() {
    // No hosts: a delegate, which routes HTTP only, has no gateways and does not delegate again.
    assert_eq!(error_paths(&vs("  hosts: []\n  http: [{route: [{destination: {host: a}}]}]\n")), Vec::<String>::new());
    assert_eq!(
        error_paths(&vs(
            "  gateways: [g]\n  http: [{delegate: {name: d}}]\n  tcp: [{route: [{destination: {host: a}}]}]\n"
        )),
        vec!["spec.gateways", "spec.tcp", "spec.http[0].delegate"]
    );
    assert_eq!(error_paths(&vs("  hosts: []\n")), vec!["spec.http"]);
    assert_eq!(
        error_paths(&vs("  hosts: [a]\n  http: [{delegate: {name: d}, route: [{destination: {host: a}}]}]\n")),
        vec!["spec.http[0]"],
        "a route either delegates or routes"
    );
    assert_eq!(
        error_paths(&vs("  hosts: [\"*\"]\n  http: [{route: [{destination: {host: a}}]}]\n")),
        vec!["spec.hosts[0]"],
        "* bound to mesh"
    );
    assert_eq!(
        error_paths(&vs("  hosts: [a]\n  http: [{route: [{destination: {host: a}}], redirect: {uri: /x}}]\n")),
        vec!["spec.http[0]"]
    );
    assert_eq!(error_paths(&vs("  hosts: [a]\n  http: [{timeout: 1s}]\n")), vec!["spec.http[0]"]);
    assert_eq!(
        error_paths(&vs("  hosts: [a]\n  http: [{route: [{destination: {host: \"\"}}]}]\n")),
        vec!["spec.http[0].route[0].destination.host"]
    );
    assert_eq!(
        error_paths(&vs("  hosts: [a]\n  http: [{route: [{destination: {host: a}}], retries: {attempts: -1}}]\n")),
        vec!["spec.http[0].retries.attempts"]
    );
    assert_eq!(error_paths(&vs("  hosts: [a]\n  tcp: [{route: []}]\n")), vec!["spec.tcp[0].route"]);
    assert_eq!(error_paths(&vs("  hosts: [a]\n")), vec!["spec"], "no routes at all");
}

#[test]
fn string_matches_need_exactly_one_form_and_a_regex_that_compiles() {
    let with_match =
        |m: &str| vs(&format!("  hosts: [a]\n  http:\n  - match: [{m}]\n    route: [{{destination: {{host: a}}}}]\n"));
    assert_eq!(error_paths(&with_match("{uri: {}}")), vec!["spec.http[0].match[0].uri"]);
    assert_eq!(
        message_at(&with_match("{uri: {exact: /a, prefix: /b}}"), "spec.http[0].match[0].uri"),
        "sets exact and prefix: set exactly one of exact, prefix or regex"
    );
    let bad_regex = message_at(&with_match("{uri: {regex: \"(abc\"}}"), "spec.http[0].match[0].uri.regex");
    assert!(bad_regex.starts_with("\"(abc\" does not compile: "), "{bad_regex}");
    assert!(!bad_regex.contains('\n'), "one line: {bad_regex}");
    let upper = message_at(&with_match("{headers: {X-User: {exact: a}}}"), "spec.http[0].match[0].headers.X-User");
    assert!(upper.contains("\"x-user\""), "{upper}");
}

fn dr(spec: &str) -> String {
    format!("apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {{name: r}}\nspec:\n{spec}")
}

#[test]
fn destination_rule_rules() {
    assert_eq!(error_paths(&dr("  host: \"\"\n")), vec!["spec.host"]);
    assert_eq!(
        error_paths(&dr("  host: a\n  subsets: [{name: v1}, {name: v1}, {name: \"\"}, {name: V2}]\n")),
        vec!["spec.subsets[1].name", "spec.subsets[2].name", "spec.subsets[3].name"]
    );
    assert_eq!(
        message_at(
            &dr("  host: a\n  trafficPolicy: {loadBalancer: {simple: FASTEST}}\n"),
            "spec.trafficPolicy.loadBalancer.simple"
        ),
        "\"FASTEST\" is not one of UNSPECIFIED, ROUND_ROBIN, LEAST_REQUEST, LEAST_CONN, RANDOM, PASSTHROUGH"
    );
    // Every hash key Istio has is accepted on its own; two are refused.
    for key in [
        "httpHeaderName: x-user",
        "httpCookie: {name: user, ttl: 0s}",
        "useSourceIp: true",
        "httpQueryParameterName: u",
    ] {
        let text = dr(&format!("  host: a\n  trafficPolicy: {{loadBalancer: {{consistentHash: {{{key}}}}}}}\n"));
        assert!(error_paths(&text).is_empty(), "{key}: {:?}", error_paths(&text));
    }
    assert_eq!(
        message_at(
            &dr(
                "  host: a\n  trafficPolicy: {loadBalancer: {consistentHash: {httpHeaderName: a, useSourceIp: true}}}\n"
            ),
            "spec.trafficPolicy.loadBalancer.consistentHash"
        ),
        "sets httpHeaderName and useSourceIp: a consistent hash has exactly one key"
    );
    assert_eq!(
        error_paths(&dr("  host: a\n  trafficPolicy: {loadBalancer: {consistentHash: {minimumRingSize: 5}}}\n")),
        vec!["spec.trafficPolicy.loadBalancer.consistentHash"]
    );
    assert_eq!(
        error_paths(&dr(
            "  host: a\n  subsets:\n  - name: v1\n    trafficPolicy: {connectionPool: {http: {maxRequestsPerConnection: -1}}, outlierDetection: {maxEjectionPercent: 150}}\n"
        )),
        vec![
            "spec.subsets[0].trafficPolicy.connectionPool.http.maxRequestsPerConnection",
            "spec.subsets[0].trafficPolicy.outlierDetection.maxEjectionPercent"
        ]
    );
}

fn gateway(servers: &str) -> String {
    format!("apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {{name: g}}\nspec:\n  servers: {servers}\n")
}

#[test]
fn gateway_rules() {
    assert_eq!(error_paths(&gateway("[]")), vec!["spec.servers"]);
    // A server that cannot be served is reported on its own, as a warning:
    // the Gateway's other servers are served.
    let unserved = |servers: &str, path: &str, says: &str| {
        let yaml = gateway(servers);
        assert!(error_paths(&yaml).is_empty(), "{servers}: {:#?}", findings(&yaml));
        let message = message_at(&yaml, path);
        assert!(message.contains(says) && message.contains("this server is not served"), "{servers}: {message}");
    };
    let port = "port: {number: 443, name: https, protocol: HTTPS}, hosts: [a.example.test]";
    unserved(&format!("[{{{port}}}]"), "spec.servers[0].tls", "needs TLS settings");
    unserved(
        &format!("[{{{port}, tls: {{mode: ISTIO_MUTUAL, credentialName: shop}}}}]"),
        "spec.servers[0].tls",
        "gateway's own workload certificate",
    );
    // ISTIO_MUTUAL is served; what it does not apply is reported.
    let mesh_tls = gateway(&format!(
        "[{{{port}, tls: {{mode: ISTIO_MUTUAL, subjectAltNames: [spiffe://cluster.local/ns/a/sa/b], cipherSuites: [ECDHE-RSA-AES128-GCM-SHA256]}}}}]"
    ));
    assert!(error_paths(&mesh_tls).is_empty(), "{:#?}", findings(&mesh_tls));
    assert!(message_at(&mesh_tls, "spec.servers[0].tls.cipherSuites").contains("not applied to ISTIO_MUTUAL"));
    assert!(findings(&mesh_tls).iter().all(|f| !f.1.contains("subjectAltNames")), "SANs are checked");
    unserved(&format!("[{{{port}, tls: {{mode: FANCY}}}}]"), "spec.servers[0].tls.mode", "is not a TLS mode");
    unserved(&format!("[{{{port}, tls: {{mode: AUTO_PASSTHROUGH}}}}]"), "spec.servers[0].tls.mode", "TLS ports only");
    unserved(&format!("[{{{port}, tls: {{mode: SIMPLE}}}}]"), "spec.servers[0].tls", "has no certificate");
    unserved(
        &format!("[{{{port}, tls: {{mode: MUTUAL, serverCertificate: /c, privateKey: /k}}}}]"),
        "spec.servers[0].tls.caCertificates",
        "client CA bundle",
    );
    unserved(
        "[{port: {number: 80, name: http, protocol: HTTP}, hosts: [a], tls: {mode: SIMPLE, credentialName: c}}]",
        "spec.servers[0].tls",
        "plain HTTP server",
    );
    // Servable ones: nothing, or a warning about what is ignored.
    let served = gateway(&format!(
        "[{{{port}, tls: {{mode: MUTUAL, credentialName: shop, minProtocolVersion: TLSV1_2, cipherSuites: [ECDHE-RSA-AES128-GCM-SHA256, NOT-A-CIPHER]}}}}, {{port: {{number: 80, name: http, protocol: HTTP}}, hosts: [a], tls: {{httpsRedirect: true}}}}]"
    ));
    assert!(error_paths(&served).is_empty(), "{:#?}", findings(&served));
    assert!(message_at(&served, "spec.servers[0].tls.cipherSuites[1]").contains("ignored"));
    assert_eq!(findings(&served).len(), 1, "{:#?}", findings(&served));
    let passthrough = gateway(&format!("[{{{port}, tls: {{mode: PASSTHROUGH, credentialName: shop}}}}]"));
    assert!(message_at(&passthrough, "spec.servers[0].tls").contains("does not terminate"));
    let versions = gateway(&format!(
        "[{{{port}, tls: {{mode: SIMPLE, credentialName: s, minProtocolVersion: TLSV1_3, maxProtocolVersion: TLSV1_2}}}}]"
    ));
    assert_eq!(error_paths(&versions), vec!["spec.servers[0].tls.minProtocolVersion"]);
    assert_eq!(
        error_paths(&gateway("[{port: {number: 0, name: http, protocol: HTTP}, hosts: []}]")),
        vec!["spec.servers[0].port.number", "spec.servers[0].hosts"]
    );
    assert_eq!(
        error_paths(&gateway(
            "[{port: {number: 80, name: http, protocol: HTTP}, hosts: [\"bad ns/x\", \"ns/*.example.com\", \"./a\", \"a.b\"]}]"
        )),
        vec!["spec.servers[0].hosts[0]"]
    );
    assert_eq!(
        error_paths(&gateway(
            "[{port: {number: 80, name: http, protocol: HTTP}, hosts: [\"*\"], bind: 127.0.0.1}, {port: {number: 81, name: http, protocol: HTTP}, hosts: [\"*\"], bind: localhost}]"
        )),
        vec!["spec.servers[1].bind"]
    );
}

fn service_entry(spec: &str) -> String {
    format!("apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {{name: se}}\nspec:\n{spec}")
}

#[test]
fn service_entry_rules() {
    assert_eq!(
        error_paths(&service_entry(
            "  hosts: [a.com]\n  ports: [{number: 80, name: http}, {number: 80, name: http}]\n"
        )),
        vec!["spec.ports[1].number", "spec.ports[1].name"]
    );
    assert_eq!(
        error_paths(&service_entry("  hosts: [a.com]\n  resolution: STATIC\n  endpoints: [{address: a.com}]\n")),
        vec!["spec.endpoints[0].address"]
    );
    assert_eq!(error_paths(&service_entry("  hosts: [a.com]\n  resolution: STATIC\n")), vec!["spec.endpoints"]);
    assert_eq!(
        error_paths(&service_entry(
            "  hosts: [a.com]\n  resolution: STATIC\n  endpoints: [{address: 1.2.3.4}]\n  workloadSelector: {labels: {app: a}}\n"
        )),
        vec!["spec"]
    );
    assert_eq!(
        error_paths(&service_entry("  hosts: [a.com]\n  resolution: DNS_ALWAYS\n  location: OUTSIDE\n")),
        vec!["spec.location", "spec.resolution"]
    );
}

#[test]
fn workload_entry_and_sidecar_rules() {
    let we = |spec: &str| {
        format!("apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {{name: w}}\nspec: {spec}\n")
    };
    assert_eq!(error_paths(&we("{address: \"\"}")), vec!["spec.address"]);
    assert_eq!(
        error_paths(&we("{address: 1.2.3.4, weight: 0, ports: {http: 0}}")),
        vec!["spec.ports.http", "spec.weight"]
    );
    let sidecar = |spec: &str| {
        format!("apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {{name: s}}\nspec: {spec}\n")
    };
    assert_eq!(error_paths(&sidecar("{egress: [{hosts: [reviews]}]}")), vec!["spec.egress[0].hosts[0]"]);
    assert_eq!(
        error_paths(&sidecar("{egress: [{hosts: [\"~/*\", \"*/*\", \"./a\", \"prod/*.svc\"]}]}")),
        Vec::<String>::new()
    );
    assert_eq!(
        error_paths(&sidecar(
            "{egress: [{hosts: [./*]}, {hosts: [./*], bind: localhost, captureMode: TPROXY}], outboundTrafficPolicy: {mode: DENY}}"
        )),
        vec![
            "spec.egress[1].port",
            "spec.egress[1].bind",
            "spec.egress[1].captureMode",
            "spec.outboundTrafficPolicy.mode"
        ]
    );
}

#[test]
fn kubernetes_rules() {
    let service = |spec: &str| format!("apiVersion: v1\nkind: Service\nmetadata: {{name: s}}\nspec: {spec}\n");
    assert_eq!(
        error_paths(&service("{ports: [{name: http, port: 80}, {name: http, port: 81}, {port: 82}]}")),
        vec!["spec.ports[1].name", "spec.ports[2].name"]
    );
    assert_eq!(
        error_paths("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nstatus: {podIP: 10.0.0}\n"),
        vec!["status.podIP"]
    );
    let slice = "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: e}\naddressType: IPv5\n";
    assert_eq!(error_paths(slice), vec!["metadata.labels", "addressType"]);
    assert_eq!(error_paths("apiVersion: v1\nkind: Service\nmetadata: {name: Reviews_1}\n"), vec!["metadata.name"]);
}

#[test]
fn ports_without_a_protocol_istio_knows_are_reported_as_served_as_tcp() {
    let service = |spec: &str| format!("apiVersion: v1\nkind: Service\nmetadata: {{name: s}}\nspec: {spec}\n");
    let warned = |spec: &str| -> Vec<String> {
        findings(&service(spec)).into_iter().filter(|f| f.0 == Severity::Warning).map(|f| f.1).collect()
    };
    assert_eq!(warned("{ports: [{name: web, port: 8080}]}"), vec!["spec.ports[0]"]);
    assert_eq!(warned("{ports: [{port: 8080}]}"), vec!["spec.ports[0]"]);
    assert_eq!(warned("{ports: [{name: web, port: 8080, appProtocol: http}]}"), Vec::<String>::new());
    assert_eq!(warned("{ports: [{name: http-web, port: 8080}, {name: db, port: 3306}]}"), Vec::<String>::new());
    assert_eq!(warned("{ports: [{name: dns, port: 5353, protocol: UDP}]}"), Vec::<String>::new(), "UDP is not served");
    let message = message_at(&service("{ports: [{name: web, port: 8080}]}"), "spec.ports[0]");
    assert!(message.contains("sniffing") && message.contains("plain TCP"), "{message}");
    // Istio's own Services (a waypoint's) name none on purpose.
    let waypoint = "apiVersion: v1\nkind: Service\nmetadata: {name: w, labels: {gateway.istio.io/managed: istio.io-mesh-controller}}\nspec: {ports: [{name: mesh, port: 15008}]}\n";
    assert!(findings(waypoint).is_empty(), "{:?}", findings(waypoint));
    // What ztunnel applies and sidecars do not yet.
    assert_eq!(
        warned("{ports: [{name: http, port: 80}], internalTrafficPolicy: Local, trafficDistribution: PreferClose}"),
        vec!["spec.internalTrafficPolicy", "spec.trafficDistribution"]
    );
}

#[test]
fn authorization_policy_rules() {
    let ap = |spec: &str| {
        format!("apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {{name: p}}\nspec:\n{spec}")
    };
    assert_eq!(
        findings(&ap(
            "  action: DENY\n  rules:\n  - from: [{source: {namespaces: [a], ipBlocks: [10.0.0.0/8]}}]\n    to: [{operation: {paths: [/admin*], ports: [\"8080\"]}}]\n    when: [{key: \"request.headers[x-user]\", values: [bob]}]\n"
        )),
        vec![]
    );
    assert_eq!(error_paths(&ap("  action: LET\n")), ["spec.action"]);
    assert_eq!(error_paths(&ap("  action: CUSTOM\n  rules: [{}]\n")), ["spec.provider"], "CUSTOM names its authorizer");
    assert_eq!(error_paths(&ap("  provider: {name: opa}\n")), ["spec.provider"], "only CUSTOM has one");
    assert_eq!(
        error_paths(&ap(
            "  rules:\n  - from: [{source: {}}, {}]\n    to: [{operation: {ports: [http]}}]\n    when: [{key: source.ipv6, values: [a]}, {key: source.ip, values: [not-an-ip]}]\n"
        )),
        [
            "spec.rules[0].from[0].source",
            "spec.rules[0].from[1].source",
            "spec.rules[0].to[0].operation.ports[0]",
            "spec.rules[0].when[0].key",
            "spec.rules[0].when[1].values[0]"
        ]
    );
    // JWT attributes are served (RequestAuthentication's JWT filter).
    let jwt = ap(
        "  rules: [{from: [{source: {requestPrincipals: [\"*\"]}}], when: [{key: \"request.auth.claims[groups]\", values: [a]}]}]\n",
    );
    assert_eq!(findings(&jwt), vec![]);
    // Path templates are checked as Istio checks them; filter metadata keys name a field.
    assert_eq!(findings(&ap("  rules: [{to: [{operation: {paths: [\"/a/{*}/b/{**}\"]}}]}]\n")), vec![]);
    assert_eq!(
        error_paths(&ap(
            "  rules:\n  - to: [{operation: {paths: [\"/a/{**}/{*}\", \"/a{*}\", \"/a/{*}/b c\"]}}]\n    when: [{key: experimental.envoy.filters.http.lua, values: [x]}]\n"
        )),
        [
            "spec.rules[0].to[0].operation.paths[0]",
            "spec.rules[0].to[0].operation.paths[1]",
            "spec.rules[0].to[0].operation.paths[2]",
            "spec.rules[0].when[0].key"
        ]
    );
    // A CUSTOM policy is checked as Istio checks it; its provider is the mesh config's (`model::references`).
    assert_eq!(findings(&ap("  action: CUSTOM\n  provider: {name: opa}\n  rules: [{}]\n")), vec![]);
    assert_eq!(error_paths(&ap("  action: CUSTOM\n  provider: {name: \"\"}\n  rules: [{}]\n")), ["spec.provider.name"]);
    assert_eq!(error_paths(&ap("  action: CUSTOM\n  provider: {name: opa}\n")), ["spec.rules"], "it would never ask");
    assert_eq!(
        error_paths(&ap(
            "  action: CUSTOM\n  provider: {name: opa}\n  rules:\n  - from: [{source: {namespaces: [a], ipBlocks: [10.0.0.0/8], requestPrincipals: [\"*\"]}}]\n    when: [{key: source.principal, values: [a]}, {key: \"request.auth.claims[iss]\", values: [a]}, {key: \"request.headers[x]\", values: [a]}]\n"
        )),
        [
            "spec.rules[0].from[0].source.requestPrincipals",
            "spec.rules[0].from[0].source.namespaces",
            "spec.rules[0].when[0].key",
            "spec.rules[0].when[1].key"
        ]
    );
    let dry_run = "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: p, annotations: {istio.io/dry-run: \"true\"}}\nspec:\n  action: CUSTOM\n  provider: {name: opa}\n  rules: [{}]\n";
    assert!(message_at(dry_run, "metadata.annotations.istio.io/dry-run").contains("denied without asking"));
    // A waypoint applies what names a Service; a Gateway API gateway's
    // targets, or another kind, are reported with what happens now.
    let waypoint = ap("  targetRefs: [{kind: Service, name: web}]\n");
    assert!(findings(&waypoint).is_empty(), "{:?}", findings(&waypoint));
    let gateway = ap("  targetRefs: [{kind: Gateway, group: gateway.networking.k8s.io, name: edge}]\n");
    assert!(message_at(&gateway, "spec.targetRefs[0]").contains("not applied by meshpush"));
    let wrong = ap(
        "  targetRefs: [{kind: Pod, name: x}, {kind: Service, name: web, namespace: other}, {kind: ServiceEntry, name: e}]\n",
    );
    assert_eq!(
        error_paths(&wrong),
        ["spec.targetRefs[0].kind", "spec.targetRefs[1].namespace", "spec.targetRefs[2].kind"]
    );
}

#[test]
fn request_authentication_rules() {
    let ra = |spec: &str| {
        format!("apiVersion: security.istio.io/v1\nkind: RequestAuthentication\nmetadata: {{name: r}}\nspec:\n{spec}")
    };
    let fine = "  selector: {matchLabels: {app: a}}\n  jwtRules:\n  - issuer: https://issuer.example\n    jwksUri: https://issuer.example/keys\n    audiences: [web]\n    fromHeaders: [{name: x-jwt, prefix: 'Bearer '}]\n    fromParams: [token]\n    outputClaimToHeaders: [{header: x-sub, claim: sub}]\n    timeout: 2s\n";
    assert_eq!(findings(&ra(fine)), vec![]);
    assert_eq!(
        error_paths(&ra(
            "  jwtRules:\n  - audiences: ['']\n  - issuer: a\n    jwksUri: ftp://keys.example/k\n  - issuer: b\n    jwks: '{\"keys\": 1}'\n    fromHeaders: [{name: ''}]\n    outputClaimToHeaders: [{header: 'bad header', claim: sub}, {header: x}]\n"
        )),
        [
            "spec.jwtRules[0].audiences[0]",
            "spec.jwtRules[0].issuer",
            "spec.jwtRules[1].jwksUri",
            "spec.jwtRules[2].jwks",
            "spec.jwtRules[2].fromHeaders[0].name",
            "spec.jwtRules[2].outputClaimToHeaders[0].header",
            "spec.jwtRules[2].outputClaimToHeaders[1]",
        ]
    );
    let private = ra(
        "  jwtRules: [{issuer: a, jwks: '{\"keys\":[{\"kty\":\"RSA\",\"n\":\"x\",\"e\":\"AQAB\",\"d\":\"y\"}]}'}]\n",
    );
    assert!(message_at(&private, "spec.jwtRules[0].jwks").contains("only the public members"));
    let waypoint = ra("  targetRefs: [{kind: Service, name: web}]\n");
    assert!(message_at(&waypoint, "spec.targetRefs").contains("applies to no workload"));
}

#[test]
fn peer_authentication_rules() {
    let pa = |spec: &str| {
        format!("apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {{name: p}}\nspec:\n{spec}")
    };
    assert_eq!(findings(&pa("  selector: {matchLabels: {app: a}}\n  mtls: {mode: STRICT}\n")), vec![]);
    assert_eq!(error_paths(&pa("  mtls: {mode: strict}\n")), ["spec.mtls.mode"], "modes are upper case");
    assert!(
        message_at(&pa("  portLevelMtls: {8080: {mode: DISABLE}}\n"), "spec.portLevelMtls")
            .contains("needs spec.selector"),
        "ports are a workload's own"
    );
    assert_eq!(
        error_paths(&pa(
            "  selector: {matchLabels: {app: a}}\n  portLevelMtls: {0: {mode: DISABLE}, 80: {mode: OFF}}\n"
        )),
        ["spec.portLevelMtls.0", "spec.portLevelMtls.80.mode"]
    );
    assert!(
        message_at(&pa("  mtls: {mode: STRICT, extra: 1}\n"), "spec.mtls.extra").contains("security.istio.io/v1"),
        "a field Istio's API does not have is named with the kind's group"
    );
}

fn gateway_api(kind: &str, spec: &str) -> String {
    format!("apiVersion: gateway.networking.k8s.io/v1\nkind: {kind}\nmetadata: {{name: r}}\nspec:\n{spec}")
}

#[test]
fn gateway_api_route_rules() {
    let grpc = gateway_api(
        "GRPCRoute",
        r#"  parentRefs: [{name: edge}]
  rules:
  - matches:
    - method: {service: echo.v1.Echo, method: Say}
    - method: {type: RegularExpression, service: "echo\\..*"}
    filters: [{type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: x-a, value: b}]}}]
    backendRefs: [{name: echo, port: 9000}]
"#,
    );
    assert!(findings(&grpc).is_empty(), "{:#?}", findings(&grpc));
    let bad_grpc = gateway_api(
        "GRPCRoute",
        r#"  parentRefs: [{name: edge}]
  rules:
  - matches:
    - method: {}
    - method: {service: "echo/Echo"}
    - method: {method: "Say.Hi"}
    filters: [{type: URLRewrite}, {type: RequestMirror}]
"#,
    );
    assert_eq!(
        error_paths(&bad_grpc),
        [
            "spec.rules[0].matches[0].method",
            "spec.rules[0].matches[1].method.service",
            "spec.rules[0].matches[2].method.method",
            "spec.rules[0].filters[0].type",
            "spec.rules[0].filters[1].requestMirror",
        ]
    );
    let tcp =
        gateway_api("TCPRoute", "  parentRefs: [{name: edge}]\n  rules: [{backendRefs: [{name: db, port: 5432}]}]\n");
    assert!(findings(&tcp).is_empty(), "{:#?}", findings(&tcp));
    let bad_tcp = gateway_api("TCPRoute", "  parentRefs: [{name: edge}]\n  rules: [{backendRefs: []}]\n");
    assert_eq!(error_paths(&bad_tcp), ["spec.rules[0].backendRefs"]);
    let no_rules =
        gateway_api("TLSRoute", "  parentRefs: [{name: edge}]\n  hostnames: [\"*.example.com\", 10.0.0.1]\n");
    assert_eq!(error_paths(&no_rules), ["spec.hostnames[1]", "spec.rules"]);
    let passthrough = "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: g}\nspec:\n  \
                       gatewayClassName: istio\n  listeners:\n  - {name: tls, port: 443, protocol: TLS, \
                       tls: {mode: Passthrough, certificateRefs: [{name: unused}]}}\n";
    let found = findings(passthrough);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!((found[0].0, found[0].1.as_str()), (Severity::Warning, "spec.listeners[0].tls.certificateRefs"));
}

#[test]
fn a_listener_protocol_is_any_name_the_schema_takes() {
    // Istio's own waypoint manifests name HBONE; the API's schema takes any
    // such name, and the translation says whether it is served.
    let listener = |protocol: &str| {
        format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: g}}\nspec:\n  \
             gatewayClassName: istio-waypoint\n  listeners:\n  - {{name: mesh, port: 15008, protocol: {protocol:?}}}\n"
        )
    };
    for ok in ["HBONE", "UDP", "example.com/udp", "a-b"] {
        assert!(findings(&listener(ok)).is_empty(), "{ok}: {:#?}", findings(&listener(ok)));
    }
    for bad in ["", "-x", "x-", "a b", "example.com/", "/udp", "a/b/c", "h_t"] {
        assert_eq!(error_paths(&listener(bad)), ["spec.listeners[0].protocol"], "{bad:?}");
    }
}

fn telemetry(spec: &str) -> String {
    format!(
        "apiVersion: telemetry.istio.io/v1alpha1\nkind: Telemetry\nmetadata: {{name: t, namespace: shop}}\nspec:\n{spec}"
    )
}

#[test]
fn a_telemetry_is_refused_where_istio_refuses_it_and_its_metrics_are_reported() {
    let valid = telemetry(
        "  selector: {matchLabels: {app: web}}\n  accessLogging:\n  - providers: [{name: envoy}]\n    \
         filter: {expression: \"response.code >= 400 && request.path.startsWith('/api')\"}\n  tracing:\n  \
         - providers: [{name: zipkin}]\n    randomSamplingPercentage: 10\n    customTags: {team: {literal: {value: shop}}}",
    );
    assert_eq!(findings(&valid), vec![]);
    let broken = telemetry(
        "  selector: {matchLabels: {app: web}}\n  targetRefs: [{kind: Gateway, group: gateway.networking.k8s.io, name: gw}]\n  \
         accessLogging:\n  - providers: [{name: envoy}]\n    match: {mode: SOMETIMES}\n    filter: {expression: 'response.code >=='}\n  \
         tracing:\n  - providers: [{name: ''}]\n    randomSamplingPercentage: 120\n    customTags: {team: {literal: {value: ''}}, \
         two: {literal: {value: a}, header: {name: b}}}",
    );
    assert_eq!(
        error_paths(&broken),
        [
            "spec.selector",
            "spec.tracing[0].providers[0].name",
            "spec.tracing[0].randomSamplingPercentage",
            "spec.tracing[0].customTags.team",
            "spec.tracing[0].customTags.two",
            "spec.accessLogging[0].match.mode",
            "spec.accessLogging[0].filter.expression",
        ]
    );
    assert!(message_at(&broken, "spec.accessLogging[0].filter.expression").starts_with("is not a CEL expression"));
    let metrics = telemetry("  metrics:\n  - providers: [{name: prometheus}]\n    overrides: [{disabled: true}]");
    let message = message_at(&metrics, "spec.metrics[0]");
    assert!(message.contains("upstream Envoy 1.40") && message.contains("/stats/prometheus"), "{message}");
    let waypoint = telemetry("  targetRefs: [{kind: Service, group: '', name: web}]");
    assert!(message_at(&waypoint, "spec.targetRefs[0]").contains("waypoints"));
}
