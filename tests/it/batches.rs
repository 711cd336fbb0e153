//! The Message Batches API (`/v1/messages/batches`): a batch's requests run in the
//! background, each charged once when its result is recorded (also across a restart);
//! cancel, delete, listing, ownership, validation and idempotency.

use std::collections::HashSet;
use std::time::Duration;

use http::Method;
use serde_json::{Value, json};

use crate::fake_chat::{FakeChat, Switches, UPSTREAM_KEY};
use crate::harness::{Answer, Body, Relay, poll_until};

const VERSION: (&str, &str) = ("anthropic-version", "2023-06-01");

/// The simulator at one credit a token, a chat completions upstream (`slow-chat`, behind the
/// fake) and a native one (`native-chat`).
fn config(fake: &str) -> String {
    format!(
        r#"
[models.sim-chat]
kind = "chat"
input_price_per_mtok = 1000000
output_price_per_mtok = 1000000
[models.slow-chat]
kind = "chat"
input_price_per_mtok = 1000000
output_price_per_mtok = 1000000
[models.native-chat]
kind = "chat"
input_price_per_mtok = 1000000
output_price_per_mtok = 1000000

[[channels]]
name = "simulator"
kind = "simulator"
models = ["sim-chat"]

[[channels]]
name = "native"
kind = "anthropic"
models = ["native-chat"]
base_url = "{fake}"
api_key = "{UPSTREAM_KEY}"

[[channels]]
name = "slow"
kind = "openai-chat"
models = ["slow-chat"]
base_url = "{fake}/v1"
api_key = "{UPSTREAM_KEY}"
"#
    )
}

/// The fake answers each request after `delay`.
async fn setup(delay: Duration) -> (Relay, FakeChat) {
    let fake = FakeChat::start(Switches {
        slow_first_byte: Some(delay),
        ..Switches::default()
    })
    .await;
    let relay = Relay::start(&config(&fake.base)).await;
    (relay, fake)
}

fn request(custom_id: &str, model: &str, text: &str) -> Value {
    json!({"custom_id": custom_id, "params": {
        "model": model, "max_tokens": 16, "messages": [{"role": "user", "content": text}]
    }})
}

fn batch_of(model: &str, ids: &[&str]) -> Value {
    let requests: Vec<Value> = ids
        .iter()
        .map(|id| request(id, model, &format!("say {id}")))
        .collect();
    json!({ "requests": requests })
}

async fn call(
    relay: &Relay,
    key: &str,
    method: Method,
    path: &str,
    body: Body,
    headers: &[(&str, &str)],
) -> Answer {
    let mut all = vec![VERSION];
    all.extend_from_slice(headers);
    relay.call_as(key, method, path, body, &all).await
}

async fn create(relay: &Relay, key: &str, body: Value) -> Value {
    let res = call(
        relay,
        key,
        Method::POST,
        "/v1/messages/batches",
        Body::Json(body),
        &[],
    )
    .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let batch = res.json();
    assert_eq!(batch["type"], "message_batch", "{batch}");
    assert!(
        batch["id"].as_str().unwrap().starts_with("msgbatch_"),
        "{batch}"
    );
    batch
}

async fn get(relay: &Relay, key: &str, id: &str) -> Answer {
    let path = format!("/v1/messages/batches/{id}");
    call(relay, key, Method::GET, &path, Body::Empty, &[]).await
}

async fn wait_ended(relay: &Relay, key: &str, id: &str) -> Value {
    poll_until(Duration::from_secs(30), || async {
        let res = get(relay, key, id).await;
        assert_eq!(res.status, 200, "{}", res.text());
        let batch = res.json();
        (batch["processing_status"] == "ended").then_some(batch)
    })
    .await
    .unwrap_or_else(|| panic!("batch {id} did not end"))
}

/// The results file's lines, checked to be JSON lines.
async fn results(relay: &Relay, key: &str, id: &str) -> Vec<Value> {
    let path = format!("/v1/messages/batches/{id}/results");
    let res = call(relay, key, Method::GET, &path, Body::Empty, &[]).await;
    assert_eq!(res.status, 200, "{}", res.text());
    assert_eq!(res.header("content-type"), Some("application/x-jsonl"));
    res.text()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// The key's charges, as (message id, amount).
async fn charges(relay: &Relay, key_id: &str) -> Vec<(String, i64)> {
    let path = format!("/admin/keys/{key_id}/ledger");
    let res = relay.admin(Method::GET, &path, Body::Empty).await;
    res.json()["data"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter(|e| e["kind"] == "charge")
        .map(|e| {
            (
                e["task_id"].as_str().unwrap().to_owned(),
                e["amount"].as_i64().unwrap(),
            )
        })
        .collect()
}

async fn quota_left(relay: &Relay, key_id: &str) -> i64 {
    let res = relay
        .admin(Method::GET, &format!("/admin/keys/{key_id}"), Body::Empty)
        .await;
    res.json()["quota_remaining"].as_i64().expect("a quota")
}

fn assert_vendor_error(res: &Answer, status: u16, kind: &str, starts: &str) {
    assert_eq!(res.status, status, "{}", res.text());
    let v = res.json();
    assert_eq!(v["type"], "error", "{v}");
    assert_eq!(v["error"]["type"], kind, "{v}");
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with(starts),
        "{message:?} should start with {starts:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_runs_and_each_success_is_charged_once() {
    let (relay, _fake) = setup(Duration::ZERO).await;
    let (key_id, key) = relay.new_key("batcher", Some(100_000)).await;
    let ids = ["zeta", "alpha", "mid-1"];
    let batch = create(&relay, &key, batch_of("sim-chat", &ids)).await;
    assert_eq!(batch["request_counts"]["processing"], 3, "{batch}");
    assert!(batch["results_url"].is_null(), "{batch}");
    assert!(
        batch["created_at"].as_str().unwrap().ends_with('Z'),
        "{batch}"
    );
    let id = batch["id"].as_str().unwrap();

    let ended = wait_ended(&relay, &key, id).await;
    assert_eq!(
        ended["request_counts"],
        json!({"processing": 0, "succeeded": 3, "errored": 0, "canceled": 0, "expired": 0})
    );
    assert!(ended["ended_at"].is_string(), "{ended}");
    assert_eq!(
        ended["results_url"],
        relay.url(&format!("/v1/messages/batches/{id}/results"))
    );

    let lines = results(&relay, &key, id).await;
    let got: Vec<&str> = lines
        .iter()
        .map(|l| l["custom_id"].as_str().unwrap())
        .collect();
    assert_eq!(got, ids, "one line per request, in request order");
    let mut expected = Vec::new();
    for line in &lines {
        assert_eq!(line["result"]["type"], "succeeded", "{line}");
        let message = &line["result"]["message"];
        assert_eq!(message["type"], "message", "{message}");
        let usage = &message["usage"];
        let cost =
            usage["input_tokens"].as_i64().unwrap() + usage["output_tokens"].as_i64().unwrap();
        expected.push((message["id"].as_str().unwrap().to_owned(), -cost));
    }
    let mut got = charges(&relay, &key_id).await;
    got.sort();
    expected.sort();
    assert_eq!(
        got, expected,
        "one charge per succeeded request, at its usage"
    );
    let spent: i64 = expected.iter().map(|(_, a)| -a).sum();
    assert_eq!(quota_left(&relay, &key_id).await, 100_000 - spent);

    // A batch whose requests all fail upstream: errored, nothing charged.
    let failing = call(
        &relay,
        &key,
        Method::POST,
        "/v1/messages/batches",
        Body::Json(batch_of("sim-chat", &["x", "y"])),
        &[("x-relay-sim", "error=500")],
    )
    .await;
    assert_eq!(failing.status, 200, "{}", failing.text());
    let failed_id = failing.json()["id"].as_str().unwrap().to_owned();
    let ended = wait_ended(&relay, &key, &failed_id).await;
    assert_eq!(ended["request_counts"]["errored"], 2, "{ended}");
    for line in results(&relay, &key, &failed_id).await {
        assert_eq!(line["result"]["type"], "errored", "{line}");
        assert_eq!(line["result"]["error"]["type"], "error", "{line}");
        assert_eq!(
            line["result"]["error"]["error"]["type"], "api_error",
            "{line}"
        );
    }
    assert_eq!(charges(&relay, &key_id).await.len(), 3);
    relay.stop().await;
}

/// On a native (`anthropic`) channel each request goes to the upstream's `/v1/messages` as the
/// client wrote it, with the batch's version header, and is charged at its usage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_on_a_native_channel_sends_each_request_as_written() {
    let (relay, fake) = setup(Duration::ZERO).await;
    let (key_id, key) = relay.new_key("native", Some(100_000)).await;
    let body = json!({"requests": [
        {"custom_id": "n1", "params": {"model": "native-chat", "max_tokens": 16, "top_k": 3,
         "messages": [{"role": "user", "content": "first"}]}},
        request("n2", "native-chat", "second"),
    ]});
    let batch = create(&relay, &key, body).await;
    let id = batch["id"].as_str().unwrap();
    let ended = wait_ended(&relay, &key, id).await;
    assert_eq!(ended["request_counts"]["succeeded"], 2, "{ended}");

    let sent: Vec<_> = fake
        .received()
        .into_iter()
        .filter(|r| r.path == "/v1/messages")
        .collect();
    assert_eq!(sent.len(), 2, "one upstream call per request");
    let first = sent
        .iter()
        .find(|r| r.body["messages"][0]["content"] == "first")
        .expect("the first request reached the upstream");
    assert_eq!(first.body["top_k"], 3, "{}", first.body);
    assert_eq!(
        first
            .headers
            .get("anthropic-version")
            .and_then(|v| v.to_str().ok()),
        Some("2023-06-01")
    );
    assert!(
        sent.iter().all(|r| r
            .headers
            .get("x-api-key")
            .is_some_and(|v| v == UPSTREAM_KEY)),
        "the channel's key went upstream"
    );

    // Charged as a `/v1/messages` call is: every input token (cache reads too) and output.
    let mut expected = Vec::new();
    for line in results(&relay, &key, id).await {
        assert_eq!(line["result"]["type"], "succeeded", "{line}");
        let usage = &line["result"]["message"]["usage"];
        let tokens = [
            "input_tokens",
            "cache_creation_input_tokens",
            "cache_read_input_tokens",
        ]
        .iter()
        .chain(&["output_tokens"])
        .map(|k| usage[*k].as_i64().unwrap_or(0))
        .sum::<i64>();
        expected.push(-tokens);
    }
    let got: Vec<i64> = charges(&relay, &key_id)
        .await
        .into_iter()
        .map(|(_, amount)| amount)
        .collect();
    assert_eq!(got, expected, "one charge per request, at its usage");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canceled_batch_runs_no_more_requests_and_charges_none_of_them() {
    let (relay, _fake) = setup(Duration::from_millis(1500)).await;
    let (key_id, key) = relay.new_key("canceler", Some(1_000_000)).await;
    let ids: Vec<String> = (0..10).map(|i| format!("r{i}")).collect();
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let batch = create(&relay, &key, batch_of("slow-chat", &refs)).await;
    let id = batch["id"].as_str().unwrap();

    // Not ended yet: neither deletable nor with results.
    let path = format!("/v1/messages/batches/{id}");
    let res = call(&relay, &key, Method::DELETE, &path, Body::Empty, &[]).await;
    assert_vendor_error(
        &res,
        409,
        "conflict_error",
        &format!("message batch {id} is in_progress"),
    );
    let res = call(
        &relay,
        &key,
        Method::GET,
        &format!("{path}/results"),
        Body::Empty,
        &[],
    )
    .await;
    assert_eq!(res.status, 409, "{}", res.text());

    let res = call(
        &relay,
        &key,
        Method::POST,
        &format!("{path}/cancel"),
        Body::Empty,
        &[],
    )
    .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let canceling = res.json();
    assert_eq!(canceling["processing_status"], "canceling", "{canceling}");
    assert!(canceling["cancel_initiated_at"].is_string(), "{canceling}");

    let ended = wait_ended(&relay, &key, id).await;
    let counts = &ended["request_counts"];
    let succeeded = counts["succeeded"].as_u64().unwrap();
    let canceled = counts["canceled"].as_u64().unwrap();
    assert_eq!(succeeded + canceled, 10, "{ended}");
    assert!(
        canceled >= 6,
        "at most the requests under way at the cancel ran: {ended}"
    );
    let lines = results(&relay, &key, id).await;
    assert_eq!(lines.len(), 10);
    let canceled_lines = lines
        .iter()
        .filter(|l| l["result"] == json!({"type": "canceled"}))
        .count();
    assert_eq!(canceled_lines as u64, canceled);
    assert_eq!(charges(&relay, &key_id).await.len() as u64, succeeded);

    // Ended: deleted once, then gone.
    let res = call(&relay, &key, Method::DELETE, &path, Body::Empty, &[]).await;
    assert_eq!(res.status, 200, "{}", res.text());
    assert_eq!(
        res.json(),
        json!({"id": id, "type": "message_batch_deleted"})
    );
    assert_eq!(get(&relay, &key, id).await.status, 404);
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_keys_batch_is_not_found() {
    let (relay, _fake) = setup(Duration::ZERO).await;
    let (_, owner) = relay.new_key("owner", None).await;
    let (_, other) = relay.new_key("other", None).await;
    let batch = create(&relay, &owner, batch_of("sim-chat", &["a"])).await;
    let id = batch["id"].as_str().unwrap();
    wait_ended(&relay, &owner, id).await;
    let path = format!("/v1/messages/batches/{id}");
    for (method, path) in [
        (Method::GET, path.clone()),
        (Method::DELETE, path.clone()),
        (Method::POST, format!("{path}/cancel")),
        (Method::GET, format!("{path}/results")),
    ] {
        let res = call(&relay, &other, method.clone(), &path, Body::Empty, &[]).await;
        assert_vendor_error(
            &res,
            404,
            "not_found_error",
            &format!("message batch {id} not found"),
        );
    }
    let listed = call(
        &relay,
        &other,
        Method::GET,
        "/v1/messages/batches",
        Body::Empty,
        &[],
    )
    .await;
    assert_eq!(listed.json()["data"], json!([]));
    assert_eq!(get(&relay, &owner, id).await.status, 200);
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_are_listed_newest_first_in_pages() {
    let (relay, _fake) = setup(Duration::ZERO).await;
    let (_, key) = relay.new_key("lister", None).await;
    let mut made = Vec::new();
    for i in 0..3 {
        let batch = create(&relay, &key, batch_of("sim-chat", &[&format!("b{i}")])).await;
        made.push(batch["id"].as_str().unwrap().to_owned());
    }
    let list = |query: String| {
        let relay = &relay;
        let key = key.clone();
        async move {
            let res = call(
                relay,
                &key,
                Method::GET,
                &format!("/v1/messages/batches{query}"),
                Body::Empty,
                &[],
            )
            .await;
            assert_eq!(res.status, 200, "{}", res.text());
            res.json()
        }
    };
    let first = list("?limit=2".into()).await;
    let ids: Vec<&str> = first["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [made[2].as_str(), made[1].as_str()]);
    assert_eq!(first["has_more"], true);
    assert_eq!(first["first_id"], made[2].as_str());
    assert_eq!(first["last_id"], made[1].as_str());
    let next = list(format!("?limit=2&after_id={}", made[1])).await;
    assert_eq!(next["data"][0]["id"], made[0].as_str());
    assert_eq!(next["has_more"], false);
    let back = list(format!("?limit=1&before_id={}", made[0])).await;
    assert_eq!(back["data"][0]["id"], made[1].as_str());
    assert_eq!(back["has_more"], true);
    let res = call(
        &relay,
        &key,
        Method::GET,
        "/v1/messages/batches?limit=0",
        Body::Empty,
        &[],
    )
    .await;
    assert_vendor_error(
        &res,
        400,
        "invalid_request_error",
        "limit: must be an integer from 1 to 1000",
    );
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_batch_is_refused_naming_the_request_and_field() {
    let (relay, _fake) = setup(Duration::ZERO).await;
    let (key_id, key) = relay.new_key("validator", Some(100)).await;
    let bad_params = json!({"requests": [
        request("a", "sim-chat", "hi"),
        {"custom_id": "b", "params": {"model": "sim-chat", "max_tokens": 0, "messages": [{"role": "user", "content": "x"}]}},
    ]});
    let cases = [
        (json!({}), "requests: is required"),
        (
            json!({"requests": [{"params": {}}]}),
            "requests[0].custom_id: is required",
        ),
        (
            batch_of("sim-chat", &["dup", "dup"]),
            "requests[1].custom_id: \"dup\" is used by an earlier request",
        ),
        (
            batch_of("sim-chat", &["no spaces"]),
            "requests[0].custom_id: must be 1 to 64 characters",
        ),
        (bad_params, "requests[1].params.max_tokens"),
        (
            json!({"requests": [{"custom_id": "s", "params": {"model": "sim-chat", "max_tokens": 5, "stream": true, "messages": [{"role": "user", "content": "x"}]}}]}),
            "requests[0].params.stream: must be false or absent",
        ),
    ];
    for (body, starts) in cases {
        let res = call(
            &relay,
            &key,
            Method::POST,
            "/v1/messages/batches",
            Body::Json(body),
            &[],
        )
        .await;
        assert_vendor_error(&res, 400, "invalid_request_error", starts);
    }
    let res = call(
        &relay,
        &key,
        Method::POST,
        "/v1/messages/batches",
        Body::Json(batch_of("nope-model", &["m"])),
        &[],
    )
    .await;
    assert_vendor_error(&res, 400, "invalid_request_error", "invalid model");
    // The estimate (input and max_tokens of every request) is more than the key has.
    let many: Vec<String> = (0..10).map(|i| format!("q{i}")).collect();
    let refs: Vec<&str> = many.iter().map(String::as_str).collect();
    let res = call(
        &relay,
        &key,
        Method::POST,
        "/v1/messages/batches",
        Body::Json(batch_of("sim-chat", &refs)),
        &[],
    )
    .await;
    assert_vendor_error(&res, 402, "billing_error", "this batch may cost up to");
    let listed = call(
        &relay,
        &key,
        Method::GET,
        "/v1/messages/batches",
        Body::Empty,
        &[],
    )
    .await;
    assert_eq!(listed.json()["data"], json!([]), "nothing refused was kept");
    assert_eq!(quota_left(&relay, &key_id).await, 100);
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_create_with_one_idempotency_key_makes_one_batch() {
    let (relay, _fake) = setup(Duration::ZERO).await;
    let (_, key) = relay.new_key("idem", None).await;
    let body = batch_of("sim-chat", &["one"]);
    let send = |body: Value| {
        let relay = &relay;
        let key = key.clone();
        async move {
            call(
                relay,
                &key,
                Method::POST,
                "/v1/messages/batches",
                Body::Json(body),
                &[("Idempotency-Key", "batch-1")],
            )
            .await
        }
    };
    let first = send(body.clone()).await;
    assert_eq!(first.status, 200, "{}", first.text());
    let again = send(body).await;
    assert_eq!(again.status, 200, "{}", again.text());
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.json()["id"], first.json()["id"]);
    let other = send(batch_of("sim-chat", &["two"])).await;
    assert_vendor_error(
        &other,
        409,
        "conflict_error",
        "this Idempotency-Key was used with another request",
    );
    let listed = call(
        &relay,
        &key,
        Method::GET,
        "/v1/messages/batches",
        Body::Empty,
        &[],
    )
    .await;
    assert_eq!(listed.json()["data"].as_array().unwrap().len(), 1);
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_mid_batch_charges_every_request_once() {
    let (relay, fake) = setup(Duration::from_millis(400)).await;
    let (key_id, key) = relay.new_key("restarter", Some(1_000_000)).await;
    let ids: Vec<String> = (0..12).map(|i| format!("r{i}")).collect();
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let batch = create(&relay, &key, batch_of("slow-chat", &refs)).await;
    let id = batch["id"].as_str().unwrap().to_owned();
    // Some requests ended, others not yet run.
    poll_until(Duration::from_secs(20), || async {
        let b = get(&relay, &key, &id).await.json();
        let done = b["request_counts"]["succeeded"].as_u64().unwrap_or(0);
        (done > 0 && b["processing_status"] == "in_progress").then_some(())
    })
    .await
    .expect("some requests ended before the stop");
    let dir = relay.stop().await;

    let relay = Relay::start_in(dir, Some(key.clone()), &config(&fake.base)).await;
    let ended = wait_ended(&relay, &key, &id).await;
    assert_eq!(ended["request_counts"]["succeeded"], 12, "{ended}");
    let lines = results(&relay, &key, &id).await;
    let messages: HashSet<String> = lines
        .iter()
        .map(|l| l["result"]["message"]["id"].as_str().unwrap().to_owned())
        .collect();
    let got = charges(&relay, &key_id).await;
    assert_eq!(got.len(), 12, "one charge per request: {got:?}");
    let charged: HashSet<String> = got.iter().map(|(m, _)| m.clone()).collect();
    assert_eq!(charged, messages, "each charge is a result's message");
    let spent: i64 = got.iter().map(|(_, a)| -a).sum();
    assert_eq!(quota_left(&relay, &key_id).await, 1_000_000 - spent);
    relay.stop().await;
}
