//! What the tests of real vendor kinds share: fast polls, tasks of both formats, frames and
//! references as asset-library assets, the ledger of a task, what a submission that may have
//! reached its vendor leaves behind, and the relay's copy of a result downloaded and probed as
//! a playable MP4.

use std::time::Duration;

use http::Method;
use serde_json::{Value, json};

use crate::harness::{Body, Multipart, Relay, poll_until};

pub const WAIT: Duration = Duration::from_secs(20);

/// Fast polls and a short cool-down, private URLs allowed (the fakes live on loopback), then
/// the channels.
pub fn config(channels: &str) -> String {
    format!(
        "[tasks]\npoll_interval_min_ms = 20\npoll_interval_max_ms = 200\nchannel_cooldown_ms = 300\nunknown_status_polls = 3\n{channels}"
    )
}

/// Creates a first-format task as `key` (the OpenAI SDK's JSON body) and answers its id.
pub async fn first_format(relay: &Relay, key: &str, body: Value) -> String {
    let res = relay
        .call_as(key, Method::POST, "/v1/videos", Body::Json(body), &[])
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    res.json()["id"].as_str().expect("id").to_owned()
}

/// Creates a second-format task as `key` and answers its id.
pub async fn second_format(relay: &Relay, key: &str, body: Value) -> String {
    let res = relay
        .call_as(
            key,
            Method::POST,
            "/v1/video/generations",
            Body::Json(body),
            &[],
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    res.json()["task_id"].as_str().expect("task_id").to_owned()
}

/// The kinds and amounts of a key's ledger entries for task `id`, oldest first.
pub async fn entries_of(relay: &Relay, key_id: &str, id: &str) -> Vec<(String, i64)> {
    relay
        .ledger(key_id)
        .await
        .iter()
        .filter(|e| e["task_id"] == id)
        .map(|e| {
            (
                e["kind"].as_str().unwrap_or_default().to_owned(),
                e["amount"].as_i64().unwrap_or_default(),
            )
        })
        .collect()
}

/// The ledger of a task that succeeded at `price`, or failed and was refunded.
pub fn settled(price: i64) -> Vec<(String, i64)> {
    vec![("prededuct".into(), -price), ("settle".into(), 0)]
}

pub fn refunded(price: i64) -> Vec<(String, i64)> {
    vec![("prededuct".into(), -price), ("refund".into(), price)]
}

/// The value of `relay_upstream_ambiguous_submissions_total` for `channel` (0 when absent).
pub async fn ambiguous_count(relay: &Relay, channel: &str) -> f64 {
    let res = relay.admin(Method::GET, "/metrics", Body::Empty).await;
    assert_eq!(res.status, 200, "{}", res.text());
    let wanted = format!("relay_upstream_ambiguous_submissions_total{{channel=\"{channel}\"}} ");
    res.text()
        .lines()
        .find_map(|l| l.strip_prefix(&wanted))
        .map_or(0.0, |v| v.trim().parse().expect("a number"))
}

/// What submissions that may have reached the vendor of channel `taker` leave behind: each
/// task of `ids` (first format, as `key`, priced `price`) failed as unconfirmed, refunded once,
/// the key's quota whole again (`quota`), and each counted for the operator on `taker`, none
/// on `spare`.
pub async fn assert_never_sent_again(
    relay: &Relay,
    (key_id, key): (&str, &str),
    ids: &[&str],
    price: i64,
    quota: i64,
    (taker, spare): (&str, &str),
) {
    for id in ids {
        let done = relay.wait_video_as(key, id, WAIT).await;
        assert_eq!(done["status"], "failed", "{done}");
        assert_eq!(done["error"]["code"], "upstream_error", "{done}");
        assert_eq!(
            done["error"]["message"], "the upstream did not confirm the task",
            "{done}"
        );
        assert_eq!(entries_of(relay, key_id, id).await, refunded(price), "{id}");
    }
    let k = relay
        .admin(Method::GET, &format!("/admin/keys/{key_id}"), Body::Empty)
        .await
        .json();
    assert_eq!(k["quota_remaining"], quota, "{k}");
    assert_eq!(ambiguous_count(relay, taker).await, ids.len() as f64);
    assert_eq!(ambiguous_count(relay, spare).await, 0.0);
}

/// When the relay last polled task `id` and when it will next (unix ms), as its store has it.
pub async fn poll_schedule(relay: &Relay, id: &str) -> (Option<u64>, Option<u64>) {
    let task = relay
        .app
        .store
        .task_shared(id)
        .await
        .expect("the store")
        .expect("the task");
    (task.polled_ms, task.next_poll_ms)
}

/// Polls start `min_ms` apart and then grow with a task's age (half of it, up to a minute), so
/// that an old task's next poll is far off; callbacks on; then the channels.
pub fn callback_config(min_ms: u64, channels: &str) -> String {
    format!(
        "[tasks]\npoll_interval_min_ms = {min_ms}\npoll_interval_max_ms = 60000\nchannel_cooldown_ms = 300\n{channels}"
    )
}

/// Downloads `path` (a relay path, or a URL on the relay) as `key`, and probes it as an MP4
/// with a video track.
pub async fn playable(relay: &Relay, key: &str, path: &str) -> channels::mp4probe::Mp4Info {
    let path = path.find("/files/").map_or(path, |at| &path[at..]);
    let res = relay
        .call_as(key, Method::GET, path, Body::Empty, &[])
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    channels::mp4probe::probe_bytes(&res.body).expect("a playable MP4")
}

/// A new asset library's id.
pub async fn library(relay: &Relay, key: &str) -> String {
    let res = relay
        .call_as(
            key,
            Method::POST,
            "/v1/asset-libraries",
            Body::Json(json!({"name": "refs"})),
            &[],
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    res.json()["id"].as_str().expect("library id").to_owned()
}

/// Uploads `bytes` as an asset of `kind` into `lib` and waits until it is active.
pub async fn asset(relay: &Relay, key: &str, lib: &str, kind: &str, bytes: &[u8]) -> String {
    let (ct, body) = Multipart::new()
        .text("type", kind)
        .file("file", "reference", "application/octet-stream", bytes)
        .build();
    let res = relay
        .call_as(
            key,
            Method::POST,
            &format!("/v1/asset-libraries/{lib}/assets"),
            Body::Raw(ct, body),
            &[],
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let id = res.json()["id"].as_str().expect("asset id").to_owned();
    let active = poll_until(WAIT, || async {
        let v = relay
            .call_as(
                key,
                Method::GET,
                &format!("/v1/assets/{id}"),
                Body::Empty,
                &[],
            )
            .await
            .json();
        (v["status"] == "active").then_some(())
    })
    .await;
    assert!(active.is_some(), "asset {id} never became active");
    id
}
