use std::fs;

use tempfile::TempDir;

use super::*;
use crate::source::file::DEFAULT_MAX_FILE_BYTES;

#[test]
fn validate_dir_reports_file_problems_and_dangling_references() {
    let dir = TempDir::new().unwrap();
    fs::write(
        dir.path().join("reviews.yaml"),
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: reviews}\nspec:\n  hosts: [reviews]\n  http: [{route: [{destination: {host: reviews}}]}]\n",
    )
    .unwrap();
    fs::write(dir.path().join("app.yaml"), "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n").unwrap();
    fs::write(
        dir.path().join("broken.yaml"),
        "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {ports: [{name: http, port: 0}]}\n",
    )
    .unwrap();

    let problems = validate_dir(dir.path(), DEFAULT_MAX_FILE_BYTES, &Default::default());
    let lines: Vec<String> = problems.iter().map(|p| format!("{}: {p}", p.severity)).collect();
    assert_eq!(
        lines,
        vec![
            "warning: app.yaml doc 0: unknown kind Deployment apps/v1: skipped",
            "error: broken.yaml doc 0: Service default/s: spec.ports[0].port: 0 is not a valid port number: ports are 1..65535",
            "warning: reviews.yaml doc 0: VirtualService default/reviews: spec.http[0].route[0].destination.host: \
             reviews (reviews.default.svc.cluster.local) matches no Service or ServiceEntry: requests routed there will fail with 503",
        ]
    );
    assert_eq!(report(&problems).lines().last(), Some("1 error, 2 warnings"));
}

#[test]
fn validate_dir_accepts_a_single_file() {
    let dir = TempDir::new().unwrap();
    let file = dir.path().join("svc.yaml");
    fs::write(
        &file,
        "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {ports: [{name: http-web, port: 80}]}\n",
    )
    .unwrap();
    assert_eq!(validate_dir(&file, DEFAULT_MAX_FILE_BYTES, &Default::default()), vec![]);
}

#[test]
fn validate_dir_on_a_missing_directory_is_one_error() {
    let dir = TempDir::new().unwrap();
    let problems = validate_dir(&dir.path().join("missing"), DEFAULT_MAX_FILE_BYTES, &Default::default());
    assert_eq!(problems.len(), 1);
    assert!(problems[0].is_error());
}

#[test]
fn the_report_exit_code_is_1_only_with_errors() {
    let dir = TempDir::new().unwrap();
    fs::write(dir.path().join("app.yaml"), "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n").unwrap();
    let warnings = validate_dir(dir.path(), DEFAULT_MAX_FILE_BYTES, &Default::default());
    assert_eq!(print_report(&warnings), 0);
    assert_eq!(print_report(&[]), 0);
    assert_eq!(report(&[]), "0 errors, 0 warnings\n");
    fs::write(dir.path().join("bad.yaml"), "kind: [\n").unwrap();
    assert_eq!(print_report(&validate_dir(dir.path(), DEFAULT_MAX_FILE_BYTES, &Default::default())), 1);
}
