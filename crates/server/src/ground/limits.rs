//! Rate limits (CONTRACT §4.2): a token bucket per key over all routes, and a separate,
//! tighter bucket per task for status polls. In this process, or with `[cluster] redis_url`
//! in Redis, shared by every relay (`cluster`), falling back to this process's buckets while
//! Redis cannot be reached.

use std::cell::RefCell;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use engine::now_secs;
use error_codes::{ApiError, ErrorCode};
use http::{HeaderName, HeaderValue};
use store::{Key, RateLimit};

use crate::config::LimitsConfig;
use crate::ground::cluster::Cluster;
use crate::ground::fingerprint::{ByPrint, Prints};
use crate::ground::http::Answer;

/// Buckets idle this long are full again and can be forgotten.
const IDLE: Duration = Duration::from_secs(120);
/// Past this many buckets, idle ones are swept on the next take.
const SWEEP_AT: usize = 10_000;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// What a request costs against which buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class<'a> {
    /// Counted against the key's bucket.
    Request,
    /// A status poll of one task: counted against that task's bucket only.
    Poll(&'a str),
}

/// Every bucket of the process, by a 128-bit fingerprint of its name (the key id, or the key
/// id and a task id) under a random SipHash key: no allocation per request, and two names
/// share a bucket only with probability 2^-128.
#[derive(Debug, Default)]
pub struct Limiter {
    buckets: Mutex<ByPrint<Bucket>>,
    prints: Prints,
    /// Refusals of keys' requests and of task polls, for the metrics.
    refused: [AtomicU64; 2],
}

/// A refusal: how long until a token is there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limited {
    pub retry_after: Duration,
}

impl Limiter {
    /// Takes one token for `key` in `class`, or says how long to wait.
    pub fn take(
        &self,
        key: &Key,
        class: Class<'_>,
        default: RateLimit,
        poll_rps: u32,
    ) -> Result<(), Limited> {
        let (name, limit) = match class {
            Class::Request => (self.print(&key.id, None), key.rate_limit.unwrap_or(default)),
            Class::Poll(task) => (
                self.print(&key.id, Some(task)),
                RateLimit {
                    rps: poll_rps,
                    burst: poll_rps.saturating_mul(2),
                },
            ),
        };
        self.take_named(name, limit, Instant::now())
    }

    /// The fingerprint of a bucket's name: a key id, and a task id for a poll bucket.
    fn print(&self, key_id: &str, task: Option<&str>) -> u128 {
        match task {
            None => self.prints.of_key_bucket(key_id),
            Some(_) => self.prints.of((key_id, task)),
        }
    }

    /// Whole tokens left in a key's bucket and how long until it is full, without taking one.
    pub fn peek(&self, key_id: &str, limit: RateLimit, now: Instant) -> (u32, Duration) {
        let name = self.print(key_id, None);
        let rps = f64::from(limit.rps.max(1));
        let burst = f64::from(limit.burst.max(1));
        let tokens = self
            .buckets
            .lock()
            .ok()
            .and_then(|b| b.get(&name).copied())
            .map(|b| (b.tokens + now.duration_since(b.at).as_secs_f64() * rps).min(burst))
            .unwrap_or(burst);
        let full_in = Duration::from_secs_f64(((burst - tokens) / rps).max(0.0));
        (tokens.floor() as u32, full_in)
    }

    fn take_named(&self, name: u128, limit: RateLimit, now: Instant) -> Result<(), Limited> {
        let rps = f64::from(limit.rps.max(1));
        let burst = f64::from(limit.burst.max(1));
        let Ok(mut buckets) = self.buckets.lock() else {
            return Ok(());
        };
        if buckets.len() > SWEEP_AT {
            buckets.retain(|_, b| now.duration_since(b.at) < IDLE);
        }
        let bucket = buckets.entry(name).or_insert(Bucket {
            tokens: burst,
            at: now,
        });
        let refill = now.duration_since(bucket.at).as_secs_f64() * rps;
        bucket.tokens = (bucket.tokens + refill).min(burst);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            let wait = (1.0 - bucket.tokens) / rps;
            Err(Limited {
                retry_after: Duration::from_secs_f64(wait.max(0.001)),
            })
        }
    }
}

/// The bucket `class` of `key` takes from, and its limit.
fn limit_of(limits: &LimitsConfig, key: &Key, class: Class<'_>) -> RateLimit {
    match class {
        Class::Request => key.rate_limit.unwrap_or(RateLimit {
            rps: limits.rps,
            burst: limits.burst,
        }),
        Class::Poll(_) => RateLimit {
            rps: limits.poll_rps_per_task,
            burst: limits.poll_rps_per_task.saturating_mul(2),
        },
    }
}

impl Limiter {
    /// Takes a token for `key` with the configured defaults.
    pub fn check(&self, limits: &LimitsConfig, key: &Key, class: Class<'_>) -> Result<(), Limited> {
        let default = RateLimit {
            rps: limits.rps,
            burst: limits.burst,
        };
        self.take(key, class, default, limits.poll_rps_per_task)
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
            let scope = usize::from(matches!(class, Class::Poll(_)));
            self.refused[scope].fetch_add(1, Ordering::Relaxed);
        }
        checked
    }

    /// Refusals since start, by scope: a key's requests, and task polls.
    pub fn refusals(&self) -> [(&'static str, u64); 2] {
        [
            ("key", self.refused[0].load(Ordering::Relaxed)),
            ("task_poll", self.refused[1].load(Ordering::Relaxed)),
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
        let task = match class {
            Class::Request => None,
            Class::Poll(task) => Some(task),
        };
        match cluster
            .take(&cluster.bucket(&key.id, task), limit_of(limits, key, class))
            .await
        {
            Ok(taken) if taken.allowed => Ok(()),
            Ok(taken) => Err(Limited {
                retry_after: Duration::from_secs_f64(taken.wait.clamp(0.001, 3600.0)),
            }),
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
                let (rps, burst) = (f64::from(limit.rps.max(1)), f64::from(limit.burst.max(1)));
                let tokens = tokens.clamp(0.0, burst);
                let full_in = Duration::from_secs_f64(((burst - tokens) / rps).max(0.0));
                set_vendor_headers(limit, tokens.floor() as u32, full_in, res);
            }
            Err(_) => self.vendor_headers(limits, key, res),
        }
    }

    /// The vendor's `anthropic-ratelimit-requests-*` headers on a `/v1/messages` answer: the
    /// key's bucket as it stands after the request (limit = burst, remaining whole tokens, and
    /// the time it is full again, RFC 3339).
    pub fn vendor_headers(&self, limits: &LimitsConfig, key: &Key, res: &mut Answer) {
        let limit = key.rate_limit.unwrap_or(RateLimit {
            rps: limits.rps,
            burst: limits.burst,
        });
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
    pub fn error(&self) -> ApiError {
        ApiError::new(
            ErrorCode::RateLimited,
            format!(
                "too many requests; retry after {} ms",
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
            limiter
                .take_named(limiter.print("k", None), limit, t0)
                .unwrap();
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
            assert!(
                limiter
                    .take_named(limiter.print("k", None), limit, t0)
                    .is_ok()
            );
        }
        let refused = limiter
            .take_named(limiter.print("k", None), limit, t0)
            .unwrap_err();
        assert!(refused.retry_after <= Duration::from_millis(100));
        // Another key is unaffected.
        assert!(
            limiter
                .take_named(limiter.print("other", None), limit, t0)
                .is_ok()
        );
        // 100 ms later one token is back.
        let t1 = t0 + Duration::from_millis(100);
        assert!(
            limiter
                .take_named(limiter.print("k", None), limit, t1)
                .is_ok()
        );
        assert!(
            limiter
                .take_named(limiter.print("k", None), limit, t1)
                .is_err()
        );
    }
}
