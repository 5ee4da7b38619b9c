//! What the admin port lets its clients take.
//!
//! Three limits, checked in this order for every expensive view (the ones
//! that walk every stream or generate config):
//!
//! - at most `max_concurrent` requests of any kind at once (then 503);
//! - per client address, `per_client_per_second` expensive views a second,
//!   `per_client_burst` at once (then 429), so one busy poller cannot take
//!   the admin port from the others;
//! - across all clients, the expensive views may keep the admin thread busy
//!   for at most `render_time_per_second` of each second (then 503 with
//!   `Retry-After`): however many clients poll, the admin port takes a
//!   bounded share of a core from the xDS workers. The time is wall time of
//!   answering, on a thread of lower priority than the xDS workers: when
//!   they are busy, an answer takes longer and the budget runs out sooner,
//!   so the admin port backs off exactly when the push path needs the CPU.

use std::time::{Duration, Instant};

/// The admin port's limits ([module docs](self)).
#[derive(Debug, Clone, Copy)]
pub struct AdminLimits {
    /// Requests served at once at most; more are answered 503.
    pub max_concurrent: usize,
    /// Expensive views one client address may ask for per second (then
    /// 429); 0: no limit.
    pub per_client_per_second: u32,
    /// Expensive views one client may ask for at once after a quiet spell.
    pub per_client_burst: u32,
    /// Time the expensive views may take per second, all clients together.
    pub render_time_per_second: Duration,
}

impl Default for AdminLimits {
    fn default() -> Self {
        Self {
            max_concurrent: 32,
            per_client_per_second: 20,
            per_client_burst: 40,
            render_time_per_second: Duration::from_millis(100),
        }
    }
}

/// A budget of answering time, refilled at `per_second` each second up to
/// [`RenderBudget::BURST_SECONDS`] seconds' worth.
///
/// An answer is admitted while the balance is positive and its time is
/// taken afterwards (the cost of a view is known only once it is built), so
/// the balance may go negative: one long answer is paid for by the
/// refusals that follow it.
#[derive(Debug)]
pub struct RenderBudget {
    per_second: Duration,
    state: std::sync::Mutex<Balance>,
}

#[derive(Debug)]
struct Balance {
    /// Seconds of answering time available; negative while in debt.
    seconds: f64,
    at: Instant,
}

impl RenderBudget {
    /// How many seconds' worth of budget may accumulate in a quiet spell.
    pub const BURST_SECONDS: f64 = 2.0;

    /// A full budget of `per_second` a second. A zero budget admits everything.
    pub fn new(per_second: Duration) -> Self {
        let seconds = per_second.as_secs_f64() * Self::BURST_SECONDS;
        Self { per_second, state: std::sync::Mutex::new(Balance { seconds, at: Instant::now() }) }
    }

    /// Whether an answer may be built now; if not, how long until it may.
    pub fn admit(&self, now: Instant) -> Result<(), Duration> {
        if self.per_second.is_zero() {
            return Ok(());
        }
        let mut balance = self.lock();
        self.refill(&mut balance, now);
        if balance.seconds > 0.0 {
            Ok(())
        } else {
            let rate = self.per_second.as_secs_f64();
            Err(Duration::from_secs_f64(-balance.seconds / rate).max(Duration::from_millis(1)))
        }
    }

    /// Takes `spent` (an admitted answer's time) from the budget.
    pub fn spend(&self, spent: Duration, now: Instant) {
        if self.per_second.is_zero() {
            return;
        }
        let mut balance = self.lock();
        self.refill(&mut balance, now);
        balance.seconds -= spent.as_secs_f64();
    }

    fn refill(&self, balance: &mut Balance, now: Instant) {
        let rate = self.per_second.as_secs_f64();
        let elapsed = now.saturating_duration_since(balance.at).as_secs_f64();
        balance.seconds = (balance.seconds + elapsed * rate).min(rate * Self::BURST_SECONDS);
        balance.at = balance.at.max(now);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Balance> {
        // The balance is two numbers always left consistent: a panic
        // elsewhere while holding the lock cannot have broken it.
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spent_budget_refuses_until_the_debt_is_refilled() {
        let start = Instant::now();
        let budget = RenderBudget::new(Duration::from_millis(100));
        assert!(budget.admit(start).is_ok());
        // One answer of 500 ms: 200 ms of burst, 300 ms of debt.
        budget.spend(Duration::from_millis(500), start);
        let wait = budget.admit(start).unwrap_err();
        assert!((wait.as_secs_f64() - 3.0).abs() < 0.01, "{wait:?}");
        assert!(budget.admit(start + Duration::from_millis(2900)).is_err());
        assert!(budget.admit(start + Duration::from_millis(3100)).is_ok());
    }

    #[test]
    fn a_quiet_spell_fills_the_budget_only_up_to_the_burst() {
        let start = Instant::now();
        let budget = RenderBudget::new(Duration::from_millis(100));
        let later = start + Duration::from_secs(60);
        // After a minute, 200 ms are available, not 6 s.
        budget.spend(Duration::from_millis(199), later);
        assert!(budget.admit(later).is_ok());
        budget.spend(Duration::from_millis(2), later);
        assert!(budget.admit(later).is_err());
    }

    #[test]
    fn a_zero_budget_admits_everything() {
        let now = Instant::now();
        let budget = RenderBudget::new(Duration::ZERO);
        budget.spend(Duration::from_secs(10), now);
        assert!(budget.admit(now).is_ok());
    }
}
