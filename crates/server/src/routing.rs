//! Which video channel runs a task: among the channels serving its model, the highest
//! `priority` tier with a channel available, then a weighted random choice by `weight` inside
//! it. A channel is unavailable while it is unhealthy (after `channel_failure_threshold`
//! failed upstream calls in a row; one probe goes through every `channel_cooldown_ms`, and a
//! success restores it) or resting after a 429. The in-process simulator is always healthy.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use channels::VideoChannel;
use rand::Rng;
use tokio::sync::Semaphore;

use crate::app::now_ms;
use crate::config::{ChannelKind, Config};

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
    /// Times the channel was marked unhealthy, and restored.
    pub marked_unhealthy: AtomicU64,
    pub restored: AtomicU64,
    /// Submissions that moved on from this channel to another one.
    pub failovers: AtomicU64,
}

pub struct Routing {
    health: HashMap<String, Health>,
    threshold: u32,
    cooldown_ms: u64,
}

impl Routing {
    pub fn new(config: &Config) -> Routing {
        let health = config
            .channels
            .iter()
            .map(|c| {
                let concurrency = c.max_concurrency.unwrap_or(DEFAULT_CONCURRENCY).max(1);
                (
                    c.name.clone(),
                    Health {
                        priority: c.priority,
                        weight: c.weight.max(1),
                        tracked: c.kind != ChannelKind::Simulator,
                        failures: AtomicU32::new(0),
                        probe_at_ms: AtomicU64::new(0),
                        busy_until_ms: AtomicU64::new(0),
                        permits: Arc::new(Semaphore::new(concurrency as usize)),
                        marked_unhealthy: AtomicU64::new(0),
                        restored: AtomicU64::new(0),
                        failovers: AtomicU64::new(0),
                    },
                )
            })
            .collect();
        Routing {
            health,
            threshold: config.tasks.channel_failure_threshold.max(1),
            cooldown_ms: config.tasks.channel_cooldown_ms,
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

    /// Chooses a channel for `model`, skipping those named in `tried`. An unhealthy channel
    /// whose cool-down has passed is chosen as a probe (one per cool-down).
    pub fn pick(
        &self,
        channels: &[Arc<VideoChannel>],
        model: &str,
        tried: &[String],
    ) -> Option<Arc<VideoChannel>> {
        let now = now_ms();
        let usable = |c: &&Arc<VideoChannel>| {
            let name = c.name();
            if !c.serves(model) || tried.iter().any(|t| t == name) {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup(extra: &str) -> (Routing, Vec<Arc<VideoChannel>>, tempfile::TempDir) {
        let text = format!(
            "[tasks]\nchannel_failure_threshold = 3\n{extra}\n\
             [[channels]]\nname = \"high\"\nkind = \"openai-videos\"\nbase_url = \"http://127.0.0.1:9\"\nmodels = [\"model_h3\"]\npriority = 5\n\
             [[channels]]\nname = \"low-a\"\nkind = \"openai-videos\"\nbase_url = \"http://127.0.0.1:9\"\nmodels = [\"model_h3\"]\nweight = 3\n\
             [[channels]]\nname = \"low-b\"\nkind = \"ark\"\nbase_url = \"http://127.0.0.1:9\"\nmodels = [\"model_h3\"]\nweight = 1\n"
        );
        let config = Config::from_toml(Some(&text), "t.toml").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let blobs: Arc<dyn store::BlobStore> =
            Arc::new(store::LocalBlobs::open(dir.path()).unwrap());
        let channels = config
            .channels
            .iter()
            .map(|c| {
                let settings = channels::RemoteSettings {
                    name: c.name.clone(),
                    models: c.models.clone(),
                    base_url: c.base_url.clone().unwrap_or_default(),
                    api_key: None,
                    model_map: Default::default(),
                    timeouts: Default::default(),
                    min_poll_interval: Duration::from_secs(2),
                    max_inline_bytes: 1024,
                };
                Arc::new(VideoChannel::OpenaiVideos(
                    channels::openai_videos::OpenaiVideos::new(settings, blobs.clone()),
                ))
            })
            .collect();
        (Routing::new(&config), channels, dir)
    }

    fn pick(r: &Routing, c: &[Arc<VideoChannel>], tried: &[&str]) -> Option<String> {
        let tried: Vec<String> = tried.iter().map(|t| t.to_string()).collect();
        r.pick(c, "model_h3", &tried).map(|c| c.name().to_owned())
    }

    #[test]
    fn higher_priority_first_then_weighted_and_unhealthy_skipped() {
        let (r, c, _dir) = setup("channel_cooldown_ms = 600000");
        assert_eq!(pick(&r, &c, &[]).as_deref(), Some("high"));
        assert_eq!(r.pick(&c, "gen2-pro", &[]).map(|_| ()), None);
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
    fn an_unhealthy_channel_gets_one_probe_per_cool_down() {
        let (r, c, _dir) = setup("channel_cooldown_ms = 0");
        for _ in 0..3 {
            r.failure("high");
        }
        // The cool-down (0 ms) has passed: the next pick is a probe.
        assert_eq!(pick(&r, &c, &[]).as_deref(), Some("high"));
        assert!(!r.is_healthy("high"));
    }
}
