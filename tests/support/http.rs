//! A minimal HTTP/1.1 client, and the message parsing the test backends share.
//!
//! Tests need exact control over what goes on the wire — the `Host` header picks
//! the virtual host in Envoy — and nothing more than one request per connection,
//! so this is a few dozen lines over `std::net` rather than a client library.
//! It speaks over TCP or over a Unix domain socket (an Envoy admin `pipe`).
//! Requests send `connection: close`; responses are read by `content-length`,
//! chunked encoding (Envoy's admin uses it) or to end of stream.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// Connect and read/write timeout for every request: loopback answers in
/// milliseconds, so a stuck peer is reported instead of hanging the test.
const TIMEOUT: Duration = Duration::from_secs(5);

/// A response, body decoded as (lossy) UTF-8.
#[derive(Debug, Clone)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Headers in order, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: String,
}

impl Response {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }
}

/// The first value of header `name` in `headers` (names lower-cased).
pub fn header<'h>(headers: &'h [(String, String)], name: &str) -> Option<&'h str> {
    let name = name.to_ascii_lowercase();
    headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str())
}

/// `GET path` from `addr` with extra `headers`. A `host` among them replaces the
/// default (`addr`).
pub fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> io::Result<Response> {
    request(addr, "GET", path, headers)
}

/// `GET path` from `addr`, waiting up to `timeout` for the answer.
pub fn get_within(addr: SocketAddr, path: &str, timeout: Duration) -> io::Result<Response> {
    let stream = TcpStream::connect_timeout(&addr, TIMEOUT)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(TIMEOUT))?;
    exchange(stream, &addr.to_string(), "GET", path, &[])
}

/// `METHOD path` from `addr` with extra `headers` (no body).
pub fn request(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)]) -> io::Result<Response> {
    let stream = TcpStream::connect_timeout(&addr, TIMEOUT)?;
    stream.set_read_timeout(Some(TIMEOUT))?;
    stream.set_write_timeout(Some(TIMEOUT))?;
    exchange(stream, &addr.to_string(), method, path, headers)
}

/// Asks `addr` to upgrade `GET path` (`Host: host`) to a websocket. Returns
/// the response head and, on `101 Switching Protocols`, the open connection
/// (the bytes after the head belong to the upgraded protocol).
pub fn upgrade(addr: SocketAddr, host: &str, path: &str) -> io::Result<(Head, BufReader<TcpStream>)> {
    let mut stream = TcpStream::connect_timeout(&addr, TIMEOUT)?;
    stream.set_read_timeout(Some(TIMEOUT))?;
    stream.set_write_timeout(Some(TIMEOUT))?;
    let request = format!(
        "GET {path} HTTP/1.1\r\nhost: {host}\r\nconnection: Upgrade\r\nupgrade: websocket\r\n\
         sec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
    );
    stream.write_all(request.as_bytes())?;
    let mut reader = BufReader::new(stream);
    let head = read_head(&mut reader)?.ok_or_else(|| invalid("connection closed before a response"))?;
    Ok((head, reader))
}

/// `GET path` over the Unix domain socket at `socket` (an Envoy admin `pipe`
/// address, say) with extra `headers`; the default `host` is `localhost`.
pub fn get_unix(socket: &Path, path: &str, headers: &[(&str, &str)]) -> io::Result<Response> {
    let stream = UnixStream::connect(socket)?;
    stream.set_read_timeout(Some(TIMEOUT))?;
    stream.set_write_timeout(Some(TIMEOUT))?;
    exchange(stream, "localhost", "GET", path, headers)
}

/// Sends one request on `stream` and reads the response.
pub fn exchange(
    mut stream: impl Read + Write,
    default_host: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> io::Result<Response> {
    let mut request = format!("{method} {path} HTTP/1.1\r\n");
    if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
        request.push_str(&format!("host: {default_host}\r\n"));
    }
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("connection: close\r\n\r\n");
    stream.write_all(request.as_bytes())?;

    let mut reader = BufReader::new(stream);
    let Head { start, headers } =
        read_head(&mut reader)?.ok_or_else(|| invalid("connection closed before a response"))?;
    let status = start
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| invalid(&format!("bad status line {start:?}")))?;
    let body = read_body(&mut reader, &headers, true)?;
    Ok(Response { status, headers, body: String::from_utf8_lossy(&body).into_owned() })
}

/// A message head.
#[derive(Debug, Clone)]
pub struct Head {
    /// The request or status line, without its line end.
    pub start: String,
    /// Headers in order, names lower-cased.
    pub headers: Vec<(String, String)>,
}

/// Reads a message head. `None` when the peer closed the connection cleanly
/// before sending anything.
pub fn read_head(reader: &mut impl BufRead) -> io::Result<Option<Head>> {
    let mut start = String::new();
    if reader.read_line(&mut start)? == 0 {
        return Ok(None);
    }
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Err(invalid("connection closed inside the headers"));
        }
        let line = line.trim_end_matches(['\r', '\n']);
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':').ok_or_else(|| invalid(&format!("bad header {line:?}")))?;
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
    }
    Ok(Some(Head { start: start.trim_end().to_string(), headers }))
}

/// Reads a message body framed by `headers`. Without `content-length` or chunked
/// encoding, a response runs to end of stream (`to_eof`) and a request is empty.
pub fn read_body(reader: &mut impl BufRead, headers: &[(String, String)], to_eof: bool) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    if header(headers, "transfer-encoding").is_some_and(|te| te.eq_ignore_ascii_case("chunked")) {
        loop {
            let mut size_line = String::new();
            reader.read_line(&mut size_line)?;
            let size_hex = size_line.trim().split(';').next().unwrap_or_default();
            let size =
                usize::from_str_radix(size_hex, 16).map_err(|_| invalid(&format!("bad chunk size {size_line:?}")))?;
            if size == 0 {
                // Trailers (none expected) end with an empty line.
                let mut line = String::new();
                while reader.read_line(&mut line)? > 0 && !line.trim().is_empty() {
                    line.clear();
                }
                return Ok(body);
            }
            let start = body.len();
            body.resize(start + size, 0);
            reader.read_exact(&mut body[start..])?;
            let mut crlf = [0u8; 2];
            reader.read_exact(&mut crlf)?;
        }
    }
    match header(headers, "content-length") {
        Some(len) => {
            let len: usize = len.parse().map_err(|_| invalid(&format!("bad content-length {len:?}")))?;
            body.resize(len, 0);
            reader.read_exact(&mut body)?;
        }
        None if to_eof => {
            reader.read_to_end(&mut body)?;
        }
        None => {}
    }
    Ok(body)
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}
