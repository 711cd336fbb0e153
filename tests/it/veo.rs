//! The `veo` kind (Google Veo on the Gemini API) end to end against [`FakeVeo`]: both client
//! formats reach it (text, first frame, first and last frame, reference images) and come back
//! as a playable video kept by the relay; failures, content refusals and expired files are
//! refunded; a rate-limited channel or a refused key fails over to the next channel; the
//! ledger is exact after each.

use http::Method;
use serde_json::json;

use crate::fake_veo::{FakeVeo, VEO_KEY, veo_mp4};
use crate::harness::{Body, Relay, png};
use crate::vendor_flows::{
    GOOGLE_WAIT as WAIT, content, create_multipart, decoded, entries, key_of_group, ledger,
    run_one, sdk_form,
};

/// The models: the first format's `model_h3` and a second-format `veo-3` of family `veo`.
const MODELS: &str = r#"
[tasks]
poll_interval_min_ms = 20
poll_interval_max_ms = 300
channel_cooldown_ms = 300
[groups]
veo = "veo"
[models.model_h3]
kind = "video"
price_per_second = 10
[models.veo-3]
kind = "generation"
family = "veo"
resolutions = ["720p", "1080p"]
durations = [4, 6, 8]
ratios = ["16:9", "9:16", "adaptive"]
price_per_second_by_resolution = { "720p" = 12, "1080p" = 20 }
"#;

/// A `veo` channel on `fake` with `key`, serving both models as Veo 3.1.
fn channel(name: &str, fake: &FakeVeo, key: &str, priority: i32) -> String {
    format!(
        r#"
[[channels]]
name = "{name}"
kind = "veo"
base_url = "{}"
api_key = "{key}"
models = ["model_h3"]
family = "veo"
priority = {priority}
request_timeout_secs = 5
model_map = {{ model_h3 = "veo-3.1-generate-preview", "veo-3" = "veo-3.1-generate-preview" }}
"#,
        fake.base
    )
}

/// Nothing of the vendor reaches a client.
fn assert_clean(text: &str) {
    for secret in [
        VEO_KEY,
        "operations/",
        "googleapis",
        "veo.internal.example",
        "op0",
    ] {
        assert!(!text.contains(secret), "{secret} leaked: {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_formats_reach_veo_and_come_back_playable() {
    let fake = FakeVeo::start().await;
    let relay = Relay::start(&format!("{MODELS}{}", channel("veo", &fake, VEO_KEY, 0))).await;
    let (key_id, secret) = key_of_group(&relay, "veo", "gen2").await;

    // Text to video, as the SDK sends it.
    let text = create_multipart(&relay, &secret, sdk_form("a lighthouse at dusk")).await;
    content(&relay, &secret, &text, assert_clean).await;
    // First frame, as the SDK's input_reference file part.
    let first = png(1280, 720);
    let form =
        sdk_form("the lighthouse wakes").file("input_reference", "f.png", "image/png", &first);
    let with_first = create_multipart(&relay, &secret, form).await;
    content(&relay, &secret, &with_first, assert_clean).await;
    // First and last frame.
    let last = png(1280, 720);
    let form = sdk_form("from dusk to night")
        .file("first_frame", "f.png", "image/png", &first)
        .file("last_frame", "l.png", "image/png", &last);
    let with_both = create_multipart(&relay, &secret, form).await;
    content(&relay, &secret, &with_both, assert_clean).await;

    let bodies = fake.bodies();
    assert_eq!(bodies.len(), 3, "{bodies:?}");
    assert_eq!(
        bodies[0],
        json!({"instances": [{"prompt": "a lighthouse at dusk"}],
               "parameters": {"aspectRatio": "16:9", "durationSeconds": 8}})
    );
    let instance = &bodies[1]["instances"][0];
    assert_eq!(instance["image"]["mimeType"], "image/png");
    assert_eq!(decoded(&instance["image"]), first);
    assert!(instance.get("lastFrame").is_none(), "{instance}");
    let instance = &bodies[2]["instances"][0];
    assert_eq!(decoded(&instance["image"]), first);
    assert_eq!(decoded(&instance["lastFrame"]), last);
    // 8 s at 10 credits, settled as asked: Veo reports no duration.
    assert_eq!(
        ledger(&relay, &key_id).await,
        entries(&[
            ("prededuct", -80),
            ("settle", 0),
            ("prededuct", -80),
            ("settle", 0),
            ("prededuct", -80),
            ("settle", 0),
        ])
    );

    // The second format with two reference images (Veo 3.1 takes them at 8 s).
    let (gen_key_id, gen_secret) = key_of_group(&relay, "veo", "veo").await;
    let image_a = crate::generations::active_image(&relay, &gen_secret, &png(320, 180)).await;
    let image_b = crate::generations::active_image(&relay, &gen_secret, &png(180, 320)).await;
    let res = relay
        .call_as(
            &gen_secret,
            Method::POST,
            "/v1/video/generations",
            Body::Json(
                json!({"model": "veo-3", "prompt": "the woman walks on the beach",
                "duration": 8, "resolution": "720p", "ratio": "16:9", "seed": 42,
                "assets": [{"id": image_a, "role": "reference_image"},
                           {"id": image_b, "role": "reference_image"}]}),
            ),
            &[],
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let id = res.json()["task_id"].as_str().unwrap().to_owned();
    let done = relay.wait_generation_as(&gen_secret, &id, WAIT).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_clean(&done.to_string());
    let url = done["video_url"].as_str().unwrap();
    let path = url
        .split_once("/files/")
        .map(|(_, p)| format!("/files/{p}"))
        .unwrap();
    let video = relay.send(Method::GET, &path, Body::Empty, &[]).await;
    assert_eq!(video.status, 200);
    assert_eq!(video.body.as_ref(), veo_mp4());

    let sent = &fake.bodies()[3];
    let refs = sent["instances"][0]["referenceImages"].as_array().unwrap();
    assert_eq!(refs.len(), 2);
    assert!(refs.iter().all(|r| r["referenceType"] == "asset"));
    assert_eq!(decoded(&refs[0]["image"]), png(320, 180));
    // No seed: the Gemini API refuses it (the fake would have answered 400).
    assert_eq!(
        sent["parameters"],
        json!({"aspectRatio": "16:9", "durationSeconds": 8})
    );
    assert_eq!(
        ledger(&relay, &gen_key_id).await,
        entries(&[("prededuct", -96), ("settle", 0)])
    );
    // Every file went through the redirect to the storage, which never saw the key.
    assert_eq!(fake.storage_gets(), (4, 0));
    assert!(fake.refused().is_empty(), "{:?}", fake.refused());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn veo_failures_refusals_and_expired_files_are_refunded() {
    let fake = FakeVeo::start().await;
    let relay = Relay::start(&format!("{MODELS}{}", channel("veo", &fake, VEO_KEY, 0))).await;
    let (key_id, secret) = key_of_group(&relay, "veo", "gen2").await;

    fake.set_flag(&fake.switches.fail, true);
    let done = run_one(&relay, &secret, "fails").await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["error"]["code"], "upstream_error", "{done}");
    assert_clean(&done.to_string());
    fake.set_flag(&fake.switches.fail, false);

    // The safety filters refused the video: the vendor's reason, refunded.
    fake.set_flag(&fake.switches.rai, true);
    let done = run_one(&relay, &secret, "refused").await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["error"]["code"], "moderation_blocked", "{done}");
    let message = done["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("Veo could not generate 1 videos"),
        "{message}"
    );
    fake.set_flag(&fake.switches.rai, false);

    // The file is gone before the relay fetched it.
    fake.set_flag(&fake.switches.expired, true);
    let done = run_one(&relay, &secret, "expired").await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["error"]["code"], "upstream_error", "{done}");
    fake.set_flag(&fake.switches.expired, false);

    let pair = [("prededuct", -80), ("refund", 80)];
    assert_eq!(
        ledger(&relay, &key_id).await,
        entries(&[pair, pair, pair].concat())
    );
    let quota = relay
        .admin(Method::GET, &format!("/admin/keys/{key_id}"), Body::Empty)
        .await
        .json();
    assert_eq!(quota["quota_remaining"], 1000, "{quota}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn veo_trouble_fails_over_to_the_next_channel() {
    let troubled = FakeVeo::start().await;
    let good = FakeVeo::start().await;
    // Every submission to the first is over quota; the second's key is wrong.
    troubled
        .switches
        .rate_limited
        .store(1000, std::sync::atomic::Ordering::SeqCst);
    let channels = [
        channel("veo-busy", &troubled, VEO_KEY, 2),
        channel("veo-wrong-key", &troubled, "not-the-key", 1),
        channel("veo-ok", &good, VEO_KEY, 0),
    ]
    .concat();
    let relay = Relay::start(&format!("{MODELS}{channels}")).await;
    let (key_id, secret) = key_of_group(&relay, "veo", "gen2").await;

    let done = run_one(&relay, &secret, "goes around").await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_clean(&done.to_string());
    assert!(troubled.bodies().is_empty());
    assert_eq!(good.bodies().len(), 1);
    assert!(
        troubled.refused().iter().any(|(status, _)| *status == 429),
        "{:?}",
        troubled.refused()
    );
    let channels = relay
        .admin(Method::GET, "/admin/channels", Body::Empty)
        .await
        .json();
    let failovers = |name: &str| {
        channels["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .map(|c| c["failovers"].as_u64().unwrap())
            .unwrap()
    };
    assert_eq!(failovers("veo-busy"), 1, "{channels}");
    assert_eq!(failovers("veo-wrong-key"), 1, "{channels}");
    // The client paid once, as asked.
    assert_eq!(
        ledger(&relay, &key_id).await,
        entries(&[("prededuct", -80), ("settle", 0)])
    );
}
