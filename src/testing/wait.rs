//! `wait_until`: the one way tests wait for something to happen.
//!
//! A test never sleeps and hopes: it polls a condition until it holds or a
//! deadline passes, and then fails saying what it waited for, what the
//! last attempt saw, and whatever the caller can add (process logs, a
//! config dump). The blocking form serves tests that drive real processes
//! from a plain thread; [`wait_until_async`] serves tests inside a tokio
//! runtime, whose condition may itself await. Both poll every
//! [`POLL`] and share [`Check`] and the failure message.

use std::future::Future;
use std::time::{Duration, Instant};

/// How often a condition is polled.
pub const POLL: Duration = Duration::from_millis(20);

/// What a condition returns: `bool`, or `Result<(), String>` whose error
/// says what the attempt saw (it goes into the timeout message).
pub trait Check {
    /// `Ok` when the condition holds.
    fn check(self) -> Result<(), String>;
}

impl Check for bool {
    fn check(self) -> Result<(), String> {
        if self { Ok(()) } else { Err(String::new()) }
    }
}

impl Check for Result<(), String> {
    fn check(self) -> Result<(), String> {
        self
    }
}

/// One poll's verdict: done (`Some(Ok)`), go on (`None`), or, once the
/// deadline has passed (`expired`, after `waited`), the failure message.
fn attempt(
    expired: bool,
    waited: Duration,
    what: &str,
    outcome: Result<(), String>,
    report: impl FnOnce() -> String,
) -> Option<Result<(), String>> {
    let seen = match outcome {
        Ok(()) => return Some(Ok(())),
        Err(seen) => seen,
    };
    if !expired {
        return None;
    }
    let seen = if seen.is_empty() { String::new() } else { format!("\nlast attempt: {seen}") };
    Some(Err(format!("timed out after {waited:?} waiting for {what}{seen}\n{}", report())))
}

/// Polls `cond` until it holds; at `deadline`, panics naming `what`, what
/// the last attempt saw, and `report()` (log tails, say; empty if nothing
/// more is known).
pub fn wait_until<C: Check>(
    deadline: Instant,
    what: &str,
    report: impl FnOnce() -> String,
    mut cond: impl FnMut() -> C,
) {
    let started = Instant::now();
    let mut report = Some(report);
    loop {
        let outcome = cond().check();
        let (expired, waited) = (Instant::now() >= deadline, started.elapsed());
        match attempt(expired, waited, what, outcome, || report.take().map(|r| r()).unwrap_or_default()) {
            Some(Ok(())) => return,
            Some(Err(message)) => panic!("{message}"),
            None => std::thread::sleep(POLL),
        }
    }
}

/// [`wait_until`] inside a tokio runtime: `cond` may await, the wait
/// between polls yields to the runtime, and the deadline is on tokio's
/// clock (a test with paused time waits in simulated time).
pub async fn wait_until_async<C, F>(deadline: impl Into<tokio::time::Instant>, what: &str, mut cond: impl FnMut() -> F)
where
    C: Check,
    F: Future<Output = C>,
{
    let (deadline, started) = (deadline.into(), tokio::time::Instant::now());
    loop {
        let outcome = cond().await.check();
        let (expired, waited) = (tokio::time::Instant::now() >= deadline, started.elapsed());
        match attempt(expired, waited, what, outcome, String::new) {
            Some(Ok(())) => return,
            Some(Err(message)) => panic!("{message}"),
            None => tokio::time::sleep(POLL).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    #[test]
    fn a_condition_that_comes_true_ends_the_wait() {
        let polls = Cell::new(0);
        wait_until(Instant::now() + Duration::from_secs(5), "the third poll", String::new, || {
            polls.set(polls.get() + 1);
            polls.get() == 3
        });
        assert_eq!(polls.get(), 3);
    }

    #[test]
    fn a_condition_that_never_holds_fails_with_what_it_saw() {
        let failure = std::panic::catch_unwind(|| {
            wait_until(Instant::now() + POLL, "the impossible", || "the logs".into(), || Err::<(), _>("nope".into()));
        })
        .expect_err("the wait must fail");
        let message = failure.downcast_ref::<String>().expect("a formatted message");
        for part in ["the impossible", "last attempt: nope", "the logs"] {
            assert!(message.contains(part), "{part:?} missing from {message:?}");
        }
    }

    #[tokio::test]
    async fn the_async_form_awaits_its_condition() {
        let polls = Cell::new(0);
        wait_until_async(Instant::now() + Duration::from_secs(5), "the second poll", || {
            polls.set(polls.get() + 1);
            let n = polls.get();
            async move {
                tokio::task::yield_now().await;
                n == 2
            }
        })
        .await;
        assert_eq!(polls.get(), 2);
    }
}
