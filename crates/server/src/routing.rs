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
