//! Rate limits (CONTRACT §4.2) and the throttle of failed authentication.
//!
//! Rate limits: every request of a key takes a token from the key's bucket; a status poll
//! (`GET` of a task or asset by id) takes one from the key's poll bucket instead (the same
//! rate and burst, counted apart), whatever the id, before the lookup. Only once the lookup
//! found the caller's own task does the poll also take from that task's bucket (2/s by
//! default), made then: an id made up costs the key's poll budget and makes nothing. Buckets
//! are kept by a fingerprint of their name in [`SHARDS`] maps, each behind a lock of its own
//! (a request locks one, never across an await); task buckets are at most
//! `limits.task_buckets_max` in all (past it a poll is held to its key's budget alone); a
//! bucket is forgotten once it is full again, by [`Limiter::sweep`], which the server runs
//! every [`SWEEP_EVERY`] off the request path. With `[cluster] redis_url` the buckets are in
//! Redis, shared by every relay (`cluster`), each key with a TTL of its refill time, and this
//! process's buckets stand in while Redis cannot be reached.
//!
//! Failed authentication ([`AuthThrottle`]): a request that presented a key or an admin token
//! that was not accepted costs its client address (an IPv6 address by its /64) a try, and the
//! credential's first characters ([`PREFIX_LEN`], for credentials of at least [`PREFIX_MIN`])
//! one too; `limits.auth_failures_burst` tries, refilled at `limits.auth_failures_per_minute`.
//! With none left, every request from that address or with that prefix that needs a
//! credential is answered `429 rate limited` before its credential is read. Each relay counts
//! its own.

use std::cell::RefCell;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use engine::now_secs;
use error_codes::{ApiError, ErrorCode};
use http::{HeaderName, HeaderValue};
use store::{Key, RateLimit};

use crate::config::LimitsConfig;
use crate::ground::cluster::Cluster;
use crate::ground::fingerprint::{ByPrint, Prints};
use crate::ground::http::Answer;

/// How many maps the buckets are spread over, each behind its own lock.
pub const SHARDS: usize = 16;
/// How often idle buckets (full again) are forgotten.
pub const SWEEP_EVERY: Duration = Duration::from_secs(10);
/// The longest a bucket is remembered after its last take, whatever its refill time.
const LONGEST_REFILL: Duration = Duration::from_secs(86_400);

/// One token bucket.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    /// When `tokens` was counted.
    at: Instant,
    /// When it is full again (and so may be forgotten).
    full: Instant,
}

/// A bucket's rate (tokens a second) and size.
#[derive(Debug, Clone, Copy)]
struct Rate {
    per_sec: f64,
    burst: f64,
}

impl Rate {
    fn of(limit: RateLimit) -> Rate {
        Rate {
            per_sec: f64::from(limit.rps.max(1)),
            burst: f64::from(limit.burst.max(1)),
        }
    }

    /// `secs` as a duration, at most [`LONGEST_REFILL`].
    fn after(secs: f64) -> Duration {
        Duration::try_from_secs_f64(secs.max(0.0))
            .unwrap_or(LONGEST_REFILL)
            .min(LONGEST_REFILL)
    }
}

impl Bucket {
    fn full(rate: Rate, now: Instant) -> Bucket {
        Bucket {
            tokens: rate.burst,
            at: now,
            full: now,
        }
    }

    /// Tokens at `now`.
    fn tokens_at(&self, rate: Rate, now: Instant) -> f64 {
        let refill = now.saturating_duration_since(self.at).as_secs_f64() * rate.per_sec;
        (self.tokens + refill).min(rate.burst)
    }

    /// Takes a token at `now` whether there is one or not (never below zero).
    fn spend(&mut self, rate: Rate, now: Instant) {
        self.tokens = (self.tokens_at(rate, now) - 1.0).max(0.0);
        self.at = now;
        self.full = now + Rate::after((rate.burst - self.tokens) / rate.per_sec);
    }

    /// Takes a token at `now`, or says how long until there is one.
    fn take(&mut self, rate: Rate, now: Instant) -> Result<(), Limited> {
        let tokens = self.tokens_at(rate, now);
        if tokens >= 1.0 {
            self.spend(rate, now);
            Ok(())
        } else {
            Err(Limited::after((1.0 - tokens) / rate.per_sec))
        }
    }
}

/// Bucket maps by fingerprint, spread over [`SHARDS`] locks by the fingerprint's high bits
/// (its low bits are the maps' hash).
#[derive(Debug)]
struct Shards([Mutex<ByPrint<Bucket>>; SHARDS]);

impl Default for Shards {
    fn default() -> Shards {
        Shards(std::array::from_fn(|_| Mutex::default()))
    }
}

impl Shards {
    fn lock(&self, print: u128) -> MutexGuard<'_, ByPrint<Bucket>> {
        self.0[((print >> 64) as usize) % SHARDS]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn len(&self) -> usize {
        self.0
            .iter()
            .map(|m| m.lock().unwrap_or_else(PoisonError::into_inner).len())
            .sum()
    }

    /// Forgets the buckets full at `now`, one shard at a time; how many.
    fn sweep(&self, now: Instant) -> usize {
        let mut gone = 0;
        for shard in &self.0 {
            let mut map = shard.lock().unwrap_or_else(PoisonError::into_inner);
            let before = map.len();
            map.retain(|_, b| b.full > now);
            gone += before - map.len();
        }
        gone
    }
}

/// What a request costs against which buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class<'a> {
    /// Counted against the key's bucket.
    Request,
    /// A status poll, before its lookup: counted against the key's poll bucket.
    Poll,
    /// A poll of the key's own task (its lookup found it): counted against that task's bucket.
    OwnTask(&'a str),
}

impl Class<'_> {
    /// Its place in [`Limiter::refusals`].
    fn scope(self) -> usize {
        match self {
            Class::Request => 0,
            Class::Poll => 1,
            Class::OwnTask(_) => 2,
        }
    }
}

/// The rate-limit buckets of the process: the keys' (requests and polls) and the tasks'.
#[derive(Debug)]
pub struct Limiter {
    keys: Shards,
    tasks: Shards,
    /// Task buckets held now, at most `tasks_max`.
    task_count: AtomicUsize,
    tasks_max: usize,
    /// Set once the task buckets were found at their cap (logged once).
    tasks_full: AtomicBool,
    prints: Prints,
    /// Refusals by [`Class::scope`], for the metrics.
    refused: [AtomicU64; 3],
}

/// The task buckets of a limiter made without a configuration.
const DEFAULT_TASK_BUCKETS: usize = 100_000;

impl Default for Limiter {
    fn default() -> Limiter {
        Limiter::new(DEFAULT_TASK_BUCKETS)
    }
}

/// A refusal: how long until a token is there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limited {
    pub retry_after: Duration,
}

impl Limited {
    /// A refusal for `secs` seconds (at least a millisecond, at most an hour).
    fn after(secs: f64) -> Limited {
        Limited {
            retry_after: Duration::try_from_secs_f64(secs.clamp(0.001, 3600.0))
                .unwrap_or(Duration::from_secs(1)),
        }
    }
}

/// The bucket `class` of `key` takes from, and its limit.
fn limit_of(limits: &LimitsConfig, key: &Key, class: Class<'_>) -> RateLimit {
    match class {
        Class::Request | Class::Poll => key.rate_limit.unwrap_or(RateLimit {
            rps: limits.rps,
            burst: limits.burst,
        }),
        Class::OwnTask(_) => RateLimit {
            rps: limits.poll_rps_per_task,
            burst: limits.poll_rps_per_task.saturating_mul(2),
        },
    }
}

impl Limiter {
    /// A limiter holding at most `tasks_max` task buckets.
    pub fn new(tasks_max: usize) -> Limiter {
        Limiter {
            keys: Shards::default(),
            tasks: Shards::default(),
            task_count: AtomicUsize::new(0),
            tasks_max,
            tasks_full: AtomicBool::new(false),
            prints: Prints::default(),
            refused: Default::default(),
        }
    }

    /// The fingerprint of the bucket `class` of `key_id` takes from.
    fn print(&self, key_id: &str, class: Class<'_>) -> u128 {
        match class {
            Class::Request => self.prints.of_key_bucket(key_id),
            Class::Poll => self.prints.of(("polls", key_id)),
            Class::OwnTask(task) => self.prints.of((key_id, Some(task))),
        }
    }

    /// Takes one token for `key` in `class` (with the configured defaults), or says how long
    /// to wait.
    pub fn check(&self, limits: &LimitsConfig, key: &Key, class: Class<'_>) -> Result<(), Limited> {
        let rate = Rate::of(limit_of(limits, key, class));
        self.take_named(self.print(&key.id, class), class, rate, Instant::now())
    }

    fn take_named(
        &self,
        name: u128,
        class: Class<'_>,
        rate: Rate,
        now: Instant,
    ) -> Result<(), Limited> {
        let Class::OwnTask(_) = class else {
            return self
                .keys
                .lock(name)
                .entry(name)
                .or_insert_with(|| Bucket::full(rate, now))
                .take(rate, now);
        };
        let mut tasks = self.tasks.lock(name);
        if let Some(bucket) = tasks.get_mut(&name) {
            return bucket.take(rate, now);
        }
        if self.task_count.fetch_add(1, Ordering::Relaxed) >= self.tasks_max {
            // At the cap the poll is held to its key's poll budget alone.
            self.task_count.fetch_sub(1, Ordering::Relaxed);
            if !self.tasks_full.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    "{} task poll buckets held (limits.task_buckets_max): further tasks' polls are held to their key's poll budget alone until idle buckets are forgotten",
                    self.tasks_max
                );
            }
            return Ok(());
        }
        let mut bucket = Bucket::full(rate, now);
        let taken = bucket.take(rate, now);
        tasks.insert(name, bucket);
        taken
    }

    /// Forgets the buckets that are full again at `now` (run every [`SWEEP_EVERY`], off the
    /// request path; it locks one shard at a time).
    pub fn sweep(&self, now: Instant) {
        self.keys.sweep(now);
        let gone = self.tasks.sweep(now);
        self.task_count.fetch_sub(gone, Ordering::Relaxed);
        if gone > 0 {
            self.tasks_full.store(false, Ordering::Relaxed);
        }
    }

    /// Buckets held now: the keys' (requests and polls) and the tasks'.
    pub fn buckets(&self) -> (usize, usize) {
        (self.keys.len(), self.tasks.len())
    }

    /// Whole tokens left in a key's bucket and how long until it is full, without taking one.
    pub fn peek(&self, key_id: &str, limit: RateLimit, now: Instant) -> (u32, Duration) {
        let name = self.print(key_id, Class::Request);
        let rate = Rate::of(limit);
        let tokens = self
            .keys
            .lock(name)
            .get(&name)
            .map_or(rate.burst, |b| b.tokens_at(rate, now));
        let full_in = Rate::after((rate.burst - tokens) / rate.per_sec);
        (tokens.floor() as u32, full_in)
    }

    /// Takes a token for `key`: from the buckets every relay shares when there is a
    /// `cluster`, from this process's when not (or when Redis does not answer in time).
    pub async fn check_shared(
        &self,
        cluster: Option<&Cluster>,
        limits: &LimitsConfig,
        key: &Key,
        class: Class<'_>,
    ) -> Result<(), Limited> {
        let checked = self.check_either(cluster, limits, key, class).await;
        if checked.is_err() {
            self.refused[class.scope()].fetch_add(1, Ordering::Relaxed);
        }
        checked
    }

    /// Refusals since start, by scope: a key's requests, a key's polls, one task's polls.
    pub fn refusals(&self) -> [(&'static str, u64); 3] {
        [
            ("key", self.refused[0].load(Ordering::Relaxed)),
            ("key_poll", self.refused[1].load(Ordering::Relaxed)),
            ("task_poll", self.refused[2].load(Ordering::Relaxed)),
        ]
    }

    /// [`Limiter::check_shared`] without the count.
    async fn check_either(
        &self,
        cluster: Option<&Cluster>,
        limits: &LimitsConfig,
        key: &Key,
        class: Class<'_>,
    ) -> Result<(), Limited> {
        let Some(cluster) = cluster else {
            return self.check(limits, key, class);
        };
        let bucket = match class {
            Class::Request => cluster.bucket(&key.id, None),
            Class::Poll => cluster.poll_bucket(&key.id),
            Class::OwnTask(task) => cluster.bucket(&key.id, Some(task)),
        };
        match cluster.take(&bucket, limit_of(limits, key, class)).await {
            Ok(taken) if taken.allowed => Ok(()),
            Ok(taken) => Err(Limited::after(taken.wait)),
            Err(_) => self.check(limits, key, class),
        }
    }

    /// [`Limiter::vendor_headers`] from the shared bucket when there is a `cluster` (this
    /// process's when Redis does not answer in time).
    pub async fn vendor_headers_shared(
        &self,
        cluster: Option<&Cluster>,
        limits: &LimitsConfig,
        key: &Key,
        res: &mut Answer,
    ) {
        let Some(cluster) = cluster else {
            return self.vendor_headers(limits, key, res);
        };
        let limit = limit_of(limits, key, Class::Request);
        match cluster.peek(&cluster.bucket(&key.id, None), limit).await {
            Ok(tokens) => {
                let rate = Rate::of(limit);
                let tokens = tokens.clamp(0.0, rate.burst);
                let full_in = Rate::after((rate.burst - tokens) / rate.per_sec);
                set_vendor_headers(limit, tokens.floor() as u32, full_in, res);
            }
            Err(_) => self.vendor_headers(limits, key, res),
        }
    }

    /// The vendor's `anthropic-ratelimit-requests-*` headers on a `/v1/messages` answer: the
    /// key's bucket as it stands after the request (limit = burst, remaining whole tokens, and
    /// the time it is full again, RFC 3339).
    pub fn vendor_headers(&self, limits: &LimitsConfig, key: &Key, res: &mut Answer) {
        let limit = limit_of(limits, key, Class::Request);
        let (remaining, full_in) = self.peek(&key.id, limit, Instant::now());
        set_vendor_headers(limit, remaining, full_in, res);
    }
}

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

    /// The throttle of `limits`.
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

const LIMIT: HeaderName = HeaderName::from_static("anthropic-ratelimit-requests-limit");
const REMAINING: HeaderName = HeaderName::from_static("anthropic-ratelimit-requests-remaining");
const RESET: HeaderName = HeaderName::from_static("anthropic-ratelimit-requests-reset");

/// The vendor's rate-limit headers: limit = burst, whole tokens remaining, when it is full.
fn set_vendor_headers(limit: RateLimit, remaining: u32, full_in: Duration, res: &mut Answer) {
    let reset = now_secs() + full_in.as_secs() + u64::from(full_in.subsec_nanos() > 0);
    let out = res.headers_mut();
    out.insert(LIMIT, count_value(0, limit.burst));
    out.insert(REMAINING, count_value(1, remaining));
    if let Some(v) = reset_value(reset) {
        out.insert(RESET, v);
    }
}

/// A count's header value: each thread keeps the last it wrote in each of two `places` and
/// shares its bytes while the count stays the same (a key's burst, and mostly what is left
/// of it), rather than writing and allocating the digits for every answer.
fn count_value(place: usize, n: u32) -> HeaderValue {
    thread_local! {
        static LAST: RefCell<[Option<(u32, HeaderValue)>; 2]> =
            const { RefCell::new([None, None]) };
    }
    LAST.with_borrow_mut(|last| match &last[place] {
        Some((at, value)) if *at == n => value.clone(),
        _ => {
            let value = HeaderValue::from(n);
            last[place] = Some((n, value.clone()));
            value
        }
    })
}

/// The reset header's value for `reset`: most answers of a second share one, so each thread
/// writes it once a second and shares its bytes after that.
fn reset_value(reset: u64) -> Option<HeaderValue> {
    thread_local! {
        static LAST: RefCell<Option<(u64, HeaderValue)>> = const { RefCell::new(None) };
    }
    LAST.with_borrow_mut(|last| {
        if let Some((at, value)) = last.as_ref()
            && *at == reset
        {
            return Some(value.clone());
        }
        let value = HeaderValue::from_bytes(&rfc3339_bytes(reset as i64)).ok()?;
        *last = Some((reset, value.clone()));
        Some(value)
    })
}

/// Unix seconds (before 1970 too) as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn rfc3339(secs: i64) -> String {
    String::from_utf8_lossy(&rfc3339_bytes(secs)).into_owned()
}

/// [`rfc3339`] without an allocation (years 0 to 9999).
fn rfc3339_bytes(secs: i64) -> [u8; 20] {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400) as u64;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let mut out = *b"0000-00-00T00:00:00Z";
    let mut put = |at: usize, width: usize, mut n: u64| {
        for i in (at..at + width).rev() {
            out[i] = b'0' + (n % 10) as u8;
            n /= 10;
        }
    };
    put(0, 4, year.clamp(0, 9999) as u64);
    put(5, 2, month as u64);
    put(8, 2, day as u64);
    put(11, 2, rem / 3600);
    put(14, 2, rem % 3600 / 60);
    put(17, 2, rem % 60);
    out
}

impl Limited {
    /// The answer to a request over its key's (or task's) rate limit.
    pub fn error(&self) -> ApiError {
        ApiError::new(
            ErrorCode::RateLimited,
            format!(
                "too many requests; retry after {} ms",
                self.retry_after.as_millis().max(1)
            ),
        )
    }

    /// The answer to a request whose client address or credential prefix has no tries left.
    pub fn failures_error(&self) -> ApiError {
        ApiError::new(
            ErrorCode::RateLimited,
            format!(
                "too many failed authentications from this address or with this credential; retry after {} ms",
                self.retry_after.as_millis().max(1)
            ),
        )
    }

    /// Sets `retry-after` (whole seconds, at least 1) and `retry-after-ms` on a 429.
    pub fn set_headers(&self, res: &mut Answer) {
        let ms = self.retry_after.as_millis().max(1);
        let secs = ms.div_ceil(1000).max(1);
        let headers = res.headers_mut();
        headers.insert("retry-after", HeaderValue::from(secs as u64));
        headers.insert("retry-after-ms", HeaderValue::from(ms as u64));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(id: &str) -> Key {
        let (mut key, _) = crate::app::new_key("k", "gen2", None);
        key.id = id.to_owned();
        key
    }

    fn limits(rps: u32, burst: u32, per_task: u32) -> LimitsConfig {
        LimitsConfig {
            rps,
            burst,
            poll_rps_per_task: per_task,
            ..LimitsConfig::default()
        }
    }

    fn take(
        limiter: &Limiter,
        key_id: &str,
        class: Class<'_>,
        limit: RateLimit,
        now: Instant,
    ) -> bool {
        limiter
            .take_named(limiter.print(key_id, class), class, Rate::of(limit), now)
            .is_ok()
    }

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_795_326_743), "2026-11-22T05:52:23Z");
        assert_eq!(rfc3339(-1), "1969-12-31T23:59:59Z");
    }

    #[test]
    fn peek_reports_remaining_without_taking() {
        let limiter = Limiter::default();
        let limit = RateLimit { rps: 10, burst: 20 };
        let t0 = Instant::now();
        assert_eq!(limiter.peek("k", limit, t0).0, 20);
        for _ in 0..5 {
            assert!(take(&limiter, "k", Class::Request, limit, t0));
        }
        let (remaining, full_in) = limiter.peek("k", limit, t0);
        assert_eq!(remaining, 15);
        assert_eq!(full_in, Duration::from_millis(500));
    }

    #[test]
    fn bucket_allows_burst_then_refills_at_rate() {
        let limiter = Limiter::default();
        let limit = RateLimit { rps: 10, burst: 20 };
        let t0 = Instant::now();
        for _ in 0..20 {
            assert!(take(&limiter, "k", Class::Request, limit, t0));
        }
        let refused = limiter
            .take_named(
                limiter.print("k", Class::Request),
                Class::Request,
                Rate::of(limit),
                t0,
            )
            .unwrap_err();
        assert!(refused.retry_after <= Duration::from_millis(100));
        // Another key, and the key's polls, are unaffected.
        assert!(take(&limiter, "other", Class::Request, limit, t0));
        assert!(take(&limiter, "k", Class::Poll, limit, t0));
        // 100 ms later one token is back.
        let t1 = t0 + Duration::from_millis(100);
        assert!(take(&limiter, "k", Class::Request, limit, t1));
        assert!(!take(&limiter, "k", Class::Request, limit, t1));
    }

    #[test]
    fn polls_of_any_ids_spend_the_keys_poll_budget_and_make_no_task_bucket() {
        let limiter = Limiter::default();
        let limits = limits(10, 20, 2);
        let flooder = key("key_flood");
        let t0 = Instant::now();
        let rate = Rate::of(limit_of(&limits, &flooder, Class::Poll));
        let print = limiter.print(&flooder.id, Class::Poll);
        // The ids never reach the limiter before a lookup found them: the key's poll bucket
        // is all a made-up id costs.
        let passed = (0..1000)
            .filter(|_| limiter.take_named(print, Class::Poll, rate, t0).is_ok())
            .count();
        assert_eq!(passed, 20, "the key's burst");
        assert_eq!(limiter.buckets(), (1, 0));
        assert_eq!(
            limiter.refused[1].load(Ordering::Relaxed),
            0,
            "counted by check_shared only"
        );
        // Another key's requests and polls have buckets of their own.
        let other = key("key_other");
        assert!(limiter.check(&limits, &other, Class::Request).is_ok());
        assert!(limiter.check(&limits, &other, Class::Poll).is_ok());
        // Polls of an own task: that task's bucket (burst 2 x 2/s).
        let t0 = Instant::now();
        let task = Rate::of(limit_of(&limits, &other, Class::OwnTask("video_1")));
        let print = limiter.print(&other.id, Class::OwnTask("video_1"));
        let class = Class::OwnTask("video_1");
        let results: Vec<bool> = (0..5)
            .map(|_| limiter.take_named(print, class, task, t0).is_ok())
            .collect();
        assert_eq!(results, [true, true, true, true, false]);
        assert_eq!(limiter.buckets(), (3, 1));
    }

    #[test]
    fn task_buckets_stop_at_their_cap_and_are_swept_once_full() {
        let limiter = Limiter::new(3);
        let limit = RateLimit { rps: 2, burst: 4 };
        let t0 = Instant::now();
        let ids = ["video_a", "video_b", "video_c", "video_d", "video_e"];
        for id in ids {
            assert!(take(&limiter, "k", Class::OwnTask(id), limit, t0));
        }
        assert_eq!(limiter.buckets().1, 3, "no bucket past the cap");
        // Past the cap a poll is held by its key's poll budget alone.
        for _ in 0..10 {
            assert!(take(&limiter, "k", Class::OwnTask("video_e"), limit, t0));
        }
        // Not full yet half a second later (one token of four was taken, 2/s): kept.
        limiter.sweep(t0 + Duration::from_millis(400));
        assert_eq!(limiter.buckets().1, 3);
        // Full again: forgotten, and room for new ones.
        limiter.sweep(t0 + Duration::from_secs(1));
        assert_eq!(limiter.buckets().1, 0);
        assert!(take(
            &limiter,
            "k",
            Class::OwnTask("video_d"),
            limit,
            t0 + Duration::from_secs(1)
        ));
        assert_eq!(limiter.buckets().1, 1);
        assert_eq!(limiter.task_count.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn key_buckets_are_swept_once_full_again() {
        let limiter = Limiter::default();
        let limit = RateLimit { rps: 10, burst: 20 };
        let t0 = Instant::now();
        for _ in 0..20 {
            assert!(take(&limiter, "k", Class::Request, limit, t0));
        }
        limiter.sweep(t0 + Duration::from_millis(1900));
        assert_eq!(
            limiter.buckets().0,
            1,
            "not full yet: kept, so the limit holds"
        );
        assert!(!take(&limiter, "k", Class::Request, limit, t0));
        limiter.sweep(t0 + Duration::from_secs(2));
        assert_eq!(limiter.buckets().0, 0);
    }

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
