//! What the tests of real vendor kinds share: fast polls, tasks of both formats, frames and
//! references as asset-library assets, the ledger of a task, a task that is made and settled
//! or fails and is refunded, the flow that proves a submission that may have reached its
//! vendor is never sent again, the channel test run in process or over the admin API, the
//! relay's copy of a result downloaded and probed as a playable MP4, and the Google kinds'
//! keys, ledgers, multipart bodies and byte-exact copies.

use std::sync::atomic::Ordering;
use std::time::Duration;

use http::Method;
use serde_json::{Value, json};

use crate::fake_vendor::TakesSubmissions;
use crate::fake_veo::veo_mp4;
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

/// Creates a first-format task `body` as `key` (of `key_id`) that the vendor makes, waits for
/// it: completed, the relay's copy a playable H.264 MP4, settled at `price`. Answers its id
/// and record.
pub async fn completed_and_settled(
    relay: &Relay,
    (key_id, key): (&str, &str),
    body: Value,
    price: i64,
) -> (String, Value) {
    let id = first_format(relay, key, body).await;
    let done = relay.wait_video_as(key, &id, WAIT).await;
    assert_eq!(done["status"], "completed", "{done}");
    let info = playable(relay, key, &format!("/v1/videos/{id}/content")).await;
    assert_eq!(info.codec, "avc1");
    assert_eq!(entries_of(relay, key_id, &id).await, settled(price));
    (id, done)
}

/// Creates a first-format task `body` as `key` (of `key_id`) that the vendor fails, waits for
/// it: failed (with error `code` when given) and refunded its `price`. Answers its record.
pub async fn failed_and_refunded(
    relay: &Relay,
    (key_id, key): (&str, &str),
    body: Value,
    code: Option<&str>,
    price: i64,
) -> Value {
    let prompt = body["prompt"].clone();
    let id = first_format(relay, key, body).await;
    let done = relay.wait_video_as(key, &id, WAIT).await;
    assert_eq!(done["status"], "failed", "{done}");
    if let Some(code) = code {
        assert_eq!(done["error"]["code"], code, "{prompt}: {done}");
    }
    assert_eq!(
        entries_of(relay, key_id, &id).await,
        refunded(price),
        "{prompt}"
    );
    done
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

/// A submission that may have reached the vendor is never sent again: with `first` (on
/// `taker`, preferred) and `second` (on `spare`) as the channels and many attempts allowed,
/// a first-format task (`task` of a prompt, priced `price`, as a key of `group`) taken and
/// hung up on, and one taken and answered without an id, each reach `taker` once and `spare`
/// never, and fail unconfirmed and refunded.
pub async fn never_sent_again<F: TakesSubmissions>(
    (taker, spare): (&F, &F),
    (first, second): (String, String),
    group: &str,
    task: impl Fn(&str) -> Value,
    price: i64,
) {
    // Many attempts allowed: none may be used on a submission the vendor may have taken.
    let channels = format!("submit_attempts = 8\n{first}{second}");
    let relay = Relay::start(&config(&channels)).await;
    let (key_id, key) = relay.new_key(group, Some(10_000)).await;

    // Taken, then the connection closed without an answer.
    taker.hang_up_submissions().store(1, Ordering::SeqCst);
    let closed = first_format(&relay, &key, task("closed on me")).await;
    relay.wait_video_as(&key, &closed, WAIT).await;
    // Taken, and answered as accepted without an id.
    taker.no_id_submissions().store(1, Ordering::SeqCst);
    let blank = first_format(&relay, &key, task("answered without an id")).await;
    relay.wait_video_as(&key, &blank, WAIT).await;

    // Each reached the first channel once, the second never.
    assert_eq!(taker.prompts(), ["closed on me", "answered without an id"]);
    assert!(spare.prompts().is_empty());
    assert_never_sent_again(
        &relay,
        (&key_id, &key),
        &[&closed, &blank],
        price,
        10_000,
        ("first", "second"),
    )
    .await;
}

/// The channel test of each channel `name` of `verdicts`, run in process, gives its verdict,
/// and its detail shows none of `hidden`.
pub async fn assert_channel_tests(relay: &Relay, verdicts: &[(&str, &str)], hidden: &[&str]) {
    for (name, verdict) in verdicts {
        let channel = relay
            .app
            .engine
            .channels()
            .iter()
            .find(|c| c.name() == *name)
            .cloned()
            .expect("the channel");
        let check = channel.check().await;
        assert_eq!(check.verdict.as_str(), *verdict, "{name}: {check:?}");
        for secret in hidden {
            assert!(!check.detail.contains(secret), "{check:?}");
        }
    }
}

/// The operator's channel test of channel `name` over the admin API: answered 200, its text
/// passing `clean` (nothing secret in it), its JSON.
pub async fn admin_channel_test(relay: &Relay, name: &str, clean: fn(&str)) -> Value {
    let res = relay
        .admin(
            Method::POST,
            &format!("/admin/channels/{name}/test"),
            Body::Empty,
        )
        .await;
    assert_eq!(res.status, 200, "{name}: {}", res.text());
    clean(&res.text());
    res.json()
}

/// How long the Google kinds' tests wait for a task (their fakes' operations run longer).
pub const GOOGLE_WAIT: Duration = Duration::from_secs(30);

/// A key named `name` of `group` with 1000 credits: (id, secret).
pub async fn key_of_group(relay: &Relay, name: &str, group: &str) -> (String, String) {
    let res = relay
        .admin(
            Method::POST,
            "/admin/keys",
            Body::Json(json!({"name": name, "group": group, "quota": 1000})),
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let v = res.json();
    (
        v["id"].as_str().unwrap().to_owned(),
        v["key"].as_str().unwrap().to_owned(),
    )
}

/// The ledger of `key_id` as (kind, amount), oldest first.
pub async fn ledger(relay: &Relay, key_id: &str) -> Vec<(String, i64)> {
    relay
        .ledger(key_id)
        .await
        .iter()
        .map(|e| {
            (
                e["kind"].as_str().unwrap().to_owned(),
                e["amount"].as_i64().unwrap(),
            )
        })
        .collect()
}

/// Ledger entries as [`ledger`] answers them.
pub fn entries(list: &[(&str, i64)]) -> Vec<(String, i64)> {
    list.iter().map(|(k, a)| ((*k).to_owned(), *a)).collect()
}

/// Creates a first-format task from a multipart body as the OpenAI SDK sends it.
pub async fn create_multipart(relay: &Relay, secret: &str, form: Multipart) -> String {
    let (ct, body) = form.build();
    let res = relay
        .call_as(secret, Method::POST, "/v1/videos", Body::Raw(ct, body), &[])
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    res.json()["id"].as_str().unwrap().to_owned()
}

/// The OpenAI SDK's multipart body: 8 s of `model_h3` at 1280x720.
pub fn sdk_form(prompt: &str) -> Multipart {
    Multipart::new()
        .text("model", "model_h3")
        .text("prompt", prompt)
        .text("seconds", "8")
        .text("size", "1280x720")
}

/// Creates a text-to-video task as `secret` and waits for its end.
pub async fn run_one(relay: &Relay, secret: &str, prompt: &str) -> Value {
    let id = create_multipart(relay, secret, sdk_form(prompt)).await;
    relay.wait_video_as(secret, &id, GOOGLE_WAIT).await
}

/// The relay's copy of a finished first-format task: the fakes' MP4, byte for byte, playable;
/// its record passes `clean` (nothing of the vendor in it).
pub async fn content(relay: &Relay, secret: &str, id: &str, clean: fn(&str)) {
    let done = relay.wait_video_as(secret, id, GOOGLE_WAIT).await;
    assert_eq!(done["status"], "completed", "{done}");
    clean(&done.to_string());
    let video = relay
        .call_as(
            secret,
            Method::GET,
            &format!("/v1/videos/{id}/content"),
            Body::Empty,
            &[],
        )
        .await;
    assert_eq!(video.status, 200);
    assert_eq!(video.body.as_ref(), veo_mp4());
    channels::mp4probe::probe(std::io::Cursor::new(video.body.to_vec())).expect("a playable MP4");
}

/// The bytes of an inline image of a Google request (`bytesBase64Encoded`).
pub fn decoded(image: &Value) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(image["bytesBase64Encoded"].as_str().unwrap())
        .unwrap()
}
