//! The throttle of failed authentication ([`AuthThrottle`]): a request that presented a key
//! or an admin token that was not accepted costs its client address (an IPv6 address by its
//! /64) a try, and the credential's first characters ([`PREFIX_LEN`], for credentials of at
//! least [`PREFIX_MIN`]) one too; `limits.auth_failures_burst` tries, refilled at
//! `limits.auth_failures_per_minute`. With none left, every request from that address or with
//! that prefix that needs a credential is answered `429 rate limited` before its credential is
//! read. Each relay counts its own. The buckets are the rate limits' ([`super::limits`]).

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use crate::config::LimitsConfig;
use crate::ground::fingerprint::{ByPrint, Prints};
use crate::ground::limits::{Bucket, Limited, Rate};

/// Which credential failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credential {
    ApiKey,
    Admin,
}

/// Characters of a presented credential that name its prefix scope (as many as a key's
/// `prefix` shows).
pub const PREFIX_LEN: usize = 14;
/// Credentials shorter than this have no prefix scope (and no prefix in the log).
pub const PREFIX_MIN: usize = 24;
/// Characters of a failed credential the log shows.
const LOGGED_LEN: usize = 8;
/// A failed authentication is logged at WARN at most this often (the others at DEBUG).
const WARN_EVERY_MS: u64 = 10_000;

/// The sources (client addresses, credential prefixes) whose authentication failed lately,
/// and the tries they have left (see the module's opening).
#[derive(Debug)]
pub struct AuthThrottle {
    state: Mutex<Sources>,
    prints: Prints,
    rate: Rate,
    max: usize,
    since: Instant,
    /// Milliseconds after `since` before which some source may be out of tries: until then
    /// a request looks its sources up; after it no source is out and none is looked up.
    blocked_until_ms: AtomicU64,
    /// Failures by [`Credential`], and requests refused for their sources' failures.
    failures: [AtomicU64; 2],
    throttled: AtomicU64,
    /// When a failure was last logged at WARN (ms after `since`; 0: never), and how many
    /// failed since.
    warned_ms: AtomicU64,
    unwarned: AtomicU64,
}

/// The tracked sources, and the one bucket every source shares past `max`.
#[derive(Debug)]
struct Sources {
    tracked: ByPrint<Bucket>,
    overflow: Bucket,
}

/// A request's sources: its client address, and the prefix of the credential it presented.
#[derive(Debug, Clone, Copy)]
pub struct Source<'a> {
    pub addr: IpAddr,
    pub credential: Option<&'a str>,
}

impl Source<'_> {
    /// The prefix scope of the credential, when it is long enough to have one.
    fn prefix(&self) -> Option<&str> {
        // A credential read from a header is visible ASCII: any byte is a boundary.
        self.credential
            .filter(|c| c.len() >= PREFIX_MIN && c.is_ascii())
            .map(|c| &c[..PREFIX_LEN])
    }

    /// The credential as the log may show it: its first characters, or only its length.
    fn shown(&self) -> String {
        match self.credential {
            Some(c) if c.len() >= PREFIX_MIN && c.is_ascii() => {
                format!("credential {:?}...", &c[..LOGGED_LEN])
            }
            Some(c) => format!("a credential of {} characters", c.len()),
            None => "no credential".to_owned(),
        }
    }
}

/// The address a client's tries are counted by: an IPv4 address, or an IPv6 address's /64
/// (one host usually holds a whole /64).
fn grouped(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V4(_) => addr,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !u128::from(u64::MAX)).into()),
        },
    }
}

impl AuthThrottle {
    /// `burst` tries per source, refilled at `per_minute`, at most `max` sources tracked.
    pub fn new(burst: u32, per_minute: u32, max: usize) -> AuthThrottle {
        let rate = Rate {
            per_sec: f64::from(per_minute.max(1)) / 60.0,
            burst: f64::from(burst.max(1)),
        };
        AuthThrottle {
            state: Mutex::new(Sources {
                tracked: ByPrint::default(),
                overflow: Bucket::full(rate, Instant::now()),
            }),
            prints: Prints::default(),
            rate,
            max,
            since: Instant::now(),
            blocked_until_ms: AtomicU64::new(0),
            failures: Default::default(),
            throttled: AtomicU64::new(0),
            warned_ms: AtomicU64::new(0),
            unwarned: AtomicU64::new(0),
        }
    }

    /// The throttle the configuration's `limits` set.
    pub fn of(limits: &LimitsConfig) -> AuthThrottle {
        AuthThrottle::new(
            limits.auth_failures_burst,
            limits.auth_failures_per_minute,
            limits.auth_failure_sources_max,
        )
    }

    fn ms(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.since).as_millis() as u64
    }

    /// The fingerprints of `source`'s scopes: its address, and its credential's prefix.
    fn names(&self, source: &Source<'_>) -> [Option<u128>; 2] {
        [
            Some(self.prints.of(("addr", grouped(source.addr)))),
            source.prefix().map(|p| self.prints.of(("prefix", p))),
        ]
    }

    /// Whether some source may be out of tries at `now` (one atomic load): only then need a
    /// request be [`AuthThrottle::check`]ed.
    pub fn any_out(&self, now: Instant) -> bool {
        let until = self.blocked_until_ms.load(Ordering::Relaxed);
        until != 0 && self.ms(now) < until
    }

    /// Whether `source` may present a credential now: `Err` while its address or its
    /// credential's prefix has no tries left.
    pub fn check(&self, source: &Source<'_>, now: Instant) -> Result<(), Limited> {
        if !self.any_out(now) {
            return Ok(());
        }
        let names = self.names(source);
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let full = state.tracked.len() >= self.max;
        let mut wait: f64 = 0.0;
        for name in names.into_iter().flatten() {
            let tokens = match state.tracked.get(&name) {
                Some(bucket) => bucket.tokens_at(self.rate, now),
                None if full => state.overflow.tokens_at(self.rate, now),
                None => continue,
            };
            if tokens < 1.0 {
                wait = wait.max((1.0 - tokens) / self.rate.per_sec);
            }
        }
        drop(state);
        if wait > 0.0 {
            self.throttled.fetch_add(1, Ordering::Relaxed);
            return Err(Limited::after(wait));
        }
        Ok(())
    }

    /// Counts a credential of `source` that was not accepted (`why`: the answer's detail).
    pub fn failed(&self, source: &Source<'_>, credential: Credential, why: &str, now: Instant) {
        self.failures[credential as usize].fetch_add(1, Ordering::Relaxed);
        let names = self.names(source);
        let mut out_until: Option<Instant> = None;
        {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            for name in names.into_iter().flatten() {
                let Sources { tracked, overflow } = &mut *state;
                let bucket = if tracked.len() < self.max || tracked.contains_key(&name) {
                    tracked
                        .entry(name)
                        .or_insert_with(|| Bucket::full(self.rate, now))
                } else {
                    overflow
                };
                bucket.spend(self.rate, now);
                if bucket.tokens < 1.0 {
                    let until = now + Rate::after((1.0 - bucket.tokens) / self.rate.per_sec);
                    out_until = Some(out_until.map_or(until, |u| u.max(until)));
                }
            }
        }
        if let Some(until) = out_until {
            // Rounded up, so that the request path looks until the source has a try again.
            self.blocked_until_ms
                .fetch_max(self.ms(until) + 1, Ordering::Relaxed);
        }
        self.log(source, credential, why, now, out_until.is_some());
    }

    /// Logs a failure: at WARN when none was in the last [`WARN_EVERY_MS`], else at DEBUG.
    fn log(&self, source: &Source<'_>, credential: Credential, why: &str, now: Instant, out: bool) {
        let what = match credential {
            Credential::ApiKey => "API key",
            Credential::Admin => "admin token",
        };
        let out = if out {
            "; it has no tries left and is answered 429 until it has"
        } else {
            ""
        };
        let unwarned = self.unwarned.fetch_add(1, Ordering::Relaxed);
        let ms = self.ms(now).max(1);
        let last = self.warned_ms.load(Ordering::Relaxed);
        if (last == 0 || ms >= last + WARN_EVERY_MS)
            && self
                .warned_ms
                .compare_exchange(last, ms, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.unwarned.store(0, Ordering::Relaxed);
            tracing::warn!(
                "authentication failed ({what}: {why}) from {}, {}{out}; {unwarned} more failed since the last such line (logged at most every {} s)",
                source.addr,
                source.shown(),
                WARN_EVERY_MS / 1000
            );
        } else {
            tracing::debug!(
                "authentication failed ({what}: {why}) from {}, {}{out}",
                source.addr,
                source.shown()
            );
        }
    }

    /// Forgets the sources whose tries are all back at `now` (run every [`SWEEP_EVERY`]).
    pub fn sweep(&self, now: Instant) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.tracked.retain(|_, b| b.full > now);
    }

    /// Sources tracked now.
    pub fn sources(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .tracked
            .len()
    }

    /// Failed authentications since start, by credential.
    pub fn failures(&self) -> [(&'static str, u64); 2] {
        [
            ("api_key", self.failures[0].load(Ordering::Relaxed)),
            ("admin", self.failures[1].load(Ordering::Relaxed)),
        ]
    }

    /// Requests refused since start because their sources had no tries left.
    pub fn throttled(&self) -> u64 {
        self.throttled.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn source<'a>(addr: &str, credential: &'a str) -> Source<'a> {
        Source {
            addr: addr.parse().unwrap(),
            credential: Some(credential),
        }
    }

    #[test]
    fn failed_authentication_throttles_the_address_and_the_prefix() {
        let throttle = AuthThrottle::new(3, 60, 100);
        let t0 = Instant::now();
        let wrong = |n: usize| format!("sk-relay-{n:05}-wrong-key-material");
        // Nothing failed: nothing is looked up.
        assert_eq!(throttle.blocked_until_ms.load(Ordering::Relaxed), 0);
        for n in 0..3 {
            let w = wrong(n * 11_111);
            assert!(throttle.check(&source("10.0.0.1", &w), t0).is_ok());
            throttle.failed(
                &source("10.0.0.1", &w),
                Credential::ApiKey,
                "no such key",
                t0,
            );
        }
        let refused = throttle.check(&source("10.0.0.1", "any"), t0).unwrap_err();
        // One try a second (60 a minute).
        assert_eq!(refused.retry_after, Duration::from_secs(1));
        // Another address is unaffected.
        assert!(
            throttle
                .check(&source("10.0.0.2", &wrong(99_999)), t0)
                .is_ok()
        );
        // A second later the address has one try again.
        let t1 = t0 + Duration::from_secs(1);
        assert!(throttle.check(&source("10.0.0.1", "any"), t1).is_ok());
        assert_eq!(throttle.failures()[0].1, 3);
        assert_eq!(throttle.throttled(), 1);

        // One prefix tried from many addresses: the prefix runs out, other prefixes do not.
        let throttle = AuthThrottle::new(3, 60, 100);
        let same = "adm-relay-0000-guess-number-";
        for n in 0..3 {
            let guess = format!("{same}{n}");
            throttle.failed(
                &source(&format!("10.1.0.{n}"), &guess),
                Credential::Admin,
                "wrong",
                t0,
            );
        }
        assert!(
            throttle
                .check(&source("10.2.0.1", &format!("{same}x")), t0)
                .is_err()
        );
        assert!(
            throttle
                .check(&source("10.2.0.1", "adm-relay-1111-guess-number-x"), t0)
                .is_ok()
        );
        // A short credential has no prefix scope.
        assert!(
            throttle
                .check(&source("10.2.0.1", "adm-relay-00"), t0)
                .is_ok()
        );
        assert_eq!(throttle.failures()[1].1, 3);
    }

    #[test]
    fn ipv6_clients_are_counted_by_their_64_and_mapped_ipv4_as_ipv4() {
        let throttle = AuthThrottle::new(2, 60, 100);
        let t0 = Instant::now();
        throttle.failed(&source("2001:db8:1:2::1", "x"), Credential::ApiKey, "x", t0);
        throttle.failed(
            &source("2001:db8:1:2:ffff::9", "y"),
            Credential::ApiKey,
            "y",
            t0,
        );
        assert!(
            throttle
                .check(&source("2001:db8:1:2::77", "z"), t0)
                .is_err()
        );
        assert!(throttle.check(&source("2001:db8:1:3::1", "z"), t0).is_ok());
        throttle.failed(&source("::ffff:10.0.0.9", "x"), Credential::ApiKey, "x", t0);
        throttle.failed(&source("10.0.0.9", "y"), Credential::ApiKey, "y", t0);
        assert!(throttle.check(&source("10.0.0.9", "z"), t0).is_err());
    }

    #[test]
    fn failure_sources_are_capped_and_swept() {
        let throttle = AuthThrottle::new(2, 60, 10);
        let t0 = Instant::now();
        for n in 0..1000 {
            let addr = format!("10.3.{}.{}", n / 256, n % 256);
            throttle.failed(&source(&addr, "short"), Credential::ApiKey, "x", t0);
        }
        assert_eq!(throttle.sources(), 10, "at most the cap is tracked");
        // Past the cap the untracked share one bucket, long spent: a new address is refused
        // until it refills.
        assert!(throttle.check(&source("10.9.9.9", "short"), t0).is_err());
        // All tries back two seconds later (2 at 1/s): every source is forgotten.
        throttle.sweep(t0 + Duration::from_secs(2));
        assert_eq!(throttle.sources(), 0);
        assert!(
            throttle
                .check(&source("10.9.9.9", "short"), t0 + Duration::from_secs(2))
                .is_ok()
        );
    }

    #[test]
    fn the_log_shows_no_more_than_a_short_prefix() {
        let long = source("10.0.0.1", "sk-relay-0123456789abcdef0123456789abcdef");
        assert_eq!(long.shown(), "credential \"sk-relay\"...");
        assert_eq!(long.prefix(), Some("sk-relay-01234"));
        let short = source("10.0.0.1", "admin");
        assert_eq!(short.shown(), "a credential of 5 characters");
        assert_eq!(short.prefix(), None);
    }
}
