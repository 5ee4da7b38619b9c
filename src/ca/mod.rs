//! The mesh's certificate authority, as istiod is one: it signs workload
//! certificates that name SPIFFE identities, and secures the port that
//! serves ADS, the CA itself and the registry API.
//!
//! * [`authority`]: the signing key and root (Istio's plug-in CA layout,
//!   or a self-signed root it creates), and how a certificate is made.
//! * [`keys`]: private keys in the PEM forms operators have.
//! * [`authn`]: which identities a caller holds — its current certificate,
//!   a JWT checked against a JWKS file, or a Kubernetes TokenReview — and
//!   the Pod a token is bound to. The same authenticators check the bearer
//!   tokens of ADS clients without a certificate (ztunnel).
//! * [`impersonation`]: when a node agent (ztunnel) may hold the
//!   certificates of the workloads on its node.
//! * [`service`]: `istio.v1.auth.IstioCertificateService`, Istio's CSR API.
//! * [`tls`]: the secure port's serving certificate and client verification.
//!
//! Trust: the CA signs only identities the caller proved, or, for a trusted
//! node agent, those of Pods on its node; the signing key never leaves
//! [`authority::CertificateAuthority`] (no `Debug`, log or error shows it).
//! The CA reads Pods from the push engine's published snapshot, and
//! nothing else of it; the streams read what a connection proved from
//! [`ConnectionContext`](crate::xds::stream::peer::ConnectionContext).

pub mod authn;
pub mod authority;
pub mod impersonation;
pub mod keys;
pub mod service;
pub mod tls;

pub use authn::Authenticators;
pub use authority::{CaMaterial, CertificateAuthority, Lifetimes};
pub use impersonation::Impersonation;
pub use service::CaService;
pub use tls::ServerTls;
