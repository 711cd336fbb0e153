//! `runway` channels against [`FakeRunway`]: both formats come back playable from the relay's
//! own copy and are settled as asked (Runway reports no length); a first frame is
//! `promptImage`, first and last frames its array on a Veo model; gen4_aleph edits a reference
//! video on `/v1/video_to_video`; failures, content refusals
//! and an expired output URL are refunded exactly; a 429 fails over to a second channel; a
//! submission that may have reached Runway is never sent again; a client's cancel reaches
//! `DELETE /v1/tasks/{id}` with the version header and is refunded once; every call names the
//! version; the key shows in no answer or record.

use std::sync::atomic::Ordering;

use http::Method;
use serde_json::{Value, json};

use crate::fake_runway::{API_KEY, FakeRunway, VERSION};
use crate::harness::{Body, Relay, png, poll_until};
use crate::vendor_flows::{
    WAIT, assert_channel_tests, asset, completed_and_settled, config, entries_of,
    failed_and_refunded, first_format, library, never_sent_again, playable, refunded,
    second_format, settled,
};

/// A `runway` channel in front of `fake` with `map` as its model map.
fn channel(name: &str, fake: &FakeRunway, priority: i32, key: &str, map: &str) -> String {
    format!(
        "[[channels]]\nname = \"{name}\"\nkind = \"runway\"\nbase_url = \"{}\"\n\
         api_key = \"{key}\"\npriority = {priority}\n\
         models = [\"model_h3\", \"gen2-pro\", \"gen2-lite\"]\nmodel_map = {{ {map} }}\n",
        fake.base
    )
}

const TEXT: &str = r#""model_h3" = "gen4.5", "gen2-pro" = "veo3.1", "gen2-lite" = "gen4.5""#;
const FRAMES: &str =
    r#""model_h3" = "gen4.5", "gen2-pro" = "veo3.1_fast", "gen2-lite" = "gen4_turbo""#;

/// Every call the fake saw named the version Runway documents.
fn all_versioned(fake: &FakeRunway) {
    let calls = fake.calls();
    assert!(!calls.is_empty());
    for (method, path, version) in calls {
        assert_eq!(version, VERSION, "{method} {path}");
    }
}

fn task(prompt: &str) -> Value {
    json!({"model": "model_h3", "prompt": prompt, "seconds": "5", "size": "1280x720"})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_formats_come_back_playable_and_settled_as_asked() {
    let fake = FakeRunway::start().await;
    let relay = Relay::start(&config(&channel("runway", &fake, 0, API_KEY, TEXT))).await;
    let (key_id, key) = relay.new_key("runway", Some(10_000)).await;

    completed_and_settled(
        &relay,
        (&key_id, &key),
        task("a bunny hopping in a meadow"),
        50,
    )
    .await;
    let (path, sent) = fake.submissions()[0].clone();
    assert_eq!(path, "/v1/text_to_video");
    // The first format has no seed: none is sent.
    assert_eq!(
        sent,
        json!({"model": "gen4.5", "promptText": "a bunny hopping in a meadow",
               "ratio": "1280:720", "duration": 5})
    );

    let id = second_format(
        &relay,
        &key,
        json!({"model": "gen2-pro", "prompt": "a heron at dawn", "duration": 8,
               "resolution": "1080p", "ratio": "9:16", "seed": 7}),
    )
    .await;
    let done = relay.wait_generation_as(&key, &id, WAIT).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    playable(&relay, &key, done["video_url"].as_str().expect("video_url")).await;
    assert_eq!(entries_of(&relay, &key_id, &id).await, settled(96));
    let (path, sent) = fake.submissions()[1].clone();
    assert_eq!(path, "/v1/text_to_video");
    // Veo on Runway takes no seed.
    assert_eq!(
        sent,
        json!({"model": "veo3.1", "promptText": "a heron at dawn", "ratio": "1080:1920",
               "duration": 8})
    );
    // gen4.5 takes the second format's seed.
    let id = second_format(
        &relay,
        &key,
        json!({"model": "gen2-lite", "prompt": "a fox in snow", "duration": 5,
               "resolution": "720p", "ratio": "16:9", "seed": 11}),
    )
    .await;
    let done = relay.wait_generation_as(&key, &id, WAIT).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(fake.submissions()[2].1["seed"], 11);
    // Each task was read at its own path, every call with the version header.
    assert!(
        fake.calls()
            .iter()
            .any(|(m, p, _)| m == "GET" && p.starts_with("/v1/tasks/"))
    );
    all_versioned(&fake);
    assert!(!done.to_string().contains(&fake.base));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_frame_is_prompt_image_and_first_and_last_its_array() {
    let fake = FakeRunway::start().await;
    let relay = Relay::start(&config(&channel("runway", &fake, 0, API_KEY, FRAMES))).await;
    let key = relay.key.clone();
    let lib = library(&relay, &key).await;
    let (first, last) = (png(8, 8), png(6, 6));
    let first_id = asset(&relay, &key, &lib, "image", &first).await;
    let last_id = asset(&relay, &key, &lib, "image", &last).await;
    let data = |b: &[u8]| format!("data:image/png;base64,{}", crate::harness::base64(b));

    // gen4_turbo: image to video only.
    let id = second_format(
        &relay,
        &key,
        json!({"model": "gen2-lite", "prompt": "the cat starts running", "duration": 5,
               "resolution": "720p", "ratio": "16:9",
               "assets": [{"id": first_id, "role": "first_frame"}]}),
    )
    .await;
    let done = relay.wait_generation(&id, WAIT).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let (path, sent) = fake.submissions()[0].clone();
    assert_eq!(path, "/v1/image_to_video");
    assert_eq!(sent["model"], "gen4_turbo");
    assert_eq!(sent["promptImage"], data(&first));
    assert_eq!(sent["ratio"], "1280:720");

    let id = second_format(
        &relay,
        &key,
        json!({"model": "gen2-pro", "prompt": "a black kitten looks up", "duration": 6,
               "resolution": "720p", "ratio": "9:16",
               "assets": [{"id": first_id, "role": "first_frame"},
                          {"id": last_id, "role": "last_frame"}]}),
    )
    .await;
    let done = relay.wait_generation(&id, WAIT).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let (path, sent) = fake.submissions()[1].clone();
    assert_eq!(path, "/v1/image_to_video");
    assert_eq!(
        sent,
        json!({"model": "veo3.1_fast", "promptText": "a black kitten looks up",
               "ratio": "720:1280", "duration": 6,
               "promptImage": [{"uri": data(&first), "position": "first"},
                               {"uri": data(&last), "position": "last"}]})
    );
    all_versioned(&fake);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gen4_aleph_edits_a_reference_video_on_video_to_video() {
    let fake = FakeRunway::start().await;
    let map = r#""model_h3" = "gen4.5", "gen2-pro" = "gen4_aleph", "gen2-lite" = "gen4.5""#;
    let relay = Relay::start(&config(&channel("runway", &fake, 0, API_KEY, map))).await;
    let (key_id, key) = relay.new_key("runway", Some(10_000)).await;
    let lib = library(&relay, &key).await;
    let clip = crate::fake_vendor::playable_mp4();
    let style = png(8, 8);
    let video_id = asset(&relay, &key, &lib, "video", &clip).await;
    let image_id = asset(&relay, &key, &lib, "image", &style).await;
    let id = second_format(
        &relay,
        &key,
        json!({"model": "gen2-pro", "prompt": "make it snow", "duration": 5,
               "resolution": "720p", "ratio": "16:9", "seed": 3,
               "assets": [{"id": video_id, "role": "reference_video"},
                          {"id": image_id, "role": "reference_image"}]}),
    )
    .await;
    let done = relay.wait_generation_as(&key, &id, WAIT).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    playable(&relay, &key, done["video_url"].as_str().expect("video_url")).await;
    assert_eq!(entries_of(&relay, &key_id, &id).await, settled(40));
    let (path, sent) = fake.submissions()[0].clone();
    assert_eq!(path, "/v1/video_to_video");
    assert_eq!(
        sent,
        json!({"model": "gen4_aleph", "promptText": "make it snow",
               "videoUri": format!("data:video/mp4;base64,{}", crate::harness::base64(&clip)),
               "references": [{"type": "image",
                               "uri": format!("data:image/png;base64,{}", crate::harness::base64(&style))}],
               "seed": 3})
    );
    all_versioned(&fake);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_alone_never_goes_to_an_image_only_model() {
    let fake = FakeRunway::start().await;
    let relay = Relay::start(&config(&channel("runway", &fake, 0, API_KEY, FRAMES))).await;
    // gen2-lite runs as gen4_turbo here: a request without a first frame is refused before it
    // is charged, and nothing reaches Runway.
    let res = relay
        .call(
            Method::POST,
            "/v1/video/generations",
            Body::Json(
                json!({"model": "gen2-lite", "prompt": "text alone", "duration": 5,
                              "resolution": "720p", "ratio": "16:9"}),
            ),
        )
        .await;
    assert_eq!(res.status, 400, "{}", res.text());
    assert!(fake.submissions().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_refusals_and_expired_results_are_refunded() {
    let fake = FakeRunway::start().await;
    let relay = Relay::start(&config(&channel("runway", &fake, 0, API_KEY, TEXT))).await;
    let (key_id, key) = relay.new_key("runway", Some(10_000)).await;
    for (prompt, code) in [
        ("this one [fail]s", "upstream_error"),
        ("its input is [refuse]d", "moderation_blocked"),
    ] {
        let done = failed_and_refunded(&relay, (&key_id, &key), task(prompt), Some(code), 50).await;
        assert!(!done.to_string().contains("SAFETY"), "{done}");
    }
    fake.state.expire_results.store(true, Ordering::SeqCst);
    failed_and_refunded(&relay, (&key_id, &key), task("fetched too late"), None, 50).await;
    let k = relay
        .admin(Method::GET, &format!("/admin/keys/{key_id}"), Body::Empty)
        .await
        .json();
    assert_eq!(k["quota_remaining"], 10_000, "{k}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_spent_credits_or_a_refused_key_fail_over() {
    let (busy, spare) = (FakeRunway::start().await, FakeRunway::start().await);
    let channels = format!(
        "{}{}{}",
        channel("first", &busy, 10, API_KEY, TEXT),
        channel("wrong-key", &busy, 5, "key_not_the_key", TEXT),
        channel("spare", &spare, 0, API_KEY, TEXT),
    );
    let relay = Relay::start(&config(&channels)).await;
    let (key_id, key) = relay.new_key("runway", Some(10_000)).await;
    for (status, message) in [
        (429, "You have exceeded the rate limit"),
        (400, "You do not have enough credits to run this task."),
    ] {
        busy.fail_next(status, message);
        let id = first_format(&relay, &key, task("failed over")).await;
        let done = relay.wait_video_as(&key, &id, WAIT).await;
        assert_eq!(done["status"], "completed", "{status}: {done}");
        assert_eq!(entries_of(&relay, &key_id, &id).await, settled(50));
    }
    assert!(busy.submissions().is_empty());
    assert_eq!(spare.submissions().len(), 2);
    // The refused key was tried between them and answered 401: nothing was made.
    assert!(
        busy.calls()
            .iter()
            .any(|(m, p, _)| m == "POST" && p == "/v1/text_to_video")
    );

    assert_channel_tests(
        &relay,
        &[("first", "ok"), ("wrong-key", "key_refused")],
        &[API_KEY],
    )
    .await;
    assert!(
        busy.calls()
            .iter()
            .any(|(m, p, v)| m == "GET" && p == "/v1/organization" && v == VERSION)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submission_that_may_have_reached_runway_is_never_sent_again() {
    let (taker, spare) = (FakeRunway::start().await, FakeRunway::start().await);
    let channels = (
        channel("first", &taker, 10, API_KEY, TEXT),
        channel("second", &spare, 0, API_KEY, TEXT),
    );
    never_sent_again((&taker, &spare), channels, "runway", task, 50).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_cancel_deletes_the_runway_task_and_refunds_once() {
    let fake = FakeRunway::start().await;
    // The task runs a minute: long enough to be cancelled while Runway still works on it.
    fake.state.run_ms.store(60_000, Ordering::SeqCst);
    let relay = Relay::start(&config(&channel("runway", &fake, 0, API_KEY, TEXT))).await;
    let (key_id, key) = relay.new_key("runway", Some(10_000)).await;
    let id = first_format(&relay, &key, task("cancel me")).await;
    // Accepted and read at least once: the relay knows Runway's id.
    let read = poll_until(WAIT, || async {
        fake.calls()
            .iter()
            .any(|(m, p, _)| m == "GET" && p.starts_with("/v1/tasks/"))
            .then_some(())
    })
    .await;
    assert!(read.is_some(), "the task was never read");

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
    assert_eq!(res.json()["status"], "cancelled");
    let upstream = fake.submissions().len();
    assert_eq!(upstream, 1);
    let deleted = poll_until(WAIT, || async {
        fake.calls()
            .into_iter()
            .find(|(m, p, _)| m == "DELETE" && p.starts_with("/v1/tasks/17f20503-"))
    })
    .await
    .expect("the cancel reached Runway");
    assert_eq!(deleted.2, VERSION, "{deleted:?}");
    // Runway now reads the task CANCELLED; the relay's record stays cancelled, refunded once.
    let after = relay.wait_video_as(&key, &id, WAIT).await;
    assert_eq!(after["status"], "cancelled", "{after}");
    assert_eq!(entries_of(&relay, &key_id, &id).await, refunded(50));
    let deletes = fake
        .calls()
        .iter()
        .filter(|(m, _, _)| m == "DELETE")
        .count();
    assert_eq!(deletes, 1);
    all_versioned(&fake);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_shows_in_no_answer_or_record() {
    let fake = FakeRunway::start().await;
    let relay = Relay::start(&config(&channel("runway", &fake, 0, API_KEY, TEXT))).await;
    let (key_id, key) = relay.new_key("runway", Some(10_000)).await;
    let ok = first_format(&relay, &key, task("a calm lake")).await;
    let failed = first_format(&relay, &key, task("this one [fail]s")).await;
    let mut seen = String::new();
    for id in [&ok, &failed] {
        seen.push_str(&relay.wait_video_as(&key, id, WAIT).await.to_string());
        let record = relay
            .app
            .store
            .task_shared(id)
            .await
            .expect("the store")
            .expect("the task");
        seen.push_str(&format!("{record:?}"));
    }
    for path in [
        format!("/admin/tasks?key_id={key_id}"),
        format!("/admin/keys/{key_id}"),
        "/admin/channels".to_owned(),
        "/metrics".to_owned(),
    ] {
        let res = relay.admin(Method::GET, &path, Body::Empty).await;
        seen.push_str(&res.text());
    }
    seen.push_str(&format!("{:?}", relay.ledger(&key_id).await));
    let res = relay
        .admin(Method::POST, "/admin/channels/runway/test", Body::Empty)
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    assert_eq!(res.json()["status"], "ok", "{}", res.text());
    seen.push_str(&res.text());
    assert!(seen.contains(&ok) && seen.contains(&failed));
    assert!(!seen.contains(API_KEY), "the key shows");
}
