//! The mesh's root certificate, handed out in Kubernetes as istiod hands
//! it out, so that an injected pod and the API server can trust meshpush:
//! - **`istio-ca-root-cert`** ([`publish_root`]): a ConfigMap of that name,
//!   key `root-cert.pem`, labelled `istio.io/config: "true"`, in every
//!   namespace but `kube-public`, `kube-node-lease` and
//!   `local-path-storage` (an injected proxy mounts it). It is created
//!   when missing, and its key is put back when someone changes it (other
//!   keys are kept), as Istio's namespace controller does.
//! - **The webhook configurations' `caBundle`** ([`patch_webhooks`]): in
//!   each MutatingWebhookConfiguration labelled `istio.io/rev` with this
//!   revision, every webhook named `…sidecar-injector.istio.io`; in each
//!   such ValidatingWebhookConfiguration, every webhook, whose
//!   `failurePolicy` also becomes `Fail` (the chart installs `Ignore`, so
//!   that an install never waits on a server that is not up yet; this one
//!   is, since it patches).
//!
//! - **The self-signed root itself** ([`root_secret`]), when there is no
//!   plug-in CA: kept in a Secret (Istio's `istio-ca-secret`, type
//!   `istio.io/ca-root`, the plug-in layout's keys), so that every replica
//!   signs with one root and a restart keeps it. The first replica to find
//!   none creates it; one that loses that race reads the winner's. A root
//!   istiod made is taken over as it is.
//!
//! Both follow watches: a new namespace, an edited ConfigMap, a chart
//! upgrade that resets `caBundle` are set right at once. Writes carry the
//! resource version read (an update that raced another is refused and
//! done again on the next event), and nothing is written when the object
//! already says it, so replicas do not fight. A failed write is logged
//! and retried on the watch's next event.

use std::collections::BTreeMap;

use futures::StreamExt as _;
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher;

use crate::ca::CaMaterial;
use crate::text::Shown;

/// The ConfigMap each namespace holds the mesh root in (Istio's name).
pub const ROOT_CERT_CONFIG_MAP: &str = "istio-ca-root-cert";
/// Its key.
pub const ROOT_CERT_KEY: &str = "root-cert.pem";
/// Namespaces that get no root ConfigMap (Istio's list).
const SKIPPED_NAMESPACES: [&str; 3] = ["kube-public", "kube-node-lease", "local-path-storage"];
/// The suffix of the injection webhooks' names (Istio's).
const INJECTION_WEBHOOK_SUFFIX: &str = "sidecar-injector.istio.io";

/// Keeps `istio-ca-root-cert` holding `bundle` in every namespace, for ever.
pub async fn publish_root(client: kube::Client, bundle: String) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let config_maps: Api<ConfigMap> = Api::all(client.clone());
    let by_name = watcher::Config::default().fields(&format!("metadata.name={ROOT_CERT_CONFIG_MAP}"));
    let namespace_events = watcher::watcher(namespaces, watcher::Config::default())
        .default_backoff()
        .applied_objects()
        .map(|ns| ns.map(|ns| ns.metadata));
    let config_map_events = watcher::watcher(config_maps, by_name).default_backoff().applied_objects().map(|cm| {
        cm.map(|cm| ObjectMeta { namespace: cm.metadata.namespace, name: cm.metadata.name, ..Default::default() })
    });
    let mut events = std::pin::pin!(futures::stream::select(namespace_events, config_map_events));
    while let Some(event) = events.next().await {
        let meta = match event {
            Ok(meta) => meta,
            Err(e) => {
                tracing::warn!(
                    "watching Namespaces and {ROOT_CERT_CONFIG_MAP} ConfigMaps: {}; retrying",
                    Shown(&e.to_string())
                );
                continue;
            }
        };
        // A Namespace names itself; a ConfigMap its namespace.
        let (namespace, terminating) = match meta.namespace {
            Some(ns) if meta.name.as_deref() == Some(ROOT_CERT_CONFIG_MAP) => (ns, false),
            Some(_) => continue,
            None => (meta.name.unwrap_or_default(), meta.deletion_timestamp.is_some()),
        };
        if namespace.is_empty() || terminating || SKIPPED_NAMESPACES.contains(&namespace.as_str()) {
            continue;
        }
        if let Err(e) = ensure_root(&client, &namespace, &bundle).await {
            tracing::warn!(
                "writing {ROOT_CERT_CONFIG_MAP} in namespace {}: {}",
                Shown(&namespace),
                Shown(&e.to_string())
            );
        }
    }
}

/// Creates or corrects the root ConfigMap of `namespace`.
async fn ensure_root(client: &kube::Client, namespace: &str, bundle: &str) -> Result<(), kube::Error> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    match api.get_opt(ROOT_CERT_CONFIG_MAP).await? {
        None => {
            let config_map = ConfigMap {
                metadata: ObjectMeta {
                    name: Some(ROOT_CERT_CONFIG_MAP.into()),
                    namespace: Some(namespace.into()),
                    labels: Some([("istio.io/config".to_string(), "true".to_string())].into()),
                    ..Default::default()
                },
                data: Some([(ROOT_CERT_KEY.to_string(), bundle.to_string())].into()),
                ..Default::default()
            };
            match api.create(&PostParams::default(), &config_map).await {
                Ok(_) => {
                    tracing::info!("wrote the mesh root to {ROOT_CERT_CONFIG_MAP} in namespace {}", Shown(namespace));
                    Ok(())
                }
                // Another replica was first, or the namespace is going.
                Err(kube::Error::Api(e)) if matches!(e.code, 403 | 404 | 409) => Ok(()),
                Err(e) => Err(e),
            }
        }
        Some(mut config_map) => {
            let data = config_map.data.get_or_insert_with(BTreeMap::new);
            if data.get(ROOT_CERT_KEY).map(String::as_str) == Some(bundle) {
                return Ok(());
            }
            data.insert(ROOT_CERT_KEY.into(), bundle.into());
            api.replace(ROOT_CERT_CONFIG_MAP, &PostParams::default(), &config_map).await?;
            tracing::info!("put the mesh root back into {ROOT_CERT_CONFIG_MAP} in namespace {}", Shown(namespace));
            Ok(())
        }
    }
}

/// Keeps this revision's webhook configurations trusting `bundle`, for ever.
pub async fn patch_webhooks(client: kube::Client, bundle: String, revision: String) {
    let selector = format!("istio.io/rev={revision}");
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let config = watcher::Config::default().labels(&selector);
    let ours = |meta: &ObjectMeta| meta.labels.as_ref().and_then(|l| l.get("istio.io/rev")) == Some(&revision);
    let mutating_events = watcher::watcher(mutating.clone(), config.clone())
        .default_backoff()
        .applied_objects()
        .map(|m| m.map(Webhooks::Mutating));
    let validating_events = watcher::watcher(validating.clone(), config)
        .default_backoff()
        .applied_objects()
        .map(|v| v.map(Webhooks::Validating));
    let mut events = std::pin::pin!(futures::stream::select(mutating_events, validating_events));
    while let Some(event) = events.next().await {
        let result = match event {
            Ok(Webhooks::Mutating(mut object)) if ours(&object.metadata) => {
                let mut changed = false;
                for hook in object.webhooks.iter_mut().flatten().filter(|h| h.name.ends_with(INJECTION_WEBHOOK_SUFFIX))
                {
                    changed |= set_bundle(&mut hook.client_config.ca_bundle, &bundle);
                }
                write(&mutating, changed, object).await
            }
            Ok(Webhooks::Validating(mut object)) if ours(&object.metadata) => {
                let mut changed = false;
                for hook in object.webhooks.iter_mut().flatten() {
                    changed |= set_bundle(&mut hook.client_config.ca_bundle, &bundle);
                    if hook.failure_policy.as_deref() != Some("Fail") {
                        hook.failure_policy = Some("Fail".into());
                        changed = true;
                    }
                }
                write(&validating, changed, object).await
            }
            Ok(_) => Ok(()),
            Err(e) => Err(format!("watching the webhook configurations: {e}; retrying")),
        };
        if let Err(e) = result {
            tracing::warn!("{}", Shown(&e));
        }
    }
}

enum Webhooks {
    Mutating(MutatingWebhookConfiguration),
    Validating(ValidatingWebhookConfiguration),
}

/// Sets a webhook's `caBundle` to `bundle`; whether it changed.
fn set_bundle(current: &mut Option<k8s_openapi::ByteString>, bundle: &str) -> bool {
    if current.as_ref().map(|b| b.0.as_slice()) == Some(bundle.as_bytes()) {
        return false;
    }
    *current = Some(k8s_openapi::ByteString(bundle.as_bytes().to_vec()));
    true
}

/// Replaces `object` (at the resource version read) when it changed.
async fn write<K>(api: &Api<K>, changed: bool, object: K) -> Result<(), String>
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    if !changed {
        return Ok(());
    }
    let name = object.meta().name.clone().unwrap_or_default();
    match api.replace(&name, &PostParams::default(), &object).await {
        Ok(_) => {
            tracing::info!("set the mesh root as the caBundle of webhook configuration {}", Shown(&name));
            Ok(())
        }
        Err(e) => Err(format!("writing the caBundle of webhook configuration {}: {e}", Shown(&name))),
    }
}

/// The Secret type Istio gives its self-signed root.
const ROOT_SECRET_TYPE: &str = "istio.io/ca-root";

/// The CA's key material from the Secret `namespace/name`, created with a
/// new self-signed root when there is none; whether this call created it.
pub async fn root_secret(
    client: kube::Client,
    namespace: &str,
    name: &str,
    trust_domain: &str,
) -> Result<(CaMaterial, bool), String> {
    use k8s_openapi::api::core::v1::Secret;
    let api: Api<Secret> = Api::namespaced(client, namespace);
    let shown = format!("Secret {namespace}/{name}");
    let read = |secret: Secret| -> Result<CaMaterial, String> {
        let data = secret.data.unwrap_or_default();
        let key = |file: &str, required: bool| match data.get(file) {
            Some(bytes) => Ok(bytes.0.clone()),
            None if !required => Ok(Vec::new()),
            None => Err(format!("{shown} has no {file}: it is not a CA's key material")),
        };
        Ok(CaMaterial {
            signer_pem: key("ca-cert.pem", true)?,
            key_pem: key("ca-key.pem", true)?,
            roots_pem: key("root-cert.pem", true)?,
            chain_pem: key("cert-chain.pem", false)?,
        })
    };
    if let Some(secret) = api.get_opt(name).await.map_err(|e| format!("reading {shown}: {e}"))? {
        return Ok((read(secret)?, false));
    }
    let material = CaMaterial::self_signed(trust_domain).map_err(|e| e.to_string())?;
    let data = material
        .files()
        .into_iter()
        .map(|(file, bytes)| (file.to_string(), k8s_openapi::ByteString(bytes.to_vec())))
        .collect();
    let secret = Secret {
        metadata: ObjectMeta { name: Some(name.into()), namespace: Some(namespace.into()), ..Default::default() },
        type_: Some(ROOT_SECRET_TYPE.into()),
        data: Some(data),
        ..Default::default()
    };
    match api.create(&PostParams::default(), &secret).await {
        Ok(_) => Ok((material, true)),
        // Another replica made one first: sign with that one.
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let winner = api.get(name).await.map_err(|e| format!("reading {shown}: {e}"))?;
            Ok((read(winner)?, false))
        }
        Err(e) => Err(format!("creating {shown}: {e}")),
    }
}
