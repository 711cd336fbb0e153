//! Audio and video references of the first format in every form (http(s) URL, multipart file
//! part, `data:` URI): checked, kept by the relay, and sent to an `ark` upstream with their
//! roles; refused with the field's own error when they are not what the field takes.

use std::collections::HashMap;
use std::time::Duration;

use http::Method;
use serde_json::{Value, json};

use crate::fake_video::{FAKE_KEY, FakeVideo, fake_mp4};
use crate::harness::{Body, MediaServer, Multipart, Relay, base64, png, wav};

const WAIT: Duration = Duration::from_secs(20);
/// A public address, so the relay hands an upstream signed URLs of its own copies.
const PUBLIC: &str = "https://relay.example";
/// The `ark` channel's inline cap: [`wav`] goes under it, [`fake_mp4`] over it.
const INLINE_CAP: usize = 4096;

/// An `ark` channel serving the first format's model, in front of `fake`.
fn ark_config(fake: &FakeVideo) -> String {
    format!(
        "[server]\npublic_base_url = \"{PUBLIC}\"\n\
         [tasks]\npoll_interval_min_ms = 20\npoll_interval_max_ms = 300\n\
         [[channels]]\nname = \"ark\"\nkind = \"ark\"\nbase_url = \"{}\"\napi_key = \"{FAKE_KEY}\"\n\
         models = [\"model_h3\"]\nmax_inline_bytes = {INLINE_CAP}\n",
        fake.ark_base()
    )
}

fn data_uri(mime: &str, bytes: &[u8]) -> String {
    format!("data:{mime};base64,{}", base64(bytes))
}

/// An MP4 (an `ftyp` box, then filler) of about `len` bytes.
fn mp4_of(len: usize) -> Vec<u8> {
    let mut v = fake_mp4();
    v.resize(len, 7);
    v
}

/// Creates a task and answers its id.
async fn create(relay: &Relay, body: Body) -> String {
    let res = relay.call(Method::POST, "/v1/videos", body).await;
    assert_eq!(res.status, 200, "{}", res.text());
    res.json()["id"].as_str().expect("id").to_owned()
}

/// The multipart fields every task here has.
fn fields(prompt: &str) -> Multipart {
    Multipart::new()
        .text("model", "model_h3")
        .text("prompt", prompt)
        .text("size", "64x64")
}

/// The one item of `content` with `role`, checked to be of `kind` (`audio_url`, ...); its URL.
fn item_url(content: &[Value], kind: &str, role: &str) -> String {
    let items: Vec<&Value> = content.iter().filter(|i| i["role"] == role).collect();
    assert_eq!(items.len(), 1, "one {role} in {content:?}");
    assert_eq!(items[0]["type"], kind, "{content:?}");
    items[0][kind]["url"]
        .as_str()
        .unwrap_or_else(|| panic!("no URL in {}", items[0]))
        .to_owned()
}

/// The bytes behind a signed URL of the relay, fetched without a key.
async fn signed(relay: &Relay, url: &str) -> (Option<String>, Vec<u8>) {
    let path = url
        .strip_prefix(PUBLIC)
        .unwrap_or_else(|| panic!("not the relay's URL: {url}"));
    assert!(
        path.starts_with("/files/") && path.contains("sig="),
        "{url}"
    );
    let res = relay
        .client
        .send(Method::GET, &relay.url(path), Body::Empty, &[])
        .await;
    assert_eq!(res.status, 200, "{url}: {}", res.text());
    let ct = res.header("content-type").map(str::to_owned);
    (ct, res.body.to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audio_and_video_reach_ark_with_their_roles_in_every_form() {
    let fake = FakeVideo::start().await;
    let relay = Relay::start(&ark_config(&fake)).await;
    let (audio, video) = (wav(), fake_mp4());
    assert!(audio.len() <= INLINE_CAP && video.len() > INLINE_CAP);
    let media = MediaServer::start(HashMap::from([
        ("/voice.wav", ("audio/wav", audio.clone())),
        ("/clip.mp4", ("video/mp4", video.clone())),
    ]))
    .await;
    // A data: URI in a multipart text part may be longer than other text parts (1 MiB).
    let long_video = mp4_of(1_200_000);

    let mut tasks = Vec::new();
    let by_url = json!({"model": "model_h3", "prompt": "by URL", "size": "64x64",
        "audio_url": media.url("/voice.wav"), "reference_video": media.url("/clip.mp4"),
        "reference_video_audio": true});
    tasks.push(("by URL", create(&relay, Body::Json(by_url)).await));
    let (ct, body) = fields("by file part")
        .file("audio_url", "voice.wav", "audio/wav", &audio)
        .file("reference_video", "clip.mp4", "video/mp4", &video)
        .build();
    tasks.push(("by file part", create(&relay, Body::Raw(ct, body)).await));
    let by_data = json!({"model": "model_h3", "prompt": "by data URI", "size": "64x64",
        "audio_url": data_uri("audio/wav", &audio),
        "reference_video": data_uri("video/mp4", &video)});
    tasks.push(("by data URI", create(&relay, Body::Json(by_data)).await));
    let (ct, body) = fields("by data URI in multipart")
        .text("audio_url", &data_uri("audio/wav", &audio))
        .text("reference_video", &data_uri("video/mp4", &long_video))
        .build();
    tasks.push((
        "by data URI in multipart",
        create(&relay, Body::Raw(ct, body)).await,
    ));

    for (prompt, id) in &tasks {
        let done = relay.wait_video(id, WAIT).await;
        assert_eq!(done["status"], "completed", "{prompt}: {done}");
        let content = fake
            .ark_content_of(prompt)
            .unwrap_or_else(|| panic!("{prompt}: no submission"));
        // The prompt, then the two references, nothing twice.
        assert_eq!(content.len(), 3, "{prompt}: {content:?}");
        let audio_url = item_url(&content, "audio_url", "reference_audio");
        let video_url = item_url(&content, "video_url", "reference_video");
        if *prompt == "by URL" {
            // URLs go on as they are: the upstream fetches them itself.
            assert_eq!(audio_url, media.url("/voice.wav"));
            assert_eq!(video_url, media.url("/clip.mp4"));
            continue;
        }
        // The relay's copies: the audio inline, the video (over the cap) as its signed URL.
        assert_eq!(audio_url, data_uri("audio/wav", &audio), "{prompt}");
        let (ct, bytes) = signed(&relay, &video_url).await;
        assert_eq!(ct.as_deref(), Some("video/mp4"), "{prompt}");
        let sent = if prompt.ends_with("multipart") {
            &long_video
        } else {
            &video
        };
        assert!(bytes == *sent, "{prompt}: the video's bytes differ");
    }
    assert!(fake.accepted().values().all(|n| *n == 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_videos_upstreams_go_without_them() {
    let fake = FakeVideo::start().await;
    let config = format!(
        "[tasks]\npoll_interval_min_ms = 20\n[[channels]]\nname = \"up\"\nkind = \"openai-videos\"\n\
         base_url = \"{}\"\napi_key = \"{FAKE_KEY}\"\nmodels = [\"model_h3\"]\n",
        fake.openai_base()
    );
    let relay = Relay::start(&config).await;
    let (ct, body) = fields("no field for them")
        .file("audio_url", "voice.wav", "audio/wav", &wav())
        .file("reference_video", "clip.mp4", "video/mp4", &fake_mp4())
        .build();
    let id = create(&relay, Body::Raw(ct, body)).await;
    let done = relay.wait_video(&id, WAIT).await;
    assert_eq!(done["status"], "completed", "{done}");
    let sent = fake.bodies();
    let sent = String::from_utf8_lossy(&sent[0]);
    assert!(sent.contains("no field for them"), "{sent}");
    for absent in ["audio", "reference_video", "WAVE", "ftyp"] {
        assert!(!sent.contains(absent), "{absent} was sent: {sent}");
    }
}

/// Entries of a directory under the relay's data directory (none when it does not exist).
fn entries(relay: &Relay, dir: &str) -> Vec<String> {
    std::fs::read_dir(relay.dir.path().join(dir))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_types_are_refused_and_good_ones_kept_with_the_task() {
    // The simulator; JSON bodies (and so data: URIs) of at most 64 KiB.
    let relay = Relay::start("[server]\nmax_body_bytes = 65536\n").await;
    let image = png(8, 8);
    let json_with = |field: &str, value: String| {
        Body::Json(json!({"model": "model_h3", "prompt": "p", "size": "64x64", field: value}))
    };
    let refused = [
        (
            "an image as the audio file part",
            fields("p")
                .file("audio_url", "a.wav", "audio/wav", &image)
                .build(),
            "invalid audio",
            "audio_url",
        ),
        (
            "audio as the video file part",
            fields("p")
                .file("reference_video", "v.mp4", "video/mp4", &wav())
                .build(),
            "invalid video",
            "reference_video",
        ),
        (
            "audio as a video data: URI in multipart",
            fields("p")
                .text("reference_video", &data_uri("video/mp4", &wav()))
                .build(),
            "invalid video",
            "reference_video",
        ),
    ];
    for (what, (ct, body), message, field) in refused {
        let res = relay
            .call(Method::POST, "/v1/videos", Body::Raw(ct, body))
            .await;
        res.assert_error(400, message, Some(field));
        let detail = res.json()["error"]["detail"].to_string();
        assert!(detail.contains(field), "{what}: {detail}");
    }
    for (body, message, field) in [
        (
            json_with("audio_url", data_uri("image/png", &image)),
            "invalid audio",
            "audio_url",
        ),
        (
            json_with("reference_video", data_uri("audio/wav", &wav())),
            "invalid video",
            "reference_video",
        ),
        (
            json_with("reference_video", "data:video/mp4;base64,AAAA*AAA".into()),
            "invalid video",
            "reference_video",
        ),
    ] {
        let res = relay.call(Method::POST, "/v1/videos", body).await;
        res.assert_error(400, message, Some(field));
    }
    // A data: URI is held to the JSON body limit, in multipart too; a file part is not.
    let big = mp4_of(100_000);
    let (ct, body) = fields("p")
        .text("reference_video", &data_uri("video/mp4", &big))
        .build();
    let res = relay
        .call(Method::POST, "/v1/videos", Body::Raw(ct, body))
        .await;
    assert_eq!(res.status, 413, "{}", res.text());
    // Nothing was left behind by any of them.
    let list = relay.get("/v1/videos").await.json();
    assert_eq!(list["data"], json!([]), "{list}");
    assert_eq!(entries(&relay, "files/tmp"), Vec::<String>::new());
    assert_eq!(entries(&relay, "files/blobs"), Vec::<String>::new());

    // Good ones are kept with the task, under their sniffed types, and the simulator takes
    // the task with them.
    let (ct, body) = fields("kept")
        .file("audio_url", "voice", "application/octet-stream", &wav())
        .file("reference_video", "clip", "application/octet-stream", &big)
        .build();
    let id = create(&relay, Body::Raw(ct, body)).await;
    let done = relay.wait_video(&id, WAIT).await;
    assert_eq!(done["status"], "completed", "{done}");
    let kept = relay.dir.path().join("files/blobs").join(&id);
    assert_eq!(std::fs::read(kept.join("audio.wav")).ok(), Some(wav()));
    assert!(std::fs::read(kept.join("reference_video.mp4")).ok() == Some(big));
    // ... and removed with it.
    let res = relay
        .call(Method::DELETE, &format!("/v1/videos/{id}"), Body::Empty)
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    assert!(!kept.exists());
}
