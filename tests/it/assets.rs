//! Asset libraries and assets end to end: create, upload (multipart and URL), processing to
//! `active` or `failed`, listing with filters, expiry without requests, owners, deletion with
//! the stored bytes, restarts. (Ten thousand assets in one library are a store test.) The
//! tests are in the modules below, by area; here is what they share.

use std::collections::HashMap;
use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::harness::{Body, Multipart, Relay, mp4_head, png, poll_until, wav};

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

/// The number of assets the library `lib_id` says it holds.
async fn asset_count(relay: &Relay, lib_id: &str) -> Value {
    let res = relay.get(&format!("/v1/asset-libraries/{lib_id}")).await;
    res.json()["asset_count"].clone()
}

/// Asks for a new library named `name` as the key `key`.
async fn new_library_as(relay: &Relay, key: &str, name: &str) -> crate::harness::Answer {
    let body = Body::Json(json!({"name": name}));
    relay
        .call_as(key, Method::POST, "/v1/asset-libraries", body, &[])
        .await
}

/// A new key in `group`; its secret.
async fn key_in_group(relay: &Relay, name: &str, group: &str) -> String {
    let body = json!({"name": name, "group": group});
    let res = relay
        .admin(Method::POST, "/admin/keys", Body::Json(body))
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    res.json()["key"].as_str().unwrap().to_owned()
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

impl Hanging {
    fn url(&self) -> String {
        format!("{}/slow.png", self.base)
    }
}

mod access;
mod lifecycle;
mod uploads;
