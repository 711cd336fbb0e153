//! Streams are bounded: an upstream event that never ends (`data:` lines without an empty
//! line) is cut at `server.max_stream_event_bytes` with an `error` event in the vendor's
//! format, the upstream request is let go, and what was relayed before is charged. With
//! `RUN_SLOW_TESTS=1`, 300 MB of such lines through the relay binary leave its peak RSS
//! within a few times the default cap.

use std::time::Duration;

use serde_json::{Value, json};

use super::{TIMEOUTS, chat_config, events, kinds, ledger, message};
use crate::fake_chat::{FakeChat, Switches};
use crate::harness::{Http, Relay, poll_until, start_binary};

/// The cap the relay is given here: 1 MiB.
const CAP: usize = 1 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_that_never_ends_is_cut_at_the_cap_with_an_error_event() {
    let fake = FakeChat::start(Switches {
        flood: Some(40 << 20),
        ..Switches::default()
    })
    .await;
    let config = format!(
        "[server]\nmax_stream_event_bytes = {CAP}\n{}",
        chat_config(&fake.base, &fake.base, TIMEOUTS)
    );
    let relay = Relay::start(&config).await;
    for model in ["native-chat", "conv-chat"] {
        let body = json!({"model": model, "max_tokens": 64, "stream": true,
            "messages": [{"role": "user", "content": "flood me"}]});
        let res = message(&relay, body).await;
        assert_eq!(res.status, 200, "{model}: {}", res.text());
        // Nothing of the endless event reached the client: the events before it, then the
        // error.
        assert!(
            res.body.len() < 4096,
            "{model}: {} bytes relayed",
            res.body.len()
        );
        let got = events(&res.body);
        let names: Vec<&str> = got.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names.first(), Some(&"message_start"), "{model}: {names:?}");
        let (name, error) = got.last().expect("an event");
        assert_eq!(name, "error", "{model}: {names:?}");
        assert_eq!(
            error,
            &json!({"type": "error", "error": {"type": "api_error",
                "message": "the upstream sent an event larger than the relay accepts"}}),
            "{model}"
        );
    }
    // The upstream request was let go long before the 40 MB were sent.
    let dropped = poll_until(Duration::from_secs(5), || async {
        fake.cancelled().then_some(())
    });
    assert!(
        dropped.await.is_some(),
        "the upstream stream was not let go"
    );
    // Each message is charged once, for what was relayed.
    let relay = &relay;
    let charges = poll_until(Duration::from_secs(5), || async move {
        let k = kinds(&ledger(relay).await);
        (k.len() == 2).then_some(k)
    })
    .await
    .expect("two charges");
    assert!(
        charges
            .iter()
            .all(|(kind, amount)| kind == "charge" && *amount < 0),
        "{charges:?}"
    );
}

/// A field of `/proc/<pid>/status` in KiB (`VmRSS`, `VmHWM`).
fn status_kib(pid: u32, field: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_megabytes_without_a_boundary_leave_rss_within_the_cap() {
    if std::env::var("RUN_SLOW_TESTS").as_deref() != Ok("1") {
        return;
    }
    const DEFAULT_CAP_MIB: u64 = 16;
    let fake = FakeChat::start(Switches {
        flood: Some(300 << 20),
        ..Switches::default()
    })
    .await;
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("relay.toml");
    std::fs::write(&config, chat_config(&fake.base, &fake.base, TIMEOUTS)).expect("config");
    let relay = start_binary(&dir.path().join("data"), &config).await;
    let key = relay
        .lines
        .iter()
        .find_map(|l| l.strip_prefix("first API key").map(str::to_owned))
        .and_then(|l| l.rsplit(' ').next().map(str::to_owned))
        .expect("a first key");
    let pid = relay.child.id().expect("pid");
    let http = Http::new();
    let url = format!("{}/v1/messages", relay.base);
    let auth = [
        ("x-api-key", key.clone()),
        ("anthropic-version", "2023-06-01".to_owned()),
    ];
    // Warm: one ordinary message, so that what follows measures the stream alone.
    let plain = json!({"model": "native-chat", "max_tokens": 8,
        "messages": [{"role": "user", "content": "hi"}]});
    let res = http
        .send(
            http::Method::POST,
            &url,
            crate::harness::Body::Json(plain),
            &auth,
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let before = status_kib(pid, "VmHWM");
    for model in ["native-chat", "conv-chat"] {
        let body = json!({"model": model, "max_tokens": 64, "stream": true,
            "messages": [{"role": "user", "content": "flood me"}]});
        let res = http
            .send(
                http::Method::POST,
                &url,
                crate::harness::Body::Json(body),
                &auth,
            )
            .await;
        assert_eq!(res.status, 200, "{model}: {}", res.text());
        let last: Option<Value> = events(&res.body).last().map(|(_, v)| v.clone());
        assert_eq!(
            last.as_ref().map(|v| v["type"].clone()),
            Some(json!("error")),
            "{model}"
        );
    }
    let after = status_kib(pid, "VmHWM");
    let grown_mib = after.saturating_sub(before) / 1024;
    eprintln!(
        "300 MB without a boundary, twice: peak RSS {} MiB before, {} MiB after (+{grown_mib} MiB; cap {DEFAULT_CAP_MIB} MiB)",
        before / 1024,
        after / 1024
    );
    // One event's bytes held back and decoded: a few times the cap at most, never the flood.
    assert!(
        grown_mib <= 4 * DEFAULT_CAP_MIB,
        "peak RSS grew {grown_mib} MiB"
    );
}
