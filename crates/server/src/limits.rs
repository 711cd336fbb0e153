//! Rate limits (CONTRACT §4.2): a token bucket per key over all routes, and a separate,
//! tighter bucket per task for status polls.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use error_codes::{ApiError, ErrorCode};
use http::HeaderValue;
use store::{Key, RateLimit};

use crate::http::Answer;

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

/// Every bucket of the process.
#[derive(Debug, Default)]
pub struct Limiter {
    buckets: Mutex<HashMap<String, Bucket>>,
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
            Class::Request => (key.id.clone(), key.rate_limit.unwrap_or(default)),
            Class::Poll(task) => (
                format!("{}\0{task}", key.id),
                RateLimit {
                    rps: poll_rps,
                    burst: poll_rps.saturating_mul(2),
                },
            ),
        };
        self.take_named(name, limit, Instant::now())
    }

    fn take_named(&self, name: String, limit: RateLimit, now: Instant) -> Result<(), Limited> {
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

/// Takes a token for `key` from the app's limiter with the configured defaults.
pub fn check(app: &crate::App, key: &Key, class: Class<'_>) -> Result<(), Limited> {
    let limits = &app.config.limits;
    let default = RateLimit {
        rps: limits.rps,
        burst: limits.burst,
    };
    app.limiter
        .take(key, class, default, limits.poll_rps_per_task)
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
    fn bucket_allows_burst_then_refills_at_rate() {
        let limiter = Limiter::default();
        let limit = RateLimit { rps: 10, burst: 20 };
        let t0 = Instant::now();
        for _ in 0..20 {
            assert!(limiter.take_named("k".into(), limit, t0).is_ok());
        }
        let refused = limiter.take_named("k".into(), limit, t0).unwrap_err();
        assert!(refused.retry_after <= Duration::from_millis(100));
        // Another key is unaffected.
        assert!(limiter.take_named("other".into(), limit, t0).is_ok());
        // 100 ms later one token is back.
        let t1 = t0 + Duration::from_millis(100);
        assert!(limiter.take_named("k".into(), limit, t1).is_ok());
        assert!(limiter.take_named("k".into(), limit, t1).is_err());
    }
}
