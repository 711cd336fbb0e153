//! The load of a cycle: connections sending submissions of both formats (with simulator
//! scenarios), cancels, polls and messages at random, until the relay is SIGKILLed at a
//! random moment; the seeded random numbers behind every choice.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use http::{Method, StatusCode};
use serde_json::{Value, json};

use super::conn::{Conn, REQUEST_TIMEOUT};
use super::options::Options;

/// Operations one connection sends at most in one cycle.
const MAX_OPS_PER_WORKER: u32 = 80;

/// Simulator directives a submission carries: plain runs, failures, timeouts, upstream errors.
const SCENARIOS: &[&str] = &["", "", "", "fail", "stuck", "delay_ms=800", "error=500"];

/// SplitMix64: small, seedable, and the same everywhere.
#[derive(Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    /// A generator for one part of the run, independent of the others' draws.
    pub fn derive(seed: u64, parts: &[u64]) -> Rng {
        let mut rng = Rng(seed);
        for p in parts {
            rng.0 ^= p.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            rng.next();
        }
        rng
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Video,
    Generation,
}

impl Format {
    pub fn of(id: &str) -> Option<Format> {
        if id.starts_with("video_") {
            Some(Format::Video)
        } else if id.starts_with("gen_") {
            Some(Format::Generation)
        } else {
            None
        }
    }
    pub fn path(self, id: &str) -> String {
        match self {
            Format::Video => format!("/v1/videos/{id}"),
            Format::Generation => format!("/v1/video/generations/{id}"),
        }
    }
    pub fn is_final(self, status: &str) -> bool {
        match self {
            Format::Video => matches!(status, "completed" | "failed" | "cancelled"),
            Format::Generation => matches!(status, "succeeded" | "failed" | "cancelled"),
        }
    }
}

/// What the load saw: acknowledged tasks (shared by every cycle, so cancels and polls reach
/// tasks of earlier cycles too) and counts.
#[derive(Default)]
pub struct Seen {
    pub acked: Mutex<Vec<String>>,
    /// Tasks whose video the relay served whole (the chaos run's load).
    pub served: Mutex<std::collections::HashSet<String>>,
    pub messages: AtomicU64,
    pub cancels: AtomicU64,
    pub refused: AtomicU64,
}

impl Seen {
    pub fn random_acked(&self, rng: &mut Rng) -> Option<String> {
        let acked = self.acked.lock().ok()?;
        if acked.is_empty() {
            return None;
        }
        Some(acked[rng.below(acked.len() as u64) as usize].clone())
    }
}

/// One connection of a cycle's load, as [`drive`] hands it to the load's starter.
pub struct Worker {
    pub base: String,
    pub key: String,
    /// Its own draws: from the run's seed, the cycle and its number.
    pub rng: Rng,
    pub cycle: u32,
    /// Its number in the cycle.
    pub index: u32,
    pub seen: Arc<Seen>,
    /// Set once the relay is killed.
    pub killed: Arc<AtomicBool>,
}

/// Starts the crash run's load on one connection: submissions of both formats with simulator
/// scenarios, cancels, polls and messages.
pub fn start(w: Worker) -> tokio::task::JoinHandle<()> {
    tokio::spawn(worker(w.base, w.key, w.rng, w.cycle, w.seen, w.killed))
}

/// Drives load on `workers` connections, each started by `start`, and SIGKILLs the relay
/// `kill_after` in; returns when every connection has seen the end.
#[allow(clippy::too_many_arguments)]
pub async fn drive(
    base: &str,
    key: &str,
    opts: &Options,
    cycle: u32,
    kill_after: Duration,
    child: &mut std::process::Child,
    seen: &Arc<Seen>,
    start: &dyn Fn(Worker) -> tokio::task::JoinHandle<()>,
) -> anyhow::Result<()> {
    let killed = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for index in 0..opts.workers {
        workers.push(start(Worker {
            base: base.to_owned(),
            key: key.to_owned(),
            rng: Rng::derive(opts.seed, &[u64::from(cycle), u64::from(index) + 1]),
            cycle,
            index,
            seen: Arc::clone(seen),
            killed: Arc::clone(&killed),
        }));
    }
    // The wait is the point: the kill lands at a random moment of the load.
    tokio::time::sleep(kill_after).await;
    child.kill().context("SIGKILL")?;
    killed.store(true, Ordering::SeqCst);
    let _ = child.wait();
    // Every connection now fails at once; wait for the workers to record what they were
    // answered before the kill.
    for w in workers {
        match tokio::time::timeout(REQUEST_TIMEOUT + Duration::from_secs(5), w).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => bail!("a load task failed: {e}"),
            Err(_) => bail!("a load task did not stop after the kill"),
        }
    }
    Ok(())
}

async fn worker(
    base: String,
    key: String,
    mut rng: Rng,
    cycle: u32,
    seen: Arc<Seen>,
    killed: Arc<AtomicBool>,
) {
    let mut conn = Conn::new(&base);
    let bearer = format!("Bearer {key}");
    for op in 0..MAX_OPS_PER_WORKER {
        if killed.load(Ordering::SeqCst) {
            return;
        }
        let roll = rng.below(100);
        let prompt = format!("crash cycle {cycle} op {op}");
        let result = if roll < 45 {
            let format = if roll < 30 {
                Format::Video
            } else {
                Format::Generation
            };
            let scenario = *rng.pick(SCENARIOS);
            let (path, body) = match format {
                Format::Video => (
                    "/v1/videos",
                    json!({"model": "model_h3", "prompt": prompt, "size": "64x64",
                           "duration": 5 + rng.below(3)}),
                ),
                Format::Generation => (
                    "/v1/video/generations",
                    json!({"model": "gen2-lite", "prompt": prompt, "duration": 5,
                           "resolution": "480p", "ratio": "1:1"}),
                ),
            };
            let mut headers = vec![("authorization", bearer.as_str())];
            if !scenario.is_empty() {
                headers.push(("x-relay-sim", scenario));
            }
            conn.send(Method::POST, path, &headers, Some(&body))
                .await
                .map(|(status, body)| {
                    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    let id = v["task_id"].as_str().or(v["id"].as_str());
                    match (status, id) {
                        (StatusCode::OK, Some(id)) => {
                            if let Ok(mut acked) = seen.acked.lock() {
                                acked.push(id.to_owned());
                            }
                        }
                        _ => {
                            seen.refused.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
        } else if roll < 55 {
            match seen.random_acked(&mut rng) {
                Some(id) => {
                    let format = Format::of(&id).unwrap_or(Format::Video);
                    let path = format!("{}/cancel", format.path(&id));
                    let res = conn
                        .send(Method::POST, &path, &[("authorization", &bearer)], None)
                        .await;
                    if matches!(res, Ok((StatusCode::OK, _))) {
                        seen.cancels.fetch_add(1, Ordering::Relaxed);
                    }
                    res.map(drop)
                }
                None => Ok(()),
            }
        } else if roll < 80 {
            let path = match seen.random_acked(&mut rng) {
                Some(id) if roll < 75 => Format::of(&id).unwrap_or(Format::Video).path(&id),
                _ => "/v1/videos?limit=5".to_owned(),
            };
            conn.send(Method::GET, &path, &[("authorization", &bearer)], None)
                .await
                .map(drop)
        } else {
            let stream = roll >= 90;
            let body = json!({"model": "sim-chat", "max_tokens": 16 + rng.below(48), "stream": stream,
                              "messages": [{"role": "user", "content": prompt}]});
            let res = conn
                .send(
                    Method::POST,
                    "/v1/messages",
                    &[
                        ("x-api-key", key.as_str()),
                        ("anthropic-version", "2023-06-01"),
                    ],
                    Some(&body),
                )
                .await;
            if matches!(res, Ok((StatusCode::OK, _))) {
                seen.messages.fetch_add(1, Ordering::Relaxed);
            }
            res.map(drop)
        };
        if result.is_err() {
            // The relay is gone (or going): this connection's part of the cycle is over.
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_repeats_its_draws() {
        let draws = |seed| {
            let mut rng = Rng::derive(seed, &[3, 1]);
            (0..8).map(|_| rng.below(1000)).collect::<Vec<_>>()
        };
        assert_eq!(draws(42), draws(42));
        assert_ne!(draws(42), draws(43));
    }
}
