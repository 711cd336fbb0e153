//! `wan` channels against [`FakeWan`]: both formats come back playable from the relay's own
//! copy and are settled on the `usage` DashScope reports; a first frame is `img_url`, first
//! and last frames go to a kf2v model on its own path, and wan2.7 takes frames and reference
//! images as `media[]` items; failures, refusals and an expired result URL are refunded
//! exactly; a throttled account fails over; a submission that may have reached DashScope is
//! never sent again; the channel test queries a task id that never existed.

use std::sync::atomic::Ordering;

use serde_json::json;

use crate::fake_wan::{API_KEY, FakeWan};
use crate::harness::{Relay, png};
use crate::vendor_flows::{
    WAIT, assert_channel_tests, asset, completed_and_settled, config, entries_of,
    failed_and_refunded, first_format, library, never_sent_again, playable, second_format, settled,
};

/// A `wan` channel in front of `fake` with `map` as its model map.
fn channel(name: &str, fake: &FakeWan, priority: i32, key: &str, map: &str) -> String {
    format!(
        "[[channels]]\nname = \"{name}\"\nkind = \"wan\"\nbase_url = \"{}\"\n\
         api_key = \"{key}\"\npriority = {priority}\n\
         models = [\"model_h3\", \"gen2-pro\", \"gen2-lite\"]\nmodel_map = {{ {map} }}\n",
        fake.base
    )
}

const TEXT: &str = r#""model_h3" = "wan2.5-t2v-preview", "gen2-pro" = "wan2.5-t2v-preview", "gen2-lite" = "wan2.2-kf2v-flash""#;
const FRAMES: &str = r#""model_h3" = "wan2.5-t2v-preview", "gen2-pro" = "wan2.5-i2v-preview", "gen2-lite" = "wan2.2-kf2v-flash""#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_formats_come_back_playable_and_settled_on_usage() {
    let fake = FakeWan::start().await;
    let relay = Relay::start(&config(&channel("wan", &fake, 0, API_KEY, TEXT))).await;
    let (key_id, key) = relay.new_key("wan", Some(10_000)).await;

    completed_and_settled(
        &relay,
        (&key_id, &key),
        json!({"model": "model_h3", "prompt": "a kitten running in the moonlight",
               "seconds": "5", "size": "1280x720"}),
        50,
    )
    .await;
    let (path, sent) = fake.submissions()[0].clone();
    assert_eq!(
        path,
        "/api/v1/services/aigc/video-generation/video-synthesis"
    );
    assert_eq!(
        sent,
        json!({"model": "wan2.5-t2v-preview",
               "input": {"prompt": "a kitten running in the moonlight"},
               "parameters": {"size": "1280*720", "duration": 5}})
    );

    let id = second_format(
        &relay,
        &key,
        json!({"model": "gen2-pro", "prompt": "a heron at dawn", "duration": 10,
               "resolution": "480p", "ratio": "9:16", "seed": 7}),
    )
    .await;
    let done = relay.wait_generation_as(&key, &id, WAIT).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    playable(&relay, &key, done["video_url"].as_str().expect("video_url")).await;
    assert_eq!(entries_of(&relay, &key_id, &id).await, settled(50));
    let (_, sent) = fake.submissions()[1].clone();
    assert_eq!(
        sent["parameters"],
        json!({"size": "480*832", "duration": 10, "seed": 7})
    );
    // Each task was polled at its own path.
    let calls = fake.state.calls.lock().unwrap().clone();
    assert!(
        calls
            .iter()
            .any(|(m, p)| m == "GET" && p.starts_with("/api/v1/tasks/"))
    );
    assert!(!done.to_string().contains(&fake.base));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_frame_is_img_url_and_first_and_last_go_to_kf2v() {
    let fake = FakeWan::start().await;
    let relay = Relay::start(&config(&channel("wan", &fake, 0, API_KEY, FRAMES))).await;
    let key = relay.key.clone();
    let lib = library(&relay, &key).await;
    let (first, last) = (png(8, 8), png(6, 6));
    let first_id = asset(&relay, &key, &lib, "image", &first).await;
    let last_id = asset(&relay, &key, &lib, "image", &last).await;
    let data = |b: &[u8]| format!("data:image/png;base64,{}", crate::harness::base64(b));

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
    let (path, sent) = fake.submissions()[0].clone();
    assert_eq!(
        path,
        "/api/v1/services/aigc/video-generation/video-synthesis"
    );
    assert_eq!(sent["input"]["img_url"], data(&first));
    assert_eq!(sent["parameters"]["resolution"], "720P");

    let id = second_format(
        &relay,
        &key,
        json!({"model": "gen2-lite", "prompt": "a black kitten looks up", "duration": 5,
               "resolution": "720p", "ratio": "adaptive",
               "assets": [{"id": first_id, "role": "first_frame"},
                          {"id": last_id, "role": "last_frame"}]}),
    )
    .await;
    let done = relay.wait_generation(&id, WAIT).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let (path, sent) = fake.submissions()[1].clone();
    assert_eq!(path, "/api/v1/services/aigc/image2video/video-synthesis");
    assert_eq!(sent["model"], "wan2.2-kf2v-flash");
    assert_eq!(sent["input"]["first_frame_url"], data(&first));
    assert_eq!(sent["input"]["last_frame_url"], data(&last));
}

/// wan2.7 models: frames to the image-to-video model and reference images to the
/// reference-to-video one, each as a `media[]` item.
const MEDIA: &str =
    r#""model_h3" = "wan2.7-t2v", "gen2-pro" = "wan2.7-i2v", "gen2-lite" = "wan2.7-r2v""#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wan_2_7_takes_frames_and_references_as_media_items() {
    let fake = FakeWan::start().await;
    let relay = Relay::start(&config(&channel("wan", &fake, 0, API_KEY, MEDIA))).await;
    let key = relay.key.clone();
    let lib = library(&relay, &key).await;
    let (first, last) = (png(8, 8), png(6, 6));
    let first_id = asset(&relay, &key, &lib, "image", &first).await;
    let last_id = asset(&relay, &key, &lib, "image", &last).await;
    let data = |b: &[u8]| format!("data:image/png;base64,{}", crate::harness::base64(b));

    // First and last frame to wan2.7-i2v: no ratio (the first frame sets the frame).
    let id = second_format(
        &relay,
        &key,
        json!({"model": "gen2-pro", "prompt": "the cat jumps onto the sofa", "duration": 4,
               "resolution": "720p", "seed": 7, "ratio": "adaptive",
               "assets": [{"id": first_id, "role": "first_frame"},
                          {"id": last_id, "role": "last_frame"}]}),
    )
    .await;
    let done = relay.wait_generation(&id, WAIT).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let (path, sent) = fake.submissions()[0].clone();
    assert_eq!(
        path,
        "/api/v1/services/aigc/video-generation/video-synthesis"
    );
    assert_eq!(
        sent,
        json!({"model": "wan2.7-i2v",
               "input": {"prompt": "the cat jumps onto the sofa",
                         "media": [{"type": "first_frame", "url": data(&first)},
                                   {"type": "last_frame", "url": data(&last)}]},
               "parameters": {"resolution": "720P", "duration": 4, "seed": 7}})
    );

    // Two reference images to wan2.7-r2v, with the ratio asked.
    let id = second_format(
        &relay,
        &key,
        json!({"model": "gen2-lite", "prompt": "Image 1 plays chess with Image 2",
               "duration": 5, "resolution": "720p", "ratio": "9:16", "seed": 7,
               "assets": [{"id": first_id, "role": "reference_image"},
                          {"id": last_id, "role": "reference_image"}]}),
    )
    .await;
    let done = relay.wait_generation(&id, WAIT).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let video = playable(
        &relay,
        &key,
        done["video_url"].as_str().expect("a video url"),
    )
    .await;
    assert_eq!(video.codec, "avc1");
    let (_, sent) = fake.submissions()[1].clone();
    assert_eq!(
        sent,
        json!({"model": "wan2.7-r2v",
               "input": {"prompt": "Image 1 plays chess with Image 2",
                         "media": [{"type": "reference_image", "url": data(&first)},
                                   {"type": "reference_image", "url": data(&last)}]},
               "parameters": {"resolution": "720P", "ratio": "9:16", "duration": 5, "seed": 7}})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_refusals_and_expired_results_are_refunded() {
    let fake = FakeWan::start().await;
    let relay = Relay::start(&config(&channel("wan", &fake, 0, API_KEY, TEXT))).await;
    let (key_id, key) = relay.new_key("wan", Some(10_000)).await;
    let task = |prompt: &str| json!({"model": "model_h3", "prompt": prompt, "seconds": "5", "size": "1280x720"});
    for (prompt, code) in [
        ("this one [fail]s", "upstream_error"),
        ("its output is [refuse]d", "moderation_blocked"),
        ("its input is [blocked]", "moderation_blocked"),
    ] {
        failed_and_refunded(&relay, (&key_id, &key), task(prompt), Some(code), 50).await;
    }
    fake.state.expire_results.store(true, Ordering::SeqCst);
    failed_and_refunded(&relay, (&key_id, &key), task("fetched too late"), None, 50).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_account_or_a_refused_key_fails_over() {
    let (busy, spare) = (FakeWan::start().await, FakeWan::start().await);
    let channels = format!(
        "{}{}{}",
        channel("first", &busy, 10, API_KEY, TEXT),
        channel("wrong-key", &busy, 5, "sk-not-the-key", TEXT),
        channel("spare", &spare, 0, API_KEY, TEXT),
    );
    let relay = Relay::start(&config(&channels)).await;
    let (key_id, key) = relay.new_key("wan", Some(10_000)).await;
    busy.fail_next(429, "Throttling.RateQuota");
    let id = first_format(
        &relay,
        &key,
        json!({"model": "model_h3", "prompt": "failed over", "seconds": "5", "size": "1280x720"}),
    )
    .await;
    let done = relay.wait_video_as(&key, &id, WAIT).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert!(busy.submissions().is_empty());
    assert_eq!(spare.submissions().len(), 1);
    assert_eq!(entries_of(&relay, &key_id, &id).await, settled(50));

    assert_channel_tests(
        &relay,
        &[("first", "ok"), ("wrong-key", "key_refused")],
        &[],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submission_that_may_have_reached_dashscope_is_never_sent_again() {
    let (taker, spare) = (FakeWan::start().await, FakeWan::start().await);
    let channels = (
        channel("first", &taker, 10, API_KEY, TEXT),
        channel("second", &spare, 0, API_KEY, TEXT),
    );
    never_sent_again(
        (&taker, &spare),
        channels,
        "wan",
        |prompt| json!({"model": "model_h3", "prompt": prompt, "seconds": "5", "size": "1280x720"}),
        50,
    )
    .await;
}
