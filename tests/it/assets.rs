//! Asset libraries and assets end to end: create, upload (multipart and URL), processing to
//! `active` or `failed`, listing with filters, expiry without requests, owners, deletion with
//! the stored bytes, restarts. (Ten thousand assets in one library are a store test.)

use std::collections::HashMap;
use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::harness::{Body, MediaServer, Multipart, Relay, mp4_head, png, poll_until, wav};

/// Longest wait for an asset to leave `processing`.
const WAIT: Duration = Duration::from_secs(30);

async fn create_library(relay: &Relay, name: &str) -> Value {
    let res = relay
        .post_json("/v1/asset-libraries", json!({"name": name}))
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    res.json()
}

async fn upload_file(
    relay: &Relay,
    key: &str,
    lib: &str,
    kind: Option<&str>,
    filename: &str,
    bytes: &[u8],
) -> crate::harness::Answer {
    let mut form = Multipart::new();
    if let Some(kind) = kind {
        form = form.text("type", kind);
    }
    let (ct, body) = form
        .file("file", filename, "application/octet-stream", bytes)
        .build();
    relay
        .call_as(
            key,
            Method::POST,
            &format!("/v1/asset-libraries/{lib}/assets"),
            Body::Raw(ct, body),
            &[],
        )
        .await
}

async fn upload_url(relay: &Relay, lib: &str, url: &str, kind: Option<&str>) -> Value {
    let mut body = json!({"url": url});
    if let Some(kind) = kind {
        body["type"] = json!(kind);
    }
    let res = relay
        .post_json(&format!("/v1/asset-libraries/{lib}/assets"), body)
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let v = res.json();
    assert_eq!(v["status"], "processing", "{v}");
    v
}

/// Polls an asset until it is no longer `processing`.
async fn settled(relay: &Relay, id: &str) -> Value {
    let path = format!("/v1/assets/{id}");
    poll_until(WAIT, || async {
        let res = relay.get(&path).await;
        assert_eq!(res.status, 200, "{}", res.text());
        let v = res.json();
        (v["status"] != "processing").then_some(v)
    })
    .await
    .unwrap_or_else(|| panic!("asset {id} still processing after {WAIT:?}"))
}

fn blob_path(relay: &Relay, asset_id: &str) -> PathBuf {
    relay
        .dir
        .path()
        .join("files/blobs/assets")
        .join(asset_id)
        .join("original")
}

fn media() -> HashMap<&'static str, (&'static str, Vec<u8>)> {
    HashMap::from([
        ("/frame.png", ("image/png", png(64, 48))),
        ("/voice.wav", ("audio/wav", wav())),
        ("/clip.mp4", ("video/mp4", mp4_head())),
        ("/notes.txt", ("text/plain", b"just some text".to_vec())),
    ])
}

/// A server whose answers hang until `serve` is set; then it answers every path with a PNG.
struct Hanging {
    base: String,
    hits: Arc<AtomicUsize>,
    serve: Arc<AtomicBool>,
    _stop: oneshot::Sender<()>,
}

impl Hanging {
    async fn start() -> Hanging {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let hits = Arc::new(AtomicUsize::new(0));
        let serve = Arc::new(AtomicBool::new(false));
        let (stop, mut stopped) = oneshot::channel::<()>();
        let (h, s) = (hits.clone(), serve.clone());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = &mut stopped => break,
                    accepted = listener.accept() => {
                        let Ok((stream, _)) = accepted else { continue };
                        let (hits, serve) = (h.clone(), s.clone());
                        tokio::spawn(async move {
                            let svc = service_fn(move |_req: Request<hyper::body::Incoming>| {
                                let (hits, serve) = (hits.clone(), serve.clone());
                                async move {
                                    hits.fetch_add(1, Ordering::SeqCst);
                                    if !serve.load(Ordering::SeqCst) {
                                        std::future::pending::<()>().await;
                                    }
                                    let res = hyper::Response::builder()
                                        .status(StatusCode::OK)
                                        .body(Full::new(Bytes::from(png(32, 32))))
                                        .expect("response");
                                    Ok::<_, Infallible>(res)
                                }
                            });
                            let _ = hyper::server::conn::http1::Builder::new()
                                .serve_connection(TokioIo::new(stream), svc)
                                .await;
                        });
                    }
                }
            }
        });
        Hanging {
            base: format!("http://{addr}"),
            hits,
            serve,
            _stop: stop,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn libraries_create_get_list_delete() {
    let relay = Relay::start("").await;
    let lib = create_library(&relay, "campaign").await;
    let id = lib["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("lib_"), "{lib}");
    assert_eq!(lib["object"], "asset_library");
    assert_eq!(lib["name"], "campaign");
    assert_eq!(lib["family"], "gen2");
    assert_eq!(lib["asset_count"], 0);
    assert!(lib["created_at"].as_u64().is_some());

    let got = relay.get(&format!("/v1/asset-libraries/{id}")).await;
    assert_eq!(got.status, 200);
    assert_eq!(got.json(), lib);

    let second = create_library(&relay, "second").await;
    let list = relay.get("/v1/asset-libraries").await.json();
    assert_eq!(list["object"], "list");
    assert_eq!(list["data"].as_array().unwrap().len(), 2);
    assert_eq!(list["first_id"], second["id"], "newest first");
    assert_eq!(list["has_more"], false);
    let page = relay
        .get("/v1/asset-libraries?limit=1&order=asc")
        .await
        .json();
    assert_eq!(page["data"][0]["id"], lib["id"]);
    assert_eq!(page["has_more"], true);
    let rest = relay
        .get(&format!("/v1/asset-libraries?limit=1&order=asc&after={id}"))
        .await
        .json();
    assert_eq!(rest["data"][0]["id"], second["id"]);
    assert_eq!(rest["has_more"], false);

    // Request faults.
    relay
        .post_json("/v1/asset-libraries", json!({"name": ""}))
        .await
        .assert_error(400, "invalid request", Some("name"));
    relay
        .call(
            Method::POST,
            "/v1/asset-libraries",
            Body::Raw("text/plain".into(), b"name=x".to_vec()),
        )
        .await
        .assert_error(415, "unsupported media type", None);
    relay.get("/v1/asset-libraries?limit=0").await.assert_error(
        400,
        "invalid request",
        Some("limit"),
    );
    relay
        .get("/v1/asset-libraries/lib_nope")
        .await
        .assert_error(404, "not found", None);
    relay
        .call(
            Method::PUT,
            &format!("/v1/asset-libraries/{id}"),
            Body::Empty,
        )
        .await
        .assert_error(405, "method not allowed", None);

    let deleted = relay
        .call(
            Method::DELETE,
            &format!("/v1/asset-libraries/{id}"),
            Body::Empty,
        )
        .await;
    assert_eq!(deleted.status, 200, "{}", deleted.text());
    assert_eq!(
        deleted.json(),
        json!({"id": id, "object": "asset_library.deleted", "deleted": true})
    );
    relay
        .get(&format!("/v1/asset-libraries/{id}"))
        .await
        .assert_error(404, "not found", None);
    relay
        .call(
            Method::DELETE,
            &format!("/v1/asset-libraries/{id}"),
            Body::Empty,
        )
        .await
        .assert_error(404, "not found", None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_by_multipart_and_url_become_active() {
    let relay = Relay::start("").await;
    let server = MediaServer::start(media()).await;
    let lib = create_library(&relay, "refs").await;
    let lib_id = lib["id"].as_str().unwrap();
    let key = relay.key.clone();

    // Multipart, type declared.
    let image = png(64, 48);
    let res = upload_file(&relay, &key, lib_id, Some("image"), "frame.png", &image).await;
    assert_eq!(res.status, 200, "{}", res.text());
    let up = res.json();
    let image_id = up["id"].as_str().unwrap().to_owned();
    assert!(image_id.starts_with("asset_"));
    assert_eq!(up["object"], "asset");
    assert_eq!(up["library_id"], lib["id"]);
    assert_eq!(up["family"], "gen2");
    assert_eq!(up["type"], "image");
    assert_eq!(up["status"], "processing");
    assert_eq!(up["error"], Value::Null);
    let done = settled(&relay, &image_id).await;
    assert_eq!(done["status"], "active", "{done}");
    assert_eq!(done["format"], "png");
    assert_eq!(done["bytes"], image.len());
    let created = done["created_at"].as_u64().unwrap();
    let expires = done["expires_at"].as_u64().unwrap();
    assert!(
        (created + 604_800..=created + 604_800 + 60).contains(&expires),
        "{done}"
    );
    assert_eq!(std::fs::read(blob_path(&relay, &image_id)).unwrap(), image);
    // An active asset is not polled any more.
    let polled = relay.get(&format!("/v1/assets/{image_id}")).await;
    assert_eq!(polled.header("openai-poll-after-ms"), None);

    // Multipart without a type: derived from the bytes.
    let res = upload_file(&relay, &key, lib_id, None, "clip", &mp4_head()).await;
    assert_eq!(res.status, 200, "{}", res.text());
    assert_eq!(res.json()["type"], Value::Null);
    let video_id = res.json()["id"].as_str().unwrap().to_owned();

    // By URL, with and without a type.
    let audio = upload_url(&relay, lib_id, &server.url("/voice.wav"), None).await;
    let audio_id = audio["id"].as_str().unwrap().to_owned();
    let frame = upload_url(&relay, lib_id, &server.url("/frame.png"), Some("image")).await;
    let frame_id = frame["id"].as_str().unwrap().to_owned();

    let video = settled(&relay, &video_id).await;
    assert_eq!(
        (&video["status"], &video["type"], &video["format"]),
        (&json!("active"), &json!("video"), &json!("mp4")),
        "{video}"
    );
    let audio = settled(&relay, &audio_id).await;
    assert_eq!(
        (&audio["status"], &audio["type"], &audio["format"]),
        (&json!("active"), &json!("audio"), &json!("wav")),
        "{audio}"
    );
    assert_eq!(audio["bytes"], wav().len());
    assert_eq!(settled(&relay, &frame_id).await["status"], "active");
    assert_eq!(std::fs::read(blob_path(&relay, &audio_id)).unwrap(), wav());

    // Listing with filters.
    let path = format!("/v1/asset-libraries/{lib_id}/assets");
    let all = relay.get(&path).await.json();
    assert_eq!(all["object"], "list");
    assert_eq!(all["data"].as_array().unwrap().len(), 4);
    assert_eq!(all["first_id"], json!(frame_id), "newest first");
    let images = relay
        .get(&format!("{path}?type=image&status=active&order=asc"))
        .await
        .json();
    let ids: Vec<&str> = images["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [image_id.as_str(), frame_id.as_str()]);
    let page = relay.get(&format!("{path}?limit=3")).await.json();
    assert_eq!(page["has_more"], true);
    let rest = relay
        .get(&format!(
            "{path}?limit=3&after={}",
            page["last_id"].as_str().unwrap()
        ))
        .await
        .json();
    assert_eq!(rest["data"][0]["id"], json!(image_id));
    assert_eq!(rest["has_more"], false);
    assert_eq!(
        relay.get(&format!("{path}?status=failed")).await.json()["data"],
        json!([])
    );
    relay
        .get(&format!("{path}?status=done"))
        .await
        .assert_error(400, "invalid request", Some("status"));
    relay
        .get(&format!("{path}?type=pdf"))
        .await
        .assert_error(400, "invalid request", Some("type"));
    assert_eq!(
        relay
            .get(&format!("/v1/asset-libraries/{lib_id}"))
            .await
            .json()["asset_count"],
        4
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_uploads_say_why() {
    let relay = Relay::start("").await;
    let server = MediaServer::start(media()).await;
    let hanging = Hanging::start().await;
    let lib = create_library(&relay, "bad").await;
    let lib_id = lib["id"].as_str().unwrap();
    let key = relay.key.clone();

    let mut uploads = Vec::new();
    let whole = png(64, 64);
    for (kind, name, bytes, code) in [
        (None, "empty.png", Vec::new(), "empty"),
        (Some("video"), "frame.png", png(16, 16), "type_mismatch"),
        (Some("audio"), "clip.mp4", mp4_head(), "type_mismatch"),
        (
            None,
            "cut.png",
            whole[..whole.len() / 2].to_vec(),
            "unsupported_format",
        ),
        (
            None,
            "junk.bin",
            b"\x00\x01garbage bytes".to_vec(),
            "unsupported_format",
        ),
    ] {
        let res = upload_file(&relay, &key, lib_id, kind, name, &bytes).await;
        assert_eq!(res.status, 200, "{}", res.text());
        uploads.push((res.json()["id"].as_str().unwrap().to_owned(), code, name));
    }
    for (url, kind, code) in [
        (server.url("/missing.png"), Some("image"), "unreachable_url"),
        (server.url("/notes.txt"), None, "unsupported_format"),
        (
            "http://127.0.0.1:9/nothing.png".to_owned(),
            None,
            "unreachable_url",
        ),
    ] {
        let v = upload_url(&relay, lib_id, &url, kind).await;
        uploads.push((v["id"].as_str().unwrap().to_owned(), code, "url"));
    }
    // A URL that never answers fails once the fetch time limit (2 s here) is up.
    let started = Instant::now();
    let hang = upload_url(&relay, lib_id, &hanging.url(), Some("image")).await;
    let hang_id = hang["id"].as_str().unwrap().to_owned();

    for (id, code, name) in &uploads {
        let v = settled(&relay, id).await;
        assert_eq!(v["status"], "failed", "{name}: {v}");
        assert_eq!(v["error"]["code"], *code, "{name}: {v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{v}"
        );
        assert_eq!(v["format"], Value::Null);
        assert!(!blob_path(&relay, id).exists(), "{name}: bytes kept");
    }
    let v = settled(&relay, &hang_id).await;
    assert_eq!(v["status"], "failed", "{v}");
    assert_eq!(v["error"]["code"], "unreachable_url", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("timed out"),
        "{v}"
    );
    assert!(hanging.hits.load(Ordering::SeqCst) >= 1);
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    let failed = relay
        .get(&format!(
            "/v1/asset-libraries/{lib_id}/assets?status=failed&limit=100"
        ))
        .await
        .json();
    assert_eq!(failed["data"].as_array().unwrap().len(), uploads.len() + 1);

    // Request faults are answered at once.
    let path = format!("/v1/asset-libraries/{lib_id}/assets");
    relay
        .post_json(&path, json!({"type": "image"}))
        .await
        .assert_error(400, "invalid request", Some("url"));
    relay
        .post_json(&path, json!({"url": "ftp://example.com/a.png"}))
        .await
        .assert_error(400, "invalid request", Some("url"));
    relay
        .post_json(
            &path,
            json!({"url": server.url("/frame.png"), "type": "picture"}),
        )
        .await
        .assert_error(400, "invalid request", Some("type"));
    let (ct, body) = Multipart::new().text("type", "image").build();
    relay
        .call(Method::POST, &path, Body::Raw(ct, body))
        .await
        .assert_error(400, "invalid request", Some("file"));
    relay
        .call(
            Method::POST,
            &path,
            Body::Raw("text/plain".into(), b"x".to_vec()),
        )
        .await
        .assert_error(415, "unsupported media type", None);
    relay
        .post_json(
            "/v1/asset-libraries/lib_nope/assets",
            json!({"url": server.url("/frame.png")}),
        )
        .await
        .assert_error(404, "not found", None);
}

impl Hanging {
    fn url(&self) -> String {
        format!("{}/slow.png", self.base)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_over_the_limit_are_refused() {
    let relay = Relay::start("[server]\nmax_upload_bytes = 4096\n").await;
    let lib = create_library(&relay, "small").await;
    let lib_id = lib["id"].as_str().unwrap();
    let key = relay.key.clone();
    let res = upload_file(&relay, &key, lib_id, None, "big.png", &vec![0u8; 8192]).await;
    res.assert_error(413, "Payload Too Large", None);
    assert_eq!(
        relay
            .get(&format!("/v1/asset-libraries/{lib_id}"))
            .await
            .json()["asset_count"],
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_assets_expire_without_requests() {
    let relay = Relay::start("[assets]\nttl_secs = 1\n").await;
    let lib = create_library(&relay, "short-lived").await;
    let lib_id = lib["id"].as_str().unwrap();
    let key = relay.key.clone();
    let res = upload_file(&relay, &key, lib_id, Some("image"), "f.png", &png(8, 8)).await;
    let id = res.json()["id"].as_str().unwrap().to_owned();
    let active = settled(&relay, &id).await;
    assert_eq!(active["status"], "active", "{active}");
    let expires = active["expires_at"].as_u64().unwrap();

    // Reads never change a status; the sweep does. Look only at the list, by status.
    let path = format!("/v1/asset-libraries/{lib_id}/assets?status=expired");
    let expired = poll_until(Duration::from_secs(15), || async {
        let list = relay.get(&path).await.json();
        list["data"].as_array().and_then(|d| d.first().cloned())
    })
    .await
    .expect("the asset expired");
    assert_eq!(expired["id"], json!(id));
    assert_eq!(expired["status"], "expired");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(now >= expires, "expired before its time");

    // Expiry is final and survives a restart.
    let dir = relay.stop().await;
    let relay = Relay::start_in(dir, Some(key), "[assets]\nttl_secs = 1\n").await;
    assert_eq!(
        relay.get(&format!("/v1/assets/{id}")).await.json()["status"],
        "expired"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_keys_libraries_and_assets_are_not_found() {
    let relay = Relay::start("").await;
    let lib = create_library(&relay, "mine").await;
    let lib_id = lib["id"].as_str().unwrap();
    let key = relay.key.clone();
    let res = upload_file(&relay, &key, lib_id, None, "f.png", &png(8, 8)).await;
    let asset_id = res.json()["id"].as_str().unwrap().to_owned();
    settled(&relay, &asset_id).await;

    let (_, other) = relay.new_key("other", None).await;
    let as_other = |method: Method, path: String, body: Body| {
        let relay = &relay;
        let other = other.clone();
        async move { relay.call_as(&other, method, &path, body, &[]).await }
    };
    for (method, path) in [
        (Method::GET, format!("/v1/asset-libraries/{lib_id}")),
        (Method::DELETE, format!("/v1/asset-libraries/{lib_id}")),
        (Method::GET, format!("/v1/asset-libraries/{lib_id}/assets")),
        (Method::GET, format!("/v1/assets/{asset_id}")),
        (Method::DELETE, format!("/v1/assets/{asset_id}")),
    ] {
        as_other(method.clone(), path.clone(), Body::Empty)
            .await
            .assert_error(404, "not found", None);
    }
    let res = upload_file(&relay, &other, lib_id, None, "f.png", &png(8, 8)).await;
    res.assert_error(404, "not found", None);
    let theirs = as_other(Method::GET, "/v1/asset-libraries".into(), Body::Empty).await;
    assert_eq!(theirs.json()["data"], json!([]));
    // Still there for the owner.
    assert_eq!(
        relay.get(&format!("/v1/assets/{asset_id}")).await.status,
        200
    );
    assert_eq!(
        relay
            .get(&format!("/v1/asset-libraries/{lib_id}"))
            .await
            .json()["asset_count"],
        1
    );
    // No key at all.
    let res = relay
        .client
        .send(
            Method::GET,
            &relay.url(&format!("/v1/assets/{asset_id}")),
            Body::Empty,
            &[],
        )
        .await;
    res.assert_error(401, "unauthorized", None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_without_a_family_cannot_hold_assets() {
    let relay = Relay::start("").await;
    let res = relay
        .admin(
            Method::POST,
            "/admin/keys",
            Body::Json(json!({"name": "loose", "group": "no-such-group"})),
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let key = res.json()["key"].as_str().unwrap().to_owned();
    relay
        .call_as(
            &key,
            Method::POST,
            "/v1/asset-libraries",
            Body::Json(json!({"name": "x"})),
            &[],
        )
        .await
        .assert_error(400, "group mismatch", None);
    // A motion key's library is of the motion family.
    let res = relay
        .admin(
            Method::POST,
            "/admin/keys",
            Body::Json(json!({"name": "m", "group": "motion"})),
        )
        .await;
    let key = res.json()["key"].as_str().unwrap().to_owned();
    let lib = relay
        .call_as(
            &key,
            Method::POST,
            "/v1/asset-libraries",
            Body::Json(json!({"name": "x"})),
            &[],
        )
        .await;
    assert_eq!(lib.json()["family"], "motion");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_removes_assets_and_their_bytes() {
    let relay = Relay::start("").await;
    let lib = create_library(&relay, "doomed").await;
    let lib_id = lib["id"].as_str().unwrap().to_owned();
    let key = relay.key.clone();
    let mut ids = Vec::new();
    for n in 0..3 {
        let res = upload_file(&relay, &key, &lib_id, None, "f.png", &png(8 + n, 8)).await;
        ids.push(res.json()["id"].as_str().unwrap().to_owned());
    }
    for id in &ids {
        assert_eq!(settled(&relay, id).await["status"], "active");
        assert!(blob_path(&relay, id).exists());
    }

    // One asset alone.
    let res = relay
        .call(
            Method::DELETE,
            &format!("/v1/assets/{}", ids[0]),
            Body::Empty,
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    assert_eq!(
        res.json(),
        json!({"id": ids[0], "object": "asset.deleted", "deleted": true})
    );
    assert!(!blob_path(&relay, &ids[0]).exists());
    relay
        .get(&format!("/v1/assets/{}", ids[0]))
        .await
        .assert_error(404, "not found", None);
    assert_eq!(
        relay
            .get(&format!("/v1/asset-libraries/{lib_id}"))
            .await
            .json()["asset_count"],
        2
    );

    // The library with the rest.
    let res = relay
        .call(
            Method::DELETE,
            &format!("/v1/asset-libraries/{lib_id}"),
            Body::Empty,
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    for id in &ids[1..] {
        relay
            .get(&format!("/v1/assets/{id}"))
            .await
            .assert_error(404, "not found", None);
        assert!(!blob_path(&relay, id).exists(), "{id}: bytes left behind");
    }
    relay
        .get(&format!("/v1/asset-libraries/{lib_id}/assets"))
        .await
        .assert_error(404, "not found", None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_and_unfinished_processing_survive_a_restart() {
    // A long fetch limit, so the hanging fetch is still under way when the relay stops.
    let config = "[security]\nurl_fetch_timeout_secs = 30\n";
    let relay = Relay::start(config).await;
    let hanging = Hanging::start().await;
    let lib = create_library(&relay, "kept").await;
    let lib_id = lib["id"].as_str().unwrap().to_owned();
    let key = relay.key.clone();
    let res = upload_file(&relay, &key, &lib_id, None, "f.png", &png(20, 10)).await;
    let done_id = res.json()["id"].as_str().unwrap().to_owned();
    let done = settled(&relay, &done_id).await;
    assert_eq!(done["status"], "active");

    let pending = upload_url(&relay, &lib_id, &hanging.url(), None).await;
    let pending_id = pending["id"].as_str().unwrap().to_owned();
    poll_until(WAIT, || async {
        (hanging.hits.load(Ordering::SeqCst) >= 1).then_some(())
    })
    .await
    .expect("the relay fetched the URL");

    let stopping = Instant::now();
    let dir = relay.stop().await;
    assert!(
        stopping.elapsed() < Duration::from_secs(10),
        "stop took {:?}",
        stopping.elapsed()
    );
    hanging.serve.store(true, Ordering::SeqCst);
    let relay = Relay::start_in(dir, Some(key), config).await;

    assert_eq!(
        relay.get(&format!("/v1/assets/{done_id}")).await.json(),
        done
    );
    assert_eq!(
        relay
            .get(&format!("/v1/asset-libraries/{lib_id}"))
            .await
            .json()["asset_count"],
        2
    );
    // The asset left processing is picked up again at start, with no request needed.
    let resumed = settled(&relay, &pending_id).await;
    assert_eq!(resumed["status"], "active", "{resumed}");
    assert_eq!(resumed["type"], "image");
    assert!(hanging.hits.load(Ordering::SeqCst) >= 2);
}
