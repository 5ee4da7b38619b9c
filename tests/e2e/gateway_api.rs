//! End to end: the Gateway API conformance suite's core HTTPRoute and
//! Gateway tests, ported (see `support::conformance` for how a cluster is
//! stood in for).
//!
//! One meshpush serves the suite's base manifests; each Gateway has a real
//! Envoy as its router. The tests run one after another, as the suite runs
//! them: each applies its manifests, waits for the route's status, sends
//! the requests the suite's test sends and checks what the backends saw and
//! what came back, then deletes its manifests. Every test runs even when
//! one before it failed; the failures are reported together.
//!
//! `tests/README.md` lists which of the suite's tests are ported here and
//! which are not, and why.

use crate::support;

use std::panic::{AssertUnwindSafe, catch_unwind};

use support::conformance::{APP, Expect, INFRA, Redirect, Suite, WEB};

const SAME: &str = "gateway-conformance-infra/same-namespace";
const ALL: &str = "gateway-conformance-infra/all-namespaces";
const BACKEND_NS: &str = "gateway-conformance-infra/backend-namespaces";

const V1: &str = "infra-backend-v1";
const V2: &str = "infra-backend-v2";
const V3: &str = "infra-backend-v3";

/// One ported test: its name (the suite's `ShortName`), its manifests, and
/// what it checks.
type Case = (&'static str, &'static str, fn(&Suite));

const CASES: &[Case] = &[
    ("HTTPRouteSimpleSameNamespace", "httproute-simple-same-namespace.yaml", simple_same_namespace),
    ("HTTPRouteMatching", "httproute-matching.yaml", matching),
    ("HTTPRouteExactPathMatching", "httproute-exact-path-matching.yaml", exact_path_matching),
    ("HTTPRouteHeaderMatching", "httproute-header-matching.yaml", header_matching),
    ("HTTPRoutePathMatchOrder", "httproute-path-match-order.yaml", path_match_order),
    ("HTTPRouteMatchingAcrossRoutes", "httproute-matching-across-routes.yaml", matching_across_routes),
    ("HTTPRouteCrossNamespace", "httproute-cross-namespace.yaml", cross_namespace),
    ("HTTPRouteHostnameIntersection", "httproute-hostname-intersection.yaml", hostname_intersection),
    ("HTTPRouteListenerHostnameMatching", "httproute-listener-hostname-matching.yaml", listener_hostname_matching),
    ("HTTPRouteMultipleGateways", "httproute-multiple-gateways.yaml", multiple_gateways),
    ("HTTPRouteWeight", "httproute-weight.yaml", weight),
    ("HTTPRouteOmittedBackendRefs", "httproute-omitted-backendrefs.yaml", omitted_backend_refs),
    ("HTTPRouteInvalidNonExistentBackendRef", "httproute-invalid-nonexistent-backendref.yaml", nonexistent_backend),
    ("HTTPRouteInvalidBackendRefUnknownKind", "httproute-invalid-backendref-unknown-kind.yaml", unknown_kind_backend),
    (
        "HTTPRouteInvalidCrossNamespaceBackendRef",
        "httproute-invalid-cross-namespace-backend-ref.yaml",
        cross_namespace_backend_without_grant,
    ),
    (
        "HTTPRouteInvalidCrossNamespaceParentRef",
        "httproute-invalid-cross-namespace-parent-ref.yaml",
        parent_not_allowed,
    ),
    (
        "HTTPRouteInvalidParentRefNotMatchingSectionName",
        "httproute-invalid-parentref-not-matching-section-name.yaml",
        section_name_not_matching,
    ),
    ("HTTPRouteReferenceGrant", "httproute-reference-grant.yaml", reference_grant),
    ("HTTPRouteInvalidReferenceGrant", "httproute-invalid-reference-grant.yaml", invalid_reference_grant),
    (
        "HTTPRoutePartiallyInvalidViaInvalidReferenceGrant",
        "httproute-partially-invalid-via-invalid-reference-grant.yaml",
        partially_invalid_reference_grant,
    ),
    ("HTTPRouteRedirectHostAndStatus", "httproute-redirect-host-and-status.yaml", redirect_host_and_status),
    ("HTTPRoute303Redirect", "httproute-303-redirect.yaml", redirect_303),
    ("HTTPRoute307Redirect", "httproute-307-redirect.yaml", redirect_307),
    ("HTTPRoute308Redirect", "httproute-308-redirect.yaml", redirect_308),
    ("HTTPRouteHTTPSListener", "httproute-https-listener.yaml", https_listener),
    ("HTTPRouteServiceTypes", "httproute-service-types.yaml", service_types),
    ("HTTPRouteDisallowedKind", "httproute-disallowed-kind.yaml", disallowed_kind),
    ("GatewayInvalidRouteKind", "gateway-invalid-route-kind.yaml", invalid_route_kind),
    ("GatewayInvalidTLSConfiguration", "gateway-invalid-tls-configuration.yaml", invalid_tls_configuration),
    (
        "GatewaySecretInvalidReferenceGrant",
        "gateway-secret-invalid-reference-grant.yaml",
        secret_invalid_reference_grant,
    ),
    (
        "GatewaySecretMissingReferenceGrant",
        "gateway-secret-missing-reference-grant.yaml",
        secret_missing_reference_grant,
    ),
    (
        "GatewaySecretReferenceGrantAllInNamespace",
        "gateway-secret-reference-grant-all-in-namespace.yaml",
        secret_reference_grant_all_in_namespace,
    ),
    (
        "GatewaySecretReferenceGrantSpecific",
        "gateway-secret-reference-grant-specific.yaml",
        secret_reference_grant_specific,
    ),
    ("GatewayWithAttachedRoutes", "gateway-with-attached-routes.yaml", with_attached_routes),
    ("GatewayModifyListeners", "gateway-modify-listeners.yaml", modify_listeners),
    (
        "GatewayWithAttachedRoutesWithPort8080",
        "gateway-with-attached-routes-with-port-8080.yaml",
        with_attached_routes_on_8080,
    ),
];

#[test]
fn core_httproute_conformance_tests_pass_through_real_envoys() {
    let mut suite = Suite::start();
    let mut failed = Vec::new();
    for (name, manifests, test) in CASES {
        suite.apply(manifests);
        let outcome = catch_unwind(AssertUnwindSafe(|| test(&suite)));
        if outcome.is_err() {
            failed.push(*name);
            eprintln!("{name} failed; the scene:\n{}", suite.scene().report());
        }
        suite.cleanup(manifests);
    }
    assert!(failed.is_empty(), "conformance tests failed: {failed:?}");
    suite.scene().assert_nothing_rejected();
}

fn simple_same_namespace(suite: &Suite) {
    suite.route_accepted(INFRA, "gateway-conformance-infra-test", 1);
    suite.expect_all(SAME, &[Expect::get("/").backend(V1)]);
}

fn matching(suite: &Suite) {
    suite.route_accepted(INFRA, "matching", 1);
    suite.expect_all(
        SAME,
        &[
            Expect::get("/").backend(V1),
            Expect::get("/example").backend(V1),
            Expect::get("/").header("Version", "one").backend(V1),
            Expect::get("/v2").backend(V2),
            Expect::get("/v2/example").backend(V2),
            Expect::get("/").header("Version", "two").backend(V2),
            Expect::get("/v2/").backend(V2),
            // Not a path segment prefix, so it does not match /v2.
            Expect::get("/v2example").backend(V1),
            Expect::get("/foo/v2/example").backend(V1),
        ],
    );
}

fn exact_path_matching(suite: &Suite) {
    suite.route_accepted(INFRA, "exact-matching", 1);
    suite.expect_all(
        SAME,
        &[
            Expect::get("/one").backend(V1),
            Expect::get("/two").backend(V2),
            Expect::get("/").status(404),
            Expect::get("/one/example").status(404),
            Expect::get("/two/").status(404),
            Expect::get("/Two").status(404),
        ],
    );
}

fn header_matching(suite: &Suite) {
    suite.route_accepted(INFRA, "header-matching", 1);
    let get = |headers: &[(&str, &str)]| headers.iter().fold(Expect::get("/"), |e, (n, v)| e.header(n, v));
    suite.expect_all(
        SAME,
        &[
            get(&[("Version", "one")]).backend(V1),
            get(&[("Version", "two")]).backend(V2),
            get(&[("Version", "two"), ("Color", "orange")]).backend(V1),
            get(&[("Version", "two"), ("Color", "blue")]).backend(V2),
            get(&[("Color", "orange")]).status(404),
            get(&[("Some-Other-Header", "one")]).status(404),
            get(&[("Color", "blue")]).backend(V1),
            get(&[("Color", "green")]).backend(V1),
            get(&[("Color", "red")]).backend(V2),
            get(&[("Color", "yellow")]).backend(V2),
            get(&[("Color", "purple")]).status(404),
        ],
    );
}

fn path_match_order(suite: &Suite) {
    suite.route_accepted(INFRA, "path-matching-order", 1);
    suite.expect_all(
        SAME,
        &[
            Expect::get("/match/exact/one").backend(V3),
            Expect::get("/match/exact").backend(V2),
            Expect::get("/match").backend(V1),
            Expect::get("/match/prefix/one/any").backend(V2),
            Expect::get("/match/prefix/any").backend(V1),
            Expect::get("/match/any").backend(V3),
        ],
    );
}

fn matching_across_routes(suite: &Suite) {
    suite.route_accepted(INFRA, "matching-part1", 1);
    suite.route_accepted(INFRA, "matching-part2", 1);
    suite.expect_all(
        SAME,
        &[
            Expect::get("/").host("example.com").backend(V1),
            Expect::get("/example").host("example.com").backend(V1),
            Expect::get("/example").host("example.net").backend(V1),
            Expect::get("/example").host("example.com").header("Version", "one").backend(V1),
            Expect::get("/v2").host("example.com").backend(V2),
            Expect::get("/v2").host("example.net").backend(V1),
            Expect::get("/v2/example").host("example.com").backend(V2),
            Expect::get("/").host("example.com").header("Version", "two").backend(V2),
        ],
    );
}

fn cross_namespace(suite: &Suite) {
    suite.route_accepted(WEB, "cross-namespace", 1);
    suite.expect_all(BACKEND_NS, &[Expect::get("/").backend("web-backend").namespace(WEB)]);
}

fn hostname_intersection(suite: &Suite) {
    const GW: &str = "gateway-conformance-infra/httproute-hostname-intersection";
    for route in [
        "specific-host-matches-listener-specific-host",
        "specific-host-matches-listener-wildcard-host",
        "wildcard-host-matches-listener-specific-host",
        "wildcard-host-matches-listener-wildcard-host",
    ] {
        suite.route_accepted(INFRA, route, 1);
    }
    let at = |host: &str, path: &str| Expect::get(path).host(host);
    suite.expect_all(
        GW,
        &[
            at("very.specific.com", "/s1").backend(V1),
            at("very.specific.com:1234", "/s1").backend(V1),
            at("non.matching.com", "/s1").status(404),
            at("foo.nonmatchingwildcard.io", "/s1").status(404),
            at("foo.wildcard.io", "/s1").status(404),
            at("very.specific.com", "/non-matching-prefix").status(404),
            at("foo.wildcard.io", "/s2").backend(V2),
            at("bar.wildcard.io", "/s2").backend(V2),
            at("foo.bar.wildcard.io", "/s2").backend(V2),
            at("non.matching.com", "/s2").status(404),
            at("wildcard.io", "/s2").status(404),
            at("very.specific.com", "/s2").status(404),
            at("foo.wildcard.io", "/non-matching-prefix").status(404),
            at("very.specific.com", "/s3").backend(V3),
            at("non.matching.com", "/s3").status(404),
            at("foo.specific.com", "/s3").status(404),
            at("foo.wildcard.io", "/s3").status(404),
            at("very.specific.com", "/non-matching-prefix").status(404),
            at("foo.anotherwildcard.io", "/s4").backend(V1),
            at("bar.anotherwildcard.io", "/s4").backend(V1),
            at("foo.bar.anotherwildcard.io", "/s4").backend(V1),
            at("anotherwildcard.io", "/s4").status(404),
            at("foo.wildcard.io", "/s4").status(404),
        ],
    );
    // The route whose hostnames intersect no listener's is not accepted.
    suite.expect_condition(
        ("HTTPRoute", INFRA, "no-intersecting-hosts"),
        "parents[0]",
        "Accepted",
        "False",
        Some("NoMatchingListenerHostname"),
    );
}

fn listener_hostname_matching(suite: &Suite) {
    const GW: &str = "gateway-conformance-infra/httproute-listener-hostname-matching";
    for route in ["backend-v1", "backend-v2", "backend-v3"] {
        suite.route_accepted(INFRA, route, 1);
    }
    let at = |host: &str| Expect::get("/").host(host);
    suite.expect_all(
        GW,
        &[
            at("bar.com").backend(V1),
            at("foo.bar.com").backend(V2),
            at("baz.bar.com").backend(V3),
            at("boo.bar.com").backend(V3),
            at("multiple.prefixes.bar.com").backend(V3),
            at("multiple.prefixes.foo.com").backend(V3),
            at("foo.com").status(404),
            at("no.matching.host").status(404),
        ],
    );
}

fn multiple_gateways(suite: &Suite) {
    suite.route_accepted(INFRA, "multiple-gateways-shared-route", 2);
    suite.route_accepted(INFRA, "same-namespace-dedicated-route", 1);
    suite.route_accepted(INFRA, "all-namespaces-dedicated-route", 1);
    suite.expect_all(SAME, &[Expect::get("/shared").backend(V1), Expect::get("/").backend(V2)]);
    suite.expect_all(ALL, &[Expect::get("/shared").backend(V1), Expect::get("/").backend(V3)]);
}

fn weight(suite: &Suite) {
    suite.route_accepted(INFRA, "weighted-backends", 1);
    suite.expect_all(SAME, &[Expect::get("/")]);
    // The suite's check: 500 requests, each backend's share within 5 points
    // of its weight's, retried up to 10 times.
    let want = [0.7, 0.3, 0.0];
    let mut last = Vec::new();
    for _ in 0..10 {
        let counts = suite.distribution(SAME, "/", 500, &[V1, V2, V3]).unwrap_or_else(|e| panic!("{e}"));
        let shares: Vec<f64> = counts.iter().map(|c| *c as f64 / 500.0).collect();
        if shares.iter().zip(want).all(|(got, want)| (got - want).abs() <= 0.05) {
            return;
        }
        last = shares;
    }
    panic!("the shares of {V1}, {V2}, {V3} were {last:?}, expected {want:?}");
}

fn omitted_backend_refs(suite: &Suite) {
    suite.route_accepted(INFRA, "omitted-backendrefs", 1);
    suite.expect_all(
        SAME,
        &[
            Expect::get("/forward").backend(V1),
            Expect::get("/omitted-no-forward").status(500),
            Expect::get("/empty-no-forward").status(500),
        ],
    );
}

/// The suite's `GatewayAndHTTPRoutesMustBeAccepted` alone (the route's
/// references are expected not to resolve).
fn accepted(suite: &Suite, namespace: &str, route: &str) {
    suite.expect_condition(("HTTPRoute", namespace, route), "parents[0]", "Accepted", "True", Some("Accepted"));
}

fn refs_not_resolved(suite: &Suite, namespace: &str, route: &str, reason: &str) {
    suite.expect_condition(("HTTPRoute", namespace, route), "parents[0]", "ResolvedRefs", "False", Some(reason));
}

/// Route `route` of the infra namespace is accepted, its backend does not
/// resolve for `reason`, and `path` answers 500.
fn unresolved_backend(suite: &Suite, route: &str, reason: &str, path: &str) {
    accepted(suite, INFRA, route);
    refs_not_resolved(suite, INFRA, route, reason);
    suite.expect_all(SAME, &[Expect::get(path).status(500)]);
}

fn nonexistent_backend(suite: &Suite) {
    unresolved_backend(suite, "invalid-nonexistent-backend-ref", "BackendNotFound", "/");
}

fn unknown_kind_backend(suite: &Suite) {
    unresolved_backend(suite, "invalid-backend-ref-unknown-kind", "InvalidKind", "/v2");
}

fn cross_namespace_backend_without_grant(suite: &Suite) {
    unresolved_backend(suite, "invalid-cross-namespace-backend-ref", "RefNotPermitted", "/");
}

fn invalid_reference_grant(suite: &Suite) {
    unresolved_backend(suite, "reference-grant", "RefNotPermitted", "/");
}

fn no_routes_attached(suite: &Suite, gateway: &str) {
    let what = format!("{gateway} to have no routes attached");
    suite.scene().wait(std::time::Duration::from_secs(30), &what, support::envoy::Section::Routes, || {
        match suite.attached_routes(gateway, "http") {
            Some(0) => Ok(()),
            other => Err(format!("attachedRoutes {other:?}")),
        }
    });
}

fn parent_not_allowed(suite: &Suite) {
    let route = ("HTTPRoute", WEB, "invalid-cross-namespace-parent-ref");
    suite.expect_condition(route, "parents[0]", "ResolvedRefs", "True", Some("ResolvedRefs"));
    suite.expect_condition(route, "parents[0]", "Accepted", "False", Some("NotAllowedByListeners"));
    no_routes_attached(suite, SAME);
}

fn section_name_not_matching(suite: &Suite) {
    let route = ("HTTPRoute", INFRA, "httproute-listener-not-matching-section-name");
    suite.expect_condition(route, "parents[0]", "Accepted", "False", Some("NoMatchingParent"));
    no_routes_attached(suite, SAME);
}

fn reference_grant(suite: &Suite) {
    suite.route_accepted(INFRA, "reference-grant", 1);
    suite.expect_all(SAME, &[Expect::get("/").backend("web-backend").namespace(WEB)]);
    suite.delete("httproute-reference-grant.yaml", "ReferenceGrant", WEB, "reference-grant");
    suite.expect_all(SAME, &[Expect::get("/").status(500)]);
}

fn partially_invalid_reference_grant(suite: &Suite) {
    accepted(suite, INFRA, "invalid-reference-grant");
    refs_not_resolved(suite, INFRA, "invalid-reference-grant", "RefNotPermitted");
    suite
        .expect_all(SAME, &[Expect::get("/v2").status(500), Expect::get("/").backend("app-backend-v1").namespace(APP)]);
}

fn redirect_host_and_status(suite: &Suite) {
    suite.route_accepted(INFRA, "redirect-host-and-status", 1);
    let to = |host: &str| Redirect { host: host.into(), ..Default::default() };
    suite.expect_all(
        SAME,
        &[
            Expect::get("/hostname-redirect").redirect(302, to("example.org")),
            Expect::get("/host-and-status").redirect(301, to("example.org")),
        ],
    );
}

/// A redirect to the same host, path and scheme.
fn same_place(suite: &Suite) -> Redirect {
    Redirect { host: suite.address(SAME, 80).ip().to_string(), ..Default::default() }
}

fn redirect_303(suite: &Suite) {
    suite.route_accepted(INFRA, "303-redirect", 1);
    suite.expect_all(SAME, &[Expect::get("/see-other").method("POST").redirect(303, same_place(suite))]);
}

fn redirect_307(suite: &Suite) {
    suite.route_accepted(INFRA, "307-redirect", 1);
    suite.expect_all(SAME, &[Expect::get("/temporary").redirect(307, same_place(suite))]);
}

fn redirect_308(suite: &Suite) {
    suite.route_accepted(INFRA, "308-redirect", 1);
    suite.expect_all(SAME, &[Expect::get("/permanent").redirect(308, same_place(suite))]);
}

fn https_listener(suite: &Suite) {
    const GW: &str = "gateway-conformance-infra/same-namespace-with-https-listener";
    suite.route_accepted(INFRA, "httproute-https-test", 1);
    suite.route_accepted(INFRA, "httproute-https-test-no-hostname", 1);
    for (host, status, backend) in
        [("example.org", 200, V1), ("unknown-example.org", 404, ""), ("second-example.org", 200, V2)]
    {
        let what = format!("https://{host}/ through {GW}");
        let mut streak = 0;
        suite.scene().wait(std::time::Duration::from_secs(30), &what, support::envoy::Section::Listeners, || {
            let (got, seen) = suite.https_get(GW, 443, host, "/")?;
            let ok = got == status && (backend.is_empty() || seen.starts_with(&format!("{INFRA}/{backend}")));
            streak = if ok { streak + 1 } else { 0 };
            match (ok, streak >= 3) {
                (true, true) => Ok(()),
                (true, false) => Err("not yet enough answers in a row".to_string()),
                (false, _) => Err(format!("status {got} from {seen:?}")),
            }
        });
    }
}

fn service_types(suite: &Suite) {
    suite.route_accepted(INFRA, "service-types", 1);
    let slices = ["manual-endpointslices-ip4", "headless-manual-endpointslices-ip4"];
    suite.fill_endpoint_slices("httproute-service-types.yaml", &slices, V1);
    suite.expect_all(
        SAME,
        &[
            Expect::get("/manual-endpointslices").backend(V1),
            Expect::get("/headless-manual-endpointslices").backend(V1),
            Expect::get("/headless").backend(V1),
        ],
    );
}

/// Istio's sample manifests (`tests/data/istio/samples`, Apache-2.0).
/// A condition the suite expects: type, status, reason (any when `None`).
type Wanted = (&'static str, &'static str, Option<&'static str>);

const RESOLVED: Wanted = ("ResolvedRefs", "True", None);
const ACCEPTED: Wanted = ("Accepted", "True", None);

fn disallowed_kind(suite: &Suite) {
    let (gw, route) = ("tlsroutes-only", "disallowed-kind");
    let at = "parents[0]";
    suite.expect_condition(("HTTPRoute", INFRA, route), at, "ResolvedRefs", "True", None);
    suite.expect_condition(("HTTPRoute", INFRA, route), at, "Accepted", "False", Some("NotAllowedByListeners"));
    suite.expect_listener(&format!("{INFRA}/{gw}"), "tls", &["TLSRoute"], 0, &[]);
}

fn invalid_route_kind(suite: &Suite) {
    let invalid: Wanted = ("ResolvedRefs", "False", Some("InvalidRouteKinds"));
    suite.expect_listener(&format!("{INFRA}/gateway-only-invalid-route-kind"), "http", &[], 0, &[invalid]);
    let gw = format!("{INFRA}/gateway-supported-and-invalid-route-kind");
    suite.expect_listener(&gw, "http", &["HTTPRoute"], 0, &[invalid]);
}

fn invalid_tls_configuration(suite: &Suite) {
    let invalid: Wanted = ("ResolvedRefs", "False", Some("InvalidCertificateRef"));
    for gw in [
        "gateway-certificate-nonexistent-secret",
        "gateway-certificate-unsupported-group",
        "gateway-certificate-unsupported-kind",
        "gateway-certificate-malformed-secret",
    ] {
        suite.expect_listener(&format!("{INFRA}/{gw}"), "https", &["HTTPRoute"], 0, &[invalid]);
    }
}

fn ref_not_permitted(suite: &Suite, gateway: &str) {
    let denied: Wanted = ("ResolvedRefs", "False", Some("RefNotPermitted"));
    suite.expect_listener(&format!("{INFRA}/{gateway}"), "https", &["HTTPRoute"], 0, &[denied]);
}

fn secret_invalid_reference_grant(suite: &Suite) {
    ref_not_permitted(suite, "gateway-secret-invalid-reference-grant");
}

fn secret_missing_reference_grant(suite: &Suite) {
    ref_not_permitted(suite, "gateway-secret-missing-reference-grant");
}

fn granted_certificate(suite: &Suite, gateway: &str) {
    let programmed: Wanted = ("Programmed", "True", Some("Programmed"));
    suite.expect_listener(&format!("{INFRA}/{gateway}"), "https", &["HTTPRoute"], 0, &[programmed, RESOLVED]);
}

fn secret_reference_grant_all_in_namespace(suite: &Suite) {
    granted_certificate(suite, "gateway-secret-reference-grant-all-in-namespace");
}

fn secret_reference_grant_specific(suite: &Suite) {
    granted_certificate(suite, "gateway-secret-reference-grant-specific");
}

fn with_attached_routes(suite: &Suite) {
    let one = format!("{INFRA}/gateway-with-one-attached-route");
    suite.expect_listener(&one, "http", &["HTTPRoute"], 1, &[ACCEPTED, RESOLVED]);
    let two = format!("{INFRA}/gateway-with-two-attached-routes");
    suite.expect_listener(&two, "http", &["HTTPRoute"], 2, &[ACCEPTED, RESOLVED]);
    let not_accepted = ("HTTPRoute", INFRA, "http-route-not-accepted");
    suite.expect_condition(not_accepted, "parents[0]", "Accepted", "False", Some("NoMatchingListenerHostname"));
    // A listener that is not programmed still counts its routes.
    let unresolved = format!("{INFRA}/unresolved-gateway-with-one-attached-unresolved-route");
    let not_programmed: Wanted = ("Programmed", "False", None);
    let refs_unresolved: Wanted = ("ResolvedRefs", "False", None);
    suite.expect_listener(&unresolved, "tls", &["HTTPRoute"], 1, &[not_programmed, refs_unresolved]);
    suite.expect_condition(("HTTPRoute", INFRA, "http-route-4"), "parents[0]", "ResolvedRefs", "False", None);
}

fn with_attached_routes_on_8080(suite: &Suite) {
    let gw = format!("{INFRA}/gateway-with-two-listeners-and-one-attached-route");
    suite.expect_listener(&gw, "http-unattached", &["HTTPRoute"], 0, &[ACCEPTED, RESOLVED]);
    suite.expect_listener(&gw, "http", &["HTTPRoute"], 1, &[ACCEPTED, RESOLVED]);
}

fn modify_listeners(suite: &Suite) {
    const FILE: &str = "gateway-modify-listeners.yaml";
    // A listener added becomes available for routing.
    let add = format!("{INFRA}/gateway-add-listener");
    suite.expect_listener_among(&add, Some(&["https"]), "https", &["HTTPRoute"], 1, &[ACCEPTED, RESOLVED]);
    suite.edit(FILE, "Gateway", INFRA, "gateway-add-listener", |gw| {
        let http = serde_yaml_ng::from_str(
            "{name: http, port: 80, protocol: HTTP, hostname: data.test.com, allowedRoutes: {namespaces: {from: All}}}",
        )
        .expect("a listener");
        gw["spec"]["listeners"].as_sequence_mut().expect("listeners").push(http);
    });
    for listener in ["https", "http"] {
        suite.expect_listener_among(&add, Some(&["https", "http"]), listener, &["HTTPRoute"], 1, &[ACCEPTED, RESOLVED]);
    }
    suite.expect_all(&add, &[Expect::get("/").host("data.test.com").backend(V1).namespace(INFRA)]);
    // A listener removed stops routing.
    let remove = format!("{INFRA}/gateway-remove-listener");
    suite.expect_listener_among(&remove, Some(&["https", "http"]), "http", &["HTTPRoute"], 1, &[ACCEPTED, RESOLVED]);
    suite.edit(FILE, "Gateway", INFRA, "gateway-remove-listener", |gw| {
        gw["spec"]["listeners"].as_sequence_mut().expect("listeners").retain(|l| l["name"] == "http");
    });
    suite.expect_listener_among(&remove, Some(&["http"]), "http", &["HTTPRoute"], 1, &[ACCEPTED, RESOLVED]);
    let gone = suite.https_get(&remove, 443, "secure.test.com", "/");
    let what = "the removed HTTPS listener to stop answering";
    suite.scene().wait(std::time::Duration::from_secs(30), what, support::envoy::Section::Listeners, || {
        match suite.https_get(&remove, 443, "secure.test.com", "/") {
            Err(_) => Ok(()),
            Ok(answer) => Err(format!("still answered: {answer:?} (first: {gone:?})")),
        }
    });
}

fn istio_sample(path: &str) -> String {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/istio/samples").join(path);
    std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

/// The share of `count` requests for `path` through `gateway` each of
/// `backends` answered.
fn shares(suite: &Suite, gateway: &str, path: &str, count: usize, backends: &[&str]) -> Result<Vec<f64>, String> {
    Ok(suite.distribution(gateway, path, count, backends)?.iter().map(|n| *n as f64 / count as f64).collect())
}

#[test]
fn istio_gateway_api_samples_route_as_their_readmes_describe() {
    use support::conformance::{Layout, container_port};
    const LAYOUT: Layout = Layout { gateways: 172, pods: 173, port: container_port };
    let mut suite = Suite::start_on(
        &[
            ("httpbin.yaml", &istio_sample("httpbin/httpbin.yaml")),
            ("helloworld.yaml", &istio_sample("helloworld/helloworld.yaml")),
            ("tcp-echo.yaml", &istio_sample("tcp-echo/tcp-echo-services.yaml")),
        ],
        LAYOUT,
    );

    // httpbin: the Gateway takes every route; the route sends everything to httpbin.
    suite.apply_text("httpbin-gateway.yaml", &istio_sample("httpbin/gateway-api/httpbin-gateway.yaml"));
    suite.route_accepted("default", "httpbin", 1);
    suite.expect_all(
        "default/httpbin-gateway",
        &[
            Expect::get("/get").host("httpbin.example.com").backend("httpbin").namespace("default"),
            Expect::get("/headers").backend("httpbin").namespace("default"),
        ],
    );

    // helloworld: without version routing both versions answer /hello, about half each.
    const HELLO: &str = "default/helloworld-gateway";
    let gateway = istio_sample("helloworld/gateway-api/helloworld-gateway.yaml");
    suite.apply_text("helloworld-gateway.yaml", &gateway);
    suite.route_accepted("default", "helloworld", 1);
    suite.expect_all(HELLO, &[Expect::get("/hello").backend("helloworld-v").namespace("default")]);
    let even =
        shares(&suite, HELLO, "/hello", 200, &["helloworld-v1", "helloworld-v2"]).unwrap_or_else(|e| panic!("{e}"));
    assert!(even.iter().all(|s| (0.3..=0.7).contains(s)), "shares of v1, v2: {even:?}");

    // With the versions' Services and the weighted route (applied over the
    // first route, as `kubectl apply` replaces it): about 9 in 10 to v1.
    suite.apply_text("helloworld-versions.yaml", &istio_sample("helloworld/gateway-api/helloworld-versions.yaml"));
    let gateway_only = gateway.split("\n---\n").next().expect("the Gateway document");
    let route = istio_sample("helloworld/gateway-api/helloworld-route.yaml");
    suite.apply_text("helloworld-gateway.yaml", &format!("{gateway_only}\n---\n{route}"));
    suite.route_accepted("default", "helloworld", 1);
    let what = "9 in 10 requests to helloworld-v1";
    suite.scene().wait(std::time::Duration::from_secs(30), what, support::envoy::Section::Routes, || {
        let weighted = shares(&suite, HELLO, "/hello", 200, &["helloworld-v1", "helloworld-v2"])?;
        if (0.8..=0.97).contains(&weighted[0]) { Ok(()) } else { Err(format!("shares of v1, v2: {weighted:?}")) }
    });

    // tcp-echo: the TCPRoute sends every connection to v1, then 8 in 10
    // (each exchange below is a connection of its own: the backends speak
    // HTTP over it, which the TCP listener carries untouched).
    const ECHO: &str = "default/tcp-echo-gateway";
    let versions = ["tcp-echo-v1", "tcp-echo-v2"];
    let tcp_shares = |suite: &Suite| -> Result<Vec<f64>, String> {
        let counts = suite.distribution_on(ECHO, 31400, "/", 200, &versions)?;
        Ok(counts.iter().map(|n| *n as f64 / 200.0).collect())
    };
    let all_v1 = istio_sample("tcp-echo/gateway-api/tcp-echo-all-v1.yaml");
    suite.apply_text("tcp-echo-gateway.yaml", &all_v1);
    suite.route_of_kind_accepted("TCPRoute", "default", "tcp-echo", 1);
    let section = support::envoy::Section::Listeners;
    suite.scene().wait(std::time::Duration::from_secs(30), "every connection to tcp-echo-v1", section, || {
        let s = tcp_shares(&suite)?;
        if s[0] == 1.0 { Ok(()) } else { Err(format!("shares of v1, v2: {s:?}")) }
    });
    let without_route: Vec<&str> =
        all_v1.split("\n---\n").filter(|d| !d.lines().any(|l| l == "kind: TCPRoute")).collect();
    let route = istio_sample("tcp-echo/gateway-api/tcp-echo-20-v2.yaml");
    suite.apply_text("tcp-echo-gateway.yaml", &format!("{}\n---\n{route}", without_route.join("\n---\n")));
    suite.scene().wait(std::time::Duration::from_secs(30), "8 in 10 connections to tcp-echo-v1", section, || {
        let s = tcp_shares(&suite)?;
        if (0.7..=0.9).contains(&s[0]) { Ok(()) } else { Err(format!("shares of v1, v2: {s:?}")) }
    });
    suite.scene().assert_nothing_rejected();
}

/// The HTTPRoute of the mesh routing test: `ledger`'s callers go to
/// `ledger-v2` when they send `x-version: v2` (only when `by_header`), else
/// to `ledger-v1`.
fn ledger_route(port: u16, by_header: bool) -> String {
    let v2 = if by_header {
        format!(
            "  - matches: [{{headers: [{{name: x-version, value: v2}}]}}]\n    backendRefs: [{{name: ledger-v2, port: {port}}}]\n"
        )
    } else {
        String::new()
    };
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: ledger, namespace: shop}}\nspec:\n  \
         parentRefs: [{{group: \"\", kind: Service, name: ledger, port: {port}}}]\n  rules:\n{v2}  \
         - backendRefs: [{{name: ledger-v1, port: {port}}}]\n"
    )
}

#[test]
fn a_route_whose_parent_is_a_service_routes_the_sidecars_that_call_it() {
    use support::manifests::{docs, pod, sidecar_node};
    let port = support::process::free_port();
    let service = |name: &str, selector: &str| {
        format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: shop}}\n\
             spec:\n  selector: {{{selector}}}\n  ports: [{{name: http, port: {port}}}]\n"
        )
    };
    let mesh = docs(&[
        service("ledger", "app: ledger"),
        service("ledger-v1", "app: ledger, version: v1"),
        service("ledger-v2", "app: ledger, version: v2"),
        pod("shop", "ledger-v1-0", "127.0.174.2", &[("app", "ledger"), ("version", "v1")], port),
        pod("shop", "ledger-v2-0", "127.0.174.3", &[("app", "ledger"), ("version", "v2")], port),
    ]);
    let backends = [format!("127.0.174.2:{port}"), format!("127.0.174.3:{port}")];
    let mut scene = support::scene::Scene::start(
        &[("mesh.yaml", &mesh), ("route.yaml", &ledger_route(port, true))],
        &[("ledger-v1-0", &backends[0]), ("ledger-v2-0", &backends[1])],
    );
    let opts = scene.sidecar(&sidecar_node("127.0.174.9", "client", "shop"), &[("app", "client")]);
    scene.add_envoy("client", &opts);
    let outbound = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let host = "ledger.shop.svc.cluster.local";
    let lands = |headers: &[(&str, &str)], want: &str| {
        let mut all = headers.to_vec();
        all.push(("host", host));
        let r = support::http::get(outbound, "/", &all).map_err(|e| e.to_string())?;
        match r.header("x-backend") {
            Some(b) if b == want => Ok(()),
            other => Err(format!("status {} from {other:?}, expected {want}", r.status)),
        }
    };
    let converge = std::time::Duration::from_secs(30);
    let section = support::envoy::Section::Routes;
    scene.wait(converge, "x-version: v2 to reach ledger-v2", section, || lands(&[("x-version", "v2")], "ledger-v2-0"));
    scene.wait(converge, "the rest to reach ledger-v1", section, || lands(&[], "ledger-v1-0"));
    // An edit of the route reaches the sidecar: everything to v1.
    scene.dir().write("route.yaml", &ledger_route(port, false));
    scene.wait(converge, "x-version: v2 to reach ledger-v1 after the edit", section, || {
        lands(&[("x-version", "v2")], "ledger-v1-0")
    });
    scene.assert_nothing_rejected();
}

/// The namespace of the stream and gRPC routing test.
const STREAMS: &str = "gateway-streams";

/// The manifests of the stream and gRPC routing test: a Gateway with a TCP
/// listener, a TLS listener passing connections through by SNI, one
/// terminating TLS with the suite's certificate (in the infra namespace,
/// which grants it), and an HTTP one for gRPC; a web Deployment (HTTP
/// backends), a Pod behind `secure` that terminates TLS itself, and two gRPC
/// Pods behind `echo-v1` and `echo-v2`.
fn streams_manifests() -> String {
    use support::manifests::pod;
    let ns = STREAMS;
    format!(
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: streams, namespace: {ns}}}
spec:
  gatewayClassName: istio
  listeners:
  - {{name: tcp, port: 9000, protocol: TCP}}
  - name: pass
    port: 443
    protocol: TLS
    hostname: "*.example.com"
    tls: {{mode: Passthrough}}
  - name: term
    port: 8443
    protocol: TLS
    hostname: example.org
    tls:
      mode: Terminate
      certificateRefs: [{{name: tls-validity-checks-certificate, namespace: {INFRA}}}]
  - {{name: grpc, port: 80, protocol: HTTP}}
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {{name: streams-certificate, namespace: {INFRA}}}
spec:
  from: [{{group: gateway.networking.k8s.io, kind: Gateway, namespace: {ns}}}]
  to: [{{group: "", kind: Secret, name: tls-validity-checks-certificate}}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: {ns}}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec: {{containers: [{{name: web, image: echo, ports: [{{containerPort: 3000}}]}}]}}
---
apiVersion: v1
kind: Service
metadata: {{name: web, namespace: {ns}}}
spec: {{selector: {{app: web}}, ports: [{{name: http, port: 8080, targetPort: 3000}}]}}
---
{secure_pod}---
apiVersion: v1
kind: Service
metadata: {{name: secure, namespace: {ns}}}
spec: {{selector: {{app: secure}}, ports: [{{name: tls, port: 8443, targetPort: 3443}}]}}
---
{echo_v1}---
{echo_v2}---
apiVersion: v1
kind: Service
metadata: {{name: echo-v1, namespace: {ns}}}
spec: {{selector: {{app: echo, version: v1}}, ports: [{{name: grpc, port: 9090, targetPort: 3090}}]}}
---
apiVersion: v1
kind: Service
metadata: {{name: echo-v2, namespace: {ns}}}
spec: {{selector: {{app: echo, version: v2}}, ports: [{{name: grpc, port: 9090, targetPort: 3090}}]}}
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {{name: raw, namespace: {ns}}}
spec:
  parentRefs: [{{name: streams, sectionName: tcp}}, {{name: streams, sectionName: term}}]
  rules: [{{backendRefs: [{{name: web, port: 8080}}]}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata: {{name: sni, namespace: {ns}}}
spec:
  parentRefs: [{{name: streams, sectionName: pass}}]
  hostnames: [secure.example.com]
  rules: [{{backendRefs: [{{name: secure, port: 8443}}]}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {{name: echo, namespace: {ns}}}
spec:
  parentRefs: [{{name: streams, sectionName: grpc}}]
  hostnames: [grpc.example.com]
  rules:
  - matches: [{{method: {{service: echo.Echo, method: Say}}}}]
    backendRefs: [{{name: echo-v1, port: 9090}}]
  - matches: [{{headers: [{{name: x-version, value: two}}]}}]
    backendRefs: [{{name: echo-v2, port: 9090}}]
  - matches: [{{method: {{service: echo.Echo}}}}]
    filters: [{{type: ResponseHeaderModifier, responseHeaderModifier: {{set: [{{name: x-route, value: service}}]}}}}]
    backendRefs: [{{name: echo-v2, port: 9090}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: web, namespace: {ns}}}
spec:
  parentRefs: [{{name: streams, sectionName: grpc}}]
  hostnames: [web.example.com]
  rules:
  - filters:
    - type: CORS
      cors: {{allowOrigins: ["https://*.example.com"], allowMethods: [GET, PUT], maxAge: 60}}
    backendRefs: [{{name: web, port: 8080}}]
"#,
        secure_pod = pod(ns, "secure-0", "127.0.176.10", &[("app", "secure")], 3443),
        echo_v1 = pod(ns, "echo-v1-0", "127.0.176.11", &[("app", "echo"), ("version", "v1")], 3090),
        echo_v2 = pod(ns, "echo-v2-0", "127.0.176.12", &[("app", "echo"), ("version", "v2")], 3090),
    )
}

#[test]
fn grpc_tcp_and_tls_routes_carry_calls_and_connections_through_a_real_envoy() {
    use support::conformance::{Layout, container_port};
    use support::grpc::{GrpcBackend, call};
    const LAYOUT: Layout = Layout { gateways: 175, pods: 176, port: container_port };
    const GW: &str = "gateway-streams/streams";
    // The suite names a Deployment's Pod's backend NAMESPACE/POD.
    const WEB_0: &str = "gateway-streams/web-0";
    // The backends that are not plain HTTP: one terminating TLS with its
    // own certificate (the Gateway must pass its connections through), two
    // speaking gRPC.
    let backend_ca = support::tls::TestCa::new("secure-backend");
    let secure_leaf = backend_ca.leaf("secure", &["secure.example.com"]);
    let secure = support::tls::TlsBackend::start("secure-0", "127.0.176.10:3443".parse().unwrap(), &secure_leaf);
    let _echo_v1 = GrpcBackend::start("echo-v1-0", "127.0.176.11:3090".parse().unwrap());
    let _echo_v2 = GrpcBackend::start("echo-v2-0", "127.0.176.12:3090".parse().unwrap());
    let suite = Suite::start_on(&[("streams.yaml", &streams_manifests())], LAYOUT);
    for (kind, name, parents) in [("TCPRoute", "raw", 2), ("TLSRoute", "sni", 1), ("GRPCRoute", "echo", 1)] {
        suite.route_of_kind_accepted(kind, STREAMS, name, parents);
    }
    let converge = std::time::Duration::from_secs(30);
    let section = support::envoy::Section::Listeners;
    let lands = |got: Result<String, String>, want: &str| match got {
        Ok(b) if b == want => Ok(()),
        Ok(b) => Err(format!("answered by {b:?}, expected {want}")),
        Err(e) => Err(e),
    };

    // TCP: an HTTP exchange over the TCP listener reaches `web` untouched.
    let tcp = suite.address(GW, 9000);
    suite.scene().wait(converge, "a connection to the TCP listener to reach web", section, || {
        let r = support::http::get(tcp, "/over-tcp", &[("host", "anything")]).map_err(|e| e.to_string());
        lands(r.map(|r| r.header("x-backend").unwrap_or_default().to_string()), WEB_0)
    });

    // TLS passthrough: the backend's own certificate answers, by SNI.
    suite.scene().wait(converge, "secure.example.com to pass through to secure", section, || {
        let r = suite.https1_get_trusting(&backend_ca.pem, GW, 443, "secure.example.com", "/");
        lands(r.map(|(_, b)| b), "secure-0")
    });
    assert!(
        secure.sni_seen().contains(&Some("secure.example.com".to_string())),
        "the client's SNI reached the backend"
    );
    let other = suite.https1_get_trusting(&backend_ca.pem, GW, 443, "other.example.com", "/");
    assert!(other.is_err(), "a name no TLSRoute takes is not passed through: {other:?}");

    // TLS terminated with the certificate another namespace grants, then TCP to web.
    suite.scene().wait(converge, "example.org to be terminated and reach web", section, || {
        let r = suite.https1_get_trusting(suite.ca_pem(), GW, 8443, "example.org", "/");
        lands(r.map(|(_, b)| b), WEB_0)
    });

    // gRPC: by method, by metadata, by service.
    let grpc = suite.address(GW, 80);
    let authority = "grpc.example.com";
    suite.scene().wait(converge, "echo.Echo/Say to reach echo-v1", section, || {
        lands(call(grpc, authority, "/echo.Echo/Say", &[]), "echo-v1-0")
    });
    lands(call(grpc, authority, "/echo.Echo/Say", &[("x-version", "two")]), "echo-v1-0")
        .expect("the method match comes first");
    lands(call(grpc, authority, "/other.Service/Do", &[("x-version", "two")]), "echo-v2-0")
        .expect("the metadata match");
    lands(call(grpc, authority, "/echo.Echo/Shout", &[]), "echo-v2-0").expect("the service match");
    let unmatched = call(grpc, authority, "/other.Service/Do", &[]);
    assert!(unmatched.is_err(), "a call no rule matches is answered with an error: {unmatched:?}");
    let wrong_host = call(grpc, "elsewhere.example.com", "/echo.Echo/Say", &[]);
    assert!(wrong_host.is_err(), "a host the route does not take is not routed: {wrong_host:?}");

    // An HTTPRoute beside the GRPCRoute on the listener, with a CORS
    // filter: Envoy answers a preflight from an allowed origin itself.
    let preflight = |origin: &str| {
        let headers = [("host", "web.example.com"), ("origin", origin), ("access-control-request-method", "PUT")];
        support::http::request(grpc, "OPTIONS", "/", &headers).map_err(|e| e.to_string())
    };
    suite.scene().wait(converge, "a preflight from an allowed origin to be answered", section, || {
        let r = preflight("https://shop.example.com")?;
        match (r.status, r.header("access-control-allow-origin"), r.header("access-control-max-age")) {
            (200, Some("https://shop.example.com"), Some("60")) => Ok(()),
            other => Err(format!("{other:?} {:?}", r.header("access-control-allow-methods"))),
        }
    });
    let other = preflight("https://elsewhere.org").expect("an answer");
    assert!(other.header("access-control-allow-origin").is_none(), "an origin not allowed gets no CORS headers");
    suite.scene().assert_nothing_rejected();
}
