//! End to end: the Gateway API conformance suite's core HTTPRoute tests,
//! ported (see `support::conformance` for how a cluster is stood in for).
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

#[allow(dead_code)]
fn unused(_: &Suite) {
    let _ = (ALL, APP, Redirect::default());
}
