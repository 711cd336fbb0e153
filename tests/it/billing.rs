//! Billing never loses or doubles a credit: races between cancel, completion and top-ups.

use std::collections::HashMap;
use std::time::Duration;

use http::Method;
use serde_json::{Value, json};

use crate::harness::{ADMIN_TOKEN, Body, Http, Relay};

/// Checks a key's ledger against its tasks: every task has one pre-deduction; a completed task
/// one settle and no refund; a failed or cancelled one a refund equal to its pre-deduction and
/// no settle; no (task, kind) twice; and the balance is `initial + added - charged`.
pub async fn check_ledger(
    relay: &Relay,
    key_id: &str,
    initial: i64,
    added: i64,
    statuses: &HashMap<String, String>,
) {
    check_ledger_at(
        &relay.client,
        &relay.base,
        ADMIN_TOKEN,
        key_id,
        initial,
        added,
        statuses,
    )
    .await
}

/// [`check_ledger`] against any relay, by its base URL and admin token.
pub async fn check_ledger_at(
    http: &Http,
    base: &str,
    admin_token: &str,
    key_id: &str,
    initial: i64,
    added: i64,
    statuses: &HashMap<String, String>,
) {
    let auth = [("authorization", format!("Bearer {admin_token}"))];
    let admin_get = |path: String| {
        let auth = auth.clone();
        async move {
            http.send(Method::GET, &format!("{base}{path}"), Body::Empty, &auth)
                .await
                .json()
        }
    };
    let ledger = admin_get(format!("/admin/keys/{key_id}/ledger")).await;
    let mut by_task: HashMap<String, Vec<(String, i64)>> = HashMap::new();
    for e in ledger["data"].as_array().unwrap() {
        by_task
            .entry(e["task_id"].as_str().unwrap().to_owned())
            .or_default()
            .push((
                e["kind"].as_str().unwrap().to_owned(),
                e["amount"].as_i64().unwrap(),
            ));
    }
    let mut charged = 0;
    for (task, status) in statuses {
        let entries = by_task.get(task).cloned().unwrap_or_default();
        let kind = |k: &str| entries.iter().filter(|(kind, _)| kind == k).count();
        let amount = |k: &str| entries.iter().find(|(kind, _)| kind == k).map(|e| e.1);
        assert_eq!(kind("prededuct"), 1, "{task}: {entries:?}");
        let price = -amount("prededuct").unwrap();
        match status.as_str() {
            "completed" => {
                assert_eq!(
                    (kind("settle"), kind("refund")),
                    (1, 0),
                    "{task}: {entries:?}"
                );
                charged += price - amount("settle").unwrap();
            }
            "failed" | "cancelled" => {
                assert_eq!(
                    (kind("settle"), kind("refund")),
                    (0, 1),
                    "{task}: {entries:?}"
                );
                assert_eq!(amount("refund"), Some(price), "{task}: {entries:?}");
            }
            other => panic!("{task} is not final: {other}"),
        }
    }
    let key = admin_get(format!("/admin/keys/{key_id}")).await;
    assert_eq!(key["quota_remaining"], initial + added - charged, "{key}");
    assert_eq!(key["quota_used"], charged, "{key}");
}

async fn submit(relay: &Relay, key: &str, sim: &str) -> String {
    let res = relay
        .call_as(
            key,
            Method::POST,
            "/v1/videos",
            Body::Json(json!({"model": "model_h3", "prompt": "p", "size": "64x64"})),
            &[("x-relay-sim", sim)],
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    res.json()["id"].as_str().unwrap().to_owned()
}

async fn final_statuses(relay: &Relay, key: &str, ids: &[String]) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for id in ids {
        let v: Value = relay.wait_video_as(key, id, Duration::from_secs(60)).await;
        out.insert(id.clone(), v["status"].as_str().unwrap().to_owned());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_cancels_at_once_refund_once() {
    let relay = Relay::start("").await;
    let (key_id, key) = relay.new_key("k", Some(10_000)).await;
    let mut ids = Vec::new();
    for _ in 0..5 {
        let id = submit(&relay, &key, "stuck").await;
        let path = format!("/v1/videos/{id}/cancel");
        let (a, b) = tokio::join!(
            relay.call_as(&key, Method::POST, &path, Body::Empty, &[]),
            relay.call_as(&key, Method::POST, &path, Body::Empty, &[]),
        );
        let mut statuses = [a.status, b.status];
        statuses.sort();
        assert_eq!(statuses, [200, 409], "{} / {}", a.text(), b.text());
        ids.push(id);
    }
    let statuses = final_statuses(&relay, &key, &ids).await;
    check_ledger(&relay, &key_id, 10_000, 0, &statuses).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_racing_completion_and_top_ups_keep_the_ledger_balanced() {
    let relay = Relay::start("").await;
    let (key_id, key) = relay.new_key("k", Some(100_000)).await;
    let mut ids = Vec::new();
    for i in 0..12u64 {
        ids.push(submit(&relay, &key, &format!("delay_ms={}", 100 + i * 40)).await);
    }
    // Cancel every task around the time some of them complete, and top up meanwhile.
    let mut added = 0;
    for (i, id) in ids.iter().enumerate() {
        let res = relay
            .call_as(
                &key,
                Method::POST,
                &format!("/v1/videos/{id}/cancel"),
                Body::Empty,
                &[],
            )
            .await;
        assert!(matches!(res.status, 200 | 409), "{}", res.text());
        if i % 3 == 0 {
            let res = relay
                .admin(
                    Method::PATCH,
                    &format!("/admin/keys/{key_id}"),
                    Body::Json(json!({"quota_add": 7})),
                )
                .await;
            assert_eq!(res.status, 200);
            added += 7;
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    let statuses = final_statuses(&relay, &key, &ids).await;
    check_ledger(&relay, &key_id, 100_000, added, &statuses).await;
    // A failing task is refunded too.
    let failing = submit(&relay, &key, "fail").await;
    let mut all = statuses.clone();
    all.extend(final_statuses(&relay, &key, &[failing]).await);
    check_ledger(&relay, &key_id, 100_000, added, &all).await;
}
