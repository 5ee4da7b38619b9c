//! What a request knows of the connection it came on: set by the
//! connection that accepted it (`serve::connections`) as an HTTP request
//! extension, read by the ADS stream, the registry API and the CA.
//!
//! On the plaintext port a client is whoever its node says it is; on the
//! secure port the TLS handshake has verified its client certificate (if
//! it presented one) against the mesh root, and [`Transport::Mtls`] carries
//! the SPIFFE identities that certificate names. A client without one (a
//! new workload; ztunnel, always) proves who it is with a bearer token
//! instead, which the connection's [`TokenAuthenticator`] checks (the CA's
//! authenticators, set by `serve`: `xds` cannot import `ca`). What a token
//! proves is never folded into [`Transport::Mtls`], which the registry API
//! trusts for its writers: only a certificate writes the registry.

use std::net::SocketAddr;
use std::sync::Arc;

use futures::future::BoxFuture;

use super::admission::EntryPlace;
use super::drain::Drain;
use crate::model::Identity;

/// How a connection was secured.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Transport {
    /// Cleartext (`--xds-addr`): nothing about the client is proven.
    #[default]
    Plaintext,
    /// Mutual TLS (`--secure-xds-addr`): the identities of the client
    /// certificate the handshake verified; empty when it presented none.
    Mtls {
        /// The certificate's SPIFFE identities.
        identities: Arc<[Identity]>,
    },
}

impl Transport {
    /// The identities the client proved (none on plaintext, or without a certificate).
    pub fn identities(&self) -> &[Identity] {
        match self {
            Transport::Plaintext => &[],
            Transport::Mtls { identities } => identities,
        }
    }
}

/// Checks the bearer token of a secure-port client without a certificate.
pub trait TokenAuthenticator: std::fmt::Debug + Send + Sync {
    /// The identities the `authorization` header's token proves, or why it
    /// proves none (a message fit for the client: no token in it).
    fn authenticate<'a>(&'a self, authorization: &'a str) -> BoxFuture<'a, Result<Vec<Identity>, String>>;
}

/// What a request knows of the connection it came on.
#[derive(Debug, Clone)]
pub struct ConnectionContext {
    /// The client's address; `None` on a Unix socket.
    pub peer: Option<SocketAddr>,
    /// The connection's drain.
    pub drain: Drain,
    /// How the connection is secured, and what its client proved.
    pub transport: Transport,
    /// How a bearer token is checked on this connection (the secure port's;
    /// `None` on the plaintext port, where nothing is proven).
    pub tokens: Option<Arc<dyn TokenAuthenticator>>,
    /// The place among the unanswered streams the connection was admitted
    /// with, for its first stream to take over.
    pub place: EntryPlace,
}
