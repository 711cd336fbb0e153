//! Relays sharing state through Redis (`[cluster]`): two relays in this process, each on its
//! own data directory holding the same key record (as relays sharing one store would see it),
//! and one Redis. Redis is required: `RELAY_TEST_REDIS_URL`, or 127.0.0.1:6379. Every test uses
//! a prefix of its own, so tests run side by side on one Redis.

use std::time::{Duration, Instant};

use http::Method;
use serde_json::json;
use store::{Key, KeyStatus, RateLimit, SledStore, Store};
use tokio::io::AsyncReadExt;

use crate::harness::{Body, Relay, poll_until};

const VERSION: (&str, &str) = ("anthropic-version", "2023-06-01");

/// The Redis the tests use; fails (never skips) when it does not answer.
async fn redis_url() -> String {
    let url = std::env::var("RELAY_TEST_REDIS_URL")
        .unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let reachable = async {
        let client = redis::Client::open(url.as_str()).ok()?;
        let mut conn = client.get_multiplexed_async_connection().await.ok()?;
        redis::cmd("PING")
            .query_async::<String>(&mut conn)
            .await
            .ok()
    };
    match tokio::time::timeout(Duration::from_secs(2), reachable).await {
        Ok(Some(_)) => url,
        _ => panic!(
            "Redis is required for the cluster tests: set RELAY_TEST_REDIS_URL or start it on 127.0.0.1:6379 (tried {url})"
        ),
    }
}

async fn redis_conn(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .expect("redis url")
        .get_multiplexed_async_connection()
        .await
        .expect("redis connection")
}

/// A fresh prefix: this test's own keys in Redis.
fn prefix() -> String {
    format!("relaytest:{}:", ulid::Ulid::new())
}

fn cluster_config(url: &str, prefix: &str, instance: &str, extra: &str) -> String {
    format!(
        "[cluster]\nredis_url = \"{url}\"\nprefix = \"{prefix}\"\ninstance_id = \"{instance}\"\n{extra}"
    )
}

/// A data directory whose store holds `key` (and so no first key is made).
async fn dir_with(key: &Key) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SledStore::open(&dir.path().join("store")).expect("open store");
    store.create_key(key).await.expect("create key");
    store.flush().await.expect("flush");
    drop(store);
    dir
}

/// Two relays on separate stores holding the same key, sharing `prefix` in Redis.
async fn two_relays(
    key: &Key,
    secret: &str,
    url: &str,
    prefix: &str,
    extra: &str,
) -> (Relay, Relay) {
    let a = Relay::start_in(
        dir_with(key).await,
        Some(secret.to_owned()),
        &cluster_config(url, prefix, "a", extra),
    )
    .await;
    let b = Relay::start_in(
        dir_with(key).await,
        Some(secret.to_owned()),
        &cluster_config(url, prefix, "b", extra),
    )
    .await;
    (a, b)
}

/// The limits the test harness lifts, back at the given values.
const LIMITS: &str = "[limits]\nrps = 10000\nburst = 10000\npoll_rps_per_task = 2\n";

/// (a) A key allowed 5 requests/s with a burst of 5, hammered through both relays: together
/// they admit what one bucket allows in that time, not twice as much.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_rate_limit_holds_across_relays() {
    let url = redis_url().await;
    let (mut key, secret) = server::app::new_key("limited", "gen2", None);
    key.rate_limit = Some(RateLimit { rps: 5, burst: 5 });
    let (a, b) = two_relays(&key, &secret, &url, &prefix(), LIMITS).await;
    let start = Instant::now();
    let (mut admitted, mut refused) = (0u32, 0u32);
    for i in 0..30 {
        let relay = if i % 2 == 0 { &a } else { &b };
        let res = relay.get("/v1/videos").await;
        match res.status {
            200 => admitted += 1,
            429 => {
                refused += 1;
                let secs: u64 = res
                    .header("retry-after")
                    .and_then(|v| v.parse().ok())
                    .expect("retry-after on a 429");
                assert!((1..=2).contains(&secs), "retry-after {secs}");
                assert!(res.header("retry-after-ms").is_some());
                res.assert_error(429, "rate limited", None);
            }
            other => panic!("unexpected {other}: {}", res.text()),
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    // One bucket: the burst, plus what refills at 5/s while the requests ran.
    let one_bucket = 5 + (elapsed * 5.0).floor() as u32;
    assert!(
        admitted <= one_bucket,
        "{admitted} admitted in {elapsed:.2}s; one shared bucket allows {one_bucket}"
    );
    assert!(admitted >= 5, "the burst is admitted: {admitted}");
    assert!(refused > 0);
}

/// Copies the directory tree `from` into `to` (a stopped relay's data directory).
fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).expect("create dir");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("dir entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy file");
        }
    }
}

/// (b) Polls of one task: 2/s per task (burst 4) in all, whichever relay is asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_poll_limit_holds_across_relays() {
    let url = redis_url().await;
    let prefix = prefix();
    let (key, secret) = server::app::new_key("poller", "gen2", None);
    // One task in both relays' stores: made on the first, whose store is then copied.
    let config = cluster_config(&url, &prefix, "a", LIMITS);
    let first = Relay::start_in(dir_with(&key).await, Some(secret.clone()), &config).await;
    let res = first
        .post_json(
            "/v1/videos",
            json!({"model": "model_h3", "prompt": "p", "size": "64x64"}),
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let id = res.json()["id"].as_str().expect("task id").to_owned();
    let dir_a = first.stop().await;
    let dir_b = tempfile::tempdir().expect("temp dir");
    copy_tree(dir_a.path(), dir_b.path());
    let a = Relay::start_in(dir_a, Some(secret.clone()), &config).await;
    let b = Relay::start_in(
        dir_b,
        Some(secret.clone()),
        &cluster_config(&url, &prefix, "b", LIMITS),
    )
    .await;
    let path = format!("/v1/videos/{id}");
    let start = Instant::now();
    let mut passed = 0u32;
    for i in 0..20 {
        let relay = if i % 2 == 0 { &a } else { &b };
        let res = relay.get(&path).await;
        match res.status {
            200 => passed += 1,
            429 => assert!(res.header("retry-after").is_some()),
            other => panic!("unexpected {other}: {}", res.text()),
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    let one_bucket = 4 + (elapsed * 2.0).floor() as u32;
    assert!(
        passed <= one_bucket,
        "{passed} polls passed in {elapsed:.2}s; one shared bucket allows {one_bucket}"
    );
    assert!(passed >= 4, "the burst passes: {passed}");
    // An id of no task of the key's is a 404 (the key's poll budget is large here), and
    // makes no bucket in Redis: the one task's is all there is.
    for i in 0..20 {
        let relay = if i % 2 == 0 { &a } else { &b };
        let res = relay.get(&format!("/v1/videos/video_madeup{i}")).await;
        assert_eq!(res.status, 404, "{}", res.text());
    }
    let mut conn = redis_conn(&url).await;
    let task_buckets: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}rlp:*"))
        .query_async(&mut conn)
        .await
        .expect("KEYS");
    assert_eq!(task_buckets, [format!("{prefix}rlp:{}:{id}", key.id)]);
    let ttl: i64 = redis::cmd("PTTL")
        .arg(&task_buckets[0])
        .query_async(&mut conn)
        .await
        .expect("PTTL");
    assert!(
        (1..=3000).contains(&ttl),
        "a task bucket expires once full: {ttl} ms"
    );
}

/// (b') Polls of made-up ids from one key share the key's poll budget across relays (here 5/s,
/// burst 5, the key's own rate limit), and leave nothing per id in Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polls_of_made_up_ids_spend_the_keys_budget_across_relays() {
    let url = redis_url().await;
    let prefix = prefix();
    let (mut key, secret) = server::app::new_key("prober", "gen2", None);
    key.rate_limit = Some(RateLimit { rps: 5, burst: 5 });
    let (a, b) = two_relays(&key, &secret, &url, &prefix, LIMITS).await;
    let start = Instant::now();
    let (mut passed, mut refused) = (0u32, 0u32);
    for i in 0..60 {
        let relay = if i % 2 == 0 { &a } else { &b };
        let res = relay.get(&format!("/v1/videos/video_madeup{i}")).await;
        match res.status {
            404 => passed += 1,
            429 => {
                refused += 1;
                res.assert_error(429, "rate limited", None);
            }
            other => panic!("unexpected {other}: {}", res.text()),
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    let one_bucket = 5 + (elapsed * 5.0).floor() as u32;
    assert!(
        passed <= one_bucket,
        "{passed} made-up polls passed in {elapsed:.2}s; one shared budget allows {one_bucket}"
    );
    assert!(
        passed >= 5 && refused > 0,
        "{passed} passed, {refused} refused"
    );
    let mut conn = redis_conn(&url).await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}rl*"))
        .query_async(&mut conn)
        .await
        .expect("KEYS");
    assert_eq!(
        keys,
        [format!("{prefix}rlq:{}", key.id)],
        "one poll bucket, nothing per id"
    );
}

/// A `sim-chat` stream whose estimate is 60 credits (max_tokens 19,900 at 3,000 per million
/// plus a few input tokens), spread over two minutes so that it stays open.
fn sixty() -> serde_json::Value {
    json!({"model": "sim-chat", "max_tokens": 19_900, "stream": true,
        "messages": [{"role": "user", "content": "hi"}]})
}

/// Sends the message on a raw connection and waits for the answer's head: once it is there
/// the message was admitted (its estimate reserved).
async fn admitted_and_held(base: &str, secret: &str) -> tokio::net::TcpStream {
    let text = sixty().to_string();
    let host = base.trim_start_matches("http://");
    let mut conn = tokio::net::TcpStream::connect(host).await.expect("connect");
    let request = format!(
        "POST /v1/messages HTTP/1.1\r\nhost: {host}\r\nauthorization: Bearer {secret}\r\n\
         anthropic-version: 2023-06-01\r\nx-relay-sim: delay_ms=120000\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{text}",
        text.len()
    );
    tokio::io::AsyncWriteExt::write_all(&mut conn, request.as_bytes())
        .await
        .expect("send");
    let mut head = [0u8; 12];
    tokio::time::timeout(Duration::from_secs(10), conn.read_exact(&mut head))
        .await
        .expect("an answer head within 10 s")
        .expect("read the head");
    assert_eq!(&head, b"HTTP/1.1 200", "{}", String::from_utf8_lossy(&head));
    conn
}

async fn send_sixty(relay: &Relay, secret: &str) -> crate::harness::Answer {
    let mut body = sixty();
    body["stream"] = json!(false);
    relay
        .call_as(
            secret,
            Method::POST,
            "/v1/messages",
            Body::Json(body),
            &[VERSION],
        )
        .await
}

/// (c) A key with 100 credits: a 60-credit message held open on relay A leaves 40, so the
/// same message on relay B is refused with 402; once A's message has ended, B admits it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_on_one_relay_holds_on_the_other() {
    let url = redis_url().await;
    let (key, secret) = server::app::new_key("chat", "gen2", Some(100));
    let (a, b) = two_relays(&key, &secret, &url, &prefix(), "").await;
    let held = admitted_and_held(&a.base, &secret).await;
    let refused = send_sixty(&b, &secret).await;
    assert_eq!(refused.status, 402, "{}", refused.text());
    assert!(
        refused.text().contains("may cost up to 60 credits") && refused.text().contains("40 left"),
        "{}",
        refused.text()
    );
    // The client goes away: A charges what it relayed and releases the reservation.
    drop(held);
    let (b_ref, secret_ref) = (&b, &secret);
    let res = poll_until(Duration::from_secs(15), || async move {
        let res = send_sixty(b_ref, secret_ref).await;
        (res.status != 402).then_some(res)
    })
    .await
    .expect("B admits once A's message has ended");
    assert_eq!(res.status, 200, "{}", res.text());
}

/// (d) A relay that dies while a message holds 60 of 100 credits releases nothing; its
/// reservation stops counting when its liveness key expires, and B admits again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_relays_reservation_vanishes() {
    let url = redis_url().await;
    let prefix = prefix();
    let (key, secret) = server::app::new_key("chat", "gen2", Some(100));
    // A runs on a runtime of its own, so that it can die at once: its tasks (the held
    // message, the liveness refresh) are dropped without running again.
    let runtime_a = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime of A");
    let dir_a = dir_with(&key).await;
    let config_a = cluster_config(&url, &prefix, "a", "");
    let secret_a = secret.clone();
    let a = runtime_a
        .spawn(async move { Relay::start_in(dir_a, Some(secret_a), &config_a).await })
        .await
        .expect("start A");
    let b = Relay::start_in(
        dir_with(&key).await,
        Some(secret.clone()),
        &cluster_config(&url, &prefix, "b", ""),
    )
    .await;
    let held = admitted_and_held(&a.base, &secret).await;
    assert_eq!(send_sixty(&b, &secret).await.status, 402);

    runtime_a.shutdown_background();
    let died = Instant::now();
    drop(held);
    // A released nothing: its field is still in the key's reservation hash.
    let mut conn = redis_conn(&url).await;
    let hash = format!("{prefix}res:{}", key.id);
    let fields: std::collections::HashMap<String, i64> = redis::cmd("HGETALL")
        .arg(&hash)
        .query_async(&mut conn)
        .await
        .expect("HGETALL");
    let a_holds: Vec<i64> = fields
        .iter()
        .filter(|(who, _)| who.starts_with("a/"))
        .map(|(_, v)| *v)
        .collect();
    assert_eq!(a_holds, vec![60], "{fields:?}");
    assert_eq!(
        send_sixty(&b, &secret).await.status,
        402,
        "a dead relay's reservation counts until its liveness expires"
    );
    let (b_ref, secret_ref) = (&b, &secret);
    let res = poll_until(Duration::from_secs(20), || async move {
        let res = send_sixty(b_ref, secret_ref).await;
        (res.status != 402).then_some(res)
    })
    .await
    .expect("B admits once A's liveness has expired");
    assert_eq!(res.status, 200, "{}", res.text());
    assert!(
        died.elapsed() >= Duration::from_secs(3),
        "admitted {:?} after A died: before its liveness could expire",
        died.elapsed()
    );
    // The admission dropped the dead relay's field.
    let fields: std::collections::HashMap<String, i64> = redis::cmd("HGETALL")
        .arg(&hash)
        .query_async(&mut conn)
        .await
        .expect("HGETALL");
    assert!(
        !fields.keys().any(|who| who.starts_with("a/")),
        "{fields:?}"
    );
    drop(a);
}

/// (e) Invalidation: B serves a key from its cache even after B's own store says the key is
/// revoked (nothing told B); a revoke through A's admin API, published through Redis, clears
/// B's cache, so B reads its store and answers 401 within a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_change_on_one_relay_clears_the_others_cache() {
    let url = redis_url().await;
    let (key, secret) = server::app::new_key("revoked soon", "gen2", None);
    let (a, b) = two_relays(&key, &secret, &url, &prefix(), "").await;
    // B follows the key-change channel (it has heard a tick), so its cache is in use, and
    // caches the key.
    let b_ref = &b;
    let heard = b.app.cluster.as_ref().expect("B has a cluster").heard();
    let heard_ref = &heard;
    poll_until(Duration::from_secs(5), || async move {
        heard_ref.fresh().then_some(())
    })
    .await
    .expect("B hears the key-change channel");
    poll_until(Duration::from_secs(5), || async move {
        (b_ref.get("/v1/videos").await.status == 200).then_some(())
    })
    .await
    .expect("B serves the key");
    // B's store has the key revoked behind B's back (as another relay's write to a shared
    // store would be): B's cache still answers for it.
    b.app
        .store
        .update_key(&key.id, &|k| k.status = KeyStatus::Revoked)
        .await
        .expect("revoke in B's store");
    poll_until(Duration::from_secs(5), || async move {
        (b_ref.get("/v1/videos").await.status == 200).then_some(())
    })
    .await
    .expect("B's cache answers for a key its store has revoked");
    let clears = b.app.key_cache.clears();
    let res = a
        .admin(
            Method::DELETE,
            &format!("/admin/keys/{}", key.id),
            Body::Empty,
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let revoked_at = Instant::now();
    let took = poll_until(Duration::from_secs(3), || async move {
        (b_ref.get("/v1/videos").await.status == 401).then(|| revoked_at.elapsed())
    })
    .await
    .expect("B refuses the key once A's change is heard");
    // About a second at most (more only on a machine too busy to run the relays' timers).
    assert!(took <= Duration::from_secs(2), "took {took:?}");
    assert!(b.app.key_cache.clears() > clears, "B's cache was cleared");
}
