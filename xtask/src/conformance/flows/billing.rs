//! SPEC §7 billing through the admin API: a task's pre-deduction, its refund when it fails
//! or is cancelled, and a quota that cannot cover a task.

use std::time::{Duration, Instant};

use serde_json::json;

use super::{TASK_DEADLINE, id_of, video};
use crate::conformance::checks;
use crate::conformance::client::Req;
use crate::conformance::suite::Suite;

/// SPEC §7 Billing: failed and cancelled tasks are not billed; the pre-deduction is refunded.
pub async fn billing(suite: &mut Suite) {
    let s = "SPEC§7";
    let Some(admin) = suite.args.admin_token.clone() else {
        suite.skip(s, "billing", "no --admin-token to read a key's ledger");
        return;
    };
    let r = suite
        .send(
            Req::post("/admin/keys")
                .bearer(&admin)
                .json(&json!({"name": "conformance-billing", "group": "gen2", "quota": 1000})),
        )
        .await;
    let (id, k) = (id_of(&r, "id"), id_of(&r, "key"));
    let create = |sim: &str| {
        Req::post("/v1/videos")
            .bearer(&k)
            .header("x-relay-sim", sim)
            .json(&video(json!({})))
    };
    let cancelled = suite.send(create("delay_ms=60000")).await;
    let failing = suite.send(create("fail; delay_ms=200")).await;
    let r = suite
        .send(Req::get(format!("/admin/keys/{id}")).bearer(&admin))
        .await;
    suite.check(
        "CONTRACT§4.1",
        "a task is pre-deducted",
        checks::field(&r, "/quota_remaining", &json!(900)),
    );
    let _ = suite
        .send(
            Req::post(format!(
                "/v1/videos/{}/cancel",
                id_of(&cancelled, "task_id")
            ))
            .bearer(&k),
        )
        .await;
    let started = Instant::now();
    let mut failed = false;
    while !failed && started.elapsed() < TASK_DEADLINE {
        let r = suite
            .send(Req::get(format!("/v1/videos/{}", id_of(&failing, "task_id"))).bearer(&k))
            .await;
        failed = matches!(
            r.json()["status"].as_str(),
            Some("failed" | "completed" | "cancelled")
        );
        tokio::time::sleep(Duration::from_millis(600)).await;
    }
    let r = suite
        .send(Req::get(format!("/admin/keys/{id}")).bearer(&admin))
        .await;
    suite.check(
        s,
        "failed and cancelled tasks are refunded in full",
        checks::field(&r, "/quota_remaining", &json!(1000)),
    );
    let r = suite
        .send(Req::get(format!("/admin/keys/{id}/ledger")).bearer(&admin))
        .await;
    let kinds: Vec<String> = r.json()["data"]
        .as_array()
        .map(|d| {
            d.iter()
                .map(|e| e["kind"].as_str().unwrap_or("?").to_owned())
                .collect()
        })
        .unwrap_or_default();
    let sum: i64 = r.json()["data"]
        .as_array()
        .map(|d| d.iter().filter_map(|e| e["amount"].as_i64()).sum())
        .unwrap_or(-1);
    let v = if sum == 0
        && kinds.iter().filter(|k| *k == "prededuct").count() == 2
        && kinds.iter().filter(|k| *k == "refund").count() == 2
    {
        Ok(())
    } else {
        Err(format!(
            "expected two prededuct and two refund entries summing to 0, got {kinds:?} summing to {sum}"
        ))
    };
    suite.check(s, "the ledger shows each pre-deduction refunded", v);
    let r = suite
        .send(
            Req::new(http::Method::PATCH, format!("/admin/keys/{id}"))
                .bearer(&admin)
                .json(&json!({"quota": 10})),
        )
        .await;
    suite.check(
        "CONTRACT§5.2",
        "change a key's quota",
        checks::status(&r, 200),
    );
    let r = suite.send(create("delay_ms=200")).await;
    suite.check(
        "CONTRACT§0.2",
        "a task the quota cannot cover: 402 insufficient quota",
        checks::api_error(&r, 402, "insufficient quota"),
    );
    let _ = suite
        .send(Req::new(http::Method::DELETE, format!("/admin/keys/{id}")).bearer(&admin))
        .await;
}
