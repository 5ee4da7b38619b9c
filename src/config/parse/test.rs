use super::*;

const EVERY_KIND: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: reviews, namespace: bookinfo}
spec:
  selector: {app: reviews}
  ports: [{name: http, port: 9080, targetPort: 9080}]
---
apiVersion: v1
kind: Pod
metadata: {name: reviews-v1-abc, namespace: bookinfo, labels: {app: reviews, version: v1}}
spec: {containers: [{name: app, ports: [{containerPort: 9080}]}]}
status: {podIP: 10.0.0.5, phase: Running}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: reviews-x1, namespace: bookinfo, labels: {kubernetes.io/service-name: reviews}}
addressType: IPv4
endpoints: [{addresses: [10.0.0.5]}]
ports: [{name: http, port: 9080}]
---
apiVersion: v1
kind: Node
metadata: {name: worker-1, labels: {topology.kubernetes.io/region: us-east, topology.kubernetes.io/zone: us-east-1a}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: httpbin}
spec:
  hosts: [httpbin.org]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: DNS
  location: MESH_EXTERNAL
---
apiVersion: networking.istio.io/v1beta1
kind: WorkloadEntry
metadata: {name: vm-1, namespace: bookinfo}
spec: {address: 10.1.0.7, labels: {app: reviews}, ports: {http: 9080}}
---
apiVersion: networking.istio.io/v1alpha3
kind: VirtualService
metadata: {name: reviews, namespace: bookinfo}
spec:
  hosts: [reviews]
  http:
  - match: [{uri: {prefix: /v2}, headers: {x-user: {exact: jason}}}]
    route:
    - {destination: {host: reviews, subset: v1}, weight: 75}
    - {destination: {host: reviews, subset: v2}, weight: 25}
    timeout: 2s
    retries: {attempts: 3, perTryTimeout: 500ms}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: bookinfo}
spec:
  host: reviews
  trafficPolicy: {loadBalancer: {simple: LEAST_REQUEST}}
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: ingress, namespace: istio-system}
spec:
  selector: {istio: ingressgateway}
  servers: [{port: {number: 80, name: http, protocol: HTTP}, hosts: ["*"]}]
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: bookinfo}
spec:
  egress: [{hosts: [./*, istio-system/*]}]
  outboundTrafficPolicy: {mode: REGISTRY_ONLY}
---
apiVersion: networking.istio.io/v1
kind: WorkloadGroup
metadata: {name: ratings-vm, namespace: bookinfo}
spec:
  metadata: {labels: {app: ratings}}
  template: {ports: {http: 9080}}
---
apiVersion: v1
kind: Secret
metadata: {name: unrelated, namespace: bookinfo}
type: Opaque
data: {password: aHVudGVyMg==}
---
apiVersion: security.istio.io/v1beta1
kind: PeerAuthentication
metadata: {name: strict, namespace: bookinfo}
spec:
  selector: {matchLabels: {app: reviews}}
  mtls: {mode: STRICT}
  portLevelMtls: {9080: {mode: PERMISSIVE}}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: no-admin, namespace: bookinfo}
spec:
  action: DENY
  rules: [{to: [{operation: {paths: [/admin*]}}]}]
---
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: jwt, namespace: bookinfo}
spec:
  jwtRules: [{issuer: https://issuer.example, jwksUri: https://issuer.example/keys}]
---
apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: mesh-default, namespace: bookinfo}
spec:
  accessLogging: [{providers: [{name: envoy}]}]
---
apiVersion: networking.istio.io/v1beta1
kind: ProxyConfig
metadata: {name: per-pod, namespace: bookinfo}
spec:
  selector: {matchLabels: {app: reviews}}
  concurrency: 2
  environmentVariables: {ISTIO_META_TEAM: books}
  image: {imageType: distroless}
---
apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {name: lua, namespace: bookinfo}
spec:
  workloadSelector: {labels: {app: reviews}}
  configPatches:
  - applyTo: HTTP_FILTER
    match:
      context: SIDECAR_INBOUND
      listener: {filterChain: {filter: {name: envoy.filters.network.http_connection_manager, subFilter: {name: envoy.filters.http.router}}}}
    patch:
      operation: INSERT_BEFORE
      value:
        name: envoy.filters.http.lua
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua
          default_source_code: {inline_string: "function envoy_on_request(h) h:headers():add('x-lua', '1') end"}
---
apiVersion: v1
kind: Namespace
metadata: {name: bookinfo, labels: {team: books}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: istio}
spec: {controllerName: istio.io/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: edge, namespace: bookinfo}
spec:
  gatewayClassName: istio
  listeners: [{name: http, port: 80, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: reviews, namespace: bookinfo}
spec:
  parentRefs: [{name: edge}]
  rules: [{backendRefs: [{name: reviews, port: 9080}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: ratings, namespace: bookinfo}
spec:
  parentRefs: [{name: edge}]
  rules: [{matches: [{method: {service: ratings.Ratings}}], backendRefs: [{name: ratings, port: 9080}]}]
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {name: mysql, namespace: bookinfo}
spec:
  parentRefs: [{name: edge}]
  rules: [{backendRefs: [{name: mysqldb, port: 3306}]}]
---
apiVersion: gateway.networking.k8s.io/v1alpha3
kind: TLSRoute
metadata: {name: details, namespace: bookinfo}
spec:
  parentRefs: [{name: edge}]
  hostnames: [details.example.com]
  rules: [{backendRefs: [{name: details, port: 9443}]}]
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: from-apps, namespace: bookinfo}
spec:
  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: apps}]
  to: [{group: "", kind: Service}]
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: reviews, namespace: bookinfo}
spec:
  ingressClassName: istio
  rules: [{host: reviews.example.com, http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: reviews, port: {number: 9080}}}}]}}]
---
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: istio}
spec: {controller: istio.io/ingress-controller}
"#;

fn kinds(parsed: &ParsedFile) -> Vec<ConfigKind> {
    parsed.objects.iter().map(|(o, _)| o.kind()).collect()
}

fn only_problem(parsed: &ParsedFile) -> &Problem {
    assert_eq!(parsed.problems.len(), 1, "expected one problem, got {:#?}", parsed.problems);
    &parsed.problems[0]
}

#[test]
fn a_kind_meshpush_writes_itself_is_not_read_from_a_file() {
    let parsed = parse_documents(
        "forged.yaml",
        "apiVersion: meshpush.io/v1\nkind: FetchedJwks\nmetadata: {name: jwks-1}\nkeys: '{}'\n",
    );
    assert!(parsed.objects.is_empty());
    assert!(only_problem(&parsed).message.contains("unknown kind FetchedJwks"), "{:?}", parsed.problems);
    let parsed = parse_documents(
        "forged.yaml",
        "apiVersion: meshpush.io/v1\nkind: FetchedTrustBundle\nmetadata: {name: b}\nurl: https://x\nroots: [x]\n",
    );
    assert!(parsed.objects.is_empty(), "no root is trusted from a file");
    assert!(only_problem(&parsed).message.contains("unknown kind FetchedTrustBundle"), "{:?}", parsed.problems);
}

#[test]
fn a_file_with_every_kind_parses_into_typed_objects() {
    let parsed = parse_documents("bookinfo.yaml", EVERY_KIND);
    // A ProxyConfig says that it reaches proxies only through injection (and
    // that its image type is not applied);
    // an EnvoyFilter what istiod says of every one.
    let of = |kind: ConfigKind| -> Vec<&Problem> {
        parsed.problems.iter().filter(|p| p.object.as_ref().is_some_and(|k| k.kind == kind)).collect()
    };
    let (injected, filter) = (of(ConfigKind::ProxyConfig), of(ConfigKind::EnvoyFilter));
    assert_eq!(parsed.problems.len(), injected.len() + filter.len(), "{:#?}", parsed.problems);
    assert_eq!(injected.len(), 2, "{injected:#?}");
    assert!(injected.iter().any(|p| p.message.contains("injected") && p.path == "spec"), "{injected:#?}");
    assert!(injected.iter().any(|p| p.path == "spec.image.imageType"), "{injected:#?}");
    assert_eq!(filter.len(), 1, "{filter:#?}");
    assert!(filter.iter().any(|p| p.message.contains("implementation details")), "{filter:#?}");
    let readable: Vec<ConfigKind> = ConfigKind::ALL.into_iter().filter(|k| !k.is_internal()).collect();
    assert_eq!(kinds(&parsed), readable);
    for (doc, (_, source)) in parsed.objects.iter().enumerate() {
        assert_eq!(*source, SourceRef { file: "bookinfo.yaml".into(), doc });
    }
    let ConfigObject::VirtualService(vs) = &parsed.objects[6].0 else { panic!("not a VirtualService") };
    assert_eq!(vs.spec.http[0].route[1].weight, Some(25));
    assert_eq!(vs.spec.http[0].retries.as_ref().map(|r| r.attempts), Some(3));
    assert_eq!(vs.spec.http[0].timeout.map(|t| t.0), Some(std::time::Duration::from_secs(2)));
    // A document without a namespace lands in `default`.
    assert_eq!(parsed.objects[4].0.key(), ConfigKey::new(ConfigKind::ServiceEntry, "default", "httpbin"));
    // A Node belongs to no namespace; its labels are its Pods' locality.
    let ConfigObject::Node(node) = &parsed.objects[3].0 else { panic!("not a Node") };
    assert_eq!(parsed.objects[3].0.key(), ConfigKey::new(ConfigKind::Node, "", "worker-1"));
    assert_eq!(node.locality(), "us-east/us-east-1a/");
    let ConfigObject::PeerAuthentication(pa) = &parsed.objects[12].0 else { panic!("not a PeerAuthentication") };
    assert_eq!(pa.spec.port_level_mtls[&9080].mode.as_deref(), Some("PERMISSIVE"));
}

const REVIEWS_VS: &str = r#"apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews, namespace: default}
spec:
  hosts: [reviews]
  http:
  - route:
    - destination: {host: reviews, subset: v1}
      weight: 50
    - destination: {host: reviews, subset: v2}
      weight: WEIGHT
"#;

#[test]
fn a_weight_of_the_wrong_type_names_the_field_path() {
    let parsed = parse_documents("reviews.yaml", &REVIEWS_VS.replace("WEIGHT", "\"abc\""));
    assert!(parsed.objects.is_empty());
    let problem = only_problem(&parsed);
    assert_eq!(problem.severity, Severity::Error);
    assert_eq!(problem.path, "spec.http[0].route[1].weight");
    assert_eq!(problem.object, Some(ConfigKey::new(ConfigKind::VirtualService, "default", "reviews")));
    assert!(problem.message.contains("\"abc\""), "{}", problem.message);
    assert!(
        problem
            .to_string()
            .starts_with("reviews.yaml doc 0: VirtualService default/reviews: spec.http[0].route[1].weight: ")
    );
}

#[test]
fn a_negative_weight_is_refused_with_its_value_and_path() {
    let text = format!(
        "---\n{}---\n{}",
        "apiVersion: v1\nkind: Service\nmetadata: {name: reviews}\n",
        REVIEWS_VS.replace("WEIGHT", "-5")
    );
    let parsed = parse_documents("reviews.yaml", &text);
    assert_eq!(kinds(&parsed), vec![ConfigKind::Service], "the broken VirtualService must not be returned");
    let errors: Vec<String> = parsed.problems.iter().filter(|p| p.is_error()).map(Problem::to_string).collect();
    assert!(
        errors.contains(
            &"reviews.yaml doc 1: VirtualService default/reviews: spec.http[0].route[1].weight: -5 is negative"
                .to_string()
        ),
        "{errors:#?}"
    );
}

#[test]
fn unknown_kinds_are_skipped_with_a_warning() {
    let text = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n";
    let parsed = parse_documents("app.yaml", text);
    assert!(parsed.objects.is_empty());
    assert!(!parsed.has_errors());
    let messages: Vec<String> = parsed.problems.iter().map(Problem::to_string).collect();
    assert_eq!(
        messages,
        vec![
            "app.yaml doc 0: unknown kind Deployment apps/v1: skipped".to_string(),
            "app.yaml doc 1: unknown kind ConfigMap v1: skipped".to_string(),
        ]
    );
}

#[test]
fn a_known_kind_under_an_unknown_api_version_is_a_warning_that_says_which_versions_work() {
    let parsed = parse_documents("a.yaml", "apiVersion: networking.istio.io/v2\nkind: Gateway\nmetadata: {name: g}\n");
    let problem = only_problem(&parsed);
    assert_eq!(problem.severity, Severity::Warning);
    assert!(problem.message.contains("networking.istio.io/v1, v1beta1 or v1alpha3"), "{}", problem.message);
}

#[test]
fn each_gateway_api_kind_is_read_at_the_versions_it_was_served_at() {
    let doc = |version: &str, kind: &str| {
        format!(
            "apiVersion: gateway.networking.k8s.io/{version}\nkind: {kind}\nmetadata: {{name: r}}\n\
             spec: {{rules: [{{backendRefs: [{{name: b, port: 80}}]}}]}}\n"
        )
    };
    for (version, kind) in
        [("v1alpha2", "TCPRoute"), ("v1alpha3", "TLSRoute"), ("v1alpha2", "GRPCRoute"), ("v1beta1", "HTTPRoute")]
    {
        let parsed = parse_documents("a.yaml", &doc(version, kind));
        assert_eq!(parsed.objects.len(), 1, "{kind} {version}: {:?}", parsed.problems);
    }
    let parsed = parse_documents("a.yaml", &doc("v1alpha3", "HTTPRoute"));
    assert!(parsed.objects.is_empty());
    assert!(only_problem(&parsed).message.contains("gateway.networking.k8s.io/v1 or v1beta1"), "{:?}", parsed.problems);
}

#[test]
fn empty_documents_are_skipped_but_counted() {
    let text = "---\n---\n# nothing here\n---\napiVersion: v1\nkind: Service\nmetadata: {name: a}\n---\n";
    let parsed = parse_documents("a.yaml", text);
    assert!(parsed.problems.is_empty(), "{:#?}", parsed.problems);
    assert_eq!(parsed.objects.len(), 1);
    assert_eq!(parsed.objects[0].1.doc, 2);
}

#[test]
fn a_missing_name_is_an_error() {
    let parsed = parse_documents("a.yaml", "apiVersion: v1\nkind: Service\nmetadata: {namespace: x}\nspec: {}\n");
    assert!(parsed.objects.is_empty());
    let problem = only_problem(&parsed);
    assert_eq!((problem.severity, problem.path.as_str()), (Severity::Error, "metadata.name"));
}

#[test]
fn a_syntax_error_keeps_the_documents_around_it_and_gives_the_line() {
    let text = "apiVersion: v1\nkind: Service\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: [b\n---\napiVersion: v1\nkind: Service\nmetadata: {name: c}\n";
    let parsed = parse_documents("a.yaml", text);
    let names: Vec<(String, usize)> = parsed.objects.iter().map(|(o, s)| (o.meta().name.clone(), s.doc)).collect();
    assert_eq!(names, vec![("a".to_string(), 0), ("c".to_string(), 2)]);
    let problem = only_problem(&parsed);
    assert_eq!((problem.severity, problem.source.doc, problem.object.as_ref()), (Severity::Error, 1, None));
    assert!(problem.message.starts_with("YAML syntax error"), "{}", problem.message);
    assert!(problem.message.contains("line 8"), "line numbers must be those of the file: {}", problem.message);
}

#[test]
fn a_syntax_error_with_no_document_after_it_says_the_rest_is_skipped() {
    let text = "apiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec:\n  ports: [1\n  selector: {}\nmore: stuff\n";
    let parsed = parse_documents("a.yaml", text);
    assert!(parsed.objects.is_empty());
    let problem = only_problem(&parsed);
    assert_eq!(problem.source.doc, 0);
    assert!(problem.message.starts_with("YAML syntax error"), "{}", problem.message);
    assert!(problem.message.ends_with("; the rest of the file is skipped"), "{}", problem.message);
}

#[test]
fn a_list_is_expanded_and_its_item_problems_say_which_item() {
    let text = r#"apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Service
  metadata: {name: a}
- apiVersion: v1
  kind: Service
  metadata: {name: b}
  spec: {ports: [{name: http, port: 70000}]}
- apiVersion: networking.istio.io/v1
  kind: DestinationRule
  metadata: {name: c}
  spec: {host: c}
"#;
    let parsed = parse_documents("list.yaml", text);
    assert_eq!(kinds(&parsed), vec![ConfigKind::Service, ConfigKind::DestinationRule]);
    let problem = only_problem(&parsed);
    assert_eq!(problem.path, "items[1].spec.ports[0].port");
    assert!(problem.message.contains("70000"), "{}", problem.message);
}

#[test]
fn fields_meshpush_does_not_model_are_accepted() {
    let text = "apiVersion: v1\nkind: Service\nmetadata: {name: a, uid: x1, resourceVersion: '7'}\nspec: {sessionAffinity: None, ports: [{name: http, port: 80, nodePort: 30080}]}\nstatus: {loadBalancer: {}}\n";
    let parsed = parse_documents("a.yaml", text);
    assert!(parsed.problems.is_empty(), "{:#?}", parsed.problems);
    assert_eq!(parsed.objects.len(), 1);
}

#[test]
fn ignored_field_paths_read_like_error_paths() {
    let text = "spec: {http: [{mirrors: [{destination: {host: x}, percentag: {value: 5}}]}], hosts: [a]}\nextra: 1\n";
    let value: Value = serde_yaml_ng::from_str(text).unwrap();
    let mut ignored = Vec::new();
    let _: istio::VirtualService = typed(value, &mut ignored).ok().unwrap();
    ignored.sort();
    assert_eq!(ignored, vec!["extra".to_string(), "spec.http[0].mirrors[0].percentag".to_string()]);
}

#[test]
fn the_later_of_two_documents_with_the_same_key_wins() {
    let doc = |host: &str| {
        format!(
            "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {{name: r}}\nspec: {{host: {host}}}\n"
        )
    };
    let parsed = parse_documents("a.yaml", &format!("{}---\n{}", doc("first"), doc("second")));
    assert_eq!(parsed.objects.len(), 1);
    let ConfigObject::DestinationRule(dr) = &parsed.objects[0].0 else { panic!("not a DestinationRule") };
    assert_eq!(dr.spec.host, "second");
    let problem = only_problem(&parsed);
    assert_eq!((problem.severity, problem.source.doc), (Severity::Warning, 1));
    assert!(problem.message.contains("doc 0"), "{}", problem.message);
}

#[test]
fn documents_without_kind_or_that_are_not_objects_are_errors() {
    let parsed = parse_documents("a.yaml", "metadata: {name: a}\n---\n- 1\n- 2\n---\napiVersion: v1\nkind: 7\n");
    let found: Vec<(usize, Severity, &str)> =
        parsed.problems.iter().map(|p| (p.source.doc, p.severity, p.path.as_str())).collect();
    assert_eq!(found, vec![(0, Severity::Error, ""), (1, Severity::Error, ""), (2, Severity::Error, "kind")]);
}

#[test]
fn problems_serialize_for_the_debug_endpoint() {
    let parsed = parse_documents("reviews.yaml", &REVIEWS_VS.replace("WEIGHT", "-5"));
    let json = serde_json::to_value(&parsed.problems[0]).unwrap();
    assert_eq!(json["severity"], "error");
    assert_eq!(json["source"]["file"], "reviews.yaml");
    assert_eq!(json["path"], "spec.http[0].route[1].weight");
}

#[test]
fn the_annotations_of_pods_slices_and_nodes_are_not_kept_and_a_services_are() {
    let parsed = parse_documents(
        "mesh.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p, annotations: {prometheus.io/scrape: \"true\"}}\n---\n\
         apiVersion: v1\nkind: Node\nmetadata: {name: n, annotations: {node.alpha.kubernetes.io/ttl: \"0\"}}\n---\n\
         apiVersion: v1\nkind: Service\nmetadata: {name: s, annotations: {networking.istio.io/exportTo: \".\"}}\n\
         spec: {ports: [{name: http, port: 80}]}\n",
    );
    assert!(parsed.problems.is_empty(), "{:#?}", parsed.problems);
    let annotations: Vec<usize> = parsed.objects.iter().map(|(o, _)| o.meta().annotations.len()).collect();
    assert_eq!(annotations, [0, 0, 1], "a Service's exportTo annotation is read; a Pod's and a Node's are not");
}
