use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use super::policy::{Decision, required};
use super::*;

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn decide(settings: &InjectorSettings, namespace: &str, labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> bool {
    let mut warnings = Vec::new();
    required(settings, &PodSpec::default(), namespace, &map(labels), &map(annotations), &mut warnings)
        == Decision::Inject
}

#[test]
fn the_pod_label_wins_over_the_annotation_and_selectors_only_decide_what_the_pod_leaves_open() {
    let settings = InjectorSettings::parse(
        "settings",
        "neverInjectSelector: [{matchLabels: {batch: \"true\"}}]\n\
         alwaysInjectSelector: [{matchExpressions: [{key: batch, operator: Exists}]}]\n",
    )
    .unwrap();
    assert!(decide(&settings, "shop", &[], &[]), "policy enabled");
    assert!(!decide(
        &settings,
        "shop",
        &[("sidecar.istio.io/inject", "false")],
        &[("sidecar.istio.io/inject", "true")]
    ));
    assert!(decide(&settings, "shop", &[], &[("sidecar.istio.io/inject", "true")]));
    assert!(!decide(&settings, "shop", &[("batch", "true")], &[]), "never wins over always");
    assert!(decide(&settings, "shop", &[("batch", "no")], &[]), "always");
    assert!(decide(&settings, "shop", &[("batch", "true")], &[("sidecar.istio.io/inject", "true")]), "the pod wins");
    assert!(!decide(&settings, "kube-system", &[("sidecar.istio.io/inject", "true")], &[]), "system namespace");
    let disabled = InjectorSettings { policy: "disabled".into(), ..InjectorSettings::default() };
    assert!(!decide(&disabled, "shop", &[], &[]));
    assert!(decide(&disabled, "shop", &[("sidecar.istio.io/inject", "true")], &[]));
    let mut warnings = Vec::new();
    let host = PodSpec { host_network: Some(true), ..PodSpec::default() };
    let inject = map(&[("sidecar.istio.io/inject", "true")]);
    assert!(matches!(required(&settings, &host, "shop", &inject, &map(&[]), &mut warnings), Decision::Skip(_)));
    let odd = map(&[("sidecar.istio.io/inject", "True")]);
    assert_eq!(
        required(&disabled, &PodSpec::default(), "shop", &map(&[]), &odd, &mut warnings),
        Decision::Skip("it has sidecar injection disabled".into())
    );
    assert!(warnings[0].contains("neither \"true\" nor \"false\""), "{warnings:?}");
}

#[test]
fn the_settings_refuse_unknown_keys_and_values_istio_refuses_naming_the_path() {
    let err = InjectorSettings::parse("cfg.yaml", "policy: enabled\nproxyImg: x\n").unwrap_err();
    assert!(err.starts_with("cfg.yaml: ") && err.contains("proxyImg"), "{err}");
    let err = InjectorSettings::parse("cfg.yaml", "policy: sometimes\n").unwrap_err();
    assert_eq!(err, "cfg.yaml: policy: \"sometimes\" is neither enabled nor disabled");
    let err = InjectorSettings::parse("cfg.yaml", "excludeIPRanges: \"*\"\n").unwrap_err();
    assert!(err.starts_with("cfg.yaml: excludeIPRanges: failed parsing cidr '*'"), "{err}");
    let err = InjectorSettings::parse("cfg.yaml", "resources: {limits: {cpu: lots}}\n").unwrap_err();
    assert!(err.contains("resources: cpu: \"lots\" is not a quantity"), "{err}");
    assert_eq!(InjectorSettings::parse("cfg.yaml", "").unwrap(), InjectorSettings::default());
}

#[test]
fn every_bad_annotation_is_named_in_one_error_in_istios_words() {
    let annotations = map(&[
        ("sidecar.istio.io/proxyCPU", "fast"),
        ("sidecar.istio.io/interceptionMode", "MAGIC"),
        ("traffic.sidecar.istio.io/includeOutboundIPRanges", "10.0.0.0/8, 192.168.0.0/16"),
        ("status.sidecar.istio.io/port", "70000"),
        ("proxy.istio.io/config", "concurrency: -1"),
        ("sidecar.istio.io/proxyMemory", "1.5Gi"),
    ]);
    let Err(InjectError::Annotations(problems)) = annotations::check(&annotations) else { panic!("refused") };
    assert_eq!(problems.len(), 5, "{problems:?}");
    assert!(
        problems.iter().any(|p| {
            p.starts_with(
        "invalid value '10.0.0.0/8, 192.168.0.0/16' for annotation 'traffic.sidecar.istio.io/includeOutboundIPRanges': \
         includeIPRanges invalid: failed parsing cidr ' 192.168.0.0/16'"
    )
        }),
        "a space is not trimmed, as in Istio: {problems:?}"
    );
    assert!(problems.iter().any(|p| p.contains("'sidecar.istio.io/interceptionMode'")));
    assert!(problems.iter().any(|p| p.contains("concurrency")), "{problems:?}");
    let fine = map(&[("sidecar.istio.io/userVolume", "{}"), ("inject.istio.io/templates", "sidecar,grpc-agent")]);
    let warnings = annotations::check(&fine).unwrap().warnings;
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(warnings[1].contains("no template \"grpc-agent\""), "{warnings:?}");
}

#[test]
fn a_pods_workload_is_its_controllers_as_istio_names_it() {
    let owner = |kind: &str, name: &str| OwnerReference {
        api_version: if kind == "Job" { "batch/v1".into() } else { "apps/v1".into() },
        kind: kind.into(),
        name: name.into(),
        controller: Some(true),
        ..OwnerReference::default()
    };
    // A controller's Pod has a generated name (Istio looks into no other).
    let meta = ObjectMeta {
        name: Some("reviews-v1-7d8f9c-x2x4q".into()),
        generate_name: Some("reviews-v1-7d8f9c-".into()),
        labels: Some(map(&[("pod-template-hash", "7d8f9c")])),
        owner_references: Some(vec![owner("ReplicaSet", "reviews-v1-7d8f9c")]),
        ..ObjectMeta::default()
    };
    let w = Workload::of_pod(&meta, "shop");
    assert_eq!((w.kind.as_str(), w.name.as_str()), ("Deployment", "reviews-v1"));
    assert_eq!(w.owner(), "kubernetes://apis/apps/v1/namespaces/shop/deployments/reviews-v1");
    let cron = ObjectMeta {
        generate_name: Some("backup-28801440-".into()),
        owner_references: Some(vec![owner("Job", "backup-28801440")]),
        ..ObjectMeta::default()
    };
    assert_eq!(Workload::of_pod(&cron, "ops").kind, "CronJob");
    assert_eq!(Workload::of_pod(&cron, "ops").name, "backup");
    let rollout = ObjectMeta {
        generate_name: Some("cart-5c6f-".into()),
        labels: Some(map(&[("rollouts-pod-template-hash", "5c6f")])),
        owner_references: Some(vec![owner("ReplicaSet", "cart-5c6f")]),
        ..ObjectMeta::default()
    };
    assert_eq!(
        (Workload::of_pod(&rollout, "shop").kind.as_str(), Workload::of_pod(&rollout, "shop").name.as_str()),
        ("Rollout", "cart")
    );
    let named = ObjectMeta { name: Some("pinned".into()), ..meta.clone() };
    let named = ObjectMeta { generate_name: None, ..named };
    assert_eq!(Workload::of_pod(&named, "shop").kind, "Pod", "a name not generated: the Pod is its own workload");
    let bare = ObjectMeta { generate_name: Some("worker-".into()), ..ObjectMeta::default() };
    assert_eq!(
        (Workload::of_pod(&bare, "ops").kind.as_str(), Workload::of_pod(&bare, "ops").name.as_str()),
        ("Pod", "worker")
    );
}

#[test]
fn a_refused_pod_is_left_exactly_as_it_was() {
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "a", "annotations": {"sidecar.istio.io/interceptionMode": "MAGIC"}},
        "spec": {"containers": [{"name": "app", "image": "app"}]}
    }))
    .unwrap();
    let (mut meta, mut spec) = (pod.metadata.clone(), pod.spec.clone().unwrap());
    let workload = Workload::of_pod(&meta, "default");
    assert!(Injector::default().inject(&mut meta, &mut spec, &workload, None).is_err());
    assert_eq!((meta, spec), (pod.metadata, pod.spec.unwrap()));
}
