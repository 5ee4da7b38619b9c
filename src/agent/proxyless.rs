//! What the agent keeps for a proxyless gRPC application: gRPC's bootstrap
//! (written once, `crate::bootstrap::grpc`), the socket it dials for xDS,
//! and the certificate files its `file_watcher` provider reads, rewritten
//! whenever the certificate is renewed or the mesh roots change.
//!
//! The socket is an abstract Unix socket ([`xds_socket_name`]), not the
//! `XDS` file Envoy dials: gRPC's C-core clients (C++, Python) send a Unix
//! socket's path, percent-encoded, as the HTTP/2 `:authority`, which is not
//! an authority, and Rust's HTTP/2 server refuses the stream as malformed.
//! An abstract socket's name is one word, a valid authority. It lives in
//! the network namespace, which a pod's containers share; it is served as
//! the `XDS` file is (the agent's ADS proxy), and carries configuration,
//! no secret.
//!
//! The files are Istio's (`OUTPUT_CERTS`): `cert-chain.pem`, `key.pem`,
//! `root-cert.pem`. Each is written whole to a temporary file and renamed
//! over the old one, so gRPC never reads half a file, and only when its
//! content changed. The key is readable by its owner only (mode 0600),
//! except in a Kubernetes pod, where the application container runs as
//! another user of the pod and the directory is the pod's own volume
//! (0644, as pilot-agent writes it there).
//!
//! Invariant: the key's bytes go to `key.pem` and nowhere else (no log,
//! no error message).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::watch;

use super::certificate::WorkloadCert;
use super::trust_bundle::TrustBundle;
use crate::bootstrap::grpc::{CERTIFICATE_CHAIN_FILE, PRIVATE_KEY_FILE, ROOT_CERTIFICATE_FILE};

/// The abstract socket a proxyless application dials for xDS, for the
/// agent whose socket directory is `socket_dir`: one word, unique per
/// directory (several agents may share a network namespace).
pub fn xds_socket_name(socket_dir: &Path) -> String {
    let absolute = std::path::absolute(socket_dir).unwrap_or_else(|_| socket_dir.to_path_buf());
    let hash = xxhash_rust::xxh3::xxh3_64(absolute.as_os_str().as_encoded_bytes());
    format!("meshpush-grpc-xds-{hash:016x}")
}

/// The workload's certificate files in one directory.
#[derive(Debug, Clone)]
pub struct CertificateFiles {
    dir: PathBuf,
    key_mode: u32,
}

impl CertificateFiles {
    /// The files in `dir` (created if missing), the key's mode chosen as
    /// pilot-agent chooses it (see the module doc).
    pub fn new(dir: &Path) -> std::io::Result<CertificateFiles> {
        std::fs::create_dir_all(dir)?;
        let in_kubernetes = std::env::var_os("KUBERNETES_SERVICE_HOST").is_some();
        Ok(CertificateFiles { dir: dir.to_path_buf(), key_mode: if in_kubernetes { 0o644 } else { 0o600 } })
    }

    /// Writes `cert`'s chain and key and the roots (its own and `bundle`'s),
    /// each only if it changed; nothing before the first certificate.
    pub fn write(&self, cert: Option<&WorkloadCert>, bundle: &TrustBundle) -> std::io::Result<()> {
        let Some(cert) = cert else { return Ok(()) };
        // The key before the chain: a provider that reads between the two
        // renames sees a pair that does not match and keeps the one it has.
        self.update(PRIVATE_KEY_FILE, cert.key_pem().as_bytes(), self.key_mode)?;
        self.update(CERTIFICATE_CHAIN_FILE, cert.chain_pem().as_bytes(), 0o644)?;
        self.update(ROOT_CERTIFICATE_FILE, bundle.with_roots(cert.roots_pem()).as_bytes(), 0o644)
    }

    /// Rewrites the files whenever the certificate or the roots change,
    /// until the agent ends.
    pub async fn keep_written(
        self,
        mut current: watch::Receiver<Option<Arc<WorkloadCert>>>,
        mut bundle: watch::Receiver<Arc<TrustBundle>>,
    ) {
        loop {
            tokio::select! {
                changed = current.changed() => if changed.is_err() { return },
                changed = bundle.changed() => if changed.is_err() { return },
            }
            let cert = current.borrow_and_update().clone();
            let roots = bundle.borrow_and_update().clone();
            match self.write(cert.as_deref(), &roots) {
                Ok(()) => tracing::info!(dir = %self.dir.display(), "rewrote the workload's certificate files"),
                Err(e) => tracing::error!(dir = %self.dir.display(), "writing the workload's certificate files: {e}"),
            }
        }
    }

    /// Writes `name` when its content differs from `bytes`.
    fn update(&self, name: &str, bytes: &[u8], mode: u32) -> std::io::Result<()> {
        let path = self.dir.join(name);
        if std::fs::read(&path).is_ok_and(|old| old == bytes) {
            return Ok(());
        }
        write_file(&path, bytes, mode)
    }
}

/// Writes `path` whole, with `mode`: a temporary file beside it, renamed
/// over it.
pub fn write_file(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let temporary = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let result = (|| {
        let mut file =
            std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(mode).open(&temporary)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        // `mode` above is masked by the umask: set it as asked.
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&temporary, std::fs::Permissions::from_mode(mode))?;
        std::fs::rename(&temporary, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_replaced_whole_with_its_mode() {
        let dir = std::env::temp_dir().join(format!("meshpush-proxyless-{}", std::process::id()));
        let path = dir.join("key.pem");
        write_file(&path, b"one", 0o600).unwrap();
        write_file(&path, b"two", 0o600).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let leftovers: Vec<_> = std::fs::read_dir(&dir).unwrap().filter_map(Result::ok).collect();
        assert_eq!(leftovers.len(), 1, "no temporary file left behind");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
