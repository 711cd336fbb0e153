//! `vidu` channels against [`FakeVidu`]: both formats come back playable from the relay's own
//! copy, fetched from Vidu's file host without the key, and settled; text goes to
//! `text2video`, a first frame to `img2video`, first and last frames to `start-end2video`,
//! reference images to `reference2video`; failed and refused tasks and an expired result link
//! are refunded exactly; a rate limit, spent credits or a refused key fails over; a submission
//! that may have reached Vidu is never sent again; a client's cancel reaches Vidu and is
//! refunded once; the channel test reads the credits; no key shows in any answer or record;
//! Vidu's callback, signed under the key, brings the poll forward, and one not so signed is
//! refused.

use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use http::Method;
use serde_json::{Value, json};

use crate::fake_vidu::{API_KEY, FakeVidu};
use crate::harness::{Body, Relay, png, poll_until};
use crate::vendor_flows::{
    WAIT, admin_channel_test, asset, callback_config, completed_and_settled, config, entries_of,
    failed_and_refunded, first_format, library, never_sent_again, playable, poll_schedule,
    refunded, second_format, settled,
};

/// The key of the channels set up to be refused.
const WRONG: &str = "vda-wrong-key-never-shown-8812";

/// A `vidu` channel in front of `fake`: the first format's model_h3 and the second format's
/// gen2-pro both as `vendor_model`.
fn channel_of(name: &str, fake: &FakeVidu, priority: i32, key: &str, vendor_model: &str) -> String {
    format!(
        "[[channels]]\nname = \"{name}\"\nkind = \"vidu\"\nbase_url = \"{}\"\n\
         api_key = \"{key}\"\npriority = {priority}\n\
         models = [\"model_h3\", \"gen2-pro\"]\n\
         model_map = {{ \"model_h3\" = \"{vendor_model}\", \"gen2-pro\" = \"{vendor_model}\" }}\n",
        fake.base
    )
}

fn channel(name: &str, fake: &FakeVidu, priority: i32, key: &str) -> String {
    channel_of(name, fake, priority, key, "viduq3-pro")
}

/// Neither key shows in `text`.
fn assert_no_secret(text: &str) {
    for secret in [API_KEY, WRONG] {
        assert!(!text.contains(secret), "a key shows: {text}");
    }
}

fn data(bytes: &[u8]) -> String {
    format!("data:image/png;base64,{}", crate::harness::base64(bytes))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_formats_come_back_playable_and_settled() {
    let fake = FakeVidu::start().await;
    let relay = Relay::start(&config(&channel("vidu", &fake, 0, API_KEY))).await;
    let (key_id, key) = relay.new_key("vidu", Some(10_000)).await;

    let (_, done) = completed_and_settled(
        &relay,
        (&key_id, &key),
        json!({"model": "model_h3", "prompt": "a paper boat drifting on a pond at dawn",
               "seconds": "8", "size": "1280x720"}),
        80,
    )
    .await;
    let (path, body) = &fake.submissions()[0];
    assert_eq!(path, "/ent/v2/text2video");
    assert_eq!(
        body,
        &json!({"model": "viduq3-pro", "prompt": "a paper boat drifting on a pond at dawn",
                "duration": 8, "aspect_ratio": "16:9", "resolution": "720p"})
    );
    assert_no_secret(&done.to_string());
    assert!(!done.to_string().contains(&fake.base), "{done}");

    let id = second_format(
        &relay,
        &key,
        json!({"model": "gen2-pro", "prompt": "a heron takes off", "duration": 10,
               "resolution": "720p", "ratio": "9:16", "seed": 42}),
    )
    .await;
    let done = relay.wait_generation_as(&key, &id, WAIT).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    playable(&relay, &key, done["video_url"].as_str().expect("video_url")).await;
    // 10 s of gen2-pro at 720p at 8 a second; Vidu reports credits, not a length.
    assert_eq!(entries_of(&relay, &key_id, &id).await, settled(80));
    let (_, sent) = &fake.submissions()[1];
    assert_eq!(sent["duration"], 10);
    assert_eq!(sent["resolution"], "720p");
    assert_eq!(sent["aspect_ratio"], "9:16");
    assert_eq!(sent["seed"], 42);
    assert_no_secret(&done.to_string());
    assert!(!done.to_string().contains(&fake.files_base), "{done}");

    // Polls went to /ent/v2/tasks/{id}/creations; the videos came from the file host, which
    // never saw the key.
    assert!(
        fake.calls().iter().any(|(m, p)| m == "GET"
            && p.starts_with("/ent/v2/tasks/")
            && p.ends_with("/creations"))
    );
    assert_eq!(fake.state.file_requests.load(Ordering::SeqCst), 2);
    assert_eq!(fake.state.file_requests_with_key.load(Ordering::SeqCst), 0);
    let tasks = relay.admin(Method::GET, "/admin/tasks", Body::Empty).await;
    assert_eq!(tasks.status, 200, "{}", tasks.text());
    assert_no_secret(&tasks.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_go_to_img2video_and_start_end2video() {
    let fake = FakeVidu::start().await;
    let relay = Relay::start(&config(&channel("vidu", &fake, 0, API_KEY))).await;
    let key = relay.key.clone();
    let lib = library(&relay, &key).await;
    let (first, last) = (png(8, 8), png(8, 8));
    let first_id = asset(&relay, &key, &lib, "image", &first).await;
    let last_id = asset(&relay, &key, &lib, "image", &last).await;

    let id = second_format(
        &relay,
        &key,
        json!({"model": "gen2-pro", "prompt": "the cat starts running", "duration": 5,
               "resolution": "720p", "ratio": "adaptive",
               "assets": [{"id": first_id, "role": "first_frame"}]}),
    )
    .await;
    let done = relay.wait_generation(&id, WAIT).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let (path, sent) = &fake.submissions()[0];
    assert_eq!(path, "/ent/v2/img2video");
    assert_eq!(sent["images"], json!([data(&first)]));
    assert!(sent.get("aspect_ratio").is_none(), "{sent}");
    assert_eq!(sent["duration"], 5);

    let id = second_format(
        &relay,
        &key,
        json!({"model": "gen2-pro", "prompt": "from one to the other", "duration": 6,
               "resolution": "720p", "ratio": "adaptive",
               "assets": [{"id": first_id, "role": "first_frame"},
                          {"id": last_id, "role": "last_frame"}]}),
    )
    .await;
    let done = relay.wait_generation(&id, WAIT).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let (path, sent) = &fake.submissions()[1];
    assert_eq!(path, "/ent/v2/start-end2video");
    assert_eq!(sent["images"], json!([data(&first), data(&last)]));
    assert!(sent.get("aspect_ratio").is_none(), "{sent}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reference_images_go_to_reference2video() {
    let fake = FakeVidu::start().await;
    let relay = Relay::start(&config(&channel_of("q2", &fake, 0, API_KEY, "viduq2"))).await;
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
    let (path, sent) = &fake.submissions()[0];
    assert_eq!(path, "/ent/v2/reference2video");
    assert_eq!(sent["model"], "viduq2");
    assert_eq!(sent["images"], json!([data(&a), data(&b)]));
    assert_eq!(sent["aspect_ratio"], "16:9");

    // viduq2 makes no first frame: refused before anything is charged.
    let res = relay
        .call_as(
            &key,
            Method::POST,
            "/v1/video/generations",
            Body::Json(
                json!({"model": "gen2-pro", "prompt": "a first frame", "duration": 5,
                              "resolution": "720p", "ratio": "adaptive",
                              "assets": [{"id": a_id, "role": "first_frame"}]}),
            ),
            &[],
        )
        .await;
    assert_eq!(res.status, 400, "{}", res.text());
    assert_eq!(fake.submissions().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_and_refused_tasks_and_expired_links_are_refunded() {
    let fake = FakeVidu::start().await;
    let relay = Relay::start(&config(&channel("vidu", &fake, 0, API_KEY))).await;
    let (key_id, key) = relay.new_key("vidu", Some(10_000)).await;
    let task = |prompt: &str| json!({"model": "model_h3", "prompt": prompt, "seconds": "5", "size": "1280x720"});
    for (prompt, code) in [
        ("this one will [fail]", "upstream_error"),
        ("this one Vidu will [refuse]", "moderation_blocked"),
    ] {
        failed_and_refunded(&relay, (&key_id, &key), task(prompt), Some(code), 50).await;
    }
    // Refused at submission (the prompt did not pass review): refunded, no other channel.
    fake.fail_next(400, "AuditSubmitIllegal", "submit is illegal");
    failed_and_refunded(
        &relay,
        (&key_id, &key),
        task("refused at once"),
        Some("moderation_blocked"),
        50,
    )
    .await;
    // A link that expired before the relay fetched it.
    fake.state.expire_results.store(true, Ordering::SeqCst);
    failed_and_refunded(&relay, (&key_id, &key), task("fetched too late"), None, 50).await;
    let k = relay
        .admin(Method::GET, &format!("/admin/keys/{key_id}"), Body::Empty)
        .await
        .json();
    assert_eq!(k["quota_remaining"], 10_000, "{k}");
    assert_no_secret(
        &relay
            .ledger(&key_id)
            .await
            .iter()
            .map(Value::to_string)
            .collect::<String>(),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limits_spent_credits_and_a_refused_key_fail_over() {
    let (busy, spare) = (FakeVidu::start().await, FakeVidu::start().await);
    let channels = format!(
        "{}{}{}",
        channel("first", &busy, 10, API_KEY),
        channel("wrong-key", &busy, 5, WRONG),
        channel("spare", &spare, 0, API_KEY),
    );
    let relay = Relay::start(&config(&channels)).await;
    let (key_id, key) = relay.new_key("vidu", Some(10_000)).await;
    let task = |prompt: &str| json!({"model": "model_h3", "prompt": prompt, "seconds": "5", "size": "1280x720"});
    busy.fail_next(429, "TooManyRequests", "too many requests");
    let id = first_format(&relay, &key, task("failed over")).await;
    let done = relay.wait_video_as(&key, &id, WAIT).await;
    assert_eq!(done["status"], "completed", "{done}");
    // The 429 and the refused key each took nothing; the spare made it.
    assert!(busy.submissions().is_empty());
    assert_eq!(spare.submissions().len(), 1);
    let posts = |fake: &FakeVidu| {
        fake.calls()
            .iter()
            .filter(|(m, p)| m == "POST" && p == "/ent/v2/text2video")
            .count()
    };
    assert_eq!(posts(&busy), 2);
    assert_eq!(entries_of(&relay, &key_id, &id).await, settled(50));

    // Spent credits: the channel rests, the spare makes this task and the next.
    let (spent, spare) = (FakeVidu::start().await, FakeVidu::start().await);
    let relay = Relay::start(&config(&format!(
        "{}{}",
        channel("spent", &spent, 10, API_KEY),
        channel("spare", &spare, 0, API_KEY)
    )))
    .await;
    let key = relay.key.clone();
    spent.fail_next(400, "CreditInsufficient", "insufficient credits");
    for prompt in ["out of credits", "while it rests"] {
        let id = first_format(&relay, &key, task(prompt)).await;
        let done = relay.wait_video_as(&key, &id, WAIT).await;
        assert_eq!(done["status"], "completed", "{done}");
    }
    assert_eq!(posts(&spent), 1);
    assert_eq!(spare.submissions().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submission_that_may_have_reached_vidu_is_never_sent_again() {
    let (taker, spare) = (FakeVidu::start().await, FakeVidu::start().await);
    let channels = (
        channel("first", &taker, 10, API_KEY),
        channel("second", &spare, 0, API_KEY),
    );
    never_sent_again(
        (&taker, &spare),
        channels,
        "vidu",
        |prompt| json!({"model": "model_h3", "prompt": prompt, "seconds": "5", "size": "1280x720"}),
        50,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_cancel_reaches_vidu_and_is_refunded_once() {
    let fake = FakeVidu::start().await;
    let relay = Relay::start(&config(&channel("vidu", &fake, 0, API_KEY))).await;
    let (key_id, key) = relay.new_key("vidu", Some(10_000)).await;
    let id = first_format(
        &relay,
        &key,
        json!({"model": "model_h3", "prompt": "a long one [hold]", "seconds": "5",
               "size": "1280x720"}),
    )
    .await;
    // Wait until Vidu has it.
    let running = poll_until(WAIT, || async {
        let v = relay
            .call_as(
                &key,
                Method::GET,
                &format!("/v1/videos/{id}"),
                Body::Empty,
                &[],
            )
            .await
            .json();
        (v["status"] == "in_progress" && !fake.submissions().is_empty()).then_some(())
    })
    .await;
    assert!(running.is_some(), "the task never reached Vidu");
    let res = relay
        .call_as(
            &key,
            Method::POST,
            &format!("/v1/videos/{id}/cancel"),
            Body::Empty,
            &[],
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    // The cancel reaches Vidu, naming the task.
    let reached = poll_until(WAIT, || async {
        fake.calls()
            .iter()
            .any(|(m, p)| m == "POST" && p.starts_with("/ent/v2/tasks/") && p.ends_with("/cancel"))
            .then_some(())
    })
    .await;
    assert!(reached.is_some(), "{:?}", fake.calls());
    let done = relay.wait_video_as(&key, &id, WAIT).await;
    assert_eq!(done["status"], "cancelled", "{done}");
    assert_eq!(entries_of(&relay, &key_id, &id).await, refunded(50));
    // A second cancel changes nothing.
    relay
        .call_as(
            &key,
            Method::POST,
            &format!("/v1/videos/{id}/cancel"),
            Body::Empty,
            &[],
        )
        .await;
    assert_eq!(entries_of(&relay, &key_id, &id).await, refunded(50));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_channel_test_reads_the_credits() {
    let fake = FakeVidu::start().await;
    let relay = Relay::start(&config(&format!(
        "{}{}",
        channel("good", &fake, 0, API_KEY),
        channel("wrong", &fake, 0, WRONG)
    )))
    .await;
    for (name, status, http) in [("good", "ok", 200), ("wrong", "key_refused", 401)] {
        let v = admin_channel_test(&relay, name, assert_no_secret).await;
        assert_eq!(v["kind"], "vidu", "{v}");
        assert_eq!(v["status"], status, "{v}");
        assert_eq!(v["http_status"], http, "{v}");
    }
    assert!(
        fake.calls()
            .iter()
            .any(|(m, p)| m == "GET" && p == "/ent/v2/credits")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vidu_callback_signed_under_the_key_brings_the_poll_forward_and_no_other_does() {
    let fake = FakeVidu::start().await;
    // The task runs until the test ends it.
    fake.state.run_ms.store(600_000, Ordering::SeqCst);
    let with_secret = format!(
        "{}callback_secret = \"vidu-callback-secret-for-tests-7\"\n",
        channel("vidu", &fake, 0, API_KEY)
    );
    let relay = Relay::start(&callback_config(50, &with_secret)).await;
    let key = relay.key.clone();
    let id = first_format(
        &relay,
        &key,
        json!({"model": "model_h3", "prompt": "woken by Vidu", "seconds": "5", "size": "1280x720"}),
    )
    .await;

    // Vidu was handed the relay's callback URL for this task.
    let sent = poll_until(WAIT, || async { fake.submissions().first().cloned() })
        .await
        .expect("the submission");
    let url = sent.1["callback_url"].as_str().expect("callback_url");
    let prefix = format!("{}/callbacks/vidu/vidu?task={id}&token=", relay.base);
    assert!(url.starts_with(&prefix), "{url}");
    let vidu_id = fake.task_of(&id).expect("the task at Vidu");

    // Once the task is 1.8 s old, its next regular poll is at least 0.9 s away.
    let old = Duration::from_millis(1_800);
    let last = poll_until(WAIT, || async {
        fake.query_ages(&vidu_id)
            .last()
            .copied()
            .filter(|age| *age >= old)
    })
    .await
    .expect("polled when 1.8 s old");
    fake.finish(&vidu_id);

    // Callbacks not signed by Vidu under this channel's key are refused and write nothing.
    let before = poll_schedule(&relay, &id).await;
    let now = httpdate::fmt_http_date(SystemTime::now());
    let (status, body) = fake.call_back(&vidu_id, WRONG, &now).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(
        body["error"]["detail"], "the callback is not signed by the vendor",
        "{body}"
    );
    let stale = httpdate::fmt_http_date(SystemTime::now() - Duration::from_secs(16 * 60));
    let (status, _) = fake.call_back(&vidu_id, API_KEY, &stale).await;
    assert_eq!(status, 401);
    // Unsigned, with the relay's own token right: refused too.
    let path = url[relay.base.len()..].to_owned();
    let payload = json!({"id": vidu_id, "state": "success"});
    let res = relay
        .send(Method::POST, &path, Body::Json(payload.clone()), &[])
        .await;
    assert_eq!(res.status, 401, "{}", res.text());
    // Signed, but the relay's token is not this task's.
    let forged = path.replace("&token=", "&token=0");
    let res = relay
        .send(Method::POST, &forged, Body::Json(payload), &[])
        .await;
    assert_eq!(res.status, 401, "{}", res.text());
    assert_eq!(poll_schedule(&relay, &id).await, before);
    let res = relay.send(Method::GET, &path, Body::Empty, &[]).await;
    assert_eq!(res.status, 405);

    // Vidu's own callback brings the poll forward: the task completes well before its next
    // regular poll would have come.
    let now = httpdate::fmt_http_date(SystemTime::now());
    let (status, body) = fake.call_back(&vidu_id, API_KEY, &now).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, json!({"received": true, "polled": true}));
    let done = poll_until(Duration::from_millis(700), || async {
        let v = relay.get(&format!("/v1/videos/{id}")).await.json();
        (v["status"] == "completed").then_some(v)
    })
    .await;
    assert!(done.is_some(), "the callback did not move the task on");
    let ages = fake.query_ages(&vidu_id);
    let next = ages.iter().find(|age| **age > last).expect("a poll after");
    assert!(
        *next - last < last / 3,
        "polled at {next:?} of age, after {last:?}: not brought forward"
    );
    // Once the task has ended, a callback is answered and brings nothing forward.
    let now = httpdate::fmt_http_date(SystemTime::now());
    let (status, body) = fake.call_back(&vidu_id, API_KEY, &now).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["polled"], false, "{body}");
}
