//! SDS: the Secrets a proxy's listeners name, as Envoy `Secret` resources.
//!
//! A router's set is every SDS name its served TLS chains refer to
//! (`kubernetes://NAME`, and `kubernetes://NAME-cacert` for a server that
//! checks client certificates), and those its clusters' TLS origination
//! refers to (a DestinationRule's `credentialName`), that resolve for it: Istio's rule, a
//! gateway reads the Secrets of its own namespace (`push::index::secrets`).
//! A Secret is sent inline: the certificate chain and key as
//! `tls_certificate`, a CA as `validation_context` (with its CRL).
//!
//! Invariant: only names the scope's own configuration refers to are in
//! its set, so a proxy receives no Secret it was not configured to use,
//! whatever names it asks for. The generated resources hold private keys:
//! every debug view redacts them (`admin::config_dump`).

use std::collections::BTreeSet;

use envoy_types::pb::envoy::config::core::v3::{DataSource, data_source};
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
    CertificateValidationContext, Secret, TlsCertificate, secret,
};

use super::{cds, gateway, tls};
use crate::model::ProxyKind;
use crate::push::index::secrets::{Reader, Resolved};
use crate::push::{PushContext, Scope};

/// The SDS names `scope`'s listeners and clusters refer to, sorted.
pub fn secret_names(ctx: &PushContext, scope: &Scope) -> BTreeSet<String> {
    if scope.key.kind != ProxyKind::Router {
        return BTreeSet::new();
    }
    let mut out: BTreeSet<String> = gateway::gateway_ports(scope)
        .iter()
        .filter(|p| p.kind == gateway::PortKind::Tls)
        .flat_map(|p| p.servers.iter())
        .flat_map(|(_, server)| tls::secret_names(server))
        .collect();
    out.extend(cds::secret_names(ctx, scope));
    out
}

/// Who reads a scope's Secrets.
pub fn reader(scope: &Scope) -> Reader {
    match scope.key.kind {
        ProxyKind::Router => Reader::Router,
        // A ztunnel gets its certificates from the CA, never over SDS; a
        // waypoint, as a sidecar, its own from its agent.
        ProxyKind::Sidecar | ProxyKind::Ztunnel | ProxyKind::Waypoint => Reader::Sidecar,
    }
}

/// The Secret `name` as a proxy of `namespace` reads it; `None` when it
/// does not resolve for it.
pub fn secret(ctx: &PushContext, namespace: &str, reader: Reader, name: &str) -> Option<Secret> {
    let inline = |bytes: &bytes::Bytes| DataSource {
        specifier: Some(data_source::Specifier::InlineBytes(bytes.to_vec())),
        ..Default::default()
    };
    let kind = match ctx.secrets.resolve(namespace, reader, name).ok()? {
        Resolved::Identity { certificate_chain, private_key } => secret::Type::TlsCertificate(TlsCertificate {
            certificate_chain: Some(inline(&certificate_chain)),
            private_key: Some(inline(&private_key)),
            ..Default::default()
        }),
        Resolved::Ca { trusted_ca, crl } => secret::Type::ValidationContext(CertificateValidationContext {
            trusted_ca: Some(inline(&trusted_ca)),
            crl: crl.as_ref().map(inline),
            ..Default::default()
        }),
    };
    Some(Secret { name: name.to_string(), r#type: Some(kind) })
}
