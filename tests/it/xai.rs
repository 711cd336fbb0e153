//! `xai` channels against [`FakeXai`]: both formats come back playable from the relay's own
//! copy, fetched from xAI's file host without the key, and are settled on the `video.duration`
//! xAI reports; a first frame is `image.url`, reference images `reference_images` once the
//! operator's `[vendor_models]` entry allows them; failed, expired and withheld jobs and an expired
//! result link are refunded exactly; a rate limit or a refused key fails over; a submission
//! that may have reached xAI is never sent again; the channel test reads the key's record; no
//! key shows in any answer or record.

use std::sync::atomic::Ordering;

use http::Method;
use serde_json::json;

use crate::fake_xai::{API_KEY, FakeXai};
use crate::harness::{Body, Relay, png};
use crate::vendor_flows::{
    WAIT, admin_channel_test, asset, completed_and_settled, config, entries_of,
    failed_and_refunded, first_format, library, never_sent_again, playable, second_format, settled,
};

/// The key of the channels set up to be refused.
const WRONG: &str = "xai-wrong-key-never-shown-4471";

/// An `xai` channel in front of `fake`: the first format's model_h3 and the second format's
/// gen2-pro both as grok-imagine-video.
fn channel(name: &str, fake: &FakeXai, priority: i32, key: &str) -> String {
    format!(
        "[[channels]]\nname = \"{name}\"\nkind = \"xai\"\nbase_url = \"{}\"\n\
         api_key = \"{key}\"\npriority = {priority}\n\
         models = [\"model_h3\", \"gen2-pro\"]\n\
         model_map = {{ \"model_h3\" = \"grok-imagine-video\", \"gen2-pro\" = \"grok-imagine-video\" }}\n",
        fake.base
    )
}

/// Neither key shows in `text`.
fn assert_no_secret(text: &str) {
    for secret in [API_KEY, WRONG] {
        assert!(!text.contains(secret), "a key shows: {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_formats_come_back_playable_and_settled_on_the_reported_duration() {
    let fake = FakeXai::start().await;
    let relay = Relay::start(&config(&channel("grok", &fake, 0, API_KEY))).await;
    let (key_id, key) = relay.new_key("xai", Some(10_000)).await;

    // The OpenAI SDK's body, unchanged.
    // 8 s of model_h3 at 10 a second, settled on the 8 s xAI reported.
    let (_, done) = completed_and_settled(
        &relay,
        (&key_id, &key),
        json!({"model": "model_h3", "prompt": "a paper boat drifting on a pond at dawn",
               "seconds": "8", "size": "1280x720"}),
        80,
    )
    .await;
    assert_eq!(
        fake.submissions()[0],
        json!({"model": "grok-imagine-video", "prompt": "a paper boat drifting on a pond at dawn",
               "duration": 8, "aspect_ratio": "16:9", "resolution": "720p"})
    );
    assert_no_secret(&done.to_string());
    assert!(!done.to_string().contains(&fake.base), "{done}");

    // The second format at 480p; xAI reports 8 s of the 10 asked: 40 of the 50 pre-deducted.
    let id = second_format(
        &relay,
        &key,
        json!({"model": "gen2-pro", "prompt": "a heron takes off [short]", "duration": 10,
               "resolution": "480p", "ratio": "9:16"}),
    )
    .await;
    let done = relay.wait_generation_as(&key, &id, WAIT).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    playable(&relay, &key, done["video_url"].as_str().expect("video_url")).await;
    assert_eq!(
        entries_of(&relay, &key_id, &id).await,
        [("prededuct".to_owned(), -50), ("settle".to_owned(), 10)]
    );
    let sent = &fake.submissions()[1];
    assert_eq!(sent["duration"], 10);
    assert_eq!(sent["resolution"], "480p");
    assert_eq!(sent["aspect_ratio"], "9:16");
    assert!(sent.get("seed").is_none(), "{sent}");
    assert_no_secret(&done.to_string());
    assert!(!done.to_string().contains(&fake.files_base), "{done}");

    // Polls went to /v1/videos/{id}, never under /generations; the videos came from the file
    // host, which never saw the key.
    let calls = fake.calls();
    assert!(
        calls
            .iter()
            .any(|(m, p)| m == "GET" && p.starts_with("/v1/videos/d97415a1-"))
    );
    assert!(
        !calls
            .iter()
            .any(|(m, p)| m == "GET" && p.starts_with("/v1/videos/generations")),
        "{calls:?}"
    );
    assert_eq!(fake.state.file_requests.load(Ordering::SeqCst), 2);
    assert_eq!(fake.state.file_requests_with_key.load(Ordering::SeqCst), 0);
    // Nor does the admin's view of the tasks hold the key.
    let tasks = relay.admin(Method::GET, "/admin/tasks", Body::Empty).await;
    assert_eq!(tasks.status, 200, "{}", tasks.text());
    assert_no_secret(&tasks.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_frame_is_image_url() {
    let fake = FakeXai::start().await;
    let relay = Relay::start(&config(&channel("grok", &fake, 0, API_KEY))).await;
    let key = relay.key.clone();
    let lib = library(&relay, &key).await;
    let frame = png(8, 8);
    let frame_id = asset(&relay, &key, &lib, "image", &frame).await;

    let id = second_format(
        &relay,
        &key,
        json!({"model": "gen2-pro", "prompt": "the cat starts running", "duration": 5,
               "resolution": "720p", "ratio": "adaptive",
               "assets": [{"id": frame_id, "role": "first_frame"}]}),
    )
    .await;
    let done = relay.wait_generation(&id, WAIT).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let sent = &fake.submissions()[0];
    assert_eq!(
        sent["image"],
        json!({"url": format!("data:image/png;base64,{}", crate::harness::base64(&frame))})
    );
    // `adaptive` is the frame's own ratio (8x8: 1:1), one xAI makes.
    assert_eq!(sent["aspect_ratio"], "1:1", "{sent}");
    assert_eq!(sent["resolution"], "720p");
    assert_eq!(sent["duration"], 5);

    // A last frame has no field at xAI: refused before anything is charged.
    let res = relay
        .call_as(
            &key,
            Method::POST,
            "/v1/video/generations",
            Body::Json(
                json!({"model": "gen2-pro", "prompt": "from one to the other",
                "duration": 5, "resolution": "720p", "ratio": "adaptive",
                "assets": [{"id": frame_id, "role": "first_frame"},
                           {"id": frame_id, "role": "last_frame"}]}),
            ),
            &[],
        )
        .await;
    assert_eq!(res.status, 400, "{}", res.text());
    assert_eq!(fake.submissions().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_expired_and_withheld_jobs_and_expired_links_are_refunded() {
    let fake = FakeXai::start().await;
    let relay = Relay::start(&config(&channel("grok", &fake, 0, API_KEY))).await;
    let (key_id, key) = relay.new_key("xai", Some(10_000)).await;
    let task = |prompt: &str| json!({"model": "model_h3", "prompt": prompt, "seconds": "5", "size": "1280x720"});
    for (prompt, code) in [
        ("this one will [fail]", "upstream_error"),
        ("this one will [expire]", "upstream_error"),
        ("this one xAI will [withhold]", "moderation_blocked"),
    ] {
        failed_and_refunded(&relay, (&key_id, &key), task(prompt), Some(code), 50).await;
    }
    let expired = first_format(&relay, &key, task("this one will [expire] too")).await;
    let done = relay.wait_video_as(&key, &expired, WAIT).await;
    assert_eq!(
        done["error"]["message"], "the upstream task expired before it finished",
        "{done}"
    );
    // A link that expired before the relay fetched it.
    fake.state.expire_results.store(true, Ordering::SeqCst);
    failed_and_refunded(&relay, (&key_id, &key), task("fetched too late"), None, 50).await;
    // Every credit came back.
    let k = relay
        .admin(Method::GET, &format!("/admin/keys/{key_id}"), Body::Empty)
        .await
        .json();
    assert_eq!(k["quota_remaining"], 10_000, "{k}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_or_a_refused_key_fails_over_and_the_channel_test_reads_the_key() {
    let (busy, spare) = (FakeXai::start().await, FakeXai::start().await);
    let channels = format!(
        "{}{}{}",
        channel("first", &busy, 10, API_KEY),
        channel("wrong-key", &busy, 5, WRONG),
        channel("spare", &spare, 0, API_KEY),
    );
    let relay = Relay::start(&config(&channels)).await;
    let (key_id, key) = relay.new_key("xai", Some(10_000)).await;
    busy.fail_next(429, "Too many requests. Please slow down.");
    let id = first_format(
        &relay,
        &key,
        json!({"model": "model_h3", "prompt": "failed over", "seconds": "5", "size": "1280x720"}),
    )
    .await;
    let done = relay.wait_video_as(&key, &id, WAIT).await;
    assert_eq!(done["status"], "completed", "{done}");
    // The 429 and the refused key each took nothing; the spare made it.
    assert!(busy.submissions().is_empty());
    assert_eq!(spare.submissions().len(), 1);
    assert_eq!(
        busy.calls()
            .iter()
            .filter(|(m, p)| m == "POST" && p == "/v1/videos/generations")
            .count(),
        2
    );
    assert_eq!(entries_of(&relay, &key_id, &id).await, settled(50));

    // The channel test, through the admin API: the key's record.
    let test = |name| admin_channel_test(&relay, name, assert_no_secret);
    let ok = test("first").await;
    assert_eq!(ok["kind"], "xai", "{ok}");
    assert_eq!(ok["status"], "ok", "{ok}");
    assert_eq!(ok["http_status"], 200, "{ok}");
    // xAI answers a wrong key 400 and names it (this fake names it whole): refused, unshown.
    let refused = test("wrong-key").await;
    assert_eq!(refused["status"], "key_refused", "{refused}");
    assert_eq!(refused["http_status"], 400, "{refused}");
    assert!(
        busy.calls()
            .iter()
            .any(|(m, p)| m == "GET" && p == "/v1/api-key")
    );
    // A key xAI has blocked answers its record with 200: refused too.
    busy.state.block_key.store(true, Ordering::SeqCst);
    let blocked = test("first").await;
    assert_eq!(blocked["status"], "key_refused", "{blocked}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exhausted_credits_fail_over_and_rest_the_channel() {
    let (spent, spare) = (FakeXai::start().await, FakeXai::start().await);
    let channels = format!(
        "{}{}",
        channel("spent", &spent, 10, API_KEY),
        channel("spare", &spare, 0, API_KEY),
    );
    let relay = Relay::start(&config(&channels)).await;
    let key = relay.key.clone();
    spent.fail_next(
        429,
        "Your team 5ea6f6bd has either used all available credits or reached its monthly spending limit. To continue making API requests, please purchase more credits or raise your spending limit.",
    );
    let task = |prompt: &str| json!({"model": "model_h3", "prompt": prompt, "seconds": "5", "size": "1280x720"});
    let first = first_format(&relay, &key, task("out of credits")).await;
    let done = relay.wait_video_as(&key, &first, WAIT).await;
    assert_eq!(done["status"], "completed", "{done}");
    // The spent channel rests (a minute): the next task goes to the spare without asking it.
    let second = first_format(&relay, &key, task("while it rests")).await;
    let done = relay.wait_video_as(&key, &second, WAIT).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(spent.calls().iter().filter(|(m, _)| m == "POST").count(), 1);
    assert_eq!(spare.submissions().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submission_that_may_have_reached_xai_is_never_sent_again() {
    let (taker, spare) = (FakeXai::start().await, FakeXai::start().await);
    let channels = (
        channel("first", &taker, 10, API_KEY),
        channel("second", &spare, 0, API_KEY),
    );
    never_sent_again(
        (&taker, &spare),
        channels,
        "xai",
        |prompt| json!({"model": "model_h3", "prompt": prompt, "seconds": "5", "size": "1280x720"}),
        50,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reference_images_go_once_the_operator_describes_them() {
    let fake = FakeXai::start().await;
    // No built-in entry takes reference images; an operator's entry says the model does.
    let described = "[vendor_models.\"grok-imagine-video\"]\nresolutions = [\"480p\", \"720p\"]\n\
                     reference_images = 2\naudio = true\n";
    let relay = Relay::start(&config(&format!(
        "{}{described}",
        channel("grok", &fake, 0, API_KEY)
    )))
    .await;
    let key = relay.key.clone();
    let lib = library(&relay, &key).await;
    let (a, b) = (png(8, 8), png(6, 6));
    let a_id = asset(&relay, &key, &lib, "image", &a).await;
    let b_id = asset(&relay, &key, &lib, "image", &b).await;
    let id = second_format(
        &relay,
        &key,
        json!({"model": "gen2-pro", "prompt": "the two of them walk together", "duration": 6,
               "resolution": "720p", "ratio": "16:9",
               "assets": [{"id": a_id, "role": "reference_image"},
                          {"id": b_id, "role": "reference_image"}]}),
    )
    .await;
    let done = relay.wait_generation(&id, WAIT).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let sent = &fake.submissions()[0];
    let data = |bytes: &[u8]| format!("data:image/png;base64,{}", crate::harness::base64(bytes));
    assert_eq!(
        sent["reference_images"],
        json!([{"url": data(&a)}, {"url": data(&b)}])
    );
    assert!(sent.get("image").is_none(), "{sent}");
    assert_eq!(sent["aspect_ratio"], "16:9");
}
