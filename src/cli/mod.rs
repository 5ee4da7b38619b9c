//! The operator commands that talk to a running meshpush: `proxy-status` and
//! `proxy-config` through its admin address, shaped like `istioctl`'s, and
//! `apply`/`delete` through its registry API, shaped like `kubectl`'s;
//! `jwt`, which makes service-account tokens for a mesh without
//! Kubernetes; and `create-remote-secret`, which reads a remote cluster's
//! reader token through its API and prints the Secret a primary reads it by.
//!
//! They read only the admin JSON endpoints (`/debug/syncz`,
//! `/debug/config_dump`), so they work against any meshpush an operator can
//! reach over HTTP, and what they print is exactly what those endpoints say.

pub mod admin_client;
pub mod apply;
pub mod jwt;
pub mod proxy_config;
pub mod proxy_status;
pub mod remote_secret;
pub mod table;

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The admin address could not be reached or answered garbage.
    #[error("admin {addr}: {reason}")]
    Admin {
        /// The address tried.
        addr: String,
        /// What went wrong.
        reason: String,
    },
    /// The admin endpoint answered with an error status.
    #[error("admin {addr}{path}: HTTP {status}: {body}")]
    Status {
        /// The address.
        addr: String,
        /// The path requested.
        path: String,
        /// HTTP status.
        status: u16,
        /// The error text.
        body: String,
    },
}
