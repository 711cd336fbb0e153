//! Which video channel runs a task: among the channels serving its model whose vendor model
//! can make what the task asks (`VideoChannel::fit`), the highest `priority` tier with a
//! channel available, then a weighted random choice by `weight` inside it. A channel is
//! unavailable while it is unhealthy (after `channel_failure_threshold` failed upstream calls
//! in a row; one probe goes through every `channel_cooldown_ms`, and a success restores it) or
//! resting after a 429. The in-process simulator is always healthy.
//!
//! Each channel's upstream calls are capped twice: `max_concurrency` at once (a semaphore) and,
//! when configured, `max_calls_per_sec` (a [`CallRate`] token bucket).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use channels::{Demand, VideoChannel};
use rand::Rng;
use tokio::sync::Semaphore;

use crate::clock::now_ms;

/// Upstream calls of one channel at once, unless configured.
const DEFAULT_CONCURRENCY: u32 = 16;

/// Routing facts and health of one channel.
pub struct Health {
    priority: i32,
    weight: u32,
    /// Remote channels only; the simulator never becomes unhealthy.
    tracked: bool,
    failures: AtomicU32,
    /// While unhealthy: when the next probe may go through (unix ms).
    probe_at_ms: AtomicU64,
    /// After a 429: no submissions before this (unix ms).
    busy_until_ms: AtomicU64,
    /// Caps this channel's upstream calls at once.
    pub permits: Arc<Semaphore>,
    /// The configured `max_concurrency` (or its default).
    pub max_concurrency: u32,
    /// Caps this channel's upstream calls per second, when configured.
    pub rate: Option<CallRate>,
    /// Calls that waited for a token of `rate`, or were put off until one was free.
    pub calls_paced: AtomicU64,
    /// Times the channel was marked unhealthy, and restored.
    pub marked_unhealthy: AtomicU64,
    pub restored: AtomicU64,
    /// Submissions that moved on from this channel to another one.
    pub failovers: AtomicU64,
}

/// How one channel is routed to and capped, from its configuration.
#[derive(Debug, Clone)]
pub struct ChannelRoute {
    pub name: String,
    /// Higher tiers are chosen first.
    pub priority: i32,
    /// Share of choices inside a tier.
    pub weight: u32,
    /// Whether failures mark it unhealthy (remote channels; the simulator never is).
    pub tracked: bool,
    pub max_concurrency: Option<u32>,
    pub max_calls_per_sec: Option<f64>,
}

pub struct Routing {
    health: HashMap<String, Health>,
    threshold: u32,
    cooldown_ms: u64,
}

impl Routing {
    /// Routing for `routes`; a channel is unhealthy after `threshold` failed calls in a row
    /// and probed again every `cooldown_ms`.
    pub fn new(routes: &[ChannelRoute], threshold: u32, cooldown_ms: u64) -> Routing {
        let health = routes
            .iter()
            .map(|c| {
                let concurrency = c.max_concurrency.unwrap_or(DEFAULT_CONCURRENCY).max(1);
                (
                    c.name.clone(),
                    Health {
                        priority: c.priority,
                        weight: c.weight.max(1),
                        tracked: c.tracked,
                        failures: AtomicU32::new(0),
                        probe_at_ms: AtomicU64::new(0),
                        busy_until_ms: AtomicU64::new(0),
                        permits: Arc::new(Semaphore::new(concurrency as usize)),
                        max_concurrency: concurrency,
                        rate: c
                            .max_calls_per_sec
                            .map(|r| CallRate::new(r, Instant::now())),
                        calls_paced: AtomicU64::new(0),
                        marked_unhealthy: AtomicU64::new(0),
                        restored: AtomicU64::new(0),
                        failovers: AtomicU64::new(0),
                    },
                )
            })
            .collect();
        Routing {
            health,
            threshold: threshold.max(1),
            cooldown_ms,
        }
    }

    pub fn health(&self, name: &str) -> Option<&Health> {
        self.health.get(name)
    }

    pub fn is_healthy(&self, name: &str) -> bool {
        self.health
            .get(name)
            .is_none_or(|h| h.failures.load(Ordering::Relaxed) < self.threshold)
    }

    /// Chooses a channel for `model` whose vendor model can make `demand`, skipping those
    /// named in `tried`. An unhealthy channel whose cool-down has passed is chosen as a probe
    /// (one per cool-down).
    pub fn pick(
        &self,
        channels: &[Arc<VideoChannel>],
        model: &str,
        demand: &Demand,
        tried: &[String],
    ) -> Option<Arc<VideoChannel>> {
        let now = now_ms();
        let usable = |c: &&Arc<VideoChannel>| {
            let name = c.name();
            if !c.serves(model) || tried.iter().any(|t| t == name) || c.fit(model, demand).is_err()
            {
                return false;
            }
            let Some(h) = self.health.get(name) else {
                return true;
            };
            h.busy_until_ms.load(Ordering::Relaxed) <= now
                && (h.failures.load(Ordering::Relaxed) < self.threshold
                    || h.probe_at_ms.load(Ordering::Relaxed) <= now)
        };
        let candidates: Vec<&Arc<VideoChannel>> = channels.iter().filter(usable).collect();
        let priority = |c: &Arc<VideoChannel>| self.health.get(c.name()).map_or(0, |h| h.priority);
        let weight = |c: &Arc<VideoChannel>| self.health.get(c.name()).map_or(1, |h| h.weight);
        let top = candidates.iter().map(|c| priority(c)).max()?;
        let tier: Vec<&Arc<VideoChannel>> = candidates
            .into_iter()
            .filter(|c| priority(c) == top)
            .collect();
        let total: u64 = tier.iter().map(|c| u64::from(weight(c))).sum();
        let mut ticket = rand::rng().random_range(0..total.max(1));
        let mut chosen = tier.first().copied()?;
        for c in &tier {
            let w = u64::from(weight(c));
            if ticket < w {
                chosen = c;
                break;
            }
            ticket -= w;
        }
        if let Some(h) = self.health.get(chosen.name())
            && h.failures.load(Ordering::Relaxed) >= self.threshold
        {
            // A probe: hold the others back for another cool-down.
            h.probe_at_ms
                .store(now + self.cooldown_ms, Ordering::Relaxed);
        }
        Some(chosen.clone())
    }

    /// Records an upstream call that worked; restores an unhealthy channel.
    pub fn success(&self, name: &str) {
        if let Some(h) = self.health.get(name).filter(|h| h.tracked)
            && h.failures.swap(0, Ordering::Relaxed) >= self.threshold
        {
            h.restored.fetch_add(1, Ordering::Relaxed);
            tracing::info!(channel = name, "channel healthy again");
        }
    }

    /// Records an upstream call that failed (transport, 5xx); marks the channel unhealthy
    /// after `threshold` in a row.
    pub fn failure(&self, name: &str) {
        if let Some(h) = self.health.get(name).filter(|h| h.tracked) {
            let n = h.failures.fetch_add(1, Ordering::Relaxed).saturating_add(1);
            if n >= self.threshold {
                h.probe_at_ms
                    .store(now_ms() + self.cooldown_ms, Ordering::Relaxed);
            }
            if n == self.threshold {
                h.marked_unhealthy.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(channel = name, failures = n, "channel marked unhealthy");
            }
        }
    }

    /// The upstream said 429: no submissions to it for a while.
    pub fn rate_limited(&self, name: &str, retry_after: Option<Duration>) {
        if let Some(h) = self.health.get(name) {
            let rest = retry_after.unwrap_or(Duration::from_secs(1)).as_millis() as u64;
            h.busy_until_ms.store(now_ms() + rest, Ordering::Relaxed);
        }
    }

    pub fn failed_over(&self, name: &str) {
        if let Some(h) = self.health.get(name) {
            h.failovers.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The channel's call permits (none known: no cap).
    pub fn permits(&self, name: &str) -> Option<Arc<Semaphore>> {
        self.health.get(name).map(|h| h.permits.clone())
    }

    /// Takes a call token of the channel's rate cap now, or books a later turn for the call
    /// and says how long until it (no cap: always a token).
    pub fn take_call(&self, name: &str) -> Result<(), Duration> {
        let Some(h) = self.health.get(name) else {
            return Ok(());
        };
        let Some(rate) = &h.rate else {
            return Ok(());
        };
        rate.take_or_turn(Instant::now()).inspect_err(|_| {
            h.calls_paced.fetch_add(1, Ordering::Relaxed);
        })
    }

    /// Books a call token of the channel's rate cap that is free within `max_wait`: how long
    /// to wait before calling (zero: at once), or `None` when there is none that soon.
    pub fn reserve_call(&self, name: &str, max_wait: Duration) -> Option<Duration> {
        let Some(h) = self.health.get(name) else {
            return Some(Duration::ZERO);
        };
        let Some(rate) = &h.rate else {
            return Some(Duration::ZERO);
        };
        let booked = rate.reserve(Instant::now(), max_wait);
        if booked != Some(Duration::ZERO) {
            h.calls_paced.fetch_add(1, Ordering::Relaxed);
        }
        booked
    }

    /// For a call that found no token: how long until its turn, turns being spread at the
    /// channel's rate so put-off calls do not all come back at once.
    pub fn call_turn(&self, name: &str) -> Duration {
        self.health
            .get(name)
            .and_then(|h| h.rate.as_ref())
            .map_or(Duration::ZERO, |rate| rate.turn(Instant::now()))
    }
}

/// A token bucket capping one channel's upstream calls per second. It holds up to `burst`
/// tokens (the rate rounded up, at least 1) and refills continuously. A call takes a token now
/// ([`CallRate::take_or_turn`]) or books the next free one within a bound
/// ([`CallRate::reserve`]), the bucket going below zero by what is booked, so a caller waits
/// once for its own slot instead of trying again and again. Either way, in any window of `t`
/// seconds the calls made number at most `burst + rate * t`.
#[derive(Debug)]
pub struct CallRate {
    per_sec: f64,
    burst: f64,
    state: Mutex<RateState>,
}

#[derive(Debug)]
struct RateState {
    tokens: f64,
    at: Instant,
    /// The turn given to the last call put off (see [`CallRate::turn`]).
    last_turn: Instant,
}

impl CallRate {
    /// A full bucket for `per_sec` calls a second (a positive, finite number).
    pub fn new(per_sec: f64, now: Instant) -> CallRate {
        let per_sec = if per_sec.is_finite() && per_sec > 0.0 {
            per_sec
        } else {
            f64::MAX
        };
        let burst = per_sec.ceil().clamp(1.0, f64::from(u32::MAX));
        CallRate {
            per_sec,
            burst,
            state: Mutex::new(RateState {
                tokens: burst,
                at: now,
                last_turn: now,
            }),
        }
    }

    pub fn per_sec(&self) -> f64 {
        self.per_sec
    }

    pub fn burst(&self) -> u32 {
        self.burst as u32
    }

    /// The state refilled up to `now`. A poisoned lock is taken over: the state is plain
    /// numbers, always consistent.
    fn refilled(&self, now: Instant) -> std::sync::MutexGuard<'_, RateState> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if now > s.at {
            let elapsed = now.duration_since(s.at).as_secs_f64();
            s.tokens = (s.tokens + elapsed * self.per_sec).min(self.burst);
            s.at = now;
        }
        s
    }

    /// How long until a whole token is there, with `tokens` now.
    fn until_token(&self, tokens: f64) -> Duration {
        Duration::from_secs_f64(((1.0 - tokens) / self.per_sec).max(0.0))
    }

    /// Takes a token now, or gives the call a later turn ([`CallRate::turn`]).
    pub fn take_or_turn(&self, now: Instant) -> Result<(), Duration> {
        let mut s = self.refilled(now);
        if s.tokens >= 1.0 {
            s.tokens -= 1.0;
            return Ok(());
        }
        Err(self.next_turn(&mut s, now))
    }

    /// Books the next token if it is free within `max_wait`: how long until it is (the call
    /// must not go before), or `None` (nothing booked).
    pub fn reserve(&self, now: Instant, max_wait: Duration) -> Option<Duration> {
        let mut s = self.refilled(now);
        let wait = self.until_token(s.tokens);
        if wait > max_wait {
            return None;
        }
        s.tokens -= 1.0;
        Some(wait)
    }

    /// A turn for a call that found no token: when the next token is due, or one interval
    /// (1 / rate) after the turn given before, whichever is later. A caller that finds no token
    /// at its turn either (others took it) gets a new turn at the end of the line.
    pub fn turn(&self, now: Instant) -> Duration {
        let mut s = self.refilled(now);
        self.next_turn(&mut s, now)
    }

    fn next_turn(&self, s: &mut RateState, now: Instant) -> Duration {
        let interval = Duration::from_secs_f64(1.0 / self.per_sec);
        let turn = (now + self.until_token(s.tokens)).max(s.last_turn + interval);
        s.last_turn = turn;
        turn - now
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three remote channels of `model_h3`: `high` (priority 5) above `low-a` and `low-b`
    /// (weights 3 and 1); unhealthy after 3 failures in a row.
    fn setup(cooldown_ms: u64) -> (Routing, Vec<Arc<VideoChannel>>, tempfile::TempDir) {
        let route = |name: &str, priority: i32, weight: u32| ChannelRoute {
            name: name.to_owned(),
            priority,
            weight,
            tracked: true,
            max_concurrency: None,
            max_calls_per_sec: None,
        };
        let routes = [
            route("high", 5, 1),
            route("low-a", 0, 3),
            route("low-b", 0, 1),
        ];
        let dir = tempfile::tempdir().unwrap();
        let blobs: Arc<dyn store::BlobStore> =
            Arc::new(store::LocalBlobs::open(dir.path()).unwrap());
        let channels = routes
            .iter()
            .map(|c| {
                let settings = channels::RemoteSettings {
                    name: c.name.clone(),
                    models: vec!["model_h3".to_owned()],
                    base_url: "http://127.0.0.1:9".to_owned(),
                    api_key: None,
                    model_map: Default::default(),
                    timeouts: Default::default(),
                    min_poll_interval: Duration::from_secs(2),
                    max_inline_bytes: 1024,
                    result_urls: Default::default(),
                    network: Default::default(),
                };
                let settings = channels::VendorSettings {
                    remote: settings,
                    kind: Default::default(),
                    callback: None,
                    blobs: blobs.clone(),
                };
                Arc::new(
                    VideoChannel::vendor("openai-videos", settings, &Default::default(), false)
                        .unwrap(),
                )
            })
            .collect();
        (Routing::new(&routes, 3, cooldown_ms), channels, dir)
    }

    /// An `openai-videos` channel of `model_h3` whose vendor model makes `caps` (none:
    /// anything).
    fn channel(
        name: &str,
        caps: Option<channels::ModelCaps>,
        blobs: &Arc<dyn store::BlobStore>,
    ) -> Arc<VideoChannel> {
        let settings = channels::VendorSettings {
            remote: channels::RemoteSettings {
                name: name.to_owned(),
                models: vec!["model_h3".to_owned()],
                base_url: "http://127.0.0.1:9".to_owned(),
                api_key: None,
                model_map: Default::default(),
                timeouts: Default::default(),
                min_poll_interval: Duration::from_secs(2),
                max_inline_bytes: 1024,
                result_urls: Default::default(),
                network: Default::default(),
            },
            kind: Default::default(),
            callback: None,
            blobs: blobs.clone(),
        };
        let overrides = caps
            .map(|c| [("model_h3".to_owned(), c)].into())
            .unwrap_or_default();
        Arc::new(VideoChannel::vendor("openai-videos", settings, &overrides, false).unwrap())
    }

    #[test]
    fn only_channels_whose_model_makes_the_request_are_picked() {
        let dir = tempfile::tempdir().unwrap();
        let blobs: Arc<dyn store::BlobStore> =
            Arc::new(store::LocalBlobs::open(dir.path()).unwrap());
        let short = channels::ModelCaps {
            durations: vec![5],
            ..Default::default()
        };
        let long = channels::ModelCaps {
            durations: vec![10],
            last_frame: true,
            ..Default::default()
        };
        let route = |name: &str, priority: i32| ChannelRoute {
            name: name.to_owned(),
            priority,
            weight: 1,
            tracked: true,
            max_concurrency: None,
            max_calls_per_sec: None,
        };
        let routes = [route("short", 5), route("long", 0), route("any", -5)];
        let r = Routing::new(&routes, 3, 600_000);
        let c = vec![
            channel("short", Some(short), &blobs),
            channel("long", Some(long), &blobs),
            channel("any", None, &blobs),
        ];
        let ask = |duration: u32, last_frame: bool, tried: &[&str]| {
            let demand = Demand {
                duration,
                size: Some((1280, 720)),
                ratio: "16:9".into(),
                last_frame,
                ..Demand::default()
            };
            let tried: Vec<String> = tried.iter().map(|t| t.to_string()).collect();
            r.pick(&c, "model_h3", &demand, &tried)
                .map(|c| c.name().to_owned())
        };
        assert_eq!(ask(5, false, &[]).as_deref(), Some("short"));
        // 10 s: the higher priority cannot make it, so the next one that can does.
        assert_eq!(ask(10, false, &[]).as_deref(), Some("long"));
        // A last frame: the short one takes none, the long one makes no 5 s.
        assert_eq!(ask(5, true, &[]).as_deref(), Some("any"));
        assert_eq!(ask(10, true, &[]).as_deref(), Some("long"));
        // Failover stays among those that fit.
        assert_eq!(ask(10, false, &["long"]).as_deref(), Some("any"));
        assert_eq!(ask(10, false, &["long", "any"]), None);
    }

    fn pick(r: &Routing, c: &[Arc<VideoChannel>], tried: &[&str]) -> Option<String> {
        let tried: Vec<String> = tried.iter().map(|t| t.to_string()).collect();
        r.pick(c, "model_h3", &Demand::default(), &tried)
            .map(|c| c.name().to_owned())
    }

    #[test]
    fn higher_priority_first_then_weighted_and_unhealthy_skipped() {
        let (r, c, _dir) = setup(600_000);
        assert_eq!(pick(&r, &c, &[]).as_deref(), Some("high"));
        assert_eq!(
            r.pick(&c, "gen2-pro", &Demand::default(), &[]).map(|_| ()),
            None
        );
        let mut a = 0;
        for _ in 0..4000 {
            if pick(&r, &c, &["high"]).as_deref() == Some("low-a") {
                a += 1;
            }
        }
        assert!((2700..3300).contains(&a), "low-a chosen {a} times of 4000");
        assert_eq!(pick(&r, &c, &["high", "low-a", "low-b"]), None);

        for _ in 0..3 {
            r.failure("high");
        }
        assert!(!r.is_healthy("high"));
        assert_eq!(
            r.health("high")
                .unwrap()
                .marked_unhealthy
                .load(Ordering::Relaxed),
            1
        );
        assert_ne!(pick(&r, &c, &[]).as_deref(), Some("high"));
        r.success("high");
        assert!(r.is_healthy("high"));
        assert_eq!(
            r.health("high").unwrap().restored.load(Ordering::Relaxed),
            1
        );
        assert_eq!(pick(&r, &c, &[]).as_deref(), Some("high"));

        r.rate_limited("high", Some(Duration::from_secs(60)));
        assert_ne!(pick(&r, &c, &[]).as_deref(), Some("high"));
    }

    #[test]
    fn a_call_rate_gives_its_burst_then_spreads_turns_and_books_within_a_bound() {
        let t0 = Instant::now();
        let ms = |n: u64| Duration::from_millis(n);
        let rate = CallRate::new(4.0, t0);
        assert_eq!(rate.burst(), 4);
        for _ in 0..4 {
            assert_eq!(rate.take_or_turn(t0), Ok(()));
        }
        // Empty: put-off calls get turns one interval (250 ms) apart.
        assert_eq!(rate.take_or_turn(t0), Err(ms(250)));
        assert_eq!(rate.take_or_turn(t0), Err(ms(500)));
        assert_eq!(rate.turn(t0 + ms(100)), ms(650));
        // A token refills in 250 ms; a booking takes it, and the next one waits its slot.
        assert_eq!(rate.reserve(t0 + ms(250), ms(100)), Some(Duration::ZERO));
        assert_eq!(rate.reserve(t0 + ms(250), ms(100)), None, "250 ms away");
        assert_eq!(rate.reserve(t0 + ms(250), ms(300)), Some(ms(250)));
        // That booking is owed: no token at 500 ms, one at 750 ms.
        assert!(rate.take_or_turn(t0 + ms(500)).is_err());
        assert_eq!(rate.take_or_turn(t0 + ms(750)), Ok(()));
        // A slow rate still has a burst of one.
        assert_eq!(CallRate::new(0.5, t0).burst(), 1);
    }

    #[test]
    fn no_window_of_a_second_sees_more_than_burst_plus_rate_calls() {
        // Three callers every 10 ms for 6 s, taking, booking short and booking long; calls go
        // at the instant they are granted.
        let t0 = Instant::now();
        let rate = CallRate::new(5.0, t0);
        let mut calls: Vec<Duration> = Vec::new();
        for step in 0..600u64 {
            let now = t0 + Duration::from_millis(step * 10);
            let at = now - t0;
            if rate.take_or_turn(now).is_ok() {
                calls.push(at);
            }
            if let Some(wait) = rate.reserve(now, Duration::from_millis(300)) {
                calls.push(at + wait);
            }
            if step % 7 == 0
                && let Some(wait) = rate.reserve(now, Duration::from_secs(2))
            {
                calls.push(at + wait);
            }
        }
        calls.sort();
        let most = calls
            .iter()
            .map(|start| {
                calls
                    .iter()
                    .filter(|t| *t >= start && **t < *start + Duration::from_secs(1))
                    .count()
            })
            .max()
            .unwrap_or(0);
        assert!(most <= 5 + 5, "{most} calls in one second");
        // And the cap is used, not starved: about 5 a second after the burst.
        assert!(calls.len() >= 5 + 5 * 6 - 2, "{} calls", calls.len());
    }

    #[test]
    fn an_unhealthy_channel_gets_one_probe_per_cool_down() {
        let (r, c, _dir) = setup(0);
        for _ in 0..3 {
            r.failure("high");
        }
        // The cool-down (0 ms) has passed: the next pick is a probe.
        assert_eq!(pick(&r, &c, &[]).as_deref(), Some("high"));
        assert!(!r.is_healthy("high"));
    }
}
