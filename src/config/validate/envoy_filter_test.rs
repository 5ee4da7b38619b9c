//! EnvoyFilter validation, through the parser: Istio's own EnvoyFilter
//! manifests pass, and each of Istio's refusals is made with its path.

use crate::config::Severity;
use crate::config::parse::parse_documents;

/// `(severity, path, message)` of every problem in `yaml` but the two every
/// EnvoyFilter gets.
fn findings(yaml: &str) -> Vec<(Severity, String, String)> {
    parse_documents("t.yaml", yaml)
        .problems
        .into_iter()
        .filter(|p| p.message != super::INTERNALS)
        .map(|p| (p.severity, p.path, p.message))
        .collect()
}

fn errors(yaml: &str) -> Vec<(String, String)> {
    findings(yaml).into_iter().filter(|f| f.0 == Severity::Error).map(|f| (f.1, f.2)).collect()
}

fn filter(patches: &str) -> String {
    format!(
        "apiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nmetadata: {{name: f, namespace: istio-system}}\nspec:\n  configPatches:\n{patches}"
    )
}

fn istio(path: &str) -> String {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/istio").join(path);
    std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

#[test]
fn istio_s_own_envoy_filters_are_valid() {
    for path in [
        "samples/ratelimit/local-rate-limit-service.yaml",
        "samples/bookinfo/policy/productpage_envoy_ratelimit.yaml",
        "tests/testdata/networking/envoyfilter-without-service/configs.yaml",
        "pilot/pkg/xds/testdata/ecds.yaml",
    ] {
        let parsed = parse_documents(path, &istio(path));
        assert!(parsed.objects.iter().any(|(o, _)| o.kind() == crate::config::ConfigKind::EnvoyFilter), "{path}");
        let found: Vec<_> = parsed
            .problems
            .iter()
            .filter(|p| p.object.as_ref().is_some_and(|k| k.kind == crate::config::ConfigKind::EnvoyFilter))
            .filter(|p| p.severity == Severity::Error || !p.message.contains(super::INTERNALS))
            .collect();
        // The bookinfo sample names Envoy's old filter name, as Istio warns.
        let deprecated = |p: &&&crate::config::Problem| p.message.contains("deprecated filter name envoy.ratelimit");
        assert!(found.iter().all(|p| p.severity == Severity::Warning && deprecated(&p)), "{path}: {found:#?}");
    }
}

#[test]
fn a_patch_without_its_parts_is_refused() {
    assert_eq!(
        errors(&filter("  - match: {context: ANY}\n    patch: {operation: ADD, value: {}}\n"))[0].0,
        "spec.configPatches[0].applyTo"
    );
    assert_eq!(errors(&filter("  - applyTo: CLUSTER\n"))[0].0, "spec.configPatches[0].patch");
    assert_eq!(
        errors(&filter("  - applyTo: CLUSTER\n    patch: {value: {name: c}}\n"))[0].0,
        "spec.configPatches[0].patch.operation"
    );
    assert_eq!(
        errors(&filter("  - applyTo: CLUSTER\n    patch: {operation: MERGE}\n")),
        [("spec.configPatches[0].patch.value".to_string(), "missing patch value for non-remove operation".to_string())]
    );
    assert!(
        errors(&filter("  - applyTo: CLUSTER\n    match: {cluster: {name: c}}\n    patch: {operation: REMOVE}\n"))
            .is_empty()
    );
}

#[test]
fn a_match_must_fit_what_is_patched() {
    let wrong = filter("  - applyTo: HTTP_FILTER\n    match: {cluster: {name: c}}\n    patch: {operation: REMOVE}\n");
    assert_eq!(errors(&wrong)[0].0, "spec.configPatches[0].match");
    let wrong =
        filter("  - applyTo: CLUSTER\n    match: {listener: {portNumber: 80}}\n    patch: {operation: REMOVE}\n");
    assert_eq!(errors(&wrong)[0].0, "spec.configPatches[0].match");
    let sub = filter(
        "  - applyTo: NETWORK_FILTER\n    match: {listener: {filterChain: {filter: {name: envoy.filters.network.tcp_proxy, subFilter: {name: x}}}}}\n    patch: {operation: REMOVE}\n",
    );
    let found: Vec<String> = errors(&sub).into_iter().map(|e| e.1).collect();
    assert!(found.iter().any(|m| m.contains("HTTP_FILTER only")), "{found:?}");
    assert!(
        found.iter().any(|m| m.contains("requires filter match with envoy.filters.network.http_connection_manager")),
        "{found:?}"
    );
    let regex =
        filter("  - applyTo: CLUSTER\n    match: {proxy: {proxyVersion: '^1\\.(2'}}\n    patch: {operation: REMOVE}\n");
    assert_eq!(errors(&regex)[0].0, "spec.configPatches[0].match.proxy.proxyVersion");
}

#[test]
fn a_value_is_read_as_the_envoy_message_it_patches() {
    // An unknown field is named by its path inside the value; istiod would
    // apply the rest, meshpush skips the patch (a warning: the filter's
    // other patches apply).
    let typo = filter(
        "  - applyTo: CLUSTER\n    patch:\n      operation: MERGE\n      value: {connect_timeout: 1s, circuit_breakers: {tresholds: []}}\n",
    );
    assert!(errors(&typo).is_empty(), "{:#?}", errors(&typo));
    let found = findings(&typo);
    let skipped: Vec<_> = found.iter().filter(|f| f.2.contains("the patch is skipped")).collect();
    assert_eq!(skipped.len(), 1, "{found:#?}");
    assert!(skipped[0].1.starts_with("spec.configPatches[0].patch.value.circuit_breakers"), "{found:#?}");
    assert!(skipped[0].2.contains("tresholds"), "{found:#?}");
    // An unknown type refuses the object, as istiod refuses it.
    let unknown = filter(
        "  - applyTo: HTTP_FILTER\n    patch:\n      operation: ADD\n      value: {name: x, typed_config: {'@type': type.googleapis.com/envoy.extensions.filters.http.nope.v3.Nope}}\n",
    );
    assert!(errors(&unknown)[0].1.contains("envoy.extensions.filters.http.nope.v3.Nope"), "{:#?}", errors(&unknown));
    // What Envoy would refuse is skipped: a TypedStruct whose value is not
    // its type, a value breaking Envoy's own constraints (a MERGE's only in
    // what it sets).
    let skipped = |patches: &str| -> Vec<(String, String)> {
        findings(&filter(patches))
            .into_iter()
            .filter(|f| f.0 == Severity::Warning && f.2.contains("the patch is skipped"))
            .map(|f| (f.1, f.2))
            .collect()
    };
    let typed_struct = skipped(
        "  - applyTo: HTTP_FILTER\n    patch:\n      operation: ADD\n      value:\n        name: x\n        typed_config:\n          '@type': type.googleapis.com/xds.type.v3.TypedStruct\n          type_url: type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua\n          value: {inline_cod: x}\n",
    );
    assert!(typed_struct[0].1.contains("TypedStruct"), "{typed_struct:#?}");
    let zero = skipped("  - applyTo: CLUSTER\n    patch: {operation: MERGE, value: {connect_timeout: 0s}}\n");
    assert_eq!(zero[0].0, "spec.configPatches[0].patch.value.connect_timeout", "{zero:#?}");
    let nameless = skipped("  - applyTo: CLUSTER\n    patch: {operation: ADD, value: {connect_timeout: 1s}}\n");
    assert_eq!(nameless[0].0, "spec.configPatches[0].patch.value.name", "{nameless:#?}");
    assert!(skipped("  - applyTo: CLUSTER\n    patch: {operation: MERGE, value: {connect_timeout: 2s}}\n").is_empty());
    // A filter by name only, and a frozen (v2-era) type, are warned about as Istio warns.
    let by_name = filter(
        "  - applyTo: NETWORK_FILTER\n    patch: {operation: ADD, value: {name: envoy.filters.network.tcp_proxy}}\n",
    );
    let found = findings(&by_name);
    assert!(found.iter().any(|f| f.0 == Severity::Warning && f.2.contains("without typed_config")), "{found:#?}");
}

#[test]
fn waypoint_patches_and_port_names_are_reported_not_dropped() {
    let waypoint = filter("  - applyTo: CLUSTER\n    match: {context: WAYPOINT}\n    patch: {operation: REMOVE}\n");
    assert!(
        findings(&waypoint)
            .iter()
            .any(|f| f.1 == "spec.configPatches[0].match.context" && f.2.contains("applies nowhere"))
    );
    let port_name =
        filter("  - applyTo: LISTENER\n    match: {listener: {portName: http}}\n    patch: {operation: REMOVE}\n");
    assert!(findings(&port_name).iter().any(|f| f.1 == "spec.configPatches[0].match.listener.portName"));
}

#[test]
fn a_patch_that_does_nothing_in_istiod_is_reported() {
    let warnings = |patches: &str| -> Vec<(String, String)> {
        findings(&filter(patches)).into_iter().filter(|f| f.0 == Severity::Warning).map(|f| (f.1, f.2)).collect()
    };
    let replace = warnings("  - applyTo: CLUSTER\n    patch: {operation: REPLACE, value: {name: c}}\n");
    assert_eq!(
        replace,
        [(
            "spec.configPatches[0].patch.operation".to_string(),
            "REPLACE does nothing on a CLUSTER, as in istiod".to_string()
        )]
    );
    let unnamed = warnings("  - applyTo: HTTP_FILTER\n    patch: {operation: REMOVE}\n");
    assert!(unnamed[0].1.contains("needs the filter's name"), "{unnamed:?}");
    let bootstrap = warnings("  - applyTo: BOOTSTRAP\n    patch: {operation: MERGE, value: {}}\n");
    assert!(bootstrap[0].1.contains("BOOTSTRAP patches are not applied"), "{bootstrap:?}");
    let ecds = warnings("  - applyTo: EXTENSION_CONFIG\n    patch: {operation: MERGE, value: {name: x}}\n");
    assert!(ecds[0].1.contains("only ADD"), "{ecds:?}");
    let typed = "{name: x, typed_config: {'@type': type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua}}";
    assert!(
        warnings(&format!("  - applyTo: EXTENSION_CONFIG\n    patch: {{operation: ADD, value: {typed}}}\n")).is_empty()
    );
}
