//! Real video upstreams, stood in for by [`FakeVideo`]: both adapters end to end with the
//! relay's own copy served, failover, 429s, unknown statuses, truncated downloads, and many
//! tasks through two flaky channels, one going down and coming back.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use http::Method;
use serde_json::{Value, json};

use crate::fake_video::{FAKE_KEY, FakeVideo, JPEG_HEAD, fake_mp4};
use crate::harness::{Body, Multipart, Relay, base64, mp4_head, png, poll_until, wav};

const WAIT: Duration = Duration::from_secs(20);

/// Fast polls and a short cool-down, then the channels.
fn config(channels: &str) -> String {
    format!(
        "[tasks]\npoll_interval_min_ms = 20\npoll_interval_max_ms = 300\nchannel_cooldown_ms = 300\nunknown_status_polls = 3\n{channels}"
    )
}

fn openai_channel(name: &str, fake: &FakeVideo, priority: i32) -> String {
    format!(
        "[[channels]]\nname = \"{name}\"\nkind = \"openai-videos\"\nbase_url = \"{}\"\napi_key = \"{FAKE_KEY}\"\nmodels = [\"model_h3\"]\npriority = {priority}\nrequest_timeout_secs = 2\n",
        fake.openai_base()
    )
}

fn ark_channel(name: &str, fake: &FakeVideo) -> String {
    format!(
        "[[channels]]\nname = \"{name}\"\nkind = \"ark\"\nbase_url = \"{}\"\napi_key = \"{FAKE_KEY}\"\nfamily = \"gen2\"\nmodel_map = {{ \"gen2-pro\" = \"seedance-pro\" }}\n",
        fake.ark_base()
    )
}

async fn create_video(relay: &Relay, key: &str, prompt: &str) -> String {
    let res = relay
        .call_as(
            key,
            Method::POST,
            "/v1/videos",
            Body::Json(
                json!({"model": "model_h3", "prompt": prompt, "size": "64x64", "seconds": "5"}),
            ),
            &[],
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    res.json()["id"].as_str().expect("id").to_owned()
}

/// Nothing of the upstream reaches a client.
fn assert_clean(text: &str, fake: &FakeVideo) {
    for secret in [
        FAKE_KEY,
        fake.base.trim_start_matches("http://"),
        "video_up_",
        "cgt-",
        "secret-host-detail",
    ] {
        assert!(!text.contains(secret), "{secret} leaked: {text}");
    }
}

async fn quota(relay: &Relay, key_id: &str) -> Value {
    relay
        .admin(Method::GET, &format!("/admin/keys/{key_id}"), Body::Empty)
        .await
        .json()
}

async fn channel_view(relay: &Relay, name: &str) -> Value {
    let list = relay
        .admin(Method::GET, "/admin/channels", Body::Empty)
        .await
        .json();
    list["data"]
        .as_array()
        .and_then(|d| d.iter().find(|c| c["name"] == name).cloned())
        .unwrap_or_else(|| panic!("no channel {name}: {list}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_format_over_openai_videos_keeps_its_own_copy() {
    let fake = FakeVideo::start().await;
    let relay = Relay::start(&config(&openai_channel("up", &fake, 0))).await;
    let (ct, body) = Multipart::new()
        .text("model", "model_h3")
        .text("prompt", "a lighthouse at dusk")
        .text("seconds", "5")
        .text("size", "64x64")
        .file("input_reference", "ref.png", "image/png", &png(64, 64))
        .build();
    let res = relay
        .call(Method::POST, "/v1/videos", Body::Raw(ct, body))
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let id = res.json()["id"].as_str().unwrap().to_owned();
    let done = relay.wait_video(&id, WAIT).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_clean(&done.to_string(), &fake);

    // The upstream got the SDK's multipart with the image as a file part.
    let sent = fake.bodies();
    let sent = String::from_utf8_lossy(&sent[0]);
    assert!(
        sent.contains("name=\"input_reference\"; filename="),
        "{sent}"
    );
    assert!(sent.contains("64x64"), "{sent}");

    // The relay serves its own copy, even once the upstream's URL has expired.
    fake.set(&fake.switches.expire_results, true);
    let content = relay.get(&format!("/v1/videos/{id}/content")).await;
    assert_eq!(content.status, 200);
    assert_eq!(content.body.as_ref(), fake_mp4().as_slice());
    let thumb = relay
        .get(&format!("/v1/videos/{id}/content?variant=thumbnail"))
        .await;
    assert_eq!(thumb.status, 200);
    assert!(thumb.body.starts_with(b"\x89PNG"));
    assert_eq!(thumb.header("content-type"), Some("image/png"));
    // The content URL is the upstream's own API: the key went along.
    assert!(fake.downloads().iter().all(|(_, auth)| *auth));

    // A JPEG thumbnail is kept and served as a JPEG.
    fake.set(&fake.switches.expire_results, false);
    fake.set(&fake.switches.jpeg_images, true);
    let res = relay
        .post_json(
            "/v1/videos",
            json!({"model": "model_h3", "prompt": "a jpeg thumbnail", "size": "64x64"}),
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let id = res.json()["id"].as_str().unwrap().to_owned();
    let done = relay.wait_video(&id, WAIT).await;
    assert_eq!(done["status"], "completed", "{done}");
    let thumb = relay
        .get(&format!("/v1/videos/{id}/content?variant=thumbnail"))
        .await;
    assert_eq!(thumb.status, 200);
    assert_eq!(thumb.header("content-type"), Some("image/jpeg"));
    assert!(thumb.body.starts_with(b"\xFF\xD8\xFF"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_format_over_ark_keeps_video_and_last_frame() {
    let fake = FakeVideo::start().await;
    let relay = Relay::start(&config(&ark_channel("ark", &fake))).await;
    let res = relay
        .post_json(
            "/v1/video/generations",
            json!({"model": "gen2-pro", "prompt": "a heron takes off", "duration": 2,
                   "resolution": "480p", "ratio": "16:9", "return_last_frame": true, "seed": 7}),
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let id = res.json()["task_id"].as_str().unwrap().to_owned();
    let done = relay.wait_generation(&id, WAIT).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_clean(&done.to_string(), &fake);

    let sent: Value = serde_json::from_slice(&fake.bodies()[0]).unwrap();
    assert_eq!(sent["model"], "seedance-pro");
    assert_eq!(sent["resolution"], "480p");
    assert_eq!(sent["ratio"], "16:9");
    assert_eq!(sent["duration"], 2);
    assert_eq!(sent["seed"], 7);
    assert_eq!(sent["return_last_frame"], true);
    assert_eq!(sent["content"][0]["type"], "text");

    fake.set(&fake.switches.expire_results, true);
    let url = done["video_url"].as_str().expect("video_url");
    let path = &url[url.find("/files/").unwrap()..];
    let video = relay.get(path).await;
    assert_eq!(video.status, 200);
    assert_eq!(video.body.as_ref(), fake_mp4().as_slice());
    let url = done["last_frame_url"].as_str().expect("last_frame_url");
    let frame = relay.get(&url[url.find("/files/").unwrap()..]).await;
    assert_eq!(frame.status, 200);
    assert!(frame.body.starts_with(b"\x89PNG"));
    // The result URLs are on another host than the API: no key went there.
    assert!(!fake.downloads().is_empty());
    assert!(fake.downloads().iter().all(|(_, auth)| !*auth));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_channel_fails_over_and_429s_wait() {
    let down = FakeVideo::start().await;
    let busy = FakeVideo::start().await;
    down.set(&down.switches.down, true);
    busy.switches.burst_429.store(3, Ordering::SeqCst);
    let channels = format!(
        "{}{}",
        openai_channel("first", &down, 10),
        openai_channel("second", &busy, 0)
    );
    let relay = Relay::start(&config(&channels)).await;
    let id = create_video(&relay, &relay.key.clone(), "failover please").await;
    let done = relay.wait_video(&id, WAIT).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert!(down.accepted().is_empty());
    assert_eq!(busy.accepted().get("failover please"), Some(&1));
    assert_eq!(busy.switches.burst_429.load(Ordering::SeqCst), 0);
    let first = channel_view(&relay, "first").await;
    assert!(first["failovers"].as_u64().unwrap() >= 1, "{first}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_reaches_the_upstream() {
    let fake = FakeVideo::start().await;
    fake.switches.run_ms.store(60_000, Ordering::SeqCst);
    let relay = Relay::start(&config(&openai_channel("up", &fake, 0))).await;
    let id = create_video(&relay, &relay.key.clone(), "stop me").await;
    let running = poll_until(WAIT, || async {
        let v = relay.get(&format!("/v1/videos/{id}")).await.json();
        (v["status"] == "in_progress").then_some(v)
    })
    .await;
    assert!(running.is_some(), "the task never ran");
    let res = relay
        .call(
            Method::POST,
            &format!("/v1/videos/{id}/cancel"),
            Body::Empty,
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let deleted = poll_until(WAIT, || async { (fake.cancelled() == 1).then_some(()) }).await;
    assert!(deleted.is_some(), "the upstream task was not cancelled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_download_answered_503_is_tried_again() {
    let fake = FakeVideo::start().await;
    fake.switches.downloads_503.store(2, Ordering::SeqCst);
    let relay = Relay::start(&config(&openai_channel("up", &fake, 0))).await;
    let id = create_video(&relay, &relay.key.clone(), "second time lucky").await;
    let done = relay.wait_video(&id, WAIT).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(fake.switches.downloads_503.load(Ordering::SeqCst), 0);
    assert_eq!(fake.accepted().get("second time lucky"), Some(&1));
    let content = relay.get(&format!("/v1/videos/{id}/content")).await;
    assert_eq!(content.body.as_ref(), fake_mp4().as_slice());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_statuses_then_truncated_downloads_fail_and_refund() {
    let fake = FakeVideo::start().await;
    let relay = Relay::start(&config(&openai_channel("up", &fake, 0))).await;
    let (key_id, key) = relay.new_key("billed", Some(1000)).await;

    let switches = &fake.switches;
    for (switch, prompt) in [
        (&switches.unknown_status, "never known"),
        (&switches.truncate, "cut short"),
        (&switches.expire_results, "gone too soon"),
    ] {
        fake.set(switch, true);
        let id = create_video(&relay, &key, prompt).await;
        let done = relay.wait_video_as(&key, &id, WAIT).await;
        assert_eq!(done["status"], "failed", "{prompt}: {done}");
        assert_eq!(done["error"]["code"], "upstream_error", "{prompt}");
        assert_clean(&done.to_string(), &fake);
        fake.set(switch, false);
    }

    let k = quota(&relay, &key_id).await;
    assert_eq!(k["quota_remaining"], 1000, "{k}");
    assert_eq!(k["quota_used"], 0, "{k}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_poll_times_out_and_the_task_goes_on() {
    let fake = FakeVideo::start().await;
    fake.set(&fake.switches.hang_polls, true);
    let channel = openai_channel("up", &fake, 0)
        .replace("request_timeout_secs = 2", "request_timeout_secs = 1");
    let relay = Relay::start(&config(&channel)).await;
    let id = create_video(&relay, &relay.key.clone(), "wait for me").await;
    let timed_out = poll_until(WAIT, || async {
        let v = channel_view(&relay, "up").await;
        (v["failures"].as_u64() >= Some(1)).then_some(v)
    })
    .await;
    assert!(timed_out.is_some(), "no poll timed out");
    fake.set(&fake.switches.hang_polls, false);
    let done = relay.wait_video(&id, WAIT).await;
    assert_eq!(done["status"], "completed", "{done}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_accepted_task_survives_a_restart_without_a_second_submission() {
    let fake = FakeVideo::start().await;
    fake.switches.run_ms.store(1_500, Ordering::SeqCst);
    let channel = config(&openai_channel("up", &fake, 0));
    let relay = Relay::start(&channel).await;
    let key = relay.key.clone();
    let id = create_video(&relay, &key, "across a restart").await;
    let running = poll_until(WAIT, || async {
        let v = relay.get(&format!("/v1/videos/{id}")).await.json();
        (v["status"] == "in_progress").then_some(v)
    })
    .await;
    assert!(running.is_some(), "the task never ran");
    let dir = relay.stop().await;
    let relay = Relay::start_in(dir, Some(key), &channel).await;
    let done = relay.wait_video(&id, WAIT).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(fake.accepted().get("across a restart"), Some(&1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_never_gets_more_calls_at_once_than_its_cap() {
    let fake = FakeVideo::start().await;
    fake.switches.latency_ms.store(20, Ordering::SeqCst);
    let channel = format!("{}max_concurrency = 2\n", openai_channel("up", &fake, 0));
    let relay = Relay::start(&config(&channel)).await;
    let key = relay.key.clone();
    let mut ids = Vec::new();
    for i in 0..12 {
        ids.push(create_video(&relay, &key, &format!("capped {i}")).await);
    }
    for id in &ids {
        let done = relay.wait_video(id, WAIT).await;
        assert_eq!(done["status"], "completed", "{done}");
    }
    let max = fake.switches.max_active.load(Ordering::SeqCst);
    assert!((1..=2).contains(&max), "{max} calls at once");
    assert!(fake.accepted().values().all(|n| *n == 1));
}

/// `n` tasks through two channels that fail 30% of submissions (and 5% of tasks); the
/// first goes down midway and comes back.
async fn many_tasks_through_two_flaky_channels(n: usize) {
    let a = FakeVideo::start().await;
    let b = FakeVideo::start().await;
    for fake in [&a, &b] {
        fake.switches
            .submit_fail_permille
            .store(300, Ordering::SeqCst);
        fake.switches.task_fail_permille.store(50, Ordering::SeqCst);
        fake.switches.run_ms.store(150, Ordering::SeqCst);
    }
    let channels = format!(
        "{}{}",
        openai_channel("a", &a, 0),
        openai_channel("b", &b, 0)
    );
    let relay = Relay::start(&config(&channels)).await;
    let key = relay.key.clone();
    let mut ids = Vec::new();
    for i in 0..n {
        ids.push(create_video(&relay, &key, &format!("task number {i}")).await);
        if i == n / 2 {
            a.set(&a.switches.down, true);
        }
    }
    let marked = poll_until(WAIT, || async {
        let v = channel_view(&relay, "a").await;
        (v["marked_unhealthy"].as_u64() >= Some(1)).then_some(v)
    })
    .await;
    assert!(marked.is_some(), "channel a was never marked unhealthy");
    a.set(&a.switches.down, false);

    // Keep looking until every task is final.
    let all_final = poll_until(Duration::from_secs(60), || {
        let relay = &relay;
        let ids = &ids;
        async move {
            for id in ids {
                let v = relay.get(&format!("/v1/videos/{id}")).await.json();
                if !matches!(
                    v["status"].as_str(),
                    Some("completed" | "failed" | "cancelled")
                ) {
                    return None;
                }
            }
            Some(())
        }
    })
    .await;
    assert!(all_final.is_some(), "not every task ended");

    let (aa, ba) = (a.accepted(), b.accepted());
    for i in 0..n {
        let prompt = format!("task number {i}");
        let times = aa.get(&prompt).copied().unwrap_or(0) + ba.get(&prompt).copied().unwrap_or(0);
        assert!(times <= 1, "{prompt} was submitted {times} times");
    }
    let restored = poll_until(WAIT, || async {
        let v = channel_view(&relay, "a").await;
        (v["healthy"] == true && v["restored"].as_u64() >= Some(1)).then_some(v)
    })
    .await;
    assert!(restored.is_some(), "channel a was not restored");
    let failovers = channel_view(&relay, "a").await["failovers"]
        .as_u64()
        .unwrap_or(0)
        + channel_view(&relay, "b").await["failovers"]
            .as_u64()
            .unwrap_or(0);
    assert!(failovers > 0, "no failover observed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_through_two_flaky_channels_all_end_once_submitted() {
    let n = if std::env::var("RUN_SLOW_TESTS").as_deref() == Ok("1") {
        1000
    } else {
        200
    };
    many_tasks_through_two_flaky_channels(n).await;
}

/// The most of `times` in any window of `window` (each window starting at one of them).
fn most_in_a_window(times: &[Instant], window: Duration) -> usize {
    let mut sorted = times.to_vec();
    sorted.sort();
    (0..sorted.len())
        .map(|i| sorted[i..].partition_point(|t| *t < sorted[i] + window))
        .max()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_never_gets_more_calls_a_second_than_its_rate() {
    const RATE: usize = 8;
    const TASKS: usize = 10;
    let fake = FakeVideo::start().await;
    // Done at the first poll: each task is a submission, a poll and two downloads.
    fake.switches.run_ms.store(1, Ordering::SeqCst);
    let channel = format!(
        "{}max_calls_per_sec = {RATE}\n",
        openai_channel("up", &fake, 0)
    );
    let relay = Relay::start(&config(&channel)).await;
    let key = relay.key.clone();
    let mut ids = Vec::new();
    for i in 0..TASKS {
        ids.push(create_video(&relay, &key, &format!("paced {i}")).await);
    }
    let all_final = poll_until(WAIT, || {
        let (relay, ids) = (&relay, &ids);
        async move {
            let mut done = Vec::new();
            for id in ids {
                let v = relay.get(&format!("/v1/videos/{id}")).await.json();
                if !matches!(
                    v["status"].as_str(),
                    Some("completed" | "failed" | "cancelled")
                ) {
                    return None;
                }
                done.push(v);
            }
            Some(done)
        }
    })
    .await
    .expect("every task ends");
    for v in &all_final {
        assert_eq!(v["status"], "completed", "{v}");
    }
    assert!(fake.accepted().values().all(|n| *n == 1));

    // The upstream's own clock: never more than the rate plus the bucket's burst (the rate
    // rounded up) in any second, though the relay had more to do at once.
    let arrivals = fake.arrivals();
    assert!(arrivals.len() >= TASKS * 4, "{} calls", arrivals.len());
    let most = most_in_a_window(&arrivals, Duration::from_secs(1));
    assert!(most <= RATE + RATE, "{most} calls in one second");
    let view = channel_view(&relay, "up").await;
    assert_eq!(view["max_calls_per_sec"], RATE as f64, "{view}");
    assert!(view["calls_paced"].as_u64() > Some(0), "{view}");
}

/// Uploads `bytes` as an asset of `kind` into library `lib` and waits until it is active.
async fn active_asset(relay: &Relay, lib: &str, kind: &str, bytes: &[u8]) -> String {
    let (ct, body) = Multipart::new()
        .text("type", kind)
        .file("file", "reference", "application/octet-stream", bytes)
        .build();
    let res = relay
        .call(
            Method::POST,
            &format!("/v1/asset-libraries/{lib}/assets"),
            Body::Raw(ct, body),
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let id = res.json()["id"].as_str().expect("asset id").to_owned();
    let active = poll_until(WAIT, || async {
        let v = relay.get(&format!("/v1/assets/{id}")).await.json();
        (v["status"] == "active").then_some(())
    })
    .await;
    assert!(active.is_some(), "asset {id} never became active");
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_reference_asset_reaches_ark_with_its_role() {
    let fake = FakeVideo::start().await;
    // A public address: references over the inline cap go as the relay's signed URLs.
    let channel = format!(
        "[server]\npublic_base_url = \"https://relay.example\"\n{}max_inline_bytes = 1024\n",
        ark_channel("ark", &fake)
    );
    let relay = Relay::start(&config(&channel)).await;
    let lib = relay
        .post_json("/v1/asset-libraries", json!({"name": "refs"}))
        .await;
    assert_eq!(lib.status, 200, "{}", lib.text());
    let lib = lib.json()["id"].as_str().expect("library id").to_owned();
    let (first, image_a, image_b) = (png(8, 8), png(4, 4), png(6, 6));
    assert!(first.len() <= 1024 && wav().len() > 1024 && mp4_head().len() <= 1024);
    let first_id = active_asset(&relay, &lib, "image", &first).await;
    let image_a_id = active_asset(&relay, &lib, "image", &image_a).await;
    let image_b_id = active_asset(&relay, &lib, "image", &image_b).await;
    let video_id = active_asset(&relay, &lib, "video", &mp4_head()).await;
    let audio_id = active_asset(&relay, &lib, "audio", &wav()).await;
    let res = relay
        .post_json(
            "/v1/video/generations",
            json!({"model": "gen2-pro", "prompt": "a heron and its references", "duration": 2,
            "resolution": "480p", "ratio": "16:9", "assets": [
                {"id": image_a_id, "role": "reference_image"},
                {"id": audio_id, "role": "reference_audio"},
                {"id": first_id, "role": "first_frame"},
                {"id": video_id, "role": "reference_video"},
                {"id": image_b_id, "role": "reference_image"},
            ]}),
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let id = res.json()["task_id"].as_str().unwrap().to_owned();
    let done = relay.wait_generation(&id, WAIT).await;
    assert_eq!(done["status"], "succeeded", "{done}");

    // What the fake received: the prompt, the first frame, then the references in request
    // order, each with its role; small ones inline, the audio (over the cap) as a signed URL.
    let contents = fake.ark_contents();
    let content = contents[0].as_array().expect("a content array");
    let data = |mime: &str, bytes: &[u8]| format!("data:{mime};base64,{}", base64(bytes));
    let item =
        |kind: &str, role: &str, url: &str| json!({"type": kind, "role": role, kind: {"url": url}});
    assert_eq!(content.len(), 6, "{content:?}");
    assert_eq!(
        content[0],
        json!({"type": "text", "text": "a heron and its references"})
    );
    assert_eq!(
        content[1],
        item("image_url", "first_frame", &data("image/png", &first))
    );
    assert_eq!(
        content[2],
        item("image_url", "reference_image", &data("image/png", &image_a))
    );
    assert_eq!(
        content[4],
        item(
            "video_url",
            "reference_video",
            &data("video/mp4", &mp4_head())
        )
    );
    assert_eq!(
        content[5],
        item("image_url", "reference_image", &data("image/png", &image_b))
    );
    assert_eq!(content[3]["type"], "audio_url");
    assert_eq!(content[3]["role"], "reference_audio");
    let url = content[3]["audio_url"]["url"]
        .as_str()
        .expect("an audio URL");
    assert!(url.starts_with("https://relay.example/files/"), "{url}");
    assert!(url.contains("sig="), "{url}");
    // The signed URL serves the asset's bytes, without a key.
    let served = relay
        .client
        .send(
            Method::GET,
            &relay.url(&url["https://relay.example".len()..]),
            Body::Empty,
            &[],
        )
        .await;
    assert_eq!(served.status, 200);
    assert_eq!(served.body.as_ref(), wav().as_slice());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jpeg_last_frame_is_kept_and_served_as_a_jpeg() {
    let fake = FakeVideo::start().await;
    fake.set(&fake.switches.jpeg_images, true);
    let relay = Relay::start(&config(&ark_channel("ark", &fake))).await;
    let res = relay
        .post_json(
            "/v1/video/generations",
            json!({"model": "gen2-pro", "prompt": "a heron at night", "duration": 2,
                   "resolution": "480p", "return_last_frame": true}),
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let id = res.json()["task_id"].as_str().unwrap().to_owned();
    let done = relay.wait_generation(&id, WAIT).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let url = done["last_frame_url"].as_str().expect("last_frame_url");
    let frame = relay.get(&url[url.find("/files/").unwrap()..]).await;
    assert_eq!(frame.status, 200);
    assert_eq!(frame.header("content-type"), Some("image/jpeg"));
    assert_eq!(frame.body.as_ref(), JPEG_HEAD);
    // Ranges work on it as on any file.
    let part = relay
        .client
        .send(
            Method::GET,
            &relay.url(&url[url.find("/files/").unwrap()..]),
            Body::Empty,
            &[("range", "bytes=0-2".to_owned())],
        )
        .await;
    assert_eq!(part.status, 206);
    assert_eq!(part.body.as_ref(), &JPEG_HEAD[..3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn result_urls_off_the_channel_go_through_the_address_guard() {
    // The fake hands out result URLs on a second loopback address: to a relay that does not
    // allow private URLs, an internal host that an upstream (or whoever controls its answers)
    // points it at.
    let fake = FakeVideo::start().await;
    let files = fake.serve_files_elsewhere().await;
    let closed = format!(
        "[security]\nallow_private_urls = false\n{}",
        config(&ark_channel("ark", &fake))
    );
    let relay = Relay::start(&closed).await;
    let (key_id, key) = relay.new_key("guarded", Some(10_000)).await;
    let body = json!({"model": "gen2-pro", "prompt": "an internal file", "duration": 5,
                      "resolution": "720p"});
    let res = relay
        .call_as(
            &key,
            Method::POST,
            "/v1/video/generations",
            Body::Json(body.clone()),
            &[],
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let id = res.json()["task_id"].as_str().unwrap().to_owned();
    let done = relay.wait_generation_as(&key, &id, WAIT).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["error"]["code"], "upstream_error", "{done}");
    assert_clean(&done.to_string(), &fake);
    assert!(
        fake.downloads().is_empty(),
        "the guarded address was reached: {:?}",
        fake.downloads()
    );
    // Refunded in full.
    assert_eq!(quota(&relay, &key_id).await["quota_remaining"], 10_000);

    // A host the channel trusts is fetched (closed networks name their file hosts).
    let authority = files.trim_start_matches("http://").to_owned();
    let trusting = closed.replace(
        "family = \"gen2\"\n",
        &format!("family = \"gen2\"\ntrusted_hosts = [\"{authority}\"]\n"),
    );
    assert_ne!(trusting, closed);
    let relay = Relay::start(&trusting).await;
    let res = relay.post_json("/v1/video/generations", body).await;
    assert_eq!(res.status, 200, "{}", res.text());
    let id = res.json()["task_id"].as_str().unwrap().to_owned();
    let done = relay.wait_generation(&id, WAIT).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert!(!fake.downloads().is_empty());
}
