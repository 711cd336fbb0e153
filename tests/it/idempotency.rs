//! `Idempotency-Key` on submissions: a repeat gets the first answer and makes nothing new (no
//! second task, asset or pre-deduction), another body under the key is a `409`, a repeat while
//! the first is in flight a `409` with `retry-after`, keys are per API key, and a task, an
//! asset or a message batch written just before a SIGKILL is what a retry after the restart
//! answers.

use std::time::Duration;

use http::Method;
use serde_json::{Value, json};

use crate::harness::{Answer, Body, Http, Multipart, Relay, png, poll_until, start_binary};

const IDEM: &str = "Idempotency-Key";

fn video(prompt: &str) -> Value {
    json!({"model": "model_h3", "prompt": prompt, "size": "64x64"})
}

async fn post(relay: &Relay, key: &str, path: &str, body: Body, idem: &str) -> Answer {
    relay
        .call_as(key, Method::POST, path, body, &[(IDEM, idem)])
        .await
}

/// The pre-deductions in a key's ledger, by task.
async fn prededucts(relay: &Relay, key_id: &str) -> Vec<String> {
    relay
        .ledger(key_id)
        .await
        .iter()
        .filter(|e| e["kind"] == "prededuct")
        .map(|e| e["task_id"].as_str().unwrap().to_owned())
        .collect()
}

/// The ids of a listing (of tasks or assets): `id`, or a generation's `task_id`.
async fn listed(relay: &Relay, key: &str, path: &str) -> Vec<String> {
    let list = relay
        .call_as(key, Method::GET, path, Body::Empty, &[])
        .await;
    assert_eq!(list.status, 200, "{}", list.text());
    list.json()["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            v["id"]
                .as_str()
                .or(v["task_id"].as_str())
                .unwrap()
                .to_owned()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotent_video_repeat_is_one_task_and_one_prededuction() {
    let relay = Relay::start("").await;
    let (key_id, key) = relay.new_key("k", Some(10_000)).await;
    let body = || Body::Json(video("a lighthouse at dusk"));
    let first = post(&relay, &key, "/v1/videos", body(), "order-1").await;
    assert_eq!(first.status, 200, "{}", first.text());
    assert_eq!(first.header("idempotent-replayed"), None);
    let id = first.json()["id"].as_str().unwrap().to_owned();

    let again = post(&relay, &key, "/v1/videos", body(), "order-1").await;
    assert_eq!(again.status, 200, "{}", again.text());
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.header("content-type"), Some("application/json"));
    assert_eq!(again.body, first.body, "the first answer, byte for byte");

    assert_eq!(listed(&relay, &key, "/v1/videos").await, vec![id.clone()]);
    assert_eq!(prededucts(&relay, &key_id).await, vec![id.clone()]);

    // Another body under the same key: refused, nothing made.
    let other = post(
        &relay,
        &key,
        "/v1/videos",
        Body::Json(video("another prompt")),
        "order-1",
    )
    .await;
    other.assert_error(409, "idempotency conflict", Some(IDEM));
    assert_eq!(other.header("retry-after"), None);
    assert_eq!(listed(&relay, &key, "/v1/videos").await, vec![id.clone()]);

    // Without the header, or with another key, the same body makes a new task.
    let plain = relay
        .call_as(&key, Method::POST, "/v1/videos", body(), &[])
        .await;
    assert_eq!(plain.status, 200, "{}", plain.text());
    let next = post(&relay, &key, "/v1/videos", body(), "order-2").await;
    assert_eq!(next.status, 200, "{}", next.text());
    assert_eq!(next.header("idempotent-replayed"), None);
    assert_eq!(listed(&relay, &key, "/v1/videos").await.len(), 3);
    assert_eq!(prededucts(&relay, &key_id).await.len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotency_key_values_are_checked() {
    let relay = Relay::start("").await;
    let (_, key) = relay.new_key("k", None).await;
    let long = "k".repeat(256);
    for bad in ["", long.as_str(), "tab\there", "caf\u{e9}"] {
        let res = post(&relay, &key, "/v1/videos", Body::Json(video("p")), bad).await;
        res.assert_error(400, "invalid request", Some(IDEM));
    }
    let longest = "k".repeat(255);
    let ok = post(&relay, &key, "/v1/videos", Body::Json(video("p")), &longest).await;
    assert_eq!(ok.status, 200, "{}", ok.text());
    assert!(listed(&relay, &key, "/v1/videos").await.len() == 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotent_validation_errors_are_kept() {
    let relay = Relay::start("").await;
    let (_, key) = relay.new_key("k", None).await;
    let bad = || Body::Json(json!({"model": "model_h3", "prompt": "p", "size": "1x1"}));
    let first = post(&relay, &key, "/v1/videos", bad(), "bad-1").await;
    first.assert_error(400, "invalid size", Some("size"));
    let again = post(&relay, &key, "/v1/videos", bad(), "bad-1").await;
    again.assert_error(400, "invalid size", Some("size"));
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.body, first.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_idempotent_duplicates_make_one_task() {
    let relay = Relay::start("").await;
    let (key_id, key) = relay.new_key("k", Some(10_000)).await;
    let path = "/v1/videos";
    let answers = futures_util::future::join_all((0..10).map(|_| {
        post(
            &relay,
            &key,
            path,
            Body::Json(video("ten at once")),
            "burst-1",
        )
    }))
    .await;
    let mut ids = Vec::new();
    for res in &answers {
        match res.status {
            200 => ids.push(res.json()["id"].as_str().unwrap().to_owned()),
            409 => {
                res.assert_error(409, "idempotency conflict", Some(IDEM));
                assert_eq!(res.header("retry-after"), Some("1"), "{}", res.text());
            }
            other => panic!("unexpected {other}: {}", res.text()),
        }
    }
    assert!(!ids.is_empty(), "one request made the task");
    ids.dedup();
    assert_eq!(ids.len(), 1, "every 200 names the same task: {ids:?}");
    assert_eq!(listed(&relay, &key, path).await, ids);
    assert_eq!(prededucts(&relay, &key_id).await, ids);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotent_generations_are_per_api_key() {
    let relay = Relay::start("").await;
    let (a_id, a) = relay.new_key("a", Some(10_000)).await;
    let (b_id, b) = relay.new_key("b", Some(10_000)).await;
    let body = || Body::Json(json!({"model": "gen2-lite", "prompt": "p", "duration": 5}));
    let path = "/v1/video/generations";
    let first = post(&relay, &a, path, body(), "gen-1").await;
    assert_eq!(first.status, 200, "{}", first.text());
    let id = first.json()["task_id"].as_str().unwrap().to_owned();
    let again = post(&relay, &a, path, body(), "gen-1").await;
    assert_eq!(again.status, 200, "{}", again.text());
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.body, first.body);

    // Another API key's request with the same Idempotency-Key is its own.
    let other = post(&relay, &b, path, body(), "gen-1").await;
    assert_eq!(other.status, 200, "{}", other.text());
    assert_eq!(other.header("idempotent-replayed"), None);
    let other_id = other.json()["task_id"].as_str().unwrap().to_owned();
    assert_ne!(other_id, id);

    assert_eq!(listed(&relay, &a, path).await, vec![id.clone()]);
    assert_eq!(listed(&relay, &b, path).await, vec![other_id.clone()]);
    assert_eq!(prededucts(&relay, &a_id).await, vec![id]);
    assert_eq!(prededucts(&relay, &b_id).await, vec![other_id]);

    let changed = post(
        &relay,
        &a,
        path,
        Body::Json(json!({"model": "gen2-lite", "prompt": "q", "duration": 5})),
        "gen-1",
    )
    .await;
    changed.assert_error(409, "idempotency conflict", Some(IDEM));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotent_asset_upload_makes_one_asset() {
    let relay = Relay::start("").await;
    let (_, key) = relay.new_key("k", None).await;
    let lib = relay
        .call_as(
            &key,
            Method::POST,
            "/v1/asset-libraries",
            Body::Json(json!({"name": "lib"})),
            &[],
        )
        .await;
    assert_eq!(lib.status, 200, "{}", lib.text());
    let lib = lib.json()["id"].as_str().unwrap().to_owned();
    let path = format!("/v1/asset-libraries/{lib}/assets");
    let image = png(64, 48);
    let upload = |bytes: &[u8]| {
        let (ct, body) = Multipart::new()
            .file("file", "frame.png", "image/png", bytes)
            .text("type", "image")
            .build();
        Body::Raw(ct, body)
    };
    let first = post(&relay, &key, &path, upload(&image), "asset-1").await;
    assert_eq!(first.status, 200, "{}", first.text());
    let id = first.json()["id"].as_str().unwrap().to_owned();
    let again = post(&relay, &key, &path, upload(&image), "asset-1").await;
    assert_eq!(again.status, 200, "{}", again.text());
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.json()["id"], id.as_str());
    assert_eq!(listed(&relay, &key, &path).await, vec![id.clone()]);

    let other = post(&relay, &key, &path, upload(&png(32, 32)), "asset-1").await;
    other.assert_error(409, "idempotency conflict", Some(IDEM));
    assert_eq!(listed(&relay, &key, &path).await, vec![id]);
}

/// What [`retry_after_sigkill`] leaves: the relay started again, and the record written
/// before the kill with the retry's answer, when the record survived it.
struct AfterKill {
    relay: crate::harness::Running,
    http: Http,
    survived: Option<(String, Answer)>,
}

/// Starts the relay binary with `config`, runs `prepare` (given the HTTP client, the relay's
/// base URL and the first API key; it answers the path to post to), posts `body()` there with
/// an `Idempotency-Key` on a task of its own, SIGKILLs the relay as soon as `listed` shows a
/// record, starts it again on the same data and retries. A record killed between its write and
/// its flush is gone: then the retry must be answered (or told the claim is in flight), and at
/// most one record may exist.
async fn retry_after_sigkill(
    config: &str,
    prepare: impl AsyncFn(&Http, &str, &str) -> String,
    body: impl Fn() -> Body + Clone + Send + 'static,
    listed: impl AsyncFn(&Http, &str, &str, &str) -> Vec<String>,
) -> AfterKill {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let config_path = dir.path().join("relay.toml");
    std::fs::write(&config_path, config).unwrap();
    let first = start_binary(&data, &config_path).await;
    let key = first
        .lines
        .iter()
        .find(|l| l.starts_with("first API key"))
        .and_then(|l| l.rsplit(' ').next())
        .unwrap_or_else(|| panic!("no key printed: {:?}", first.lines))
        .to_owned();
    let http = Http::new();
    let path = prepare(&http, &first.base, &key).await;
    let user = [
        ("authorization", format!("Bearer {key}")),
        (IDEM, "crash-1".to_owned()),
        // Read by the messages paths only.
        ("anthropic-version", "2023-06-01".to_owned()),
    ];

    // The request runs on its own; the relay is killed as soon as the record is in the store,
    // whether or not its answer got out.
    let submit = {
        let (http, url, user, body) = (
            http.clone(),
            format!("{}{path}", first.base),
            user.clone(),
            body.clone(),
        );
        tokio::spawn(async move { http.send(Method::POST, &url, body(), &user).await })
    };
    let written = poll_until(Duration::from_secs(30), || async {
        listed(&http, &first.base, &key, &path)
            .await
            .first()
            .cloned()
    })
    .await
    .expect("the record was written");
    let mut child = first.child;
    child.kill().await.expect("SIGKILL");
    let _ = submit.await;

    let second = start_binary(&data, &config_path).await;
    let survived = listed(&http, &second.base, &key, &path).await;
    let retry = http
        .send(
            Method::POST,
            &format!("{}{path}", second.base),
            body(),
            &user,
        )
        .await;
    if survived.is_empty() {
        assert!(
            retry.status == 200
                || (retry.status == 409 && retry.header("retry-after") == Some("1")),
            "{}",
            retry.text()
        );
        assert!(listed(&http, &second.base, &key, &path).await.len() <= 1);
        return AfterKill {
            relay: second,
            http,
            survived: None,
        };
    }
    assert_eq!(survived, vec![written.clone()]);
    assert_eq!(retry.status, 200, "{}", retry.text());
    assert_eq!(retry.json()["id"], written.as_str(), "{}", retry.text());
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    assert_eq!(
        listed(&http, &second.base, &key, &path).await,
        vec![written.clone()]
    );
    AfterKill {
        relay: second,
        http,
        survived: Some((written, retry)),
    }
}

/// An admin listing's ids (`/admin/tasks`, `/admin/keys`) on a relay binary.
async fn admin_ids(http: &Http, base: &str, path: &str) -> Vec<String> {
    let admin = [(
        "authorization",
        "Bearer restart-admin-token-5f0c9e2b7a1d4386".to_owned(),
    )];
    let v = http
        .send(Method::GET, &format!("{base}{path}"), Body::Empty, &admin)
        .await
        .json();
    v["data"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x["id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// A task written, then SIGKILL: after the restart a retry with the same key answers that task,
/// and the key was charged once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotent_retry_after_sigkill_answers_the_written_task() {
    let after = retry_after_sigkill(
        "[simulator]\ntask_secs = 30\nfps = 4\n",
        async |_, _, _| "/v1/videos".to_owned(),
        || Body::Json(video("written, then killed")),
        async |http, base, _, _| admin_ids(http, base, "/admin/tasks").await,
    )
    .await;
    let Some((written, _)) = after.survived else {
        return;
    };
    let base = &after.relay.base;
    let key_id = admin_ids(&after.http, base, "/admin/keys").await[0].clone();
    let admin = [(
        "authorization",
        "Bearer restart-admin-token-5f0c9e2b7a1d4386".to_owned(),
    )];
    let ledger = after
        .http
        .send(
            Method::GET,
            &format!("{base}/admin/keys/{key_id}/ledger"),
            Body::Empty,
            &admin,
        )
        .await
        .json();
    let prededucts: Vec<&Value> = ledger["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "prededuct")
        .collect();
    assert_eq!(prededucts.len(), 1, "{ledger}");
    assert_eq!(prededucts[0]["task_id"], written.as_str());
}

/// An asset written, then SIGKILL: after the restart a retry with the same key answers that
/// asset, and the library holds it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotent_upload_retry_after_sigkill_answers_the_written_asset() {
    let image = png(64, 48);
    let upload = move || {
        let (ct, body) = Multipart::new()
            .file("file", "frame.png", "image/png", &image)
            .text("type", "image")
            .build();
        Body::Raw(ct, body)
    };
    let after = retry_after_sigkill(
        "",
        async |http, base, key| {
            let auth = [("authorization", format!("Bearer {key}"))];
            let lib = http
                .send(
                    Method::POST,
                    &format!("{base}/v1/asset-libraries"),
                    Body::Json(json!({"name": "lib"})),
                    &auth,
                )
                .await;
            assert_eq!(lib.status, 200, "{}", lib.text());
            let lib = lib.json()["id"].as_str().unwrap().to_owned();
            format!("/v1/asset-libraries/{lib}/assets")
        },
        upload,
        async |http, base, key, path| {
            let auth = [("authorization", format!("Bearer {key}"))];
            let v = http
                .send(Method::GET, &format!("{base}{path}"), Body::Empty, &auth)
                .await
                .json();
            v["data"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x["id"].as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default()
        },
    )
    .await;
    if let Some((written, retry)) = &after.survived {
        assert_eq!(retry.json()["object"], "asset", "{written}");
    }
}

/// A message batch written, then SIGKILL: after the restart a retry with the same key answers
/// that batch, and the key has it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotent_batch_retry_after_sigkill_answers_the_written_batch() {
    let after = retry_after_sigkill(
        "",
        async |_, _, _| "/v1/messages/batches".to_owned(),
        || {
            let request = |id: &str| {
                json!({"custom_id": id, "params": {"model": "sim-chat", "max_tokens": 16,
                       "messages": [{"role": "user", "content": format!("say {id}")}]}})
            };
            Body::Json(json!({"requests": [request("a"), request("b")]}))
        },
        async |http, base, key, path| {
            let headers = [
                ("authorization", format!("Bearer {key}")),
                ("anthropic-version", "2023-06-01".to_owned()),
            ];
            let v = http
                .send(Method::GET, &format!("{base}{path}"), Body::Empty, &headers)
                .await
                .json();
            v["data"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x["id"].as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default()
        },
    )
    .await;
    if let Some((written, retry)) = &after.survived {
        assert_eq!(retry.json()["type"], "message_batch", "{written}");
    }
}

/// A repeat while the first request is still being handled (held on fetching its first frame,
/// after the key is claimed) is `409` with `retry-after: 1`; once the first is answered, a
/// repeat gets its answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeat_in_flight_is_told_to_retry_then_replayed() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let image_url = format!("http://{}/frame.png", listener.local_addr().unwrap());
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let (asked, fetching) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut head = [0u8; 4096];
        let _ = stream.read(&mut head).await;
        let _ = asked.send(());
        let _ = released.await;
        let image = png(64, 36);
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: image/png\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            image.len()
        );
        let _ = stream.write_all(head.as_bytes()).await;
        let _ = stream.write_all(&image).await;
    });

    let relay = Relay::start("").await;
    let (key_id, key) = relay.new_key("k", Some(10_000)).await;
    let body = || {
        Body::Json(
            json!({"model": "model_h3", "prompt": "held", "first_frame": image_url,
                          "size": "64x64"}),
        )
    };
    let first = {
        let (client, url, key) = (relay.client.clone(), relay.url("/v1/videos"), key.clone());
        let headers = [
            ("authorization", format!("Bearer {key}")),
            (IDEM, "held-1".to_owned()),
        ];
        let body = body();
        tokio::spawn(async move { client.send(Method::POST, &url, body, &headers).await })
    };
    // The frame is fetched after the key is claimed: the first request holds it now (for at
    // most the test configuration's 2 s fetch timeout).
    tokio::time::timeout(Duration::from_secs(10), fetching)
        .await
        .expect("the first request fetches its frame")
        .unwrap();
    let refused = post(&relay, &key, "/v1/videos", body(), "held-1").await;
    refused.assert_error(409, "idempotency conflict", Some(IDEM));
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert!(listed(&relay, &key, "/v1/videos").await.is_empty());

    release.send(()).unwrap();
    let first = first.await.unwrap();
    assert_eq!(first.status, 200, "{}", first.text());
    let again = post(&relay, &key, "/v1/videos", body(), "held-1").await;
    assert_eq!(again.status, 200, "{}", again.text());
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.body, first.body);
    let id = first.json()["id"].as_str().unwrap().to_owned();
    assert_eq!(listed(&relay, &key, "/v1/videos").await, vec![id.clone()]);
    assert_eq!(prededucts(&relay, &key_id).await, vec![id]);
}
