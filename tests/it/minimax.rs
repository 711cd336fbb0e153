//! `minimax` channels against [`FakeMinimax`]: both formats come back playable from the
//! relay's own copy (the finished task's file resolved to its download URL), frames and a
//! subject reference reach the vendor as `data:` URIs, errors inside HTTP 200s are read
//! (a refusal refunded, a rate limit or a refused key failing over), failures and an expired
//! download URL are refunded exactly, a submission that may have reached MiniMax is never
//! sent again, MiniMax's address check is answered and its status push brings the task's poll
//! forward (a forged one changes nothing), and the channel test reads the key's answer.

use std::sync::atomic::Ordering;
use std::time::Duration;

use http::Method;

use serde_json::{Value, json};

use crate::fake_minimax::{API_KEY, FakeMinimax};
use crate::harness::{Body, Relay, png, poll_until};
use crate::vendor_flows::{
    WAIT, assert_channel_tests, asset, callback_config, completed_and_settled, config, entries_of,
    failed_and_refunded, first_format, library, never_sent_again, playable, poll_schedule,
    second_format, settled,
};

/// A `minimax` channel in front of `fake`: the first format's model on Hailuo 2.3, the
/// second format's on Hailuo 02 (last frames) and S2V-01 (a subject).
fn channel(name: &str, fake: &FakeMinimax, priority: i32, key: &str) -> String {
    format!(
        "[[channels]]\nname = \"{name}\"\nkind = \"minimax\"\nbase_url = \"{}\"\n\
         api_key = \"{key}\"\npriority = {priority}\n\
         models = [\"model_h3\", \"gen2-pro\", \"gen2-lite\"]\n\
         model_map = {{ \"model_h3\" = \"MiniMax-Hailuo-2.3\", \"gen2-pro\" = \"MiniMax-Hailuo-02\", \"gen2-lite\" = \"S2V-01\" }}\n",
        fake.base
    )
}

async fn relay_with(fake: &FakeMinimax) -> Relay {
    Relay::start(&config(&channel("minimax", fake, 0, API_KEY))).await
}

fn data_png(bytes: &[u8]) -> String {
    format!("data:image/png;base64,{}", crate::harness::base64(bytes))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_formats_come_back_playable_and_settled() {
    let fake = FakeMinimax::start().await;
    let relay = relay_with(&fake).await;
    let (key_id, key) = relay.new_key("minimax", Some(10_000)).await;

    // MiniMax reports no length: 6 s of model_h3 at 10 a second, as asked.
    completed_and_settled(
        &relay,
        (&key_id, &key),
        json!({"model": "model_h3", "prompt": "a stylish walk down a neon street",
               "seconds": "6", "size": "1366x768"}),
        60,
    )
    .await;
    // The size's tier, as Hailuo 2.3 names it: the smallest it makes as large as 1366x768.
    assert_eq!(
        fake.submissions()[0],
        json!({"model": "MiniMax-Hailuo-2.3", "prompt": "a stylish walk down a neon street",
               "duration": 6, "resolution": "768P"})
    );
    // Query, then the file resolved, then the download.
    let calls = fake.state.calls.lock().unwrap().clone();
    assert!(calls.iter().any(|p| p == "/v1/query/video_generation"));
    assert!(calls.iter().any(|p| p == "/v1/files/retrieve"));
    assert!(calls.iter().any(|p| p.starts_with("/cdn/")));

    let id = second_format(
        &relay,
        &key,
        json!({"model": "gen2-pro", "prompt": "the flower blooms", "duration": 6,
               "resolution": "1080p", "ratio": "16:9"}),
    )
    .await;
    let done = relay.wait_generation_as(&key, &id, WAIT).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    playable(&relay, &key, done["video_url"].as_str().expect("video_url")).await;
    assert_eq!(entries_of(&relay, &key_id, &id).await, settled(72));
    assert_eq!(fake.submissions()[1]["resolution"], "1080P");
    assert_eq!(fake.submissions()[1]["model"], "MiniMax-Hailuo-02");
    assert!(!done.to_string().contains(&fake.base));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_and_a_subject_go_as_data_uris() {
    let fake = FakeMinimax::start().await;
    let subject = format!(
        "[models.gen2-pro]\nkind = \"generation\"\nfamily = \"gen2\"\nresolutions = [\"1080p\"]\n\
         durations = [6]\nratios = [\"16:9\", \"adaptive\"]\nprice_per_second = 12\n\
         [models.hailuo-s2v]\nkind = \"generation\"\nfamily = \"gen2\"\nresolutions = [\"720p\"]\n\
         durations = [6]\nratios = [\"16:9\"]\nprice_per_second = 4\n\
         [[channels]]\nname = \"minimax\"\nkind = \"minimax\"\nbase_url = \"{}\"\n\
         api_key = \"{API_KEY}\"\nmodels = [\"gen2-pro\", \"hailuo-s2v\"]\n\
         model_map = {{ \"gen2-pro\" = \"MiniMax-Hailuo-02\", \"hailuo-s2v\" = \"S2V-01\" }}\n",
        fake.base
    );
    let relay = Relay::start(&config(&subject)).await;
    let key = relay.key.clone();
    let lib = library(&relay, &key).await;
    let (first, last) = (png(8, 8), png(6, 6));
    let first_id = asset(&relay, &key, &lib, "image", &first).await;
    let last_id = asset(&relay, &key, &lib, "image", &last).await;

    // A first frame.
    let id = second_format(
        &relay,
        &key,
        json!({"model": "gen2-pro", "prompt": "from this frame", "duration": 6,
               "resolution": "1080p", "ratio": "adaptive",
               "assets": [{"id": first_id, "role": "first_frame"}]}),
    )
    .await;
    let done = relay.wait_generation(&id, WAIT).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let sent = fake.submissions()[0].clone();
    assert_eq!(sent["first_frame_image"], data_png(&first));
    assert!(sent.get("last_frame_image").is_none(), "{sent}");

    // First and last frames (Hailuo 02).
    let id = second_format(
        &relay,
        &key,
        json!({"model": "gen2-pro", "prompt": "from one to the other", "duration": 6,
               "resolution": "1080p", "ratio": "adaptive",
               "assets": [{"id": first_id, "role": "first_frame"},
                          {"id": last_id, "role": "last_frame"}]}),
    )
    .await;
    let done = relay.wait_generation(&id, WAIT).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let sent = fake.submissions()[1].clone();
    assert_eq!(sent["first_frame_image"], data_png(&first));
    assert_eq!(sent["last_frame_image"], data_png(&last));

    // A subject reference, on a model of S2V-01's own durations and tier.
    let id = second_format(
        &relay,
        &key,
        json!({"model": "hailuo-s2v", "prompt": "she runs toward the camera", "duration": 6,
               "resolution": "720p", "ratio": "16:9",
               "assets": [{"id": first_id, "role": "reference_image"}]}),
    )
    .await;
    let done = relay.wait_generation(&id, WAIT).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let sent = fake.submissions()[2].clone();
    assert_eq!(sent["model"], "S2V-01");
    assert_eq!(
        sent["subject_reference"],
        json!([{"type": "character", "image": [data_png(&first)]}])
    );
    assert_eq!(sent["resolution"], "720P");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_in_200s_failures_and_expired_urls_are_refunded() {
    let fake = FakeMinimax::start().await;
    let relay = relay_with(&fake).await;
    let (key_id, key) = relay.new_key("minimax", Some(10_000)).await;
    let task = |prompt: &str| json!({"model": "model_h3", "prompt": prompt, "seconds": "6", "size": "1366x768"});
    for (prompt, code) in [
        ("this one [fail]s", "upstream_error"),
        ("its output is [refuse]d", "moderation_blocked"),
        ("its input is [blocked]", "moderation_blocked"),
    ] {
        failed_and_refunded(&relay, (&key_id, &key), task(prompt), Some(code), 60).await;
    }
    // A parameter the vendor refuses (status_code 2013 in a 200): the task fails, refunded.
    fake.fail_next(2013);
    failed_and_refunded(
        &relay,
        (&key_id, &key),
        task("refused as a bad parameter"),
        None,
        60,
    )
    .await;

    fake.state.expire_results.store(true, Ordering::SeqCst);
    failed_and_refunded(&relay, (&key_id, &key), task("fetched too late"), None, 60).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_or_a_refused_key_fails_over_to_another_channel() {
    let (busy, spare) = (FakeMinimax::start().await, FakeMinimax::start().await);
    let channels = format!(
        "{}{}{}",
        channel("first", &busy, 10, API_KEY),
        channel("wrong-key", &busy, 5, "not-the-key"),
        channel("spare", &spare, 0, API_KEY),
    );
    let relay = Relay::start(&config(&channels)).await;
    let (key_id, key) = relay.new_key("minimax", Some(10_000)).await;
    // 1002 (rate limit) in a 200 on the first; 1004 (key refused) on the second.
    busy.fail_next(1002);
    let id = first_format(
        &relay,
        &key,
        json!({"model": "model_h3", "prompt": "failed over", "seconds": "6", "size": "1366x768"}),
    )
    .await;
    let done = relay.wait_video_as(&key, &id, WAIT).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert!(busy.submissions().is_empty());
    assert_eq!(spare.submissions().len(), 1);
    assert_eq!(entries_of(&relay, &key_id, &id).await, settled(60));

    assert_channel_tests(
        &relay,
        &[("first", "ok"), ("wrong-key", "key_refused")],
        &[],
    )
    .await;
    // The channel test called files/list, which the fake answers `ok` only with one of the
    // documented purposes (else 2013, an error).
    let calls = busy.state.calls.lock().unwrap().clone();
    assert!(calls.iter().any(|p| p == "/v1/files/list"), "{calls:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submission_that_may_have_reached_minimax_is_never_sent_again() {
    let (taker, spare) = (FakeMinimax::start().await, FakeMinimax::start().await);
    let channels = (
        channel("first", &taker, 10, API_KEY),
        channel("second", &spare, 0, API_KEY),
    );
    never_sent_again(
        (&taker, &spare),
        channels,
        "minimax",
        |prompt| json!({"model": "model_h3", "prompt": prompt, "seconds": "6", "size": "1366x768"}),
        60,
    )
    .await;
}

const CALLBACK_SECRET: &str = "minimax-callback-secret-for-tests-7";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minimax_callback_is_checked_then_brings_the_poll_forward() {
    let fake = FakeMinimax::start().await;
    // The task runs until the test ends it.
    fake.state.run_ms.store(600_000, Ordering::SeqCst);
    let with_secret = format!(
        "{}callback_secret = \"{CALLBACK_SECRET}\"\n",
        channel("minimax", &fake, 0, API_KEY)
    );
    let relay = Relay::start(&callback_config(50, &with_secret)).await;
    let key = relay.key.clone();
    let id = first_format(
        &relay,
        &key,
        json!({"model": "model_h3", "prompt": "woken by MiniMax", "seconds": "6",
               "size": "1366x768"}),
    )
    .await;

    // MiniMax was handed the relay's callback URL, and its address check was answered.
    let sent = poll_until(WAIT, || async { fake.submissions().first().cloned() })
        .await
        .expect("the submission");
    let url = sent["callback_url"].as_str().expect("callback_url");
    let prefix = format!("{}/callbacks/minimax/minimax?task={id}&token=", relay.base);
    assert!(url.starts_with(&prefix), "{url}");
    let path = url[relay.base.len()..].to_owned();
    let checked = poll_until(WAIT, || async {
        fake.state.challenges.lock().unwrap().first().cloned()
    })
    .await
    .expect("the address checked");
    assert_eq!((checked.1, checked.2), (200, true), "{checked:?}");

    let post = |path: String, payload: Value| {
        let relay = &relay;
        async move {
            relay
                .send(Method::POST, &path, Body::Json(payload), &[])
                .await
        }
    };
    // The challenge is echoed only on the channel's own token.
    let challenge = json!({"challenge": "abc-123"});
    let res = post(path.clone(), challenge.clone()).await;
    assert_eq!(res.status, 200, "{}", res.text());
    assert_eq!(res.json(), challenge);
    let forged = path.replace("&token=", "&token=0");
    assert_eq!(post(forged.clone(), challenge.clone()).await.status, 401);
    let res = post(path.clone(), json!({"challenge": 7})).await;
    assert_eq!(res.status, 400, "{}", res.text());
    assert_eq!(res.json()["error"]["param"], "challenge");

    // Once the task is 1.8 s old, its next regular poll is at least 0.9 s away.
    let old = Duration::from_millis(1_800);
    let last = poll_until(WAIT, || async {
        fake.query_ages(&id)
            .last()
            .copied()
            .filter(|age| *age >= old)
    })
    .await
    .expect("polled when 1.8 s old");
    fake.finish(&id);

    // Status pushes that are not MiniMax's are refused and write nothing.
    let before = poll_schedule(&relay, &id).await;
    let push = json!({"task_id": "1", "status": "success", "file_id": "2",
                      "base_resp": {"status_code": 0, "status_msg": "success"}});
    assert_eq!(post(forged, push.clone()).await.status, 401);
    let other_channel = path.replace("/minimax/minimax?", "/minimax/nope?");
    assert_eq!(post(other_channel, push.clone()).await.status, 404);
    let res = post(path.clone(), push).await;
    assert_eq!(res.status, 404, "another upstream task: {}", res.text());
    let res = post(path.clone(), json!({"status": "success"})).await;
    assert_eq!(res.status, 400, "{}", res.text());
    assert_eq!(res.json()["error"]["param"], "task_id");
    assert_eq!(poll_schedule(&relay, &id).await, before);

    // MiniMax's own push brings the poll forward: the task completes well before its next
    // regular poll would have come.
    fake.call_back(&id);
    let done = poll_until(Duration::from_millis(700), || async {
        let v = relay.get(&format!("/v1/videos/{id}")).await.json();
        (v["status"] == "completed").then_some(v)
    })
    .await;
    assert!(done.is_some(), "the callback did not move the task on");
    let calls = fake.state.callbacks.lock().unwrap().clone();
    assert!(
        calls
            .iter()
            .any(|(_, status, answered)| status == "success" && *answered == 200),
        "{calls:?}"
    );
    let ages = fake.query_ages(&id);
    let next = ages.iter().find(|age| **age > last).expect("a poll after");
    // The schedule had it at half the task's age after the poll before.
    assert!(
        *next - last < last / 3,
        "polled at {next:?} of age, after {last:?}: not brought forward"
    );
}
