//! Signed webhooks of finished tasks: delivered to a receiver of our own on 127.0.0.1, signed
//! per Standard Webhooks (checked here with HMAC-SHA256), retried until a 2xx, listed for
//! operators with their attempts, delivered again (with the same `webhook-id`) after a restart
//! in the middle of a delivery; the event types of both formats; bad callback URLs refused;
//! receivers that never answer hold only their own share of the deliveries under way.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use hmac::{Hmac, Mac};
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use sha2::Sha256;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::harness::{Body, Relay, poll_until};

const WAIT: Duration = Duration::from_secs(30);

/// Fast retries and deliveries for tests.
const HOOKS: &str = r#"
[webhooks]
timeout_ms = 1500
retry_initial_ms = 200
retry_max_ms = 400
poll_interval_ms = 50
"#;

/// One request the receiver got.
#[derive(Debug, Clone)]
struct Delivery {
    headers: HeaderMap,
    body: Bytes,
    /// When it arrived.
    at: Instant,
}

impl Delivery {
    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("delivery body is JSON")
    }
}

/// How the receiver answers, request by request.
#[derive(Clone, Copy)]
enum Plan {
    /// These statuses in turn, then 200.
    Statuses(&'static [u16]),
    /// Holds the first request open for good (it is recorded), answers 200 after.
    HoldFirst,
    /// Holds every request open for good (each is recorded): a receiver that never answers.
    HoldAll,
}

/// A webhook receiver on 127.0.0.1 that records every request.
struct Receiver {
    base: String,
    seen: Arc<Mutex<Vec<Delivery>>>,
    _stop: oneshot::Sender<()>,
}

impl Receiver {
    async fn start(plan: Plan) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let seen: Arc<Mutex<Vec<Delivery>>> = Arc::default();
        let (stop, mut stopped) = oneshot::channel::<()>();
        let log = seen.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = &mut stopped => break,
                    accepted = listener.accept() => {
                        let Ok((stream, _)) = accepted else { continue };
                        let log = log.clone();
                        tokio::spawn(async move {
                            let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
                                let log = log.clone();
                                async move {
                                    let headers = req.headers().clone();
                                    let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                                    let n = {
                                        let mut log = log.lock().unwrap();
                                        log.push(Delivery { headers, body, at: Instant::now() });
                                        log.len()
                                    };
                                    let status = match plan {
                                        Plan::Statuses(list) => list.get(n - 1).copied().unwrap_or(200),
                                        Plan::HoldFirst if n == 1 => std::future::pending().await,
                                        Plan::HoldFirst => 200,
                                        Plan::HoldAll => std::future::pending().await,
                                    };
                                    Ok::<_, Infallible>(
                                        hyper::Response::builder()
                                            .status(StatusCode::from_u16(status).unwrap())
                                            .body(Full::new(Bytes::from_static(b"ok")))
                                            .unwrap(),
                                    )
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
        Receiver {
            base: format!("http://{addr}"),
            seen,
            _stop: stop,
        }
    }

    fn url(&self) -> String {
        format!("{}/hooks/relay", self.base)
    }

    fn seen(&self) -> Vec<Delivery> {
        self.seen.lock().unwrap().clone()
    }

    /// Waits until at least `n` requests have arrived.
    async fn wait_for(&self, n: usize) -> Vec<Delivery> {
        poll_until(WAIT, || async {
            let seen = self.seen();
            (seen.len() >= n).then_some(seen)
        })
        .await
        .unwrap_or_else(|| panic!("the receiver did not get {n} deliveries: {:?}", self.seen()))
    }
}

/// A key with a webhook secret: (id, key, secret).
async fn hook_key(relay: &Relay, webhook_url: Option<&str>) -> (String, String, String) {
    let res = relay
        .admin(
            Method::POST,
            "/admin/keys",
            Body::Json(json!({"name": "hooks", "group": "gen2", "webhook_url": webhook_url})),
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let v = res.json();
    assert_eq!(v["webhook_url"], json!(webhook_url));
    let secret = v["webhook_secret"]
        .as_str()
        .expect("webhook_secret")
        .to_owned();
    assert!(secret.starts_with("whsec_"), "{secret}");
    (
        v["id"].as_str().unwrap().to_owned(),
        v["key"].as_str().unwrap().to_owned(),
        secret,
    )
}

/// Checks a delivery's Standard Webhooks signature against `secret`.
fn assert_signed(delivery: &Delivery, secret: &str) {
    let id = delivery.header("webhook-id");
    let timestamp = delivery.header("webhook-timestamp");
    let signature = delivery.header("webhook-signature");
    assert!(id.starts_with("evt_"), "webhook-id {id:?}");
    let ts: u64 = timestamp
        .parse()
        .expect("webhook-timestamp is unix seconds");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(ts <= now && now - ts < 120, "timestamp {ts}, now {now}");
    let key = STANDARD
        .decode(secret.strip_prefix("whsec_").unwrap())
        .unwrap();
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(&delivery.body);
    let expected = format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()));
    assert!(
        signature.split(' ').any(|s| s == expected),
        "signature {signature:?}, expected {expected:?}"
    );
    // Another secret does not verify it.
    let mut other = Hmac::<Sha256>::new_from_slice(b"another secret").unwrap();
    other.update(format!("{id}.{timestamp}.").as_bytes());
    other.update(&delivery.body);
    assert_ne!(
        signature,
        format!("v1,{}", STANDARD.encode(other.finalize().into_bytes()))
    );
    assert_eq!(delivery.header("content-type"), "application/json");
}

async fn create_video(relay: &Relay, key: &str, body: Value, sim: &str) -> String {
    let mut headers = Vec::new();
    if !sim.is_empty() {
        headers.push(("x-relay-sim", sim));
    }
    let res = relay
        .call_as(key, Method::POST, "/v1/videos", Body::Json(body), &headers)
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    res.json()["id"].as_str().unwrap().to_owned()
}

/// The admin listing of one task's deliveries.
async fn deliveries(relay: &Relay, task_id: &str) -> Vec<Value> {
    let res = relay
        .admin(
            Method::GET,
            &format!("/admin/webhooks?task_id={task_id}"),
            Body::Empty,
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    res.json()["data"].as_array().unwrap().clone()
}

async fn wait_delivered(relay: &Relay, task_id: &str) -> Value {
    poll_until(WAIT, || async {
        let list = deliveries(relay, task_id).await;
        list.into_iter().find(|d| d["status"] == "delivered")
    })
    .await
    .unwrap_or_else(|| panic!("no delivered webhook for {task_id}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completed_video_is_delivered_signed() {
    let relay = Relay::start(HOOKS).await;
    let receiver = Receiver::start(Plan::Statuses(&[])).await;
    let (key_id, key, secret) = hook_key(&relay, None).await;
    let body = json!({"model": "model_h3", "prompt": "a webhook", "callback_url": receiver.url()});
    let id = create_video(&relay, &key, body, "").await;
    let seen = receiver.wait_for(1).await;
    let delivery = &seen[0];
    assert_signed(delivery, &secret);
    let event = delivery.json();
    assert_eq!(event["type"], "video.completed");
    assert_eq!(event["id"], delivery.header("webhook-id"));
    assert!(event["created_at"].as_u64().is_some());
    // `data` is the task as GET answers it.
    let got = relay.wait_video_as(&key, &id, WAIT).await;
    assert_eq!(event["data"], got);
    assert_eq!(event["data"]["status"], "completed");

    let listed = wait_delivered(&relay, &id).await;
    assert_eq!(listed["id"], event["id"]);
    assert_eq!(listed["type"], "video.completed");
    assert_eq!(listed["key_id"], key_id);
    assert_eq!(listed["url"], receiver.url());
    let attempts = listed["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 1, "{listed}");
    assert_eq!(attempts[0]["status_code"], 200);
    assert!(attempts[0]["duration_ms"].as_u64().is_some());
    // Exactly one delivery.
    assert_eq!(receiver.seen().len(), 1);

    // A rotated secret signs what follows; the old one no longer verifies.
    let res = relay
        .admin(
            Method::POST,
            &format!("/admin/keys/{key_id}/webhook-secret"),
            Body::Empty,
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let rotated = res.json()["webhook_secret"].as_str().unwrap().to_owned();
    assert_ne!(rotated, secret);
    let again = json!({"model": "model_h3", "prompt": "again", "callback_url": receiver.url()});
    create_video(&relay, &key, again, "").await;
    let seen = receiver.wait_for(2).await;
    assert_signed(&seen[1], &rotated);
    // The key record never shows the secret.
    let record = relay
        .admin(Method::GET, &format!("/admin/keys/{key_id}"), Body::Empty)
        .await
        .json();
    assert!(record.get("webhook_secret").is_none(), "{record}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_receiver_is_retried_and_the_attempts_listed() {
    let relay = Relay::start(HOOKS).await;
    let receiver = Receiver::start(Plan::Statuses(&[500, 500])).await;
    // The key's default webhook_url stands in for a callback_url.
    let (_, key, secret) = hook_key(&relay, Some(&receiver.url())).await;
    let id = create_video(
        &relay,
        &key,
        json!({"model": "model_h3", "prompt": "retry"}),
        "",
    )
    .await;
    let listed = wait_delivered(&relay, &id).await;
    let codes: Vec<Value> = listed["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["status_code"].clone())
        .collect();
    assert_eq!(codes, [json!(500), json!(500), json!(200)], "{listed}");
    let seen = receiver.seen();
    assert_eq!(seen.len(), 3);
    // The same event on every attempt, each signed.
    for d in &seen {
        assert_eq!(d.header("webhook-id"), listed["id"].as_str().unwrap());
        assert_signed(d, &secret);
    }
    // The status filter.
    let res = relay
        .admin(Method::GET, "/admin/webhooks?status=delivered", Body::Empty)
        .await;
    assert!(
        res.json()["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["task_id"] == id.as_str())
    );
    let res = relay
        .admin(Method::GET, "/admin/webhooks?status=lost", Body::Empty)
        .await;
    res.assert_error(400, "invalid request", Some("status"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_never_answers_2xx_ends_failed() {
    let relay = Relay::start(
        "[webhooks]\ntimeout_ms = 1500\nretry_initial_ms = 100\nretry_max_ms = 200\nmax_age_secs = 1\npoll_interval_ms = 50\n",
    )
    .await;
    let receiver = Receiver::start(Plan::Statuses(&[503; 64])).await;
    let (_, key, _) = hook_key(&relay, Some(&receiver.url())).await;
    let id = create_video(
        &relay,
        &key,
        json!({"model": "model_h3", "prompt": "gone"}),
        "",
    )
    .await;
    let failed = poll_until(WAIT, || async {
        deliveries(&relay, &id)
            .await
            .into_iter()
            .find(|d| d["status"] == "failed")
    })
    .await
    .expect("the delivery ends failed");
    let attempts = failed["attempts"].as_array().unwrap();
    assert!(attempts.len() >= 2, "{failed}");
    assert!(attempts.iter().all(|a| a["status_code"] == 503));
    assert_eq!(failed["next_attempt_at"], Value::Null);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_mid_delivery_delivers_again_with_the_same_id() {
    let relay = Relay::start(HOOKS).await;
    let receiver = Receiver::start(Plan::HoldFirst).await;
    let (_, key, secret) = hook_key(&relay, None).await;
    let known = relay.key.clone();
    let body = json!({"model": "model_h3", "prompt": "held", "callback_url": receiver.url()});
    let id = create_video(&relay, &key, body, "").await;
    // The first delivery is under way (held open by the receiver): stop the relay now.
    receiver.wait_for(1).await;
    let dir = relay.stop().await;
    let relay = Relay::start_in(dir, Some(known), HOOKS).await;
    let listed = wait_delivered(&relay, &id).await;
    let seen = receiver.seen();
    assert!(seen.len() >= 2, "delivered again after the restart");
    for d in &seen {
        assert_eq!(d.header("webhook-id"), listed["id"].as_str().unwrap());
        assert_signed(d, &secret);
        assert_eq!(d.json()["data"]["id"], id.as_str());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_and_cancelled_tasks_of_both_formats_have_their_event_types() {
    let relay = Relay::start(HOOKS).await;
    let receiver = Receiver::start(Plan::Statuses(&[])).await;
    let (_, key, secret) = hook_key(&relay, Some(&receiver.url())).await;
    let failed = create_video(
        &relay,
        &key,
        json!({"model": "model_h3", "prompt": "fails"}),
        "fail",
    )
    .await;
    let cancelled = create_video(
        &relay,
        &key,
        json!({"model": "model_h3", "prompt": "stays"}),
        "stuck",
    )
    .await;
    let res = relay
        .call_as(
            &key,
            Method::POST,
            &format!("/v1/videos/{cancelled}/cancel"),
            Body::Empty,
            &[],
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());

    // Second format: its own status words, and its callback_url field.
    let gen_body = |prompt: &str| json!({"model": "gen2-lite", "prompt": prompt, "duration": 5, "callback_url": receiver.url()});
    let create_gen = |body: Value, sim: &'static str| {
        let relay = &relay;
        let key = key.clone();
        async move {
            let mut headers = Vec::new();
            if !sim.is_empty() {
                headers.push(("x-relay-sim", sim));
            }
            let res = relay
                .call_as(
                    &key,
                    Method::POST,
                    "/v1/video/generations",
                    Body::Json(body),
                    &headers,
                )
                .await;
            assert_eq!(res.status, 200, "{}", res.text());
            res.json()["task_id"].as_str().unwrap().to_owned()
        }
    };
    let gen_ok = create_gen(gen_body("succeeds"), "").await;
    let gen_failed = create_gen(gen_body("fails"), "fail").await;
    let gen_cancelled = create_gen(gen_body("stays"), "stuck").await;
    let res = relay
        .call_as(
            &key,
            Method::POST,
            &format!("/v1/video/generations/{gen_cancelled}/cancel"),
            Body::Empty,
            &[],
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());

    let expect = [
        (failed.as_str(), "video.failed", "failed"),
        (cancelled.as_str(), "video.cancelled", "cancelled"),
        (gen_ok.as_str(), "video_generation.succeeded", "succeeded"),
        (gen_failed.as_str(), "video_generation.failed", "failed"),
        (
            gen_cancelled.as_str(),
            "video_generation.cancelled",
            "cancelled",
        ),
    ];
    let seen = receiver.wait_for(expect.len()).await;
    for (task, kind, status) in expect {
        let d = seen
            .iter()
            .find(|d| {
                let e = d.json();
                e["data"]["id"] == task || e["data"]["task_id"] == task
            })
            .unwrap_or_else(|| panic!("no delivery for {task}"));
        assert_signed(d, &secret);
        let event = d.json();
        assert_eq!(event["type"], kind, "{event}");
        assert_eq!(event["data"]["status"], status, "{event}");
    }
    let gen_event = seen
        .iter()
        .map(Delivery::json)
        .find(|e| e["data"]["task_id"] == gen_ok.as_str())
        .unwrap();
    assert_eq!(gen_event["data"]["object"], "video.generation");
    assert!(gen_event["data"]["video_url"].as_str().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_callback_urls_are_refused_naming_the_field() {
    let relay = Relay::start("").await;
    for url in [
        json!("ftp://hooks.example/x"),
        json!("/relative"),
        json!(5),
        json!("https://"),
    ] {
        let res = relay
            .post_json(
                "/v1/videos",
                json!({"model": "model_h3", "prompt": "x", "callback_url": url}),
            )
            .await;
        res.assert_error(400, "invalid request", Some("callback_url"));
        let res = relay
            .post_json(
                "/v1/video/generations",
                json!({"model": "gen2-lite", "prompt": "x", "callback_url": url}),
            )
            .await;
        res.assert_error(400, "invalid request", Some("callback_url"));
    }
    // Multipart, as the OpenAI SDK sends it.
    let (ct, body) = crate::harness::Multipart::new()
        .text("model", "model_h3")
        .text("prompt", "x")
        .text("callback_url", "gopher://hooks.example")
        .build();
    let res = relay
        .call_as(
            &relay.key.clone(),
            Method::POST,
            "/v1/videos",
            Body::Raw(ct, body),
            &[],
        )
        .await;
    res.assert_error(400, "invalid request", Some("callback_url"));

    // Where private addresses are refused, a loopback or private callback is refused at once.
    let strict = Relay::start("[security]\nallow_private_urls = false\n").await;
    for url in [
        "http://127.0.0.1:9/hook",
        "http://[::1]/hook",
        "http://10.1.2.3/hook",
    ] {
        let res = strict
            .post_json(
                "/v1/videos",
                json!({"model": "model_h3", "prompt": "x", "callback_url": url}),
            )
            .await;
        res.assert_error(400, "invalid request", Some("callback_url"));
        let res = strict
            .admin(
                Method::POST,
                "/admin/keys",
                Body::Json(json!({"name": "k", "webhook_url": url})),
            )
            .await;
        res.assert_error(400, "invalid request", Some("webhook_url"));
    }
}

/// Deliveries that never end (the relay's attempts time out) and a short attempt timeout.
const HELD: &str = r#"
[webhooks]
timeout_ms = 3000
retry_initial_ms = 200
retry_max_ms = 400
poll_interval_ms = 50
concurrency = 16
per_receiver_concurrency = 4
per_key_concurrency = 8
"#;

/// The attempt timeout of [`HELD`].
const HELD_TIMEOUT: Duration = Duration::from_millis(3000);

/// Ends a video of `key` whose webhook goes to `url` at once (cancelled while it runs, so no
/// rendering comes between the request and the webhook).
async fn cancelled_video(relay: &Relay, key: &str, url: &str) {
    let body = json!({"model": "model_h3", "prompt": "flood", "callback_url": url});
    let id = create_video(relay, key, body, "stuck").await;
    let res = relay
        .call_as(
            key,
            Method::POST,
            &format!("/v1/videos/{id}/cancel"),
            Body::Empty,
            &[],
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
}

/// `n` webhooks of `key` to `url`.
async fn flood(relay: &Relay, key: &str, url: &str, n: usize) {
    for _ in 0..n {
        cancelled_video(relay, key, url).await;
    }
}

/// Waits for another key's webhook to reach `fast` while the held deliveries, the first of
/// which arrived at `held_since`, wait out their timeout: it must arrive before they time out.
async fn arrives_while_held(relay: &Relay, fast: &Receiver, held_since: Instant) -> Delivery {
    let (_, other, _) = hook_key(relay, None).await;
    cancelled_video(relay, &other, &fast.url()).await;
    let left = HELD_TIMEOUT.saturating_sub(held_since.elapsed());
    let seen = poll_until(left, || async { fast.seen().first().cloned() }).await;
    let delivery = seen.unwrap_or_else(|| {
        panic!(
            "another key's webhook did not arrive within {HELD_TIMEOUT:?} of the held ones \
             (they time out then): one receiver's deliveries delayed another's"
        )
    });
    assert!(
        delivery.at < held_since + HELD_TIMEOUT,
        "arrived {:?} after the held ones began",
        delivery.at - held_since
    );
    delivery
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_never_answers_delays_no_other_key() {
    let relay = Relay::start(HELD).await;
    let slow = Receiver::start(Plan::HoldAll).await;
    let fast = Receiver::start(Plan::Statuses(&[])).await;
    let (_, key, _) = hook_key(&relay, None).await;
    flood(&relay, &key, &slow.url(), 20).await;
    // The receiver's share of the slots is taken, and held until the attempts time out.
    let held = slow.wait_for(4).await;
    let held_since = held[0].at;
    let delivery = arrives_while_held(&relay, &fast, held_since).await;
    assert_eq!(delivery.json()["type"], "video.cancelled");
    // No more than the receiver's cap was under way at once: the fifth came only after the
    // first attempts timed out.
    assert_eq!(
        slow.seen()
            .iter()
            .filter(|d| d.at < held_since + HELD_TIMEOUT)
            .count(),
        4,
        "per_receiver_concurrency = 4"
    );
    // The rest of the flood goes on as slots free.
    let later = slow.wait_for(5).await;
    assert!(later[4].at >= held_since + HELD_TIMEOUT - Duration::from_millis(500));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_keys_many_receivers_hold_only_that_keys_share() {
    let relay = Relay::start(HELD).await;
    let slow = [
        Receiver::start(Plan::HoldAll).await,
        Receiver::start(Plan::HoldAll).await,
        Receiver::start(Plan::HoldAll).await,
        Receiver::start(Plan::HoldAll).await,
    ];
    let fast = Receiver::start(Plan::Statuses(&[])).await;
    let (_, key, _) = hook_key(&relay, None).await;
    for receiver in &slow {
        flood(&relay, &key, &receiver.url(), 5).await;
    }
    // The key's cap (8) binds before the receivers' (4 each, 16 in all).
    let first = poll_until(WAIT, || async {
        let seen: Vec<Delivery> = slow.iter().flat_map(Receiver::seen).collect();
        (seen.len() >= 8).then(|| seen.iter().map(|d| d.at).min().unwrap())
    })
    .await
    .expect("the key's share of deliveries under way");
    arrives_while_held(&relay, &fast, first).await;
    let under_way: usize = slow
        .iter()
        .map(|r| {
            r.seen()
                .iter()
                .filter(|d| d.at < first + HELD_TIMEOUT)
                .count()
        })
        .sum();
    assert_eq!(under_way, 8, "per_key_concurrency = 8");
}
