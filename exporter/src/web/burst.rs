//! Warnings that come in bursts, logged as counts.
//!
//! A refused scrape (`--web.max-requests`), a handler timeout or a refused password check is
//! worth a warning, but a burst of them must not write one line each. A [`BurstLog`] writes the
//! first event of a quiet period at once, counts the others, and writes the count when the
//! interval after the last written line ends (from a timer on the tokio runtime, or at the next
//! event or when the log is dropped when there is no runtime). Under a sustained burst that is one
//! line per interval.
//!
//! It does not know what the events are: the caller gives the first line's text per event, and
//! the summary's text as a function of the count and the interval.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How often a burst is summed up in the log.
pub(crate) const BURST_LOG_INTERVAL: Duration = Duration::from_secs(10);

type Summary = Box<dyn Fn(u64, Duration) -> String + Send + Sync>;

pub(crate) struct BurstLog {
    interval: Duration,
    summary: Summary,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Events until then are counted, not written.
    quiet_until: Option<Instant>,
    /// Events counted and not written yet.
    counted: u64,
    /// A timer will write the count at `quiet_until`.
    timer: bool,
}

impl BurstLog {
    /// `summary(n, interval)` is the line for `n` events counted over `interval`.
    pub(crate) fn new(
        interval: Duration,
        summary: impl Fn(u64, Duration) -> String + Send + Sync + 'static,
    ) -> Arc<BurstLog> {
        Arc::new(BurstLog {
            interval,
            summary: Box::new(summary),
            state: Mutex::new(State::default()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One event: written as `first()` at level `warn` when the log is quiet, counted otherwise.
    pub(crate) fn warn(self: &Arc<Self>, first: impl FnOnce() -> String) {
        let mut s = self.lock();
        let now = Instant::now();
        match s.quiet_until {
            Some(until) if now < until => {
                s.counted += 1;
                if !s.timer
                    && let Ok(rt) = tokio::runtime::Handle::try_current()
                {
                    s.timer = true;
                    let this = self.clone();
                    rt.spawn(async move {
                        tokio::time::sleep_until(tokio::time::Instant::from_std(until)).await;
                        this.flush();
                    });
                }
            }
            _ => {
                // A count left over when no timer could run.
                self.write_count(&mut s);
                // Formatted even when `warn` is off: once per interval at most.
                let line = first();
                log::warn!("{line}");
                s.quiet_until = Some(now + self.interval);
            }
        }
    }

    /// The timer: write what was counted; if anything was, stay quiet for another interval.
    fn flush(&self) {
        let mut s = self.lock();
        s.timer = false;
        if self.write_count(&mut s) {
            s.quiet_until = Some(Instant::now() + self.interval);
        }
    }

    fn write_count(&self, s: &mut State) -> bool {
        if s.counted == 0 {
            return false;
        }
        let line = (self.summary)(s.counted, self.interval);
        log::warn!("{line}");
        s.counted = 0;
        true
    }
}

impl Drop for BurstLog {
    fn drop(&mut self) {
        let mut s = self.lock();
        self.write_count(&mut s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts (first lines, summaries, sum of summarised counts) — without a logger: the texts
    /// are produced by closures that record what they were asked for.
    #[derive(Default)]
    struct Seen {
        firsts: u64,
        summaries: Vec<u64>,
    }

    fn log_with(seen: &Arc<Mutex<Seen>>, interval: Duration) -> Arc<BurstLog> {
        let s = seen.clone();
        BurstLog::new(interval, move |n, _| {
            s.lock().unwrap().summaries.push(n);
            format!("{n} more")
        })
    }

    fn event(log: &Arc<BurstLog>, seen: &Arc<Mutex<Seen>>) {
        log.warn(|| {
            seen.lock().unwrap().firsts += 1;
            "first".to_string()
        });
    }

    #[test]
    fn without_a_runtime_the_count_comes_with_the_next_event_or_the_drop() {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let log = log_with(&seen, Duration::from_millis(50));
        for _ in 0..232 {
            event(&log, &seen);
        }
        assert_eq!(seen.lock().unwrap().firsts, 1);
        assert!(seen.lock().unwrap().summaries.is_empty());
        std::thread::sleep(Duration::from_millis(80));
        event(&log, &seen);
        assert_eq!(seen.lock().unwrap().firsts, 2);
        assert_eq!(seen.lock().unwrap().summaries, [231]);
        event(&log, &seen);
        drop(log);
        assert_eq!(seen.lock().unwrap().summaries, [231, 1]);
    }

    #[tokio::test]
    async fn on_a_runtime_a_timer_writes_the_count_once_per_interval() {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let log = log_with(&seen, Duration::from_millis(100));
        for _ in 0..100 {
            event(&log, &seen);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while seen.lock().unwrap().summaries.is_empty() {
            assert!(Instant::now() < deadline, "no summary");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(seen.lock().unwrap().firsts, 1);
        assert_eq!(seen.lock().unwrap().summaries, [99]);
        // Still quiet for an interval after a count: the next event is counted, not written.
        event(&log, &seen);
        assert_eq!(seen.lock().unwrap().firsts, 1);
        while seen.lock().unwrap().summaries.len() < 2 {
            assert!(Instant::now() < deadline, "no second summary");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(seen.lock().unwrap().summaries, [99, 1]);
        // After a quiet interval, the next event is written at once again.
        tokio::time::sleep(Duration::from_millis(250)).await;
        event(&log, &seen);
        assert_eq!(seen.lock().unwrap().firsts, 2);
    }
}
