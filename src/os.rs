//! What the long-running commands ask of the operating system: Unix
//! sockets to listen on and the signals that end them. `meshpush serve`
//! and `meshpush agent` both use these, so both behave alike when a socket
//! file is left over or the process is told to stop.

use std::io;
use std::path::Path;

/// Binds a Unix socket at `path`. A socket file nobody accepts on (left by a
/// server that was killed) is replaced; anything else at `path` is an error.
pub fn bind_unix(path: &Path) -> io::Result<tokio::net::UnixListener> {
    use std::os::unix::fs::FileTypeExt as _;
    match tokio::net::UnixListener::bind(path) {
        Err(e)
            if e.kind() == io::ErrorKind::AddrInUse
                && std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket())
                && std::os::unix::net::UnixStream::connect(path).is_err() =>
        {
            std::fs::remove_file(path)?;
            tokio::net::UnixListener::bind(path)
        }
        other => other,
    }
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("installing a SIGTERM handler");
    tokio::select! {
        _ = ctrl_c => {}
        _ = term.recv() => {}
    }
}
