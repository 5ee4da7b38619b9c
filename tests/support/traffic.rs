//! Requests through Envoy, one at a time or as steady background traffic.
//!
//! Every request goes to a listener Envoy binds (a sidecar's outbound port in
//! NONE mode, a gateway's port) with the `Host` header that picks the route,
//! and counts as answered only when a test [`Backend`](super::backend::Backend)
//! answered 200 — its name is the `x-backend` header. Anything else (a refused
//! connection, a 503 from Envoy, a 404 for an unknown host) is a failure with
//! a description, so "no failed request" is a count that must stay zero.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::http;

/// Gap between two background requests: steady traffic (a few hundred
/// requests a second) that leaves the CPU to Envoy and meshpush on a
/// two-core machine.
const PACE: Duration = Duration::from_millis(2);

/// Background traffic stops by itself after this long, should a test forget it.
const LIMIT: Duration = Duration::from_secs(120);

/// Failures described in a [`Tally`]; later ones are only counted.
const KEPT_FAILURES: usize = 20;

/// One request: `GET path` to `target` with `Host: host` and `headers`.
#[derive(Debug, Clone)]
pub struct Request {
    /// The listener Envoy binds.
    pub target: SocketAddr,
    /// The `Host` header.
    pub host: String,
    /// The path.
    pub path: String,
    /// More headers.
    pub headers: Vec<(String, String)>,
}

impl Request {
    /// `GET /` to `target` with `Host: host`.
    pub fn new(target: SocketAddr, host: &str) -> Request {
        Request { target, host: host.to_string(), path: "/".to_string(), headers: Vec::new() }
    }

    /// The same request for `path`.
    pub fn path(mut self, path: &str) -> Request {
        self.path = path.to_string();
        self
    }

    /// The same request with header `name: value` added.
    pub fn header(mut self, name: &str, value: &str) -> Request {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    /// Sends it: the name of the backend that answered 200, or what went wrong.
    pub fn send(&self) -> Result<String, String> {
        let mut headers: Vec<(&str, &str)> = vec![("host", &self.host)];
        headers.extend(self.headers.iter().map(|(n, v)| (n.as_str(), v.as_str())));
        let what = || format!("GET {} Host {} via {}", self.path, self.host, self.target);
        let r = http::get(self.target, &self.path, &headers).map_err(|e| format!("{}: {e}", what()))?;
        match r.header("x-backend") {
            Some(backend) if r.status == 200 => {
                if r.header("x-request-path") != Some(&self.path) {
                    return Err(format!("{}: {backend} saw path {:?}", what(), r.header("x-request-path")));
                }
                Ok(backend.to_string())
            }
            _ => Err(format!("{}: {} {}", what(), r.status, r.body.trim())),
        }
    }

    /// Sends it `n` times: how many answers came from each backend, or the first failure.
    pub fn sample(&self, n: usize) -> Result<BTreeMap<String, u64>, String> {
        let mut seen = BTreeMap::new();
        for i in 0..n {
            let backend = self.send().map_err(|e| format!("request {} of {n}: {e}", i + 1))?;
            *seen.entry(backend).or_insert(0) += 1;
        }
        Ok(seen)
    }

    /// `Ok` when `n` requests in a row are all answered by backends in `expected`.
    pub fn all_answered_by(&self, n: usize, expected: &[&str]) -> Result<(), String> {
        let seen = self.sample(n)?;
        if seen.keys().all(|b| expected.contains(&b.as_str())) {
            Ok(())
        } else {
            Err(format!("{n} requests for Host {} answered by {seen:?}, expected only {expected:?}", self.host))
        }
    }
}

/// What background traffic saw.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    /// Requests sent (and finished).
    pub sent: u64,
    /// Requests a backend answered with 200, by backend.
    pub answered: BTreeMap<String, u64>,
    /// Requests that failed.
    pub failed: u64,
    /// The first failures, described.
    pub failures: Vec<String>,
}

impl Tally {
    /// Requests answered by `backend`.
    pub fn answered_by(&self, backend: &str) -> u64 {
        self.answered.get(backend).copied().unwrap_or(0)
    }
}

/// Requests sent in a loop from a thread of its own until stopped.
pub struct Traffic {
    request: Request,
    stop: Arc<AtomicBool>,
    tally: Arc<Mutex<Tally>>,
    thread: Option<JoinHandle<()>>,
}

impl Traffic {
    /// Starts sending `request` every [`PACE`] (for at most [`LIMIT`]).
    pub fn start(request: Request) -> Traffic {
        let stop = Arc::new(AtomicBool::new(false));
        let tally = Arc::new(Mutex::new(Tally::default()));
        let thread = {
            let (request, stop, tally) = (request.clone(), stop.clone(), tally.clone());
            thread::Builder::new()
                .name(format!("traffic-{}", request.host))
                .spawn(move || {
                    let until = Instant::now() + LIMIT;
                    while !stop.load(Ordering::SeqCst) && Instant::now() < until {
                        let outcome = request.send();
                        let mut t = tally.lock();
                        t.sent += 1;
                        match outcome {
                            Ok(backend) => *t.answered.entry(backend).or_insert(0) += 1,
                            Err(e) => {
                                t.failed += 1;
                                if t.failures.len() < KEPT_FAILURES {
                                    t.failures.push(e);
                                }
                            }
                        }
                        drop(t);
                        thread::sleep(PACE);
                    }
                })
                .expect("spawn the traffic thread")
        };
        Traffic { request, stop, tally, thread: Some(thread) }
    }

    /// The request it sends.
    pub fn request(&self) -> &Request {
        &self.request
    }

    /// What it saw so far.
    pub fn tally(&self) -> Tally {
        self.tally.lock().clone()
    }

    /// Requests sent so far.
    pub fn sent(&self) -> u64 {
        self.tally.lock().sent
    }

    /// Stops and returns what it saw.
    pub fn stop(mut self) -> Tally {
        self.halt();
        self.tally()
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Traffic {
    fn drop(&mut self) {
        self.halt();
    }
}
