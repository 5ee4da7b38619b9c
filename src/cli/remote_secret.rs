//! `meshpush create-remote-secret`: the remote secret that lets a primary
//! meshpush (or istiod) read a remote cluster, as `istioctl
//! create-remote-secret` writes it.
//!
//! It reads, in the remote cluster its kubeconfig names, the token of the
//! reader service account (the chart installs `meshpush-reader` with
//! `remote: true`: read-only on Services, Pods, EndpointSlices, Nodes and
//! Namespaces) from its `kubernetes.io/service-account-token` Secret, and
//! prints a Secret `istio-remote-secret-NAME` labelled
//! `istio/multiCluster: "true"`, annotated `networking.istio.io/cluster:
//! NAME`, whose one key `NAME` is a kubeconfig of that cluster's server,
//! its CA and that token. Applied to the primary cluster's meshpush
//! namespace, it makes the primary read the remote cluster.
//!
//! Invariant: the token goes to standard output only, inside the Secret;
//! no error message carries it.

use std::collections::BTreeMap;
use std::path::Path;

use base64::Engine as _;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams};
use serde_json::json;

use crate::source::kube::remote::MULTICLUSTER_SECRET_LABEL;

/// The annotation naming the cluster of a remote secret (istioctl writes it).
pub const CLUSTER_ANNOTATION: &str = "networking.istio.io/cluster";

/// The annotation that binds a token Secret to its service account.
const SERVICE_ACCOUNT_ANNOTATION: &str = "kubernetes.io/service-account.name";

/// What `create-remote-secret` is asked for.
#[derive(Debug, Clone)]
pub struct RemoteSecretRequest<'a> {
    /// The remote cluster's kubeconfig (its current context).
    pub kubeconfig: &'a Path,
    /// The remote cluster's id in the mesh.
    pub name: &'a str,
    /// Where the reader's token Secret is in the remote cluster, and the
    /// namespace the remote secret is written for.
    pub namespace: &'a str,
    /// The reader service account.
    pub service_account: &'a str,
    /// The server the primary dials (default: the kubeconfig's).
    pub server: Option<&'a str>,
}

/// The remote secret's YAML.
pub async fn create(request: &RemoteSecretRequest<'_>) -> Result<String, String> {
    check_name(request.name)?;
    let kubeconfig = kube::config::Kubeconfig::read_from(request.kubeconfig)
        .map_err(|e| format!("--kubeconfig {}: {e}", request.kubeconfig.display()))?;
    let (server, ca) = current_cluster(&kubeconfig)?;
    let server = request.server.map(str::to_string).unwrap_or(server);
    let access = crate::source::kube::KubeAccess::Kubeconfig(request.kubeconfig.to_path_buf());
    let client = crate::source::kube::client(&access).await.map_err(|e| e.to_string())?;
    let secrets: Api<Secret> = Api::namespaced(client, request.namespace);
    let list = secrets
        .list(&ListParams::default().fields("type=kubernetes.io/service-account-token"))
        .await
        .map_err(|e| format!("listing the token Secrets of namespace {}: {e}", request.namespace))?;
    let token_secret = list
        .items
        .iter()
        .filter(|s| {
            s.metadata.annotations.as_ref().and_then(|a| a.get(SERVICE_ACCOUNT_ANNOTATION)).map(String::as_str)
                == Some(request.service_account)
        })
        .min_by_key(|s| s.metadata.name.clone())
        .ok_or_else(|| {
            format!(
                "no token Secret of service account {}/{} (a Secret of type kubernetes.io/service-account-token annotated {SERVICE_ACCOUNT_ANNOTATION}: {}); install the chart with remote: true in that cluster",
                request.namespace, request.service_account, request.service_account
            )
        })?;
    let field = |key: &str| token_secret.data.as_ref().and_then(|d| d.get(key)).map(|v| v.0.clone());
    let token = field("token")
        .and_then(|t| String::from_utf8(t).ok())
        .filter(|t| !t.is_empty())
        .ok_or_else(|| format!("the token Secret of {} holds no token yet", request.service_account))?;
    // The CA the service account's Secret holds, else the kubeconfig's.
    let ca = field("ca.crt").map(|c| base64::engine::general_purpose::STANDARD.encode(c)).or(ca);
    render(request, &server, ca.as_deref(), &token)
}

/// The remote secret of cluster `request.name` at `server` (its CA, base64
/// PEM) with `token`.
fn render(request: &RemoteSecretRequest<'_>, server: &str, ca: Option<&str>, token: &str) -> Result<String, String> {
    let name = request.name;
    let mut cluster = json!({ "server": server });
    if let Some(ca) = ca {
        cluster["certificate-authority-data"] = json!(ca);
    }
    let kubeconfig = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{ "name": name, "cluster": cluster }],
        "contexts": [{ "name": name, "context": { "cluster": name, "user": name } }],
        "current-context": name,
        "users": [{ "name": name, "user": { "token": token } }],
        "preferences": {},
    });
    let kubeconfig = serde_yaml_ng::to_string(&kubeconfig).map_err(|e| format!("rendering the kubeconfig: {e}"))?;
    let secret = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": format!("istio-remote-secret-{name}"),
            "namespace": request.namespace,
            "labels": BTreeMap::from([(MULTICLUSTER_SECRET_LABEL, "true")]),
            "annotations": BTreeMap::from([(CLUSTER_ANNOTATION, name)]),
        },
        "stringData": { name: kubeconfig },
    });
    let yaml = serde_yaml_ng::to_string(&secret).map_err(|e| format!("rendering the Secret: {e}"))?;
    Ok(format!("# This file is autogenerated, do not edit.\n{yaml}---\n"))
}

/// The current context's server and CA (base64 PEM) of `kubeconfig`.
fn current_cluster(kubeconfig: &kube::config::Kubeconfig) -> Result<(String, Option<String>), String> {
    let context_name = kubeconfig.current_context.as_deref().ok_or("the kubeconfig has no current-context")?;
    let context = kubeconfig
        .contexts
        .iter()
        .find(|c| c.name == context_name)
        .and_then(|c| c.context.as_ref())
        .ok_or_else(|| format!("the kubeconfig has no context {context_name}"))?;
    let cluster = kubeconfig
        .clusters
        .iter()
        .find(|c| c.name == context.cluster)
        .and_then(|c| c.cluster.as_ref())
        .ok_or_else(|| format!("the kubeconfig has no cluster {}", context.cluster))?;
    let server = cluster.server.clone().ok_or("the kubeconfig's cluster has no server")?;
    let ca = match (&cluster.certificate_authority_data, &cluster.certificate_authority) {
        (Some(data), _) => Some(data.clone()),
        (None, Some(file)) => {
            let pem = std::fs::read(file).map_err(|e| format!("the kubeconfig's certificate-authority {file}: {e}"))?;
            Some(base64::engine::general_purpose::STANDARD.encode(pem))
        }
        (None, None) => None,
    };
    Ok((server, ca))
}

/// A cluster id must be a DNS-1123 label, as istioctl requires.
fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(format!("--name {name:?}: a cluster id is a DNS-1123 label (a-z, 0-9, -; 63 at most)"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_secret_is_istioctls_shape_with_a_kubeconfig_of_the_cluster() {
        let request = RemoteSecretRequest {
            kubeconfig: Path::new("unused"),
            name: "cluster2",
            namespace: "istio-system",
            service_account: "meshpush-reader",
            server: None,
        };
        let text = render(&request, "https://10.0.0.1:6443", Some("Q0E="), "sekret").unwrap();
        assert!(text.starts_with("# This file is autogenerated"));
        let secret: serde_json::Value = serde_yaml_ng::from_str(text.trim_end_matches("---\n")).unwrap();
        assert_eq!(secret["metadata"]["name"], "istio-remote-secret-cluster2");
        assert_eq!(secret["metadata"]["labels"]["istio/multiCluster"], "true");
        assert_eq!(secret["metadata"]["annotations"]["networking.istio.io/cluster"], "cluster2");
        let kubeconfig: serde_json::Value =
            serde_yaml_ng::from_str(secret["stringData"]["cluster2"].as_str().unwrap()).unwrap();
        assert_eq!(kubeconfig["current-context"], "cluster2");
        assert_eq!(kubeconfig["clusters"][0]["cluster"]["server"], "https://10.0.0.1:6443");
        assert_eq!(kubeconfig["clusters"][0]["cluster"]["certificate-authority-data"], "Q0E=");
        assert_eq!(kubeconfig["users"][0]["user"]["token"], "sekret");
    }

    #[test]
    fn a_cluster_id_is_a_dns_label() {
        for good in ["cluster2", "east-1", "a"] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in ["", "Cluster2", "-a", "a-", "a.b", &"x".repeat(64)] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }
}
