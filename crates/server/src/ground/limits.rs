//! Rate limits (CONTRACT §4.2).
//!
//! Every request of a key takes a token from the key's bucket; a status poll
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
//! process's buckets stand in while Redis cannot be reached. The same buckets count failed
//! authentication ([`super::auth_throttle`]).

use std::cell::RefCell;
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
pub(super) struct Bucket {
    pub(super) tokens: f64,
    /// When `tokens` was counted.
    pub(super) at: Instant,
    /// When it is full again (and so may be forgotten).
    pub(super) full: Instant,
}

/// A bucket's rate (tokens a second) and size.
#[derive(Debug, Clone, Copy)]
pub(super) struct Rate {
    pub(super) per_sec: f64,
    pub(super) burst: f64,
}

impl Rate {
    pub(super) fn of(limit: RateLimit) -> Rate {
        Rate {
            per_sec: f64::from(limit.rps.max(1)),
            burst: f64::from(limit.burst.max(1)),
        }
    }

    /// `secs` as a duration, at most [`LONGEST_REFILL`].
    pub(super) fn after(secs: f64) -> Duration {
        Duration::try_from_secs_f64(secs.max(0.0))
            .unwrap_or(LONGEST_REFILL)
            .min(LONGEST_REFILL)
    }
}

impl Bucket {
    pub(super) fn full(rate: Rate, now: Instant) -> Bucket {
        Bucket {
            tokens: rate.burst,
            at: now,
            full: now,
        }
    }

    /// Tokens at `now`.
    pub(super) fn tokens_at(&self, rate: Rate, now: Instant) -> f64 {
        let refill = now.saturating_duration_since(self.at).as_secs_f64() * rate.per_sec;
        (self.tokens + refill).min(rate.burst)
    }

    /// Takes a token at `now` whether there is one or not (never below zero).
    pub(super) fn spend(&mut self, rate: Rate, now: Instant) {
        self.tokens = (self.tokens_at(rate, now) - 1.0).max(0.0);
        self.at = now;
        self.full = now + Rate::after((rate.burst - self.tokens) / rate.per_sec);
    }

    /// Takes a token at `now`, or says how long until there is one.
    pub(super) fn take(&mut self, rate: Rate, now: Instant) -> Result<(), Limited> {
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
    pub(super) fn after(secs: f64) -> Limited {
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
}
