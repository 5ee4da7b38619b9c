//! `istio.v1.auth.IstioCertificateService/CreateCertificate`, as istiod
//! serves it on its secure port: a PEM CSR and a validity in, the signed
//! chain out.
//!
//! Istio's agents call it with their service-account token, and again with
//! their current certificate to renew; so do meshpush's. ztunnel calls it
//! for each workload on its node, naming the workload's identity in the
//! request's `ImpersonatedIdentity` metadata ([`impersonation`](super::impersonation)).
//! The answers follow istiod's codes: `UNAUTHENTICATED` for a caller with
//! no valid credential, `PERMISSION_DENIED` for a CSR naming an identity
//! the caller does not hold (or may not impersonate), `INVALID_ARGUMENT`
//! for a CSR that does not parse or a TTL above the maximum. Each request
//! is logged at DEBUG with the identity issued, never the CSR or the token;
//! refusals at INFO, refused impersonations at WARN.

use std::sync::Arc;
use std::time::Duration;

use tonic::{Request, Response, Status};

use super::authn::{Authenticators, CLUSTER_ID_HEADER};
use super::authority::{CertificateAuthority, SignError};
use super::impersonation::{self, Impersonation};
use crate::metrics::Metrics;
use crate::text::Shown;
use crate::xds::stream::peer::ConnectionContext;

/// The code generated from `proto/istio/v1/auth/ca.proto`.
#[allow(missing_docs, clippy::all, clippy::pedantic, rust_2018_idioms)]
pub mod proto {
    tonic::include_proto!("istio.v1.auth");
}

use proto::istio_certificate_service_server::{IstioCertificateService, IstioCertificateServiceServer};
use proto::{IstioCertificateRequest, IstioCertificateResponse};

/// Largest request read: a CSR is about 1 KB.
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;

/// The CA's gRPC service.
#[derive(Debug, Clone)]
pub struct CaService {
    ca: Arc<CertificateAuthority>,
    authenticators: Arc<Authenticators>,
    impersonation: Option<Arc<Impersonation>>,
    metrics: Arc<Metrics>,
}

impl CaService {
    /// A service signing with `ca` for callers `authenticators` accept,
    /// counting in `metrics`; it issues only the callers' own identities.
    pub fn new(ca: Arc<CertificateAuthority>, authenticators: Arc<Authenticators>, metrics: Arc<Metrics>) -> CaService {
        CaService { ca, authenticators, impersonation: None, metrics }
    }

    /// Also issues node agents the identities of their node's workloads,
    /// as `impersonation` allows (without it, every such request is refused).
    pub fn with_impersonation(mut self, impersonation: Impersonation) -> CaService {
        self.impersonation = Some(Arc::new(impersonation));
        self
    }

    /// The service ready for a tonic router.
    pub fn into_server(self) -> IstioCertificateServiceServer<CaService> {
        IstioCertificateServiceServer::new(self).max_decoding_message_size(MAX_REQUEST_BYTES)
    }
}

#[tonic::async_trait]
impl IstioCertificateService for CaService {
    async fn create_certificate(
        &self,
        request: Request<IstioCertificateRequest>,
    ) -> Result<Response<IstioCertificateResponse>, Status> {
        self.metrics.ca_requests.inc();
        let connection = request.extensions().get::<ConnectionContext>().cloned();
        let peer = connection.as_ref().and_then(|c| c.peer);
        let certificate = connection.as_ref().map(|c| c.transport.identities().to_vec()).unwrap_or_default();
        let authorization = request.metadata().get("authorization").and_then(|v| v.to_str().ok()).map(str::to_owned);
        let cluster = request.metadata().get(CLUSTER_ID_HEADER).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let authenticated =
            self.authenticators.authenticate_in(&certificate, authorization.as_deref(), cluster.as_deref()).await;
        let caller = match authenticated {
            Ok(caller) => caller,
            Err(e) => {
                self.metrics.ca_authentication_failures.inc();
                tracing::info!(?peer, "CA: refused an unauthenticated certificate request: {e}");
                return Err(Status::unauthenticated(format!("request authentication failure: {e}")));
            }
        };
        let request = request.into_inner();
        let held = match impersonation::requested(request.metadata.as_ref()) {
            None => caller.identities,
            Some(asked) => {
                let allowed = match &self.impersonation {
                    Some(impersonation) => impersonation.authorize(&caller, asked).await,
                    None => Err("this CA issues no certificate for another identity".to_string()),
                };
                match allowed {
                    Ok(identity) => vec![identity],
                    Err(why) => {
                        self.metrics.ca_authentication_failures.inc();
                        let by = caller.identities.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
                        tracing::warn!(?peer, caller = %by, asked = %Shown(asked), "CA: refused an impersonation: {why}");
                        return Err(Status::permission_denied(format!("impersonation refused: {why}")));
                    }
                }
            }
        };
        let ttl = Duration::from_secs(u64::try_from(request.validity_duration).unwrap_or(0));
        let ca = self.ca.clone();
        let caller = held.clone();
        // Signing is CPU work (an RSA signer takes milliseconds).
        let signed = tokio::task::spawn_blocking(move || ca.sign_workload(&request.csr, &held, ttl))
            .await
            .map_err(|e| Status::internal(format!("signing failed: {e}")))?;
        let ids = caller.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
        match signed {
            Ok(issued) => {
                self.metrics.ca_issued.inc();
                tracing::debug!(?peer, identities = %ids, "CA: issued a workload certificate");
                Ok(Response::new(IstioCertificateResponse { cert_chain: issued.chain }))
            }
            Err(e) => {
                self.metrics.ca_sign_errors.inc();
                tracing::info!(?peer, identities = %ids, "CA: refused a certificate request: {e}");
                Err(match e {
                    SignError::NotHeld { .. } | SignError::NoIdentity => Status::permission_denied(e.to_string()),
                    SignError::BadCsr(_) | SignError::Ttl { .. } => Status::invalid_argument(e.to_string()),
                    SignError::Expired | SignError::Signing(_) => Status::internal(e.to_string()),
                })
            }
        }
    }
}
