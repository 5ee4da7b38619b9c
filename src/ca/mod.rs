//! The mesh's certificate authority, as istiod is one: it signs workload
//! certificates that name SPIFFE identities, and secures the port that
//! serves ADS, the CA itself and the registry API.
//!
//! * [`authority`]: the signing key and root (Istio's plug-in CA layout,
//!   or a self-signed root it creates), and how a certificate is made.
//! * [`keys`]: private keys in the PEM forms operators have.
//! * [`authn`]: which identities a caller holds — its current certificate,
//!   a JWT checked against a JWKS file, or a Kubernetes TokenReview.
//! * [`service`]: `istio.v1.auth.IstioCertificateService`, Istio's CSR API.
//! * [`tls`]: the secure port's serving certificate and client verification.
//!
//! Trust: the CA signs only identities the caller proved, and the signing
//! key never leaves [`authority::CertificateAuthority`] (no `Debug`, log or
//! error shows it). The CA knows nothing of the push engine; the streams
//! read what a connection proved from
//! [`Transport`](crate::xds::stream::peer::Transport).

pub mod authn;
pub mod authority;
pub mod keys;
pub mod service;
pub mod tls;

pub use authn::Authenticators;
pub use authority::{CaMaterial, CertificateAuthority, Lifetimes};
pub use service::CaService;
pub use tls::ServerTls;
