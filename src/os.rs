//! What the long-running commands ask of the operating system: Unix
//! sockets to listen on, the signals that end them, and the switches their
//! environment sets. `meshpush serve` and `meshpush agent` both use these,
//! so both behave alike when a socket file is left over, the process is
//! told to stop, or an Istio feature variable is set.

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

/// Binds the abstract Unix socket `name` (Linux: no file; it lives in the
/// network namespace, which a pod's containers share).
pub fn bind_abstract_unix(name: &str) -> io::Result<tokio::net::UnixListener> {
    use std::os::linux::net::SocketAddrExt as _;
    let address = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
    let listener = std::os::unix::net::UnixListener::bind_addr(&address)?;
    listener.set_nonblocking(true)?;
    tokio::net::UnixListener::from_std(listener)
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

/// A boolean switch as istiod and pilot-agent read their feature variables
/// (Go's `strconv.ParseBool`): `1`, `t`, `T`, `true`, `TRUE`, `True`, and
/// the same spellings of false.
pub fn parse_switch(value: &str) -> Result<bool, String> {
    match value {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err(format!("{value:?} is not a boolean (true, false, 1, 0, t, f)")),
    }
}

#[cfg(test)]
mod switch_test {
    #[test]
    fn switches_read_as_go_reads_them() {
        assert_eq!(super::parse_switch("True"), Ok(true));
        assert_eq!(super::parse_switch("0"), Ok(false));
        assert!(super::parse_switch("yes").is_err(), "Go refuses yes");
    }
}
