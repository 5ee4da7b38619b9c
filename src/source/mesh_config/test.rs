//! Following the mesh config file: an edit is written to the store, a
//! broken edit keeps what is served, the trust domain stays until restart.

use super::*;

fn source(dir: &tempfile::TempDir, text: &str, flags: MeshSettings) -> MeshConfigSource {
    let path = dir.path().join("mesh");
    std::fs::write(&path, text).unwrap();
    let startup = MeshSettings::parse("mesh", text).unwrap().over(flags.clone());
    let served = startup.mesh_config();
    MeshConfigSource::new(
        MeshOrigin::File { mesh: path, networks: None },
        flags,
        &startup,
        served,
        true,
        MeshConfigStatus::default(),
    )
}

fn served(write: Option<Write>) -> Arc<MeshConfig> {
    match &write {
        Some(Write::Put(object, _)) if let ConfigObject::MeshConfig(o) = &**object => o.mesh.clone(),
        other => panic!("expected the mesh config written, got {other:?}"),
    }
}

#[test]
fn an_edit_is_written_as_the_mesh_config_object_and_an_unchanged_read_writes_nothing() {
    let dir = tempfile::TempDir::new().unwrap();
    let mut source = source(&dir, "rootNamespace: first\n", MeshSettings::default());
    assert!(source.reread(&dir.path().join("mesh"), None).is_none(), "the startup text again: nothing to write");
    assert!(source.reread(&dir.path().join("mesh"), None).is_none(), "and again");
    std::fs::write(dir.path().join("mesh"), "rootNamespace: second\nenablePrometheusMerge: false\n").unwrap();
    assert_eq!(&*served(source.reread(&dir.path().join("mesh"), None)).root_namespace, "second");
    let problems = source.status.problems();
    assert_eq!(problems.iter().map(|p| p.path.as_str()).collect::<Vec<_>>(), vec!["enablePrometheusMerge"]);
    assert!(source.reread(&dir.path().join("mesh"), None).is_none(), "read again, unchanged");
}

#[test]
fn a_broken_edit_keeps_the_served_mesh_config_and_says_why_until_mended() {
    let dir = tempfile::TempDir::new().unwrap();
    let mut source = source(&dir, "rootNamespace: first\n", MeshSettings::default());
    std::fs::write(dir.path().join("mesh"), "rootNamespace: [\n").unwrap();
    assert!(source.reread(&dir.path().join("mesh"), None).is_none(), "nothing is written");
    let problems = source.status.problems();
    assert_eq!(problems.len(), 1);
    assert!(problems[0].is_error() && problems[0].message.contains("the last good mesh config stays served"));
    assert_eq!(&*source.served.root_namespace, "first");
    std::fs::write(dir.path().join("mesh"), "rootNamespace: mended\n").unwrap();
    assert_eq!(&*served(source.reread(&dir.path().join("mesh"), None)).root_namespace, "mended");
    assert!(source.status.problems().is_empty(), "the mended file has nothing to report");
}

#[test]
fn the_trust_domain_stays_until_restart_and_flags_stay_over_the_file() {
    let dir = tempfile::TempDir::new().unwrap();
    let flags = MeshSettings { root_namespace: Some("flag-root".into()), ..Default::default() };
    let mut source = source(&dir, "trustDomain: one.org\n", flags);
    std::fs::write(dir.path().join("mesh"), "trustDomain: two.org\nrootNamespace: file-root\ningressClass: edge\n")
        .unwrap();
    let mesh = served(source.reread(&dir.path().join("mesh"), None));
    assert_eq!(&*mesh.trust_domain, "one.org", "the CA's trust domain stays");
    assert_eq!(&*mesh.root_namespace, "flag-root", "the flag stays over the file");
    assert_eq!(&*mesh.ingress.class, "edge");
    let problems = source.status.problems();
    assert_eq!(problems.iter().map(|p| p.path.as_str()).collect::<Vec<_>>(), vec!["trustDomain"]);
    assert!(problems[0].message.contains("applies at the next start"), "{}", problems[0].message);
}

#[test]
fn moved_discovery_selectors_are_reported_for_the_next_start() {
    let dir = tempfile::TempDir::new().unwrap();
    let text = "discoverySelectors: [{matchLabels: {mesh: a}}]\n";
    let mut source = source(&dir, text, MeshSettings::default());
    std::fs::write(dir.path().join("mesh"), format!("{text}rootNamespace: other\n")).unwrap();
    served(source.reread(&dir.path().join("mesh"), None));
    assert!(source.status.problems().is_empty(), "the same selectors: nothing to say");
    std::fs::write(dir.path().join("mesh"), "discoverySelectors: [{matchLabels: {mesh: b}}]\n").unwrap();
    served(source.reread(&dir.path().join("mesh"), None));
    let problems = source.status.problems();
    assert_eq!(problems.iter().map(|p| p.path.as_str()).collect::<Vec<_>>(), vec!["discoverySelectors"]);
}

#[test]
fn a_revision_reads_its_own_configmap_as_istio_names_it() {
    let name =
        |revision: Option<&str>| match MeshOrigin::istio_configmap(KubeAccess::InCluster, "istio-system", revision) {
            MeshOrigin::ConfigMap { namespace, name, .. } => format!("{namespace}/{name}"),
            other => panic!("{other:?}"),
        };
    assert_eq!(name(None), "istio-system/istio");
    assert_eq!(name(Some("default")), "istio-system/istio", "the default revision is Istio's own ConfigMap");
    assert_eq!(name(Some("canary")), "istio-system/istio-canary");
    let origin = MeshOrigin::istio_configmap(KubeAccess::InCluster, "istio-system", Some("1-24"));
    assert_eq!(origin.name(), "k8s:ConfigMap/istio-system/istio-1-24");
}

#[test]
fn a_missing_configmap_or_key_is_istios_defaults_and_a_missing_key_is_a_problem() {
    let origin = "k8s:ConfigMap/istio-system/istio";
    assert_eq!(configmap_text(origin, None), (Texts::default(), None), "none at all: Istio's defaults, no problem");
    let mut cm = ConfigMap {
        data: Some([("meshNetworks".to_string(), "networks: {}".to_string())].into()),
        ..Default::default()
    };
    assert!(configmap_text(origin, Some(&cm)).1.unwrap().message.contains("no `mesh` key"));
    cm.data.as_mut().unwrap().insert("mesh".into(), "rootNamespace: x\n".into());
    let texts = Texts { mesh: "rootNamespace: x\n".to_string(), networks: "networks: {}".to_string() };
    assert_eq!(configmap_text(origin, Some(&cm)), (texts, None));
}

#[test]
fn a_mesh_networks_edit_is_served_and_a_broken_one_keeps_the_last_good() {
    let dir = tempfile::TempDir::new().unwrap();
    let networks = dir.path().join("meshNetworks");
    std::fs::write(&networks, "networks: {}\n").unwrap();
    let mut source = source(&dir, "rootNamespace: first\n", MeshSettings::default());
    let mesh = dir.path().join("mesh");
    let reread = |source: &mut MeshConfigSource| source.reread(&mesh, Some(&networks));
    std::fs::write(
        &networks,
        "networks:\n  west: {endpoints: [{fromRegistry: west}], gateways: [{address: 192.0.2.9, port: 15443}]}\n",
    )
    .unwrap();
    let served_networks = served(reread(&mut source)).networks.clone();
    assert_eq!(served_networks.networks.keys().map(|k| &**k).collect::<Vec<_>>(), ["west"]);
    // Broken: refused with its path; the last good networks stay served.
    std::fs::write(&networks, "networks: {west: {gateways: [{address: 192.0.2.9, port: 0}]}}\n").unwrap();
    assert!(reread(&mut source).is_none(), "nothing is written");
    let problems = source.status.problems();
    assert!(problems[0].is_error() && problems[0].message.contains("networks.west.gateways[0].port"), "{problems:?}");
    assert_eq!(source.served.networks, served_networks);
    // A missing file is a problem too, and changes nothing served.
    std::fs::remove_file(&networks).unwrap();
    assert!(reread(&mut source).is_none());
    assert!(source.status.problems()[0].message.contains("cannot read"), "{:?}", source.status.problems());
}
