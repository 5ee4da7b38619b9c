//! A minimal HTTP/1.1 GET against the admin address, for the CLI.
//!
//! One request per connection (`connection: close`), bodies framed by
//! `content-length`, chunked encoding or end of stream. The admin endpoints
//! are plain JSON over HTTP/1.1 on a trusted address, so a client library
//! would add nothing but build time.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use super::CliError;

/// How long a connect, write or read may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// `GET path` from the admin address `addr` (`host:port`); the body of a 2xx answer.
pub fn get(addr: &str, path: &str) -> Result<String, CliError> {
    let fail = |reason: String| CliError::Admin { addr: addr.to_string(), reason };
    let target = addr
        .to_socket_addrs()
        .map_err(|e| fail(format!("not a host:port ({e})")))?
        .next()
        .ok_or_else(|| fail("resolves to no address".into()))?;
    let mut stream = TcpStream::connect_timeout(&target, TIMEOUT)
        .map_err(|e| fail(format!("{e} (is meshpush serving with --admin-addr {addr}?)")))?;
    stream.set_read_timeout(Some(TIMEOUT)).map_err(|e| fail(e.to_string()))?;
    stream.set_write_timeout(Some(TIMEOUT)).map_err(|e| fail(e.to_string()))?;
    write!(stream, "GET {path} HTTP/1.1\r\nhost: {addr}\r\naccept: application/json\r\nconnection: close\r\n\r\n")
        .map_err(|e| fail(e.to_string()))?;

    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).map_err(|e| fail(e.to_string()))?;
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| fail(format!("not an HTTP response: {:?}", line.trim())))?;
    let (mut length, mut chunked) = (None, false);
    loop {
        line.clear();
        reader.read_line(&mut line).map_err(|e| fail(e.to_string()))?;
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            let value = value.trim();
            if name.eq_ignore_ascii_case("content-length") {
                length = value.parse::<usize>().ok();
            } else if name.eq_ignore_ascii_case("transfer-encoding") && value.eq_ignore_ascii_case("chunked") {
                chunked = true;
            }
        }
    }
    let body = if chunked {
        read_chunked(&mut reader).map_err(|e| fail(e.to_string()))?
    } else if let Some(n) = length {
        let mut body = vec![0; n];
        reader.read_exact(&mut body).map_err(|e| fail(e.to_string()))?;
        body
    } else {
        let mut body = Vec::new();
        reader.read_to_end(&mut body).map_err(|e| fail(e.to_string()))?;
        body
    };
    let body = String::from_utf8_lossy(&body).into_owned();
    if !(200..300).contains(&status) {
        return Err(CliError::Status { addr: addr.to_string(), path: path.to_string(), status, body });
    }
    Ok(body)
}

fn read_chunked(reader: &mut impl BufRead) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut size = String::new();
        reader.read_line(&mut size)?;
        let size = usize::from_str_radix(size.trim().split(';').next().unwrap_or_default(), 16)
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "bad chunk size"))?;
        if size == 0 {
            return Ok(body);
        }
        let start = body.len();
        body.resize(start + size, 0);
        reader.read_exact(&mut body[start..])?;
        let mut crlf = [0; 2];
        reader.read_exact(&mut crlf)?;
    }
}

/// Percent-encodes a query value (node ids contain `~` and `|`-free text, but be safe).
pub fn encode_query(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(b as char),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}
