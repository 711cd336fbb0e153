//! The `vertex-veo` kind (Google Veo on Vertex AI) end to end against [`FakeVertex`]: both
//! client formats reach it (text, first frame, first and last frame, a reference image) and
//! come back as the same playable video, whether Vertex AI answers it inline as base64 or in
//! Cloud Storage; the service account's token is fetched once for many tasks, and fetched
//! again when the API says it expired or too little of it is left; failures and content
//! refusals are refunded; a rate limit or a refused key fails over to the next channel; the
//! ledger is exact after each; `relay config check` names a missing or malformed key file.

use std::path::Path;

use http::Method;
use serde_json::{Value, json};

use crate::fake_veo::veo_mp4;
use crate::fake_vertex::{
    FakeVertex, LOCATION, PROJECT, account_key, stranger_key, write_key_file,
};
use crate::harness::{Body, Relay, png};
use crate::vendor_flows::{
    GOOGLE_WAIT as WAIT, assert_channel_tests, content, create_multipart, decoded, entries,
    key_of_group, ledger, run_one, sdk_form,
};

/// The first format's `model_h3`, and second-format models of family `veo` (Veo 3.1 and 2).
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
[models.veo-2]
kind = "generation"
family = "veo"
resolutions = ["720p"]
durations = [5, 6, 7, 8]
ratios = ["16:9", "9:16"]
price_per_second = 5
"#;

/// A `vertex-veo` channel on `fake` with the key file at `key`; `extra` lines added.
fn channel(name: &str, fake: &FakeVertex, key: &Path, priority: i32, extra: &str) -> String {
    format!(
        r#"
[[channels]]
name = "{name}"
kind = "vertex-veo"
base_url = "{base}"
storage_base_url = "{base}"
credentials_file = {key:?}
project = "{PROJECT}"
location = "{LOCATION}"
models = ["model_h3"]
family = "veo"
priority = {priority}
request_timeout_secs = 5
model_map = {{ model_h3 = "veo-3.1-fast-generate-001", "veo-3" = "veo-3.1-generate-preview", "veo-2" = "veo-2.0-generate-001" }}
{extra}
"#,
        base = fake.base,
        key = key.display().to_string(),
    )
}

/// A second-format task as `secret`, waited for: its record.
async fn generation(relay: &Relay, secret: &str, request: Value) -> Value {
    let res = relay
        .call_as(
            secret,
            Method::POST,
            "/v1/video/generations",
            Body::Json(request),
            &[],
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let id = res.json()["task_id"].as_str().unwrap().to_owned();
    relay.wait_generation_as(secret, &id, WAIT).await
}

/// The bytes a finished second-format task serves.
async fn generation_video(relay: &Relay, done: &Value) -> Vec<u8> {
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_clean(&done.to_string());
    let url = done["video_url"].as_str().unwrap();
    let path = url
        .split_once("/files/")
        .map(|(_, p)| format!("/files/{p}"))
        .unwrap();
    let video = relay.send(Method::GET, &path, Body::Empty, &[]).await;
    assert_eq!(video.status, 200);
    video.body.to_vec()
}

/// Nothing of the vendor, its token or the key reaches a client.
fn assert_clean(text: &str) {
    for secret in [
        "ya29.",
        "operations/",
        "googleapis",
        "gs://",
        "vertex.internal.example",
        PROJECT,
        "PRIVATE KEY",
    ] {
        assert!(!text.contains(secret), "{secret} leaked: {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_formats_reach_vertex_with_one_token_and_come_back_playable() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeVertex::start().await;
    let key_file = fake.key_file(dir.path(), "sa.json");
    let relay = Relay::start(&format!(
        "{MODELS}{}",
        channel("vertex", &fake, &key_file, 0, "")
    ))
    .await;
    let (key_id, secret) = key_of_group(&relay, "vertex", "gen2").await;

    // Text to video, first frame, first and last frame: the OpenAI SDK's multipart bodies.
    let text = create_multipart(&relay, &secret, sdk_form("a lighthouse at dusk")).await;
    content(&relay, &secret, &text, assert_clean).await;
    let first = png(1280, 720);
    let form =
        sdk_form("the lighthouse wakes").file("input_reference", "f.png", "image/png", &first);
    let with_first = create_multipart(&relay, &secret, form).await;
    content(&relay, &secret, &with_first, assert_clean).await;
    let last = png(640, 360);
    let form = sdk_form("from dusk to night")
        .file("first_frame", "f.png", "image/png", &first)
        .file("last_frame", "l.png", "image/png", &last);
    let with_both = create_multipart(&relay, &secret, form).await;
    content(&relay, &secret, &with_both, assert_clean).await;

    let bodies = fake.bodies();
    assert_eq!(bodies.len(), 3, "{bodies:?}");
    // Veo 3.1 makes sound: generateAudio, which Vertex AI requires of Veo 3; one sample.
    assert_eq!(
        bodies[0],
        json!({"instances": [{"prompt": "a lighthouse at dusk"}],
               "parameters": {"aspectRatio": "16:9", "durationSeconds": 8, "sampleCount": 1,
                              "generateAudio": true}})
    );
    let instance = &bodies[1]["instances"][0];
    assert_eq!(instance["image"]["mimeType"], "image/png");
    assert_eq!(decoded(&instance["image"]), first);
    assert!(instance.get("lastFrame").is_none(), "{instance}");
    let instance = &bodies[2]["instances"][0];
    assert_eq!(decoded(&instance["image"]), first);
    assert_eq!(decoded(&instance["lastFrame"]), last);
    // 8 s at 10 credits, settled as asked: Veo reports no duration.
    let pair = [("prededuct", -80), ("settle", 0)];
    assert_eq!(
        ledger(&relay, &key_id).await,
        entries(&[pair, pair, pair].concat())
    );

    // The second format: a reference image on Veo 3.1 with a seed, and Veo 2 (no sound, so
    // no generateAudio, which Vertex AI refuses for it).
    let (gen_key_id, gen_secret) = key_of_group(&relay, "vertex", "veo").await;
    let image = crate::generations::active_image(&relay, &gen_secret, &png(320, 180)).await;
    let done = generation(
        &relay,
        &gen_secret,
        json!({"model": "veo-3", "prompt": "the woman walks on the beach", "duration": 8,
               "resolution": "720p", "ratio": "16:9", "seed": 42,
               "assets": [{"id": image, "role": "reference_image"}]}),
    )
    .await;
    assert_eq!(generation_video(&relay, &done).await, veo_mp4());
    let veo2 = generation(
        &relay,
        &gen_secret,
        json!({"model": "veo-2", "prompt": "a butterfly lands on a flower", "duration": 5,
               "resolution": "720p", "ratio": "9:16"}),
    )
    .await;
    assert_eq!(generation_video(&relay, &veo2).await, veo_mp4());

    let bodies = fake.bodies();
    let refs = bodies[3]["instances"][0]["referenceImages"]
        .as_array()
        .unwrap();
    assert_eq!(refs.len(), 1);
    assert_eq!(refs[0]["referenceType"], "asset");
    assert_eq!(decoded(&refs[0]["image"]), png(320, 180));
    assert_eq!(
        bodies[3]["parameters"],
        json!({"aspectRatio": "16:9", "durationSeconds": 8, "sampleCount": 1, "seed": 42,
               "generateAudio": true})
    );
    // No seed asked for: the one the relay chose and recorded goes along.
    assert!(veo2["seed"].is_u64(), "{veo2}");
    assert_eq!(
        bodies[4]["parameters"],
        json!({"aspectRatio": "9:16", "durationSeconds": 5, "sampleCount": 1,
               "seed": veo2["seed"]})
    );
    assert_eq!(
        ledger(&relay, &gen_key_id).await,
        entries(&[
            ("prededuct", -96),
            ("settle", 0),
            ("prededuct", -25),
            ("settle", 0)
        ])
    );

    // Five tasks, their polls and nothing else: one token, every call carried it.
    assert_eq!(fake.exchanges(), 1);
    assert!(fake.unauthorized().is_empty(), "{:?}", fake.unauthorized());
    assert!(fake.refused().is_empty(), "{:?}", fake.refused());
    assert_eq!(fake.storage_gets(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cloud_storage_result_is_read_with_the_token_and_served_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeVertex::start().await;
    let key_file = fake.key_file(dir.path(), "sa.json");
    let storage = "storage_uri = \"gs://relay-videos/out/\"";
    let relay = Relay::start(&format!(
        "{MODELS}{}",
        channel("vertex-gcs", &fake, &key_file, 0, storage)
    ))
    .await;
    let (key_id, secret) = key_of_group(&relay, "vertex", "gen2").await;

    let id = create_multipart(&relay, &secret, sdk_form("a paper boat at dawn")).await;
    content(&relay, &secret, &id, assert_clean).await;
    let (gen_key_id, gen_secret) = key_of_group(&relay, "vertex", "veo").await;
    let done = generation(
        &relay,
        &gen_secret,
        json!({"model": "veo-3", "prompt": "a paper boat at noon", "duration": 6,
               "resolution": "1080p", "ratio": "16:9"}),
    )
    .await;
    assert_eq!(generation_video(&relay, &done).await, veo_mp4());

    let bodies = fake.bodies();
    assert_eq!(bodies.len(), 2);
    assert_eq!(
        bodies[1]["parameters"],
        json!({"aspectRatio": "16:9", "durationSeconds": 6, "resolution": "1080p",
               "sampleCount": 1, "seed": done["seed"], "generateAudio": true,
               "storageUri": "gs://relay-videos/out/"})
    );
    // Both videos read from the storage, with the one token.
    assert_eq!(fake.storage_gets(), 2);
    assert_eq!(fake.exchanges(), 1);
    assert!(fake.unauthorized().is_empty(), "{:?}", fake.unauthorized());
    assert_eq!(
        ledger(&relay, &key_id).await,
        entries(&[("prededuct", -80), ("settle", 0)])
    );
    assert_eq!(
        ledger(&relay, &gen_key_id).await,
        entries(&[("prededuct", -120), ("settle", 0)])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_or_short_lived_token_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeVertex::start().await;
    let key_file = fake.key_file(dir.path(), "sa.json");
    let relay = Relay::start(&format!(
        "{MODELS}{}",
        channel("vertex", &fake, &key_file, 0, "")
    ))
    .await;
    let (key_id, secret) = key_of_group(&relay, "vertex", "gen2").await;

    let done = run_one(&relay, &secret, "first").await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(fake.exchanges(), 1);

    // The API says the token expired (revoked early, a clock off): the submission is made once
    // more with a new token, and the task is taken once.
    fake.expire_tokens();
    let done = run_one(&relay, &secret, "second").await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(fake.unauthorized(), ["ACCESS_TOKEN_EXPIRED"]);
    assert_eq!(fake.exchanges(), 2);
    assert_eq!(fake.bodies().len(), 2);

    // Tokens with less than five minutes left are never used twice: each call gets a new one.
    fake.switches
        .expires_in
        .store(120, std::sync::atomic::Ordering::SeqCst);
    fake.expire_tokens();
    let expired = ["ACCESS_TOKEN_EXPIRED", "ACCESS_TOKEN_EXPIRED"];
    let (exchanges, calls) = (fake.exchanges(), fake.authorized_calls());
    let done = run_one(&relay, &secret, "third").await;
    assert_eq!(done["status"], "completed", "{done}");
    let (new_exchanges, new_calls) = (
        fake.exchanges() - exchanges,
        fake.authorized_calls() - calls,
    );
    assert!(
        new_calls >= 2,
        "a submission and a poll at least: {new_calls}"
    );
    assert_eq!(new_exchanges, new_calls);
    assert_eq!(fake.unauthorized(), expired);

    let pair = [("prededuct", -80), ("settle", 0)];
    assert_eq!(
        ledger(&relay, &key_id).await,
        entries(&[pair, pair, pair].concat())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vertex_failures_and_refusals_are_refunded() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeVertex::start().await;
    let key_file = fake.key_file(dir.path(), "sa.json");
    let relay = Relay::start(&format!(
        "{MODELS}{}",
        channel("vertex", &fake, &key_file, 0, "")
    ))
    .await;
    let (key_id, secret) = key_of_group(&relay, "vertex", "gen2").await;

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
    assert!(message.contains("Support codes: 90789179"), "{message}");
    fake.set_flag(&fake.switches.rai, false);

    let pair = [("prededuct", -80), ("refund", 80)];
    assert_eq!(
        ledger(&relay, &key_id).await,
        entries(&[pair, pair].concat())
    );
    let quota = relay
        .admin(Method::GET, &format!("/admin/keys/{key_id}"), Body::Empty)
        .await
        .json();
    assert_eq!(quota["quota_remaining"], 1000, "{quota}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_or_a_refused_key_fails_over_and_the_channel_test_says_which() {
    let dir = tempfile::tempdir().unwrap();
    let troubled = FakeVertex::start().await;
    let good = FakeVertex::start().await;
    troubled
        .switches
        .rate_limited
        .store(1000, std::sync::atomic::Ordering::SeqCst);
    let busy_key = troubled.key_file(dir.path(), "busy.json");
    // A key the token endpoint does not know: its signature is refused.
    let stranger = write_key_file(
        dir.path(),
        "stranger.json",
        &stranger_key().0,
        &troubled.token_uri,
    );
    let good_key = good.key_file(dir.path(), "good.json");
    let channels = [
        channel("vertex-busy", &troubled, &busy_key, 2, ""),
        channel("vertex-stranger", &troubled, &stranger, 1, ""),
        channel("vertex-ok", &good, &good_key, 0, ""),
    ]
    .concat();
    let relay = Relay::start(&format!("{MODELS}{channels}")).await;
    let (key_id, secret) = key_of_group(&relay, "vertex", "gen2").await;

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
    assert_eq!(troubled.refused_grants(), ["Invalid JWT Signature."]);
    let listed = relay
        .admin(Method::GET, "/admin/channels", Body::Empty)
        .await
        .json();
    let failovers = |name: &str| {
        listed["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .map(|c| c["failovers"].as_u64().unwrap())
            .unwrap()
    };
    assert_eq!(failovers("vertex-busy"), 1, "{listed}");
    assert_eq!(failovers("vertex-stranger"), 1, "{listed}");
    // The client paid once, as asked.
    assert_eq!(
        ledger(&relay, &key_id).await,
        entries(&[("prededuct", -80), ("settle", 0)])
    );

    // The channel test: a token and the model's record; the stranger's key is refused.
    assert_channel_tests(
        &relay,
        &[
            ("vertex-busy", "ok"),
            ("vertex-stranger", "key_refused"),
            ("vertex-ok", "ok"),
        ],
        &["ya29."],
    )
    .await;
    assert_eq!(troubled.model_gets(), 1);
    assert_eq!(good.model_gets(), 1);
    assert_eq!(
        troubled.refused_grants(),
        ["Invalid JWT Signature.", "Invalid JWT Signature."]
    );
}

/// `relay config check` of a file with one `vertex-veo` channel given `extra`: (success,
/// stderr).
async fn config_check(dir: &Path, extra: &str) -> (bool, String) {
    let config = dir.join("relay.toml");
    std::fs::write(
        &config,
        format!(
            "[[channels]]\nname = \"vertex\"\nkind = \"vertex-veo\"\nmodels = [\"model_h3\"]\n\
             project = \"{PROJECT}\"\nlocation = \"{LOCATION}\"\n{extra}"
        ),
    )
    .unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_relay"))
        .args(["config", "check"])
        .arg(&config)
        .output()
        .await
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_check_names_a_missing_or_malformed_key_file_without_showing_it() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, err) = config_check(dir.path(), "").await;
    assert!(!ok);
    assert!(
        err.contains("channels.vertex: kind vertex-veo needs credentials_file"),
        "{err}"
    );

    let missing = dir.path().join("absent.json");
    let (ok, err) = config_check(
        dir.path(),
        &format!("credentials_file = {:?}\n", missing.display().to_string()),
    )
    .await;
    assert!(!ok);
    assert!(
        err.contains(&format!(
            "credentials_file {}: cannot be read",
            missing.display()
        )),
        "{err}"
    );

    // A key file cut short, in the middle of its private key.
    let good = write_key_file(
        dir.path(),
        "good.json",
        &account_key().0,
        "https://oauth2.googleapis.com/token",
    );
    let text = std::fs::read_to_string(&good).unwrap();
    let cut = dir.path().join("cut.json");
    std::fs::write(&cut, &text[..text.find("PRIVATE KEY").unwrap() + 200]).unwrap();
    let (ok, err) = config_check(
        dir.path(),
        &format!("credentials_file = {:?}\n", cut.display().to_string()),
    )
    .await;
    assert!(!ok);
    assert!(
        err.contains(&format!("credentials_file {}: is not JSON", cut.display())),
        "{err}"
    );
    let pem = &account_key().0;
    assert!(
        !err.contains("PRIVATE KEY") && !err.contains(&pem[60..100]),
        "{err}"
    );

    let (ok, err) = config_check(
        dir.path(),
        &format!("credentials_file = {:?}\n", good.display().to_string()),
    )
    .await;
    assert!(ok, "{err}");
}
