//! The secure port (istiod's 15012) as `serve` opens it: the mesh's CA
//! (its plug-in material, a self-signed root in a directory, or, on
//! Kubernetes, the root kept in a Secret), the authenticators that prove
//! callers' identities, the port's TLS and its listener, and the webhook
//! listener that shares its certificate.

use std::sync::Arc;

use anyhow::Context as _;

use super::{SecureXds, bind_xds};
use crate::engine::PushEngine;
use connections::XdsListener;

use super::connections;

/// The secure port, bound, with what it serves.
pub(super) struct SecurePort {
    pub(super) listener: XdsListener,
    /// The mesh roots (PEM), for what hands them out in Kubernetes.
    pub(super) roots_pem: String,
    pub(super) webhook: Option<tokio::net::TcpListener>,
    pub(super) tls: crate::ca::ServerTls,
    pub(super) ca: crate::ca::CaService,
    /// Checks the bearer tokens of ADS clients without a certificate (the
    /// CA's own authenticators).
    pub(super) tokens: Arc<crate::ca::Authenticators>,
    pub(super) registry_writers: Vec<crate::model::Identity>,
    /// The CA, which also certifies meshpush's own mesh identity.
    pub(super) authority: Arc<crate::ca::CertificateAuthority>,
}

impl SecurePort {
    /// Opens the CA (creating a self-signed root when its directory has
    /// none), sets up TLS and binds the port.
    pub(super) async fn open(
        secure: &SecureXds,
        kube: Option<(kube::Client, &str, crate::ca::authn::ClusterClients)>,
        engine: Arc<PushEngine>,
    ) -> anyhow::Result<SecurePort> {
        use crate::ca::{Authenticators, CaMaterial, CaService, CertificateAuthority, Impersonation, ServerTls};
        let plug_in = CaMaterial::read(&secure.ca_dir)
            .with_context(|| format!("reading the CA directory {}", secure.ca_dir.display()))?
            .is_some();
        let ca = match (&secure.ca_secret, &kube) {
            (Some((namespace, name)), Some((client, ..))) if !plug_in => {
                let (material, created) =
                    crate::source::ca_bundle::root_secret(client.clone(), namespace, name, &secure.trust_domain)
                        .await
                        .map_err(anyhow::Error::msg)?;
                let origin = std::path::PathBuf::from(format!("Secret {namespace}/{name}"));
                let ca = CertificateAuthority::from_material(
                    &origin,
                    &material,
                    &secure.trust_domain,
                    secure.lifetimes,
                    created,
                )?;
                tracing::info!(secret = %origin.display(), created, "the self-signed root is kept in a Secret");
                ca
            }
            (Some(_), None) => anyhow::bail!("--ca-secret needs Kubernetes (--kubeconfig or --in-cluster)"),
            _ => CertificateAuthority::open(&secure.ca_dir, &secure.trust_domain, secure.lifetimes)
                .with_context(|| format!("opening the CA directory {}", secure.ca_dir.display()))?,
        };
        if ca.created_root() {
            tracing::info!(
                dir = %secure.ca_dir.display(),
                trust_domain = %secure.trust_domain,
                "created a self-signed root CA (ca-cert.pem, ca-key.pem, root-cert.pem); workloads trust root-cert.pem"
            );
        } else {
            tracing::info!(dir = %secure.ca_dir.display(), trust_domain = %secure.trust_domain, "CA key material loaded");
        }
        let mut authenticators = Authenticators::new(&secure.trust_domain);
        if let Some(jwks) = &secure.jwks {
            authenticators = authenticators.with_jwks(jwks).with_context(|| format!("--jwks {}", jwks.display()))?;
        }
        if let Some((client, cluster_id, remotes)) = kube {
            authenticators = authenticators.with_token_review(client).with_remote_clusters(cluster_id, remotes);
        }
        let authenticators = Arc::new(authenticators);
        if !authenticators.accepts_tokens() {
            tracing::warn!(
                "the CA accepts no tokens (no --jwks and no Kubernetes cluster): only workloads that already hold a \
                 certificate can get one"
            );
        }
        let ca = Arc::new(ca);
        let tls = ServerTls::new(ca.clone(), secure.server_names.clone())?;
        let listener =
            bind_xds(&secure.addr).with_context(|| format!("binding the secure xDS address {}", secure.addr))?;
        let webhook = match secure.webhook_addr {
            Some(addr) => Some(
                std::net::TcpListener::bind(addr)
                    .and_then(|l| l.set_nonblocking(true).map(|()| l))
                    .and_then(tokio::net::TcpListener::from_std)
                    .with_context(|| format!("binding the webhook address {addr}"))?,
            ),
            None => None,
        };
        Ok(SecurePort {
            listener,
            roots_pem: ca.roots_pem().to_string(),
            webhook,
            tls,
            ca: CaService::new(ca.clone(), authenticators.clone(), engine.metrics().clone()).with_impersonation(
                Impersonation::new(secure.trusted_node_accounts.clone(), &secure.trust_domain, engine),
            ),
            tokens: authenticators,
            registry_writers: secure.registry_writers.clone(),
            authority: ca.clone(),
        })
    }
}
