//! Bad input gets a precise error: status, the contract's message, code and param. Never a
//! panic, a 5xx or a stored half-record.

use std::collections::HashMap;

use http::Method;
use serde_json::{Value, json};

use crate::harness::{Body, MediaServer, Multipart, Relay, mp4_head, png, wav};

/// (case, body, status, message, param)
fn field_cases(media: &MediaServer) -> Vec<(&'static str, Value, u16, &'static str, &'static str)> {
    let img = media.url("/frame.png");
    let text = media.url("/notes.txt");
    let missing = media.url("/missing.png");
    let audio = media.url("/a.wav");
    let video = media.url("/v.mp4");
    vec![
        (
            "model missing",
            json!({"prompt": "p"}),
            400,
            "invalid model",
            "model",
        ),
        (
            "model other",
            json!({"model": "sora-2", "prompt": "p"}),
            400,
            "invalid model",
            "model",
        ),
        (
            "model wrong type",
            json!({"model": 3, "prompt": "p"}),
            400,
            "invalid model",
            "model",
        ),
        (
            "prompt missing",
            json!({"model": "model_h3"}),
            400,
            "invalid prompt",
            "prompt",
        ),
        (
            "prompt empty",
            json!({"model": "model_h3", "prompt": "  "}),
            400,
            "invalid prompt",
            "prompt",
        ),
        (
            "prompt number",
            json!({"model": "model_h3", "prompt": 5}),
            400,
            "invalid prompt",
            "prompt",
        ),
        (
            "prompt too long",
            json!({"model": "model_h3", "prompt": "x".repeat(10_001)}),
            400,
            "invalid prompt",
            "prompt",
        ),
        (
            "size malformed",
            json!({"model": "model_h3", "prompt": "p", "size": "big"}),
            400,
            "invalid size",
            "size",
        ),
        (
            "size too small",
            json!({"model": "model_h3", "prompt": "p", "size": "32x32"}),
            400,
            "invalid size",
            "size",
        ),
        (
            "size too large",
            json!({"model": "model_h3", "prompt": "p", "size": "8192x720"}),
            400,
            "invalid size",
            "size",
        ),
        (
            "size number",
            json!({"model": "model_h3", "prompt": "p", "size": 720}),
            400,
            "invalid size",
            "size",
        ),
        (
            "ratio unknown",
            json!({"model": "model_h3", "prompt": "p", "aspect_ratio": "5:4"}),
            400,
            "invalid ratio",
            "aspect_ratio",
        ),
        (
            "duration low",
            json!({"model": "model_h3", "prompt": "p", "duration": 4}),
            400,
            "invalid duration",
            "duration",
        ),
        (
            "duration high",
            json!({"model": "model_h3", "prompt": "p", "duration": 16}),
            400,
            "invalid duration",
            "duration",
        ),
        (
            "duration text",
            json!({"model": "model_h3", "prompt": "p", "duration": "abc"}),
            400,
            "invalid duration",
            "duration",
        ),
        (
            "duration as a JSON string",
            json!({"model": "model_h3", "prompt": "p", "duration": "8"}),
            400,
            "invalid duration",
            "duration",
        ),
        (
            "duration fraction",
            json!({"model": "model_h3", "prompt": "p", "duration": 5.5}),
            400,
            "invalid duration",
            "duration",
        ),
        (
            "seconds high",
            json!({"model": "model_h3", "prompt": "p", "seconds": "20"}),
            400,
            "invalid duration",
            "seconds",
        ),
        (
            "seconds disagree",
            json!({"model": "model_h3", "prompt": "p", "duration": 5, "seconds": "8"}),
            400,
            "invalid duration",
            "seconds",
        ),
        (
            "two audios",
            json!({"model": "model_h3", "prompt": "p", "audio_url": [audio.clone(), audio.clone()]}),
            400,
            "reference limit exceeded",
            "audio_url",
        ),
        (
            "two videos",
            json!({"model": "model_h3", "prompt": "p", "reference_video": [video.clone(), video.clone()]}),
            400,
            "reference limit exceeded",
            "reference_video",
        ),
        (
            "two first frames",
            json!({"model": "model_h3", "prompt": "p", "first_frame": img.clone(), "input_reference": img.clone()}),
            400,
            "reference limit exceeded",
            "input_reference",
        ),
        (
            "image not a url",
            json!({"model": "model_h3", "prompt": "p", "first_frame": "not a url"}),
            400,
            "invalid image",
            "first_frame",
        ),
        (
            "image unreachable",
            json!({"model": "model_h3", "prompt": "p", "first_frame": missing}),
            400,
            "invalid image",
            "first_frame",
        ),
        (
            "image wrong format",
            json!({"model": "model_h3", "prompt": "p", "last_frame": text.clone()}),
            400,
            "invalid image",
            "last_frame",
        ),
        (
            "image bad data uri",
            json!({"model": "model_h3", "prompt": "p", "first_frame": "data:image/png;base64,%%%"}),
            400,
            "invalid image",
            "first_frame",
        ),
        (
            "audio wrong format",
            json!({"model": "model_h3", "prompt": "p", "audio_url": img.clone()}),
            400,
            "invalid audio",
            "audio_url",
        ),
        (
            "audio wrong type",
            json!({"model": "model_h3", "prompt": "p", "audio_url": 7}),
            400,
            "invalid audio",
            "audio_url",
        ),
        (
            "video wrong format",
            json!({"model": "model_h3", "prompt": "p", "reference_video": audio.clone()}),
            400,
            "invalid video",
            "reference_video",
        ),
        (
            "video audio without video",
            json!({"model": "model_h3", "prompt": "p", "reference_video_audio": true}),
            400,
            "invalid request",
            "reference_video_audio",
        ),
        (
            "video audio wrong type",
            json!({"model": "model_h3", "prompt": "p", "reference_video": video.clone(), "reference_video_audio": "yes"}),
            400,
            "invalid request",
            "reference_video_audio",
        ),
        // Check order: the earlier field's error wins.
        (
            "model before prompt",
            json!({"model": "x", "prompt": ""}),
            400,
            "invalid model",
            "model",
        ),
        (
            "prompt before size",
            json!({"model": "model_h3", "size": "x"}),
            400,
            "invalid prompt",
            "prompt",
        ),
        (
            "size before ratio",
            json!({"model": "model_h3", "prompt": "p", "size": "x", "aspect_ratio": "7:1"}),
            400,
            "invalid size",
            "size",
        ),
        (
            "ratio before duration",
            json!({"model": "model_h3", "prompt": "p", "aspect_ratio": "7:1", "duration": 99}),
            400,
            "invalid ratio",
            "aspect_ratio",
        ),
        (
            "duration before references",
            json!({"model": "model_h3", "prompt": "p", "duration": 99, "audio_url": [audio.clone(), audio.clone()]}),
            400,
            "invalid duration",
            "duration",
        ),
        (
            "references before images",
            json!({"model": "model_h3", "prompt": "p", "first_frame": text.clone(), "audio_url": [audio.clone(), audio]}),
            400,
            "reference limit exceeded",
            "audio_url",
        ),
        (
            "images before audio",
            json!({"model": "model_h3", "prompt": "p", "first_frame": text.clone(), "audio_url": text.clone()}),
            400,
            "invalid image",
            "first_frame",
        ),
        (
            "audio before video",
            json!({"model": "model_h3", "prompt": "p", "audio_url": text.clone(), "reference_video": text}),
            400,
            "invalid audio",
            "audio_url",
        ),
    ]
}

fn media_files() -> HashMap<&'static str, (&'static str, Vec<u8>)> {
    let mut files = HashMap::new();
    files.insert("/frame.png", ("image/png", png(64, 36)));
    files.insert(
        "/notes.txt",
        ("text/plain", b"just some text, not media".to_vec()),
    );
    files.insert("/a.wav", ("audio/wav", wav()));
    files.insert("/v.mp4", ("video/mp4", mp4_head()));
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_field_rule_has_its_error() {
    let media = MediaServer::start(media_files()).await;
    let relay = Relay::start("").await;
    for (case, body, status, message, param) in field_cases(&media) {
        let res = relay.post_json("/v1/videos", body).await;
        assert_eq!(res.status, status, "{case}: {}", res.text());
        let v = res.json();
        assert_eq!(v["error"]["message"], message, "{case}: {v}");
        assert_eq!(v["error"]["code"], message.replace(' ', "_"), "{case}: {v}");
        assert_eq!(v["error"]["param"], param, "{case}: {v}");
        assert_eq!(v["error"]["type"], "invalid_request_error", "{case}: {v}");
    }
    // Nothing refused was stored.
    let list = relay.get("/v1/videos").await.json();
    assert_eq!(list["data"].as_array().unwrap().len(), 0, "{list}");

    // Accepted references of every kind.
    let res = relay
        .post_json(
            "/v1/videos",
            json!({"model": "model_h3", "prompt": "p", "size": "64x64",
                   "audio_url": [media.url("/a.wav")], "reference_video": media.url("/v.mp4"),
                   "reference_video_audio": true, "unknown_field": {"ignored": true}}),
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_urls_are_refused_by_default() {
    let media = MediaServer::start(media_files()).await;
    let relay = Relay::start("[security]\nallow_private_urls = false\n").await;
    let res = relay
        .post_json(
            "/v1/videos",
            json!({"model": "model_h3", "prompt": "p", "first_frame": media.url("/frame.png")}),
        )
        .await;
    res.assert_error(400, "invalid image", Some("first_frame"));
    let res = relay
        .post_json(
            "/v1/videos",
            json!({"model": "model_h3", "prompt": "p", "audio_url": "http://169.254.169.254/latest"}),
        )
        .await;
    res.assert_error(400, "invalid audio", Some("audio_url"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multipart_faults() {
    let relay = Relay::start("").await;
    // A text file in an image field.
    let (ct, body) = Multipart::new()
        .text("model", "model_h3")
        .text("prompt", "p")
        .file(
            "input_reference",
            "x.txt",
            "application/octet-stream",
            b"hello there",
        )
        .build();
    let res = relay
        .call(Method::POST, "/v1/videos", Body::Raw(ct, body))
        .await;
    res.assert_error(400, "invalid image", Some("input_reference"));
    // Two first frames as parts.
    let (ct, body) = Multipart::new()
        .text("model", "model_h3")
        .text("prompt", "p")
        .file("input_reference", "a.png", "image/png", &png(64, 36))
        .file("first_frame", "b.png", "image/png", &png(64, 36))
        .build();
    let res = relay
        .call(Method::POST, "/v1/videos", Body::Raw(ct, body))
        .await;
    res.assert_error(400, "reference limit exceeded", None);
    // A broken multipart body.
    let res = relay
        .call(
            Method::POST,
            "/v1/videos",
            Body::Raw(
                "multipart/form-data; boundary=abc".into(),
                b"--abc\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nmodel_h3".to_vec(),
            ),
        )
        .await;
    res.assert_error(400, "invalid request", None);
    // Multipart without a boundary.
    let res = relay
        .call(
            Method::POST,
            "/v1/videos",
            Body::Raw("multipart/form-data".into(), b"x".to_vec()),
        )
        .await;
    res.assert_error(400, "invalid request", None);
    let list = relay.get("/v1/videos").await.json();
    assert_eq!(list["data"].as_array().unwrap().len(), 0, "{list}");
    // No temporary upload left behind.
    let tmp = relay.dir.path().join("files").join("tmp");
    let left: Vec<_> = std::fs::read_dir(&tmp)
        .map(|d| d.flatten().collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_get_clear_4xx() {
    let relay = Relay::start("").await;
    let res = relay
        .call(
            Method::POST,
            "/v1/videos",
            Body::Raw("application/json".into(), b"{not json".to_vec()),
        )
        .await;
    res.assert_error(400, "invalid request", Some("body"));
    let res = relay
        .call(
            Method::POST,
            "/v1/videos",
            Body::Raw("application/json".into(), b"[1,2]".to_vec()),
        )
        .await;
    res.assert_error(400, "invalid request", None);
    let res = relay
        .call(
            Method::POST,
            "/v1/videos",
            Body::Raw(String::new(), b"{}".to_vec()),
        )
        .await;
    res.assert_error(415, "unsupported media type", None);
    let res = relay
        .call(
            Method::POST,
            "/v1/videos",
            Body::Raw("text/plain".into(), b"hi".to_vec()),
        )
        .await;
    res.assert_error(415, "unsupported media type", None);

    // Paths: `..`, a 10 KB id, unknown routes, wrong methods.
    relay
        .get("/v1/videos/../admin/keys")
        .await
        .assert_error(404, "not found", None);
    let long = "v".repeat(10 * 1024);
    relay
        .get(&format!("/v1/videos/{long}"))
        .await
        .assert_error(404, "not found", None);
    relay
        .get("/v1/nothing")
        .await
        .assert_error(404, "not found", None);
    let res = relay.call(Method::PUT, "/v1/videos", Body::Empty).await;
    res.assert_error(405, "method not allowed", None);
    assert_eq!(res.header("allow"), Some("GET, POST"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_declared_body_is_refused_before_reading() {
    let relay = Relay::start("").await;
    // Declare 1 GB, send a few bytes: the relay answers 413 without waiting for the rest.
    let addr = relay.base.trim_start_matches("http://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let head = format!(
        "POST /v1/videos HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {}\r\ncontent-type: application/json\r\ncontent-length: 1000000000\r\n\r\n{{\"model\"",
        relay.key
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(std::time::Duration::from_secs(10), stream.read(&mut buf))
        .await
        .expect("an answer without the body")
        .unwrap();
    let text = String::from_utf8_lossy(&buf[..n]);
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    assert!(text.contains("Payload Too Large"), "{text}");

    // Between the limit and 4x: read, then 413.
    let relay = Relay::start("[server]\nmax_body_bytes = 1000\n").await;
    let body = json!({"model": "model_h3", "prompt": "x".repeat(2000)});
    relay
        .post_json("/v1/videos", body)
        .await
        .assert_error(413, "Payload Too Large", None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_faults_are_401() {
    let relay = Relay::start("").await;
    let no_key = relay
        .client
        .send(Method::GET, &relay.url("/v1/videos"), Body::Empty, &[])
        .await;
    no_key.assert_error(401, "unauthorized", None);
    assert_eq!(no_key.json()["error"]["type"], "authentication_error");
    for auth in ["Bearer nope", "Basic abc", "Bearer", "sk-relay-x"] {
        let res = relay
            .client
            .send(
                Method::GET,
                &relay.url("/v1/videos"),
                Body::Empty,
                &[("authorization", auth.to_owned())],
            )
            .await;
        res.assert_error(401, "unauthorized", None);
    }
    // x-api-key is for /v1/messages only.
    let res = relay
        .client
        .send(
            Method::GET,
            &relay.url("/v1/videos"),
            Body::Empty,
            &[("x-api-key", relay.key.clone())],
        )
        .await;
    res.assert_error(401, "unauthorized", None);
    // Auth comes before validation.
    let res = relay
        .client
        .send(
            Method::POST,
            &relay.url("/v1/videos"),
            Body::Json(json!({"model": "x"})),
            &[],
        )
        .await;
    res.assert_error(401, "unauthorized", None);
    // An API key is not the admin token, nor the reverse.
    let res = relay.get("/admin/keys").await;
    res.assert_error(401, "unauthorized", None);
    let res = relay
        .client
        .send(
            Method::GET,
            &relay.url("/v1/videos"),
            Body::Empty,
            &[(
                "authorization",
                format!("Bearer {}", crate::harness::ADMIN_TOKEN),
            )],
        )
        .await;
    res.assert_error(401, "unauthorized", None);
    // Health needs no key.
    let health = relay
        .client
        .send(Method::GET, &relay.url("/healthz"), Body::Empty, &[])
        .await;
    assert_eq!(health.status, 200);
    let ready = relay
        .client
        .send(Method::GET, &relay.url("/readyz"), Body::Empty, &[])
        .await;
    assert_eq!(ready.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_prior_knowledge_is_served() {
    use http_body_util::{BodyExt, Full};
    let relay = Relay::start("").await;
    let client: hyper_util::client::legacy::Client<_, Full<bytes::Bytes>> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .http2_only(true)
            .build_http();
    let req = http::Request::get(relay.url("/v1/videos"))
        .header("authorization", format!("Bearer {}", relay.key))
        .body(Full::new(bytes::Bytes::new()))
        .unwrap();
    let res = client.request(req).await.expect("an h2c answer");
    assert_eq!(res.version(), http::Version::HTTP_2);
    assert_eq!(res.status(), 200);
    assert!(res.headers().contains_key("x-request-id"));
    let body = res.into_body().collect().await.unwrap().to_bytes();
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["object"], "list");
}
