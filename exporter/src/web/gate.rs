//! Admission to bcrypt: a small, bounded, prioritised queue of password checks.
//!
//! bcrypt is slow on purpose, so a flood of guessed passwords could otherwise queue up without
//! bound in front of a valid client's first login (after a restart nobody is remembered). The
//! gate bounds and orders that queue:
//!
//! - at most `concurrency` checks run at once (on the blocking pool);
//! - at most `max_waiting` wait; at most `per_source` are waiting or running per source (an IPv4
//!   address, or an IPv6 /64). Over the per-source bound a check is refused at once
//!   ([`Refusal::SourceBusy`], answered 429); with the queue full, [`Refusal::Full`] (503);
//! - waiting checks are served by rank, then first come first served. A check's rank is the
//!   number of its source's checks that failed, counted until `failure_memory` passes without a
//!   failure (capped at [`MAX_RANK`]; a success resets it), plus the number of checks the source
//!   already had pending. A guessing source fails and sinks, so a client that has not failed
//!   passes every source that has, and the heaviest guessers come last. When
//!   the queue is full, a check evicts the newest waiting check of a worse rank (which gets
//!   [`Refusal::Full`]), or is refused if there is none.
//!
//! A client sharing its address with a flood cannot be told apart from it before bcrypt: it is
//! answered (a check or a refusal), not served first. Neither can a wave of first checks from many
//! new sources: until they fail, they rank with a valid client.
//!
//! The source table is bounded (`max_sources`): entries with nothing pending are forgotten, the
//! oldest failures first, when it is full. Cancelled checks (a request that times out or whose
//! client goes away) leave the queue; a running check keeps its slot until bcrypt returns.
//!
//! It does not run bcrypt or know about HTTP: [`Gate::acquire`] hands out a [`Slot`], the caller
//! runs the check while holding it and reports the result with [`Gate::record`].

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// Bounds of the gate; see the module documentation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) concurrency: usize,
    pub(crate) max_waiting: usize,
    pub(crate) per_source: usize,
    pub(crate) failure_memory: Duration,
    pub(crate) max_sources: usize,
}

impl Limits {
    /// The server's limits: half the cores (1 to 4) run bcrypt, 32 wait, 4 per source, failures
    /// remembered for a minute, 4096 sources.
    pub(crate) fn for_this_machine() -> Limits {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Limits {
            concurrency: (cores / 2).clamp(1, 4),
            max_waiting: 32,
            per_source: 4,
            failure_memory: Duration::from_secs(60),
            max_sources: 4096,
        }
    }
}

/// Why a check was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The source already has `per_source` checks waiting or running.
    SourceBusy,
    /// The queue is full (or this check was evicted by one of a source that has not failed).
    Full,
}

/// A source of requests: an IPv4 address or an IPv6 /64 (IPv4-mapped IPv6 counts as IPv4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct SourceKey(u128);

impl SourceKey {
    pub(crate) fn of(ip: IpAddr) -> SourceKey {
        // IPv4 as its IPv4-mapped IPv6 address, whose low 64 bits are never zero; IPv6 as its
        // /64 with the low 64 bits zero: the two never collide.
        match ip.to_canonical() {
            IpAddr::V4(v4) => SourceKey(u128::from(v4.to_ipv6_mapped())),
            IpAddr::V6(v6) => SourceKey(u128::from(v6) & !(u128::from(u64::MAX))),
        }
    }
}

/// The highest rank: sources with this many recent failures or more are served last, in order.
pub(crate) const MAX_RANK: u32 = 1000;

struct Waiter {
    source: SourceKey,
    notify: Arc<Notify>,
}

#[derive(Default)]
struct Source {
    /// Checks waiting or running.
    pending: usize,
    /// Failed checks since the last success, while they are less than `failure_memory` apart.
    failures: u32,
    last_failure: Option<Instant>,
}

impl Source {
    fn rank(&self, now: Instant, memory: Duration) -> u32 {
        match self.last_failure {
            Some(t) if now.saturating_duration_since(t) < memory => self.failures.min(MAX_RANK),
            _ => 0,
        }
    }
}

#[derive(Default)]
struct State {
    running: usize,
    next_seq: u64,
    /// Waiting checks in serving order: (rank, arrival).
    waiting: BTreeMap<(u32, u64), Waiter>,
    /// Admitted from the queue, not yet picked up by their waiter.
    granted: HashSet<u64>,
    /// Evicted from the queue, not yet told.
    evicted: HashSet<u64>,
    sources: HashMap<SourceKey, Source>,
}

/// The queue in front of bcrypt. Shared (`Arc`) by every request.
pub(crate) struct Gate {
    limits: Limits,
    state: Mutex<State>,
}

/// The right to run one check; dropping it lets the next one in.
pub(crate) struct Slot {
    gate: Arc<Gate>,
    source: SourceKey,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut s = self.gate.lock();
        s.running -= 1;
        Gate::release_source(&mut s, self.source);
        self.gate.dispatch(&mut s);
    }
}

/// A check in the queue; dropping it before it is admitted (cancellation) removes it.
struct Ticket<'a> {
    gate: &'a Arc<Gate>,
    key: (u32, u64),
    source: SourceKey,
    done: bool,
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut s = self.gate.lock();
        let seq = self.key.1;
        if s.waiting.remove(&self.key).is_some() {
            Gate::release_source(&mut s, self.source);
        } else if s.granted.remove(&seq) {
            // Admitted but never picked up: give the slot back.
            s.running -= 1;
            Gate::release_source(&mut s, self.source);
            self.gate.dispatch(&mut s);
        } else {
            // Evicted: its source was released then.
            s.evicted.remove(&seq);
        }
    }
}

impl Gate {
    pub(crate) fn new(limits: Limits) -> Arc<Gate> {
        Arc::new(Gate {
            limits: Limits {
                concurrency: limits.concurrency.max(1),
                max_waiting: limits.max_waiting,
                per_source: limits.per_source.max(1),
                ..limits
            },
            state: Mutex::new(State::default()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn release_source(s: &mut State, source: SourceKey) {
        if let Some(src) = s.sources.get_mut(&source) {
            src.pending = src.pending.saturating_sub(1);
        }
    }

    /// Admit waiting checks while slots are free.
    fn dispatch(&self, s: &mut State) {
        while s.running < self.limits.concurrency {
            let Some(((_, seq), waiter)) = s.waiting.pop_first() else {
                break;
            };
            s.running += 1;
            s.granted.insert(seq);
            waiter.notify.notify_one();
        }
    }

    /// Make room in the source table (below `max_sources`): forget sources with nothing pending,
    /// those without a recent failure first.
    fn prune(&self, s: &mut State, now: Instant) {
        if s.sources.len() < self.limits.max_sources {
            return;
        }
        let memory = self.limits.failure_memory;
        s.sources
            .retain(|_, src| src.pending > 0 || src.rank(now, memory) > 0);
        if s.sources.len() >= self.limits.max_sources {
            s.sources.retain(|_, src| src.pending > 0);
        }
    }

    /// Wait for a slot to check a password from `ip`, or be refused at once.
    pub(crate) async fn acquire(self: &Arc<Self>, ip: IpAddr) -> Result<Slot, Refusal> {
        let source = SourceKey::of(ip);
        let (key, notify) = {
            let mut s = self.lock();
            let now = Instant::now();
            if !s.sources.contains_key(&source) {
                self.prune(&mut s, now);
            }
            let memory = self.limits.failure_memory;
            let src = s.sources.entry(source).or_default();
            if src.pending >= self.limits.per_source {
                return Err(Refusal::SourceBusy);
            }
            let rank = src.rank(now, memory) + src.pending as u32;
            src.pending += 1;
            if s.running < self.limits.concurrency && s.waiting.is_empty() {
                s.running += 1;
                return Ok(Slot {
                    gate: self.clone(),
                    source,
                });
            }
            if s.waiting.len() >= self.limits.max_waiting {
                // Room at the expense of the newest check of the worst rank, if worse.
                let victim = s
                    .waiting
                    .last_key_value()
                    .map(|(k, _)| *k)
                    .filter(|&(worst, _)| worst > rank);
                match victim.and_then(|v| s.waiting.remove_entry(&v)) {
                    Some(((_, victim_seq), w)) => {
                        Gate::release_source(&mut s, w.source);
                        s.evicted.insert(victim_seq);
                        w.notify.notify_one();
                    }
                    None => {
                        Gate::release_source(&mut s, source);
                        return Err(Refusal::Full);
                    }
                }
            }
            let seq = s.next_seq;
            s.next_seq += 1;
            let notify = Arc::new(Notify::new());
            s.waiting.insert(
                (rank, seq),
                Waiter {
                    source,
                    notify: notify.clone(),
                },
            );
            ((rank, seq), notify)
        };
        let mut ticket = Ticket {
            gate: self,
            key,
            source,
            done: false,
        };
        loop {
            {
                let mut s = self.lock();
                if s.granted.remove(&key.1) {
                    ticket.done = true;
                    return Ok(Slot {
                        gate: self.clone(),
                        source,
                    });
                }
                if s.evicted.remove(&key.1) {
                    ticket.done = true;
                    return Err(Refusal::Full);
                }
            }
            // `notify_one` stores a permit when nobody waits yet, so no wake-up is lost.
            notify.notified().await;
        }
    }

    /// Remember the outcome of a check from `ip`: a failure ranks the source one lower (after a
    /// quiet `failure_memory`, from the top again); a success puts it back at the top.
    pub(crate) fn record(&self, ip: IpAddr, failed: bool) {
        let source = SourceKey::of(ip);
        let mut s = self.lock();
        let now = Instant::now();
        if failed {
            if !s.sources.contains_key(&source) {
                self.prune(&mut s, now);
            }
            let memory = self.limits.failure_memory;
            let src = s.sources.entry(source).or_default();
            src.failures = src.rank(now, memory).saturating_add(1);
            src.last_failure = Some(now);
        } else if let Some(src) = s.sources.get_mut(&source) {
            src.failures = 0;
            src.last_failure = None;
        }
    }

    /// (running, waiting, sources known) — for tests.
    #[cfg(test)]
    fn counts(&self) -> (usize, usize, usize) {
        let s = self.lock();
        (s.running, s.waiting.len(), s.sources.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn ip(n: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, n))
    }

    fn limits() -> Limits {
        Limits {
            concurrency: 1,
            max_waiting: 3,
            per_source: 2,
            failure_memory: Duration::from_secs(60),
            max_sources: 8,
        }
    }

    /// Let spawned tasks run until they block.
    async fn settle() {
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
    }

    type Order = Arc<Mutex<Vec<&'static str>>>;

    fn waiter(
        gate: &Arc<Gate>,
        from: IpAddr,
        name: &'static str,
        order: &Order,
    ) -> tokio::task::JoinHandle<Result<Slot, Refusal>> {
        let (gate, order) = (gate.clone(), order.clone());
        tokio::spawn(async move {
            let r = gate.acquire(from).await;
            order.lock().unwrap().push(name);
            r
        })
    }

    #[tokio::test]
    async fn one_check_at_a_time_in_arrival_order() {
        let gate = Gate::new(limits());
        let order = Order::default();
        let a = gate.acquire(ip(1)).await.expect("free");
        let b = waiter(&gate, ip(2), "b", &order);
        settle().await;
        let c = waiter(&gate, ip(3), "c", &order);
        settle().await;
        assert_eq!(gate.counts().0, 1);
        assert_eq!(gate.counts().1, 2);
        assert!(order.lock().unwrap().is_empty());
        drop(a);
        let b = b.await.expect("task").expect("b admitted");
        settle().await;
        assert_eq!(*order.lock().unwrap(), ["b"]);
        drop(b);
        drop(c.await.expect("task").expect("c admitted"));
        assert_eq!(*order.lock().unwrap(), ["b", "c"]);
        assert_eq!(gate.counts().0, 0);
    }

    #[tokio::test]
    async fn a_busy_source_is_refused_at_once() {
        let gate = Gate::new(limits());
        let order = Order::default();
        let a = gate.acquire(ip(1)).await.expect("free");
        let b = waiter(&gate, ip(1), "b", &order);
        settle().await;
        // Two pending from 10.0.0.1 (one running, one waiting): the third is refused.
        assert_eq!(gate.acquire(ip(1)).await.err(), Some(Refusal::SourceBusy));
        // Another source is not.
        let c = waiter(&gate, ip(2), "c", &order);
        settle().await;
        drop(a);
        // c goes first: b's source already had a check pending when b arrived, which ranks it
        // one lower.
        drop(c.await.expect("task").expect("c"));
        drop(b.await.expect("task").expect("b"));
        assert_eq!(*order.lock().unwrap(), ["c", "b"]);
        drop(gate.acquire(ip(1)).await.expect("free again"));
    }

    #[tokio::test]
    async fn sources_that_failed_wait_behind_those_that_did_not() {
        let gate = Gate::new(limits());
        gate.record(ip(1), true);
        let order = Order::default();
        let running = gate.acquire(ip(9)).await.expect("free");
        let failing = waiter(&gate, ip(1), "failing", &order);
        settle().await;
        let fresh = waiter(&gate, ip(2), "fresh", &order);
        settle().await;
        drop(running);
        let fresh = fresh.await.expect("task").expect("fresh");
        settle().await;
        assert_eq!(*order.lock().unwrap(), ["fresh"]);
        drop(fresh);
        drop(failing.await.expect("task").expect("failing"));
        // A success takes the source out of the failing class.
        gate.record(ip(1), false);
        let running = gate.acquire(ip(9)).await.expect("free");
        let order = Order::default();
        let first = waiter(&gate, ip(1), "first", &order);
        settle().await;
        let second = waiter(&gate, ip(2), "second", &order);
        settle().await;
        drop(running);
        drop(first.await.expect("task").expect("first"));
        drop(second.await.expect("task").expect("second"));
        assert_eq!(*order.lock().unwrap(), ["first", "second"]);
    }

    #[tokio::test]
    async fn sources_that_failed_more_wait_longer() {
        let gate = Gate::new(limits());
        gate.record(ip(1), true);
        gate.record(ip(1), true);
        gate.record(ip(2), true);
        let order = Order::default();
        let running = gate.acquire(ip(9)).await.expect("free");
        let twice = waiter(&gate, ip(1), "twice", &order);
        settle().await;
        let once = waiter(&gate, ip(2), "once", &order);
        settle().await;
        drop(running);
        drop(once.await.expect("task").expect("once"));
        drop(twice.await.expect("task").expect("twice"));
        assert_eq!(*order.lock().unwrap(), ["once", "twice"]);
    }

    #[tokio::test]
    async fn failures_are_forgotten_after_a_quiet_memory() {
        let gate = Gate::new(Limits {
            failure_memory: Duration::from_millis(50),
            ..limits()
        });
        gate.record(ip(1), true);
        gate.record(ip(1), true);
        let rank = |g: &Gate| {
            g.lock().sources[&SourceKey::of(ip(1))].rank(Instant::now(), g.limits.failure_memory)
        };
        assert_eq!(rank(&gate), 2);
        std::thread::sleep(Duration::from_millis(80));
        assert_eq!(rank(&gate), 0);
        gate.record(ip(1), true);
        assert_eq!(rank(&gate), 1);
        gate.record(ip(1), false);
        assert_eq!(rank(&gate), 0);
    }

    #[tokio::test]
    async fn a_full_queue_refuses_or_evicts_the_newest_failing_check() {
        let gate = Gate::new(limits());
        let order = Order::default();
        for n in 1..=3 {
            gate.record(ip(n), true);
        }
        let running = gate.acquire(ip(9)).await.expect("free");
        let f1 = waiter(&gate, ip(1), "f1", &order);
        let f2 = waiter(&gate, ip(2), "f2", &order);
        settle().await;
        let f3 = waiter(&gate, ip(3), "f3", &order);
        settle().await;
        assert_eq!(gate.counts().1, 3);
        // Full: another failing source is refused...
        gate.record(ip(4), true);
        assert_eq!(gate.acquire(ip(4)).await.err(), Some(Refusal::Full));
        // ...a fresh one takes the place of the newest failing one.
        let fresh = waiter(&gate, ip(5), "fresh", &order);
        settle().await;
        assert_eq!(f3.await.expect("task").err(), Some(Refusal::Full));
        drop(running);
        drop(fresh.await.expect("task").expect("fresh"));
        drop(f1.await.expect("task").expect("f1"));
        drop(f2.await.expect("task").expect("f2"));
        assert_eq!(*order.lock().unwrap(), ["f3", "fresh", "f1", "f2"]);
        assert_eq!(gate.counts().0, 0);
        assert_eq!(gate.counts().1, 0);
    }

    #[tokio::test]
    async fn cancelled_checks_leave_the_queue() {
        let gate = Gate::new(limits());
        let running = gate.acquire(ip(1)).await.expect("free");
        // Waits, then is cancelled by the timeout.
        let r = tokio::time::timeout(Duration::from_millis(20), gate.acquire(ip(2))).await;
        assert!(r.is_err());
        assert_eq!(gate.counts().1, 0);
        // Admitted, but cancelled before it picks up its slot: the slot goes to the next one.
        let order = Order::default();
        let doomed = waiter(&gate, ip(2), "doomed", &order);
        settle().await;
        let next = waiter(&gate, ip(3), "next", &order);
        settle().await;
        {
            let s = gate.lock();
            assert_eq!(s.waiting.len(), 2);
        }
        doomed.abort();
        drop(running);
        let _ = doomed.await;
        drop(next.await.expect("task").expect("next"));
        assert_eq!(gate.counts().0, 0);
        // Nothing is pending any more for these sources.
        let s = gate.lock();
        assert!(s.sources.values().all(|src| src.pending == 0));
    }

    #[tokio::test]
    async fn the_source_table_is_bounded() {
        let gate = Gate::new(limits());
        for n in 0..100 {
            gate.record(ip(n), true);
            drop(gate.acquire(ip(n)).await.expect("free"));
            assert!(gate.counts().2 <= 8, "{:?}", gate.counts());
        }
    }

    #[test]
    fn sources_are_ipv4_addresses_and_ipv6_prefixes() {
        let v6 = |s: &str| IpAddr::V6(s.parse::<Ipv6Addr>().expect("v6"));
        assert_eq!(
            SourceKey::of(v6("2001:db8::1")),
            SourceKey::of(v6("2001:db8::ffff:1"))
        );
        assert_ne!(
            SourceKey::of(v6("2001:db8::1")),
            SourceKey::of(v6("2001:db8:0:1::1"))
        );
        assert_eq!(SourceKey::of(v6("::ffff:10.0.0.1")), SourceKey::of(ip(1)));
        assert_ne!(SourceKey::of(ip(1)), SourceKey::of(ip(2)));
        // An IPv6 prefix never equals an IPv4 address.
        assert_ne!(
            SourceKey::of(v6("::")),
            SourceKey::of(IpAddr::V4(Ipv4Addr::UNSPECIFIED))
        );
    }
}
