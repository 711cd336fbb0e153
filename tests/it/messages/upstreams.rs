//! Messages through real upstreams: a native one passed through byte for byte, failures before
//! the first byte and in mid-stream, clients that go away, idle upstreams, reservations of
//! the estimate, and pings in the gaps.

use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::json;

use super::{
    TIMEOUTS, VERSION, assert_only_a_good_message_is_charged, assert_vendor, chat_config, events,
    failing, kinds, ledger, message, post, raw_stream, setup,
};
use crate::fake_chat::{FakeChat, SECRET_HOST, Switches, UPSTREAM_KEY};
use crate::harness::{Body, Relay, poll_until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_streaming_through_the_relay_is_byte_identical() {
    let (relay, fake) = setup(Switches {
        piece: 7,
        ..Switches::default()
    })
    .await;
    let body = json!({"model": "native-chat", "max_tokens": 64, "stream": true,
        "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
        "messages": [{"role": "user", "content": "weather?"}], "future_field": [1, 2]});
    let direct = raw_stream(
        &format!("{}/v1/messages", fake.base),
        &body,
        &[("x-api-key", UPSTREAM_KEY), VERSION],
    )
    .await;
    let key = format!("Bearer {}", relay.key);
    let relayed = raw_stream(
        &relay.url("/v1/messages"),
        &body,
        &[
            ("authorization", &key),
            VERSION,
            ("anthropic-beta", "tools-2024"),
        ],
    )
    .await;
    assert_eq!(direct.0, 200);
    assert_eq!(relayed.0, 200);
    assert!(direct.1.len() > 500);
    assert_eq!(
        String::from_utf8_lossy(&relayed.1),
        String::from_utf8_lossy(&direct.1),
        "relayed stream differs"
    );
    // The upstream got the upstream key (never the client's), the version and beta headers,
    // and the body as the client sent it, unknown fields included.
    let seen = fake.last();
    assert_eq!(seen.headers.get("x-api-key").unwrap(), UPSTREAM_KEY);
    assert!(seen.headers.get("authorization").is_none());
    assert_eq!(seen.headers.get("anthropic-version").unwrap(), "2023-06-01");
    assert_eq!(seen.headers.get("anthropic-beta").unwrap(), "tools-2024");
    assert_eq!(seen.body, body);
    // Billed from message_start / message_delta: input 11 + 2 cached, output 7.
    let relay_ref = &relay;
    let entries = poll_until(Duration::from_secs(5), || async move {
        let e = ledger(relay_ref).await;
        (!e.is_empty()).then_some(e)
    })
    .await
    .expect("one charge");
    let k = kinds(&entries);
    let cost = (13 * 100_000 + 7 * 300_000_u64).div_ceil(1_000_000) as i64;
    assert_eq!(k, vec![("charge".to_owned(), -cost)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_whole_answers_pass_through() {
    let (relay, fake) = setup(Switches::default()).await;
    let body = json!({"model": "native-chat", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]});
    let direct = raw_stream(&format!("{}/v1/messages", fake.base), &body, &[VERSION]).await;
    let res = message(&relay, body).await;
    assert_eq!(res.status, 200, "{}", res.text());
    assert_eq!(res.body, direct.1);
    assert_eq!(res.header("content-type"), Some("application/json"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_failures_before_the_first_byte() {
    let (relay, fake) = setup(Switches::default()).await;
    for model in ["native-chat", "conv-chat"] {
        for stream in [false, true] {
            let body = json!({"model": model, "max_tokens": 8, "stream": stream,
                "messages": [{"role": "user", "content": "hi"}]});
            fake.set(failing(500));
            let res = message(&relay, body.clone()).await;
            assert_vendor(&res, 500, "api_error", "upstream error");
            assert_eq!(res.header("x-should-retry"), Some("true"));
            assert!(res.header("retry-after").is_some());

            fake.set(failing(429));
            let res = message(&relay, body.clone()).await;
            assert_vendor(&res, 429, "rate_limit_error", "rate limited");
            assert_eq!(res.header("retry-after"), Some("2"));
            assert_eq!(res.header("retry-after-ms"), Some("2000"));

            // The upstream may have the request (it read it and closed, or did not answer
            // within the first-byte timeout): a retry could run it twice, so none is asked.
            for switches in [
                Switches {
                    slow_first_byte: Some(Duration::from_millis(2500)),
                    ..Switches::default()
                },
                Switches {
                    hang_up: true,
                    ..Switches::default()
                },
            ] {
                fake.set(switches);
                let res = message(&relay, body.clone()).await;
                assert_vendor(&res, 500, "api_error", "upstream error");
                assert_eq!(res.header("x-should-retry"), Some("false"));
                assert!(res.header("retry-after").is_none());
            }
        }
    }
    // Counted for the operator, per channel: two of each kind of call above.
    let scrape = relay
        .admin(Method::GET, "/metrics", Body::Empty)
        .await
        .text();
    for channel in ["native", "conv"] {
        let line = format!("relay_upstream_ambiguous_submissions_total{{channel=\"{channel}\"}} 4");
        assert!(scrape.contains(&line), "{line} not in {scrape}");
    }
    // An upstream that refuses the request itself: a retry cannot help.
    fake.set(failing(400));
    let res = message(&relay, json!({"model": "native-chat", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]})).await;
    assert_vendor(&res, 500, "api_error", "upstream error");
    assert_eq!(res.header("x-should-retry"), Some("false"));
    assert!(res.header("retry-after").is_none());
    // An upstream that cannot be reached.
    let relay2 = Relay::start(&chat_config(
        "http://127.0.0.1:9",
        &fake.base,
        "connect_timeout_secs = 1",
    ))
    .await;
    let res = message(&relay2, json!({"model": "native-chat", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]})).await;
    assert_vendor(&res, 500, "api_error", "upstream error");
    // Nothing left: a retry is safe.
    assert_eq!(res.header("x-should-retry"), Some("true"));
    // No failure is charged.
    assert_only_a_good_message_is_charged(&relay, &fake).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mid_stream_disconnect_becomes_an_error_event_and_no_charge() {
    let (relay, fake) = setup(Switches {
        disconnect_after: Some(5),
        ..Switches::default()
    })
    .await;
    for model in ["native-chat", "conv-chat"] {
        let body = json!({"model": model, "max_tokens": 64, "stream": true,
            "messages": [{"role": "user", "content": "one two three four five six seven"}]});
        let res = message(&relay, body).await;
        assert_eq!(res.status, 200, "{}", res.text());
        let evs = events(&res.body);
        assert_eq!(evs[0].0, "message_start");
        let (name, data) = evs.last().unwrap();
        assert_eq!(name, "error", "{model}: {}", res.text());
        assert_eq!(data["type"], "error");
        assert_eq!(data["error"]["type"], "api_error");
        assert!(!evs.iter().any(|(n, _)| n == "message_stop"));
        assert!(!res.text().contains(SECRET_HOST));
    }
    // Neither broken stream is charged.
    assert_only_a_good_message_is_charged(&relay, &fake).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_disconnects_cancels_the_upstream_request() {
    for model in ["native-chat", "conv-chat"] {
        let (relay, fake) = setup(Switches {
            event_pause: Duration::from_millis(150),
            ..Switches::default()
        })
        .await;
        let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
        let body = json!({"model": model, "max_tokens": 64, "stream": true,
            "messages": [{"role": "user", "content": "a b c d e f g h i j k l m n o p q r s t"}]});
        let req = Request::builder()
            .method(Method::POST)
            .uri(relay.url("/v1/messages"))
            .header("authorization", format!("Bearer {}", relay.key))
            .header("anthropic-version", "2023-06-01")
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap();
        let res = client.request(req).await.expect("answer");
        assert_eq!(res.status(), 200);
        let mut body = res.into_body();
        let first = body.frame().await.expect("a first frame").expect("frame");
        assert!(first.into_data().is_ok());
        drop(body);
        drop(client);
        let fake_ref = &fake;
        let cancelled = poll_until(Duration::from_secs(10), || async move {
            fake_ref.cancelled().then_some(())
        })
        .await;
        assert!(
            cancelled.is_some(),
            "{model}: the upstream stream was not cancelled"
        );
        // What was delivered is charged.
        let relay_ref = &relay;
        let k = poll_until(Duration::from_secs(5), || async move {
            let k = kinds(&ledger(relay_ref).await);
            (k.len() == 1).then_some(k)
        })
        .await
        .expect("charged");
        assert_eq!(k[0].0, "charge");
        assert!(k[0].1 < 0, "{k:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_silent_past_the_idle_timeout_ends_the_stream_with_an_error_event() {
    // The fake pauses 3 s between events; the channel's idle timeout is 2 s.
    let (relay, _fake) = setup(Switches {
        event_pause: Duration::from_millis(3000),
        ..Switches::default()
    })
    .await;
    let body = json!({"model": "native-chat", "max_tokens": 8, "stream": true,
        "messages": [{"role": "user", "content": "hi"}]});
    let res = message(&relay, body).await;
    assert_eq!(res.status, 200);
    let evs = events(&res.body);
    assert_eq!(evs[0].0, "message_start");
    let (name, data) = evs.last().unwrap();
    assert_eq!(name, "error", "{}", res.text());
    assert_eq!(data["error"]["type"], "timeout_error");
}

/// A key's quota covers one message's estimate but not two: while one message waits on its
/// upstream, a second is refused with 402; when the first client goes away before the answer,
/// nothing is charged and its reservation is released, so the next message goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reservations_hold_the_estimate_while_a_message_runs() {
    let fake = FakeChat::start(Switches {
        slow_first_byte: Some(Duration::from_secs(60)),
        ..Switches::default()
    })
    .await;
    // A longer first-byte timeout than the test runs, so only the client's leaving ends it.
    let relay = Relay::start(&chat_config(
        &fake.base,
        &fake.base,
        "first_byte_timeout_secs = 120",
    ))
    .await;
    // max_tokens 64 at 0.3 credits per output token: an estimate of about 21 credits.
    let (key_id, secret) = relay.new_key("chat", Some(30)).await;
    let body = json!({"model": "native-chat", "max_tokens": 64,
        "messages": [{"role": "user", "content": "anyone there"}]});
    let conn = crate::harness::message_held_open(&relay.base, &secret, &body).await;
    let fake_ref = &fake;
    poll_until(Duration::from_secs(10), || async move {
        (!fake_ref.received().is_empty()).then_some(())
    })
    .await
    .expect("the message reached the upstream");
    let second = relay
        .call_as(
            &secret,
            Method::POST,
            "/v1/messages",
            Body::Json(body.clone()),
            &[VERSION],
        )
        .await;
    assert_vendor(&second, 402, "billing_error", "this message may cost");

    drop(conn);
    fake.set(Switches::default());
    let relay_ref = &relay;
    let (secret_ref, body_ref) = (&secret, &body);
    poll_until(Duration::from_secs(10), || async move {
        let res = relay_ref
            .call_as(
                secret_ref,
                Method::POST,
                "/v1/messages",
                Body::Json(body_ref.clone()),
                &[VERSION],
            )
            .await;
        (res.status == 200).then_some(())
    })
    .await
    .expect("the reservation was released");
    let key_ref = &key_id;
    let entries = poll_until(Duration::from_secs(5), || async move {
        let e = relay_ref.ledger(key_ref).await;
        (!e.is_empty()).then_some(e)
    })
    .await
    .expect("the good message's charge");
    // Only the message that was answered is charged.
    assert_eq!(kinds(&entries).len(), 1, "{entries:?}");
    assert_eq!(entries[0]["kind"], "charge");
}

/// An upstream that pauses between events longer than `server.stream_ping_ms`: the client gets
/// `ping` events in the gaps, each whole and between two events, and the stream is otherwise
/// the upstream's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_upstream_gets_pings_in_between_its_events() {
    let fake = FakeChat::start(Switches {
        event_pause: Duration::from_millis(150),
        ..Switches::default()
    })
    .await;
    let config = format!(
        "[server]\nstream_ping_ms = 50\n{}",
        chat_config(&fake.base, &fake.base, TIMEOUTS)
    );
    let relay = Relay::start(&config).await;
    let body = json!({"model": "native-chat", "max_tokens": 64, "stream": true,
        "messages": [{"role": "user", "content": "take your time"}]});
    let res = message(&relay, body).await;
    assert_eq!(res.status, 200, "{}", res.text());
    let evs = events(&res.body);
    let pings = evs.iter().filter(|(name, _)| name == "ping").count();
    assert!(pings >= 2, "no pings in the gaps: {}", res.text());
    for (name, data) in evs.iter().filter(|(name, _)| name == "ping") {
        assert_eq!(data, &json!({"type": "ping"}), "{name}");
    }
    assert_eq!(evs.first().unwrap().0, "message_start");
    assert_eq!(evs.last().unwrap().0, "message_stop");
    // Without the pings, the bytes are the upstream's.
    let direct = raw_stream(
        &format!("{}/v1/messages", fake.base),
        &json!({"model": "native-chat", "max_tokens": 64, "stream": true,
            "messages": [{"role": "user", "content": "take your time"}]}),
        &[VERSION],
    )
    .await;
    let ping = "event: ping\ndata: {\"type\":\"ping\"}\n\n";
    assert_eq!(
        res.text().replace(ping, ""),
        String::from_utf8_lossy(&direct.1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_and_beta_header_pass_through_and_count_tokens_is_free() {
    let (relay, fake) = setup(Switches::default()).await;
    let body = json!({"model": "native-chat", "max_tokens": 8,
        "messages": [{"role": "user", "content": "hi"}]});
    // A beta flag the relay has never heard of is not refused, and goes on as it came.
    let beta = ("anthropic-beta", "made-up-beta-2099-01-01,another-one");
    for (path, upstream_path) in [
        (
            "/v1/messages/count_tokens?beta=true",
            "/v1/messages/count_tokens",
        ),
        ("/v1/messages?beta=true&x=a%20b", "/v1/messages"),
    ] {
        let res = post(&relay, path, body.clone(), &[VERSION, beta]).await;
        assert_eq!(res.status, 200, "{path}: {}", res.text());
        let seen = fake.last();
        assert_eq!(seen.path, upstream_path);
        let query = path.split_once('?').map(|(_, q)| q.to_owned());
        assert_eq!(seen.query, query, "{path}");
        assert_eq!(seen.headers.get("anthropic-beta").unwrap(), beta.1);
        if upstream_path.ends_with("count_tokens") {
            assert_eq!(res.json(), json!({"input_tokens": 42}));
            // Counting tokens is never billed: the ledger is still empty.
            assert!(ledger(&relay).await.is_empty());
        }
    }
    // Without a query string none is invented.
    let res = post(
        &relay,
        "/v1/messages/count_tokens",
        body.clone(),
        &[VERSION],
    )
    .await;
    assert_eq!(res.status, 200, "{}", res.text());
    assert_eq!(fake.last().query, None);
    assert!(fake.last().headers.get("anthropic-beta").is_none());
    // The message (not the count) is charged, exactly once: the count added nothing.
    let relay_ref = &relay;
    let k = poll_until(Duration::from_secs(5), || async move {
        let k = kinds(&ledger(relay_ref).await);
        (!k.is_empty()).then_some(k)
    })
    .await
    .expect("the message's charge");
    assert_eq!(k.len(), 1, "{k:?}");
    assert_eq!(k[0].0, "charge");
}

/// With `server.workers = 3`, messages on many connections at once are spread over the
/// threads that serve connections, each with its own upstream connections: every message is
/// answered whole, reaches the upstream once, and is charged exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_on_many_connections_are_served_by_every_worker_and_charged_once() {
    let fake = FakeChat::start(Switches::default()).await;
    let config = format!(
        "{}\n[server]\nworkers = 3\n",
        chat_config(&fake.base, &fake.base, TIMEOUTS)
    );
    let relay = Relay::start(&config).await;
    let (key_id, secret) = relay.new_key("workers", None).await;
    let body = json!({"model": "native-chat", "max_tokens": 64,
        "messages": [{"role": "user", "content": "hello"}]});
    let answers = futures_util::future::join_all((0..12).map(|_| {
        relay.call_as(
            &secret,
            Method::POST,
            "/v1/messages",
            Body::Json(body.clone()),
            &[VERSION],
        )
    }))
    .await;
    for answer in &answers {
        assert_eq!(answer.status, 200, "{}", answer.text());
        assert_eq!(answer.json()["type"], "message", "{}", answer.text());
    }
    assert_eq!(fake.received().len(), 12);
    let (relay_ref, key_ref) = (&relay, &key_id);
    let entries = poll_until(Duration::from_secs(10), || async move {
        let e = relay_ref.ledger(key_ref).await;
        (e.len() >= 12).then_some(e)
    })
    .await
    .expect("every message's charge");
    assert_eq!(entries.len(), 12, "{entries:?}");
    assert!(
        kinds(&entries).iter().all(|(kind, _)| kind == "charge"),
        "{entries:?}"
    );
}
