//! `cargo xtask crash --chaos`: the crash run's kill cycles with the relay's video tasks on a
//! fake vendor that misbehaves, and the checks of what the vendor saw.
//!
//! The fake ([`FakeVideo`], in this process, so it outlives every relay it serves) speaks
//! `openai-videos`; the relay reaches it through two channels of that kind, so refusals fail
//! over from one to the other. At random (its draws seeded from the run's seed) it closes the
//! connection after reading a submission (with a task made, or none), answers one after the
//! relay's first-byte timeout, answers 429, 500 or an error inside a `200`, fails or loses a
//! task (its polls answer 404), and cuts a result download off halfway. It keeps, by the
//! `Idempotency-Key` the relay sends (the relay's task id), how it answered every submission,
//! and which tasks it made, finished and delivered whole; every prompt is unique, so a task
//! made twice shows in its count of tasks per prompt too.
//!
//! After the crash run's own audit, on top of it: no submission reached the vendor after one
//! that may have been taken (answered, closed, late, dropped), nor did any prompt make two
//! tasks; no task whose video the relay served was refunded, nor one whose video the vendor
//! delivered whole (unless its client cancelled it); every task the vendor completed is, at
//! the relay, completed with the vendor's video served whole, or failed or cancelled (and then
//! refunded, which the crash audit checks); and the relay completed no task the vendor did not.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use http::{Method, StatusCode};
use serde_json::{Value, json};

use super::conn::Conn;
use super::facts::{Facts, Found};
use super::workload::{Rng, Seen, Worker};
use crate::fake_video::{FAKE_KEY, FakeVideo, Taken, fake_mp4, seed_chances};

/// Operations one connection sends at most in one cycle.
const MAX_OPS_PER_WORKER: u32 = 60;
/// The longest pause between two operations of a connection, in ms: the load is a steady
/// trickle of tasks, not a flood (every completed one is downloaded again by the checks).
const MAX_PAUSE_MS: u64 = 40;
/// How long an upstream task runs, in ms.
const RUN_MS: u64 = 400;

/// How often each misbehaviour happens, in thousandths of the requests it applies to.
const CLOSE: u32 = 50;
const DROP: u32 = 30;
const LATE: u32 = 40;
const RATE_LIMIT: u32 = 80;
const SERVER_ERROR: u32 = 60;
const ERROR_200: u32 = 40;
const TASK_FAIL: u32 = 50;
const LOSE: u32 = 50;
const RESET_DOWNLOAD: u32 = 150;

/// The relay's configuration: two channels to the fake with a first-byte timeout of 1 s (a
/// late answer comes after 1.5 s), fast polls, a short claim lease (a killed relay's tasks
/// are soon taken up again) and a task timeout well past a task's life.
pub fn config(fake: &FakeVideo) -> String {
    let channel = |name: &str, priority: i32| {
        format!(
            "[[channels]]\nname = \"{name}\"\nkind = \"openai-videos\"\nbase_url = \"{}\"\n\
             api_key = \"{FAKE_KEY}\"\nmodels = [\"model_h3\"]\npriority = {priority}\n\
             request_timeout_secs = 1\n",
            fake.openai_base()
        )
    };
    format!(
        "[tasks]\ntimeout_secs = 60\npoll_interval_min_ms = 50\npoll_interval_max_ms = 400\n\
         claim_lease_secs = 2\nchannel_cooldown_ms = 300\nsubmit_attempts = 4\n\
         [limits]\nrps = 100000\nburst = 100000\npoll_rps_per_task = 100000\n{}{}",
        channel("chaos-a", 10),
        channel("chaos-b", 0)
    )
}

/// Starts the fake vendor on 127.0.0.1 with every misbehaviour switched on.
pub async fn start_fake(seed: u64) -> FakeVideo {
    seed_chances(seed);
    let fake = FakeVideo::start().await;
    let sw = &fake.switches;
    sw.run_ms.store(RUN_MS, Ordering::SeqCst);
    sw.late_ms.store(1_500, Ordering::SeqCst);
    for (switch, permille) in [
        (&sw.close_permille, CLOSE),
        (&sw.drop_permille, DROP),
        (&sw.late_permille, LATE),
        (&sw.rate_limit_permille, RATE_LIMIT),
        (&sw.submit_fail_permille, SERVER_ERROR),
        (&sw.error_200_permille, ERROR_200),
        (&sw.task_fail_permille, TASK_FAIL),
        (&sw.lose_permille, LOSE),
        (&sw.reset_download_permille, RESET_DOWNLOAD),
    ] {
        switch.store(permille, Ordering::SeqCst);
    }
    fake
}

/// Starts one connection's load (its prompts marked with the run's `seed`).
pub fn start(seed: u64, w: Worker) -> tokio::task::JoinHandle<()> {
    let marker = format!("seed {seed} cycle {} worker {}", w.cycle, w.index);
    tokio::spawn(worker(w.base, w.key, w.rng, marker, w.seen, w.killed))
}

/// One connection's load: video submissions (each with a prompt of its own), cancels, polls
/// and downloads of the content of tasks the relay reports completed, until the relay dies.
async fn worker(
    base: String,
    key: String,
    mut rng: Rng,
    marker: String,
    seen: Arc<Seen>,
    killed: Arc<AtomicBool>,
) {
    let mut conn = Conn::new(&base);
    let bearer = format!("Bearer {key}");
    let auth = [("authorization", bearer.as_str())];
    let video = fake_mp4();
    for op in 0..MAX_OPS_PER_WORKER {
        if killed.load(Ordering::SeqCst) {
            return;
        }
        let roll = rng.below(100);
        let result = if roll < 45 {
            let prompt = format!("chaos {marker} op {op}");
            let body = json!({"model": "model_h3", "prompt": prompt, "size": "64x64",
                              "seconds": "5"});
            conn.send(Method::POST, "/v1/videos", &auth, Some(&body))
                .await
                .map(|(status, body)| {
                    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    match (status, v["id"].as_str()) {
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
        } else {
            match seen.random_acked(&mut rng) {
                None => Ok(()),
                Some(id) if roll < 52 => {
                    let path = format!("/v1/videos/{id}/cancel");
                    let res = conn.send(Method::POST, &path, &auth, None).await;
                    if matches!(res, Ok((StatusCode::OK, _))) {
                        seen.cancels.fetch_add(1, Ordering::Relaxed);
                    }
                    res.map(drop)
                }
                Some(id) if roll < 85 => {
                    match conn.get_json(&format!("/v1/videos/{id}"), &key).await {
                        Ok((StatusCode::OK, v)) if v["status"] == "completed" => {
                            download(&mut conn, &auth, &id, &video, &seen).await
                        }
                        other => other.map(drop),
                    }
                }
                // The content of a task whatever its state (refused until it is completed).
                Some(id) => download(&mut conn, &auth, &id, &video, &seen).await,
            }
        };
        if result.is_err() {
            // The relay is gone (or going): this connection's part of the cycle is over.
            return;
        }
        let pause = rng.below(MAX_PAUSE_MS + 1);
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
}

/// Downloads a task's content through the relay; the vendor's video whole is noted as served.
async fn download(
    conn: &mut Conn,
    auth: &[(&str, &str)],
    id: &str,
    video: &[u8],
    seen: &Seen,
) -> anyhow::Result<()> {
    let (status, body) = conn
        .send(Method::GET, &format!("/v1/videos/{id}/content"), auth, None)
        .await?;
    if status == StatusCode::OK
        && body == video
        && let Ok(mut served) = seen.served.lock()
    {
        served.insert(id.to_owned());
    }
    Ok(())
}

/// What the vendor saw and did, and what became of it at the relay.
#[derive(Debug, Default)]
pub struct Counts {
    /// Submissions that reached the vendor, and the tasks they made.
    pub received: usize,
    pub made: usize,
    /// How submissions were answered instead: a task made and the connection closed, none
    /// made and closed, a task made and answered after the first-byte timeout; 429, 500,
    /// an error inside a `200`.
    pub closed: usize,
    pub dropped: usize,
    pub late: usize,
    pub rate_limited: u32,
    pub server_errors: u32,
    pub errors_in_200: u32,
    /// Vendor tasks failed, lost (polls answer 404), completed, and completed with the video
    /// delivered whole; result downloads cut off.
    pub vendor_failed: usize,
    pub lost: usize,
    pub vendor_completed: usize,
    pub delivered: usize,
    pub resets: u32,
    /// Relay tasks by final status, contents served during the load and checked whole after.
    pub completed: usize,
    pub failed: usize,
    pub cancelled: usize,
    pub served: usize,
    pub checked: usize,
    /// Tasks submitted again after a submission the vendor may have taken (each a violation).
    pub resent: usize,
}

/// What the checks read of the fake vendor: how it answered each submission and what became
/// of each task it made, by the relay's task id, and the tasks it made per prompt.
pub struct Vendor {
    pub received: HashMap<String, Vec<&'static str>>,
    pub taken: HashMap<String, Taken>,
    pub accepted: HashMap<String, u32>,
}

/// The answers to a submission after which the vendor may hold a task: nothing may follow.
const MAY_HAVE_TAKEN: &[&str] = &["answered", "closed", "late", "dropped", "replay"];

/// The chaos checks over what the relay shows (`facts`), what the vendor saw (`vendor`) and
/// the tasks whose video the relay served during the load: their violations, and the counts
/// of the vendor's side (the misbehaviours injected are the fake's to count).
pub fn check(facts: &Facts, vendor: &Vendor, served: &HashSet<String>) -> (Counts, Vec<String>) {
    let mut violations = Vec::new();
    let mut counts = Counts {
        received: vendor.received.values().map(Vec::len).sum(),
        made: vendor.accepted.values().map(|n| *n as usize).sum(),
        served: served.len(),
        ..Counts::default()
    };
    let ordered: BTreeMap<&String, &Vec<&str>> = vendor.received.iter().collect();
    for (task, answers) in ordered {
        for answer in answers {
            match *answer {
                "closed" => counts.closed += 1,
                "dropped" => counts.dropped += 1,
                "late" => counts.late += 1,
                _ => {}
            }
        }
        // Never sent again once it may have been taken.
        if let Some(at) = answers.iter().position(|a| MAY_HAVE_TAKEN.contains(a))
            && at + 1 < answers.len()
        {
            counts.resent += 1;
            violations.push(format!(
                "task {task} was submitted to the vendor again after a submission it may have \
                 taken: {answers:?}"
            ));
        }
    }
    let mut twice: Vec<(&String, &u32)> = vendor.accepted.iter().filter(|(_, n)| **n > 1).collect();
    twice.sort();
    if !twice.is_empty() {
        violations.push(format!(
            "{} prompts made more than one vendor task, e.g. {:?}",
            twice.len(),
            &twice[..twice.len().min(5)]
        ));
    }

    let refunded = |id: &str| {
        facts
            .entries
            .iter()
            .any(|e| e["task_id"] == id && e["kind"] == "refund")
    };
    let status_of = |id: &str| match facts.tasks.get(id) {
        Some(Found::Final(s)) => Some(s.as_str()),
        _ => None,
    };
    let mut served: Vec<&String> = served.iter().collect();
    served.sort();
    for id in served {
        if status_of(id) != Some("completed") || refunded(id) {
            violations.push(format!(
                "the relay served {id}'s video, yet the task is {:?}{}",
                facts.tasks.get(id),
                if refunded(id) { " and refunded" } else { "" }
            ));
        }
    }

    // Every task the vendor made, by what became of it there and at the relay.
    let ordered: BTreeMap<&String, &Taken> = vendor.taken.iter().collect();
    for (id, t) in ordered {
        match t.status {
            "failed" => counts.vendor_failed += 1,
            "lost" => counts.lost += 1,
            "completed" => counts.vendor_completed += 1,
            _ => {}
        }
        counts.delivered += usize::from(t.delivered);
        if !facts.tasks.contains_key(id) {
            violations.push(format!(
                "the vendor made a task for {id} ({}), which the relay does not know",
                t.status
            ));
            continue;
        }
        match status_of(id) {
            Some("completed") if t.status != "completed" || !t.delivered => {
                violations.push(format!(
                    "the relay completed {id}, but the vendor's task is {} (delivered whole: {})",
                    t.status, t.delivered
                ));
            }
            Some("failed") if t.delivered => violations.push(format!(
                "the vendor delivered {id}'s video whole, yet the relay failed the task{}",
                if refunded(id) { " and refunded it" } else { "" }
            )),
            _ => {}
        }
    }
    for (id, found) in &facts.tasks {
        let Found::Final(status) = found else {
            continue;
        };
        match status.as_str() {
            "completed" => {
                counts.completed += 1;
                if !vendor.taken.contains_key(id) {
                    violations.push(format!(
                        "the relay completed {id}, which no submission to the vendor made"
                    ));
                }
            }
            "failed" => counts.failed += 1,
            "cancelled" => counts.cancelled += 1,
            _ => {}
        }
    }
    (counts, violations)
}

/// The chaos checks, after the crash run's own (`facts` gathered after the last start, the
/// relay at `base` with the key `secret`): [`check`], then the content of every completed
/// task downloaded through the relay, which must be the vendor's video whole. Violations go
/// to `violations`.
pub async fn verify(
    base: &str,
    secret: &str,
    facts: &Facts,
    fake: &FakeVideo,
    seen: &Seen,
    violations: &mut Vec<String>,
) -> anyhow::Result<Counts> {
    let vendor = Vendor {
        received: fake.received(),
        taken: fake.taken(),
        accepted: fake.accepted(),
    };
    let served = seen
        .served
        .lock()
        .map_err(|_| anyhow::anyhow!("a load task panicked"))?
        .clone();
    let (mut counts, found) = check(facts, &vendor, &served);
    violations.extend(found);
    let injected = &fake.switches.injected;
    counts.rate_limited = injected.rate_limited.load(Ordering::Relaxed);
    counts.server_errors = injected.server_errors.load(Ordering::Relaxed);
    counts.errors_in_200 = injected.errors_in_200.load(Ordering::Relaxed);
    counts.resets = injected.resets.load(Ordering::Relaxed);

    let mut conn = Conn::new(base);
    let auth = format!("Bearer {secret}");
    let video = fake_mp4();
    let completed = facts
        .tasks
        .iter()
        .filter(|(_, f)| matches!(f, Found::Final(s) if s == "completed"))
        .map(|(id, _)| id);
    for id in completed {
        let (status, body) = conn
            .send(
                Method::GET,
                &format!("/v1/videos/{id}/content"),
                &[("authorization", &auth)],
                None,
            )
            .await?;
        if status == StatusCode::OK && body == video {
            counts.checked += 1;
        } else {
            violations.push(format!(
                "completed task {id}: its content answered {status} with {} bytes, not the \
                 vendor's {} bytes",
                body.len(),
                video.len()
            ));
        }
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn taken(status: &'static str, delivered: bool) -> Taken {
        Taken {
            times: 1,
            answer: "answered",
            status,
            delivered,
        }
    }

    /// A run that went right: a task completed and served, one failed upstream and refunded,
    /// one refused by a 429 then made on the other channel and lost (refunded), one cancelled
    /// by its client after the vendor made it, one the vendor took and closed on (refunded),
    /// one refused inside a 200 (refunded, nothing made).
    fn good() -> (Facts, Vendor, HashSet<String>) {
        let final_ = |s: &str| Found::Final(s.to_owned());
        let mut facts = Facts::default();
        for (id, status) in [
            ("video_1", "completed"),
            ("video_2", "failed"),
            ("video_3", "failed"),
            ("video_4", "cancelled"),
            ("video_5", "failed"),
            ("video_6", "failed"),
        ] {
            facts.tasks.insert(id.to_owned(), final_(status));
            facts
                .entries
                .push(json!({"task_id": id, "kind": "prededuct", "amount": -10}));
            let end = if status == "completed" {
                "settle"
            } else {
                "refund"
            };
            facts
                .entries
                .push(json!({"task_id": id, "kind": end, "amount": 10}));
        }
        let received = [
            ("video_1", vec!["answered"]),
            ("video_2", vec!["answered"]),
            ("video_3", vec!["429", "500", "answered"]),
            ("video_4", vec!["answered"]),
            ("video_5", vec!["closed"]),
            ("video_6", vec!["error_200"]),
        ]
        .map(|(id, a)| (id.to_owned(), a))
        .into();
        let taken = [
            ("video_1", taken("completed", true)),
            ("video_2", taken("failed", false)),
            ("video_3", taken("lost", false)),
            ("video_4", taken("completed", true)),
            ("video_5", taken("completed", false)),
        ]
        .map(|(id, t)| (id.to_owned(), t))
        .into();
        let accepted = (1..=5).map(|n| (format!("prompt {n}"), 1)).collect();
        let vendor = Vendor {
            received,
            taken,
            accepted,
        };
        (facts, vendor, ["video_1".to_owned()].into())
    }

    fn violations(facts: &Facts, vendor: &Vendor, served: &HashSet<String>) -> String {
        check(facts, vendor, served).1.join("\n")
    }

    #[test]
    fn a_run_that_went_right_passes_and_is_counted() {
        let (facts, vendor, served) = good();
        let (counts, violations) = check(&facts, &vendor, &served);
        assert!(violations.is_empty(), "{violations:?}");
        assert_eq!(
            (counts.received, counts.made, counts.closed, counts.lost),
            (8, 5, 1, 1)
        );
        assert_eq!(
            (counts.vendor_completed, counts.delivered, counts.completed),
            (3, 2, 1)
        );
        assert_eq!((counts.failed, counts.cancelled, counts.served), (4, 1, 1));
    }

    #[test]
    fn each_broken_promise_is_named() {
        // Sent again after the vendor may have taken it: closed, dropped, answered or late.
        for first in ["closed", "dropped", "answered", "late"] {
            let (facts, mut vendor, served) = good();
            vendor
                .received
                .insert("video_5".into(), vec!["500", first, "answered"]);
            let (counts, v) = check(&facts, &vendor, &served);
            assert_eq!(counts.resent, 1, "{first}");
            let v = v.join("\n");
            assert!(
                v.contains("task video_5 was submitted to the vendor again"),
                "{first}: {v}"
            );
        }

        // One prompt, two vendor tasks.
        let (facts, mut vendor, served) = good();
        vendor.accepted.insert("prompt 2".into(), 2);
        assert!(violations(&facts, &vendor, &served).contains("1 prompts made more than one"));

        // A video served, then its task failed and refunded.
        let (mut facts, vendor, served) = good();
        facts
            .tasks
            .insert("video_1".into(), Found::Final("failed".into()));
        facts.entries[1] = json!({"task_id": "video_1", "kind": "refund", "amount": 10});
        let v = violations(&facts, &vendor, &served);
        assert!(v.contains("the relay served video_1's video, yet"), "{v}");
        assert!(
            v.contains("delivered video_1's video whole, yet the relay failed"),
            "{v}"
        );

        // Completed at the relay, not at the vendor; completed with no vendor task at all.
        let (mut facts, vendor, served) = good();
        facts
            .tasks
            .insert("video_2".into(), Found::Final("completed".into()));
        facts
            .tasks
            .insert("video_6".into(), Found::Final("completed".into()));
        let v = violations(&facts, &vendor, &served);
        assert!(
            v.contains("the relay completed video_2, but the vendor's task is failed"),
            "{v}"
        );
        assert!(
            v.contains("video_6, which no submission to the vendor made"),
            "{v}"
        );

        // A vendor task for a task the relay does not know.
        let (facts, mut vendor, served) = good();
        vendor
            .taken
            .insert("video_9".into(), taken("completed", false));
        let v = violations(&facts, &vendor, &served);
        assert!(
            v.contains("a task for video_9 (completed), which the relay does not know"),
            "{v}"
        );
    }
}
