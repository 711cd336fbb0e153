//! The built binary: first-start bootstrap, and a SIGKILL with tasks in flight loses nothing.

use std::time::Duration;

use http::Method;
use serde_json::json;
use tokio::process::Command;

use crate::harness::{Body, Http, poll_until, start_binary};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_with_tasks_in_flight_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let config = dir.path().join("relay.toml");
    std::fs::write(
        &config,
        "[simulator]\ntask_secs = 1.5\nfps = 4\n[limits]\npoll_rps_per_task = 1000\n",
    )
    .unwrap();

    let first = start_binary(&data, &config).await;
    let key_line = first
        .lines
        .iter()
        .find(|l| l.starts_with("first API key"))
        .unwrap_or_else(|| panic!("no key printed: {:?}", first.lines));
    let key = key_line.rsplit(' ').next().unwrap().to_owned();
    assert!(
        first.lines.iter().any(|l| l.contains("curl")),
        "{:?}",
        first.lines
    );

    let http = Http::new();
    let auth = [("authorization", format!("Bearer {key}"))];
    let mut ids = Vec::new();
    for i in 0..8 {
        let res = http
            .send(
                Method::POST,
                &format!("{}/v1/videos", first.base),
                Body::Json(
                    json!({"model": "model_h3", "prompt": format!("clip {i}"), "size": "64x64"}),
                ),
                &auth,
            )
            .await;
        assert_eq!(res.status, 200, "{}", res.text());
        ids.push(res.json()["id"].as_str().unwrap().to_owned());
    }
    let mut child = first.child;
    child.kill().await.expect("SIGKILL");

    let second = start_binary(&data, &config).await;
    assert!(
        !second.lines.iter().any(|l| l.contains("API key")),
        "the first key is printed once only: {:?}",
        second.lines
    );
    for id in &ids {
        let url = format!("{}/v1/videos/{id}", second.base);
        let done = poll_until(Duration::from_secs(60), || async {
            let res = http.send(Method::GET, &url, Body::Empty, &auth).await;
            // Polled faster than a task's poll budget: a 429 says nothing of the task.
            if res.status == 429 {
                return None;
            }
            assert_eq!(
                res.status,
                200,
                "acknowledged task {id} lost: {}",
                res.text()
            );
            let v = res.json();
            (v["status"] == "completed" || v["status"] == "failed").then_some(v)
        })
        .await
        .unwrap_or_else(|| panic!("task {id} did not finish after the restart"));
        assert_eq!(done["status"], "completed", "{done}");
    }
    let mut child = second.child;
    // SIGTERM: a graceful stop exits 0.
    let pid = child.id().expect("pid");
    let status = Command::new("kill")
        .arg(pid.to_string())
        .status()
        .await
        .unwrap();
    assert!(status.success());
    let exit = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .expect("stops within the grace period")
        .unwrap();
    assert!(exit.success(), "{exit:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_check_names_unknown_keys() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[server]\nlisten = \"127.0.0.1:0\"\ntypo_key = 1\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_relay"))
        .args(["config", "check"])
        .arg(&bad)
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("typo_key") && err.contains("bad.toml"),
        "{err}"
    );

    let good = dir.path().join("good.toml");
    std::fs::write(&good, "[simulator]\ntask_secs = 2\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_relay"))
        .args(["config", "check"])
        .arg(&good)
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The shipped example is a complete, working file.
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../relay.example.toml");
    let out = Command::new(env!("CARGO_BIN_EXE_relay"))
        .args(["config", "check"])
        .arg(&example)
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// SIGKILL at random moments during bursts of submissions, cancels and completions, 20 times
/// over one data directory; then every acknowledged task is there, ends final, and the ledger
/// balances. Slow: runs with RUN_SLOW_TESTS=1 (`cargo xtask ci --slow`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_at_random_moments_keeps_billing_invariants() {
    if std::env::var("RUN_SLOW_TESTS").as_deref() != Ok("1") {
        eprintln!("skipped: set RUN_SLOW_TESTS=1 to run the crash test");
        return;
    }
    use rand::Rng;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let config = dir.path().join("relay.toml");
    std::fs::write(
        &config,
        "[tasks]\ntimeout_secs = 3\n[simulator]\ntask_secs = 0.4\nfps = 4\n[limits]\nrps = 10000\nburst = 10000\npoll_rps_per_task = 10000\n",
    )
    .unwrap();
    let http = Http::new();
    let admin = [(
        "authorization",
        "Bearer restart-admin-token-5f0c9e2b7a1d4386".to_owned(),
    )];
    let mut key: Option<(String, String)> = None;
    let mut acknowledged: Vec<String> = Vec::new();
    for round in 0..20 {
        let running = start_binary(&data, &config).await;
        let (key_id, secret) = match &key {
            Some(k) => k.clone(),
            None => {
                let res = http
                    .send(
                        Method::POST,
                        &format!("{}/admin/keys", running.base),
                        Body::Json(json!({"name": "crash", "quota": 1_000_000})),
                        &admin,
                    )
                    .await;
                let v = res.json();
                let k = (
                    v["id"].as_str().unwrap().to_owned(),
                    v["key"].as_str().unwrap().to_owned(),
                );
                key = Some(k.clone());
                k
            }
        };
        let auth = [("authorization", format!("Bearer {secret}"))];
        let kill_after = Duration::from_millis(rand::rng().random_range(50..600));
        let base = running.base.clone();
        let acked = std::sync::Mutex::new(Vec::new());
        let burst = async {
            for i in 0..40 {
                let sim = ["", "fail", "delay_ms=100", "stuck"][i % 4];
                let res = http
                    .send(
                        Method::POST,
                        &format!("{base}/v1/videos"),
                        Body::Json(json!({"model": "model_h3", "prompt": format!("r{round} {i}"), "size": "64x64"})),
                        &[auth[0].clone(), ("x-relay-sim", sim.to_owned())],
                    )
                    .await;
                if res.status == 200 {
                    let id = res.json()["id"].as_str().unwrap().to_owned();
                    acked.lock().unwrap().push(id.clone());
                    if i % 4 == 3 {
                        let _ = http
                            .send(
                                Method::POST,
                                &format!("{base}/v1/videos/{id}/cancel"),
                                Body::Empty,
                                &auth,
                            )
                            .await;
                    }
                }
            }
        };
        // Requests cut off by the kill never got an answer; only answered ones count.
        tokio::select! {
            () = burst => {}
            () = tokio::time::sleep(kill_after) => {}
        }
        acknowledged.extend(acked.into_inner().unwrap());
        let mut child = running.child;
        child.kill().await.expect("SIGKILL");
        let _ = child.wait().await;
        let _ = key_id;
    }
    // A last start: everything acknowledged is there and ends final; the ledger balances.
    let last = start_binary(&data, &config).await;
    let (key_id, secret) = key.unwrap();
    let auth = [("authorization", format!("Bearer {secret}"))];
    let tasks = http
        .send(
            Method::GET,
            &format!("{}/admin/tasks?key_id={key_id}&limit=1000", last.base),
            Body::Empty,
            &admin,
        )
        .await
        .json();
    let all: Vec<String> = tasks["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_owned())
        .collect();
    for id in &acknowledged {
        assert!(all.contains(id), "acknowledged task {id} was lost");
    }
    let mut statuses = std::collections::HashMap::new();
    for id in &all {
        let url = format!("{}/v1/videos/{id}", last.base);
        let v = poll_until(Duration::from_secs(120), || async {
            let v = http
                .send(Method::GET, &url, Body::Empty, &auth)
                .await
                .json();
            matches!(
                v["status"].as_str(),
                Some("completed" | "failed" | "cancelled")
            )
            .then_some(v)
        })
        .await
        .unwrap_or_else(|| panic!("task {id} did not end"));
        statuses.insert(id.clone(), v["status"].as_str().unwrap().to_owned());
    }
    crate::billing::check_ledger_at(
        &http,
        &last.base,
        "restart-admin-token-5f0c9e2b7a1d4386",
        &key_id,
        1_000_000,
        0,
        &statuses,
    )
    .await;
    eprintln!(
        "crash test: {} acknowledged, {} stored, all final and balanced",
        acknowledged.len(),
        all.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_commands_talk_to_the_running_relay() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("relay.toml");
    std::fs::write(&config, "[simulator]\ntask_secs = 1\n").unwrap();
    let running = start_binary(&dir.path().join("data"), &config).await;
    let relay = |args: &[&str]| {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_relay"));
        cmd.args(&args)
            .env("RELAY_URL", &running.base)
            .env("RELAY_ADMIN_TOKEN", "restart-admin-token-5f0c9e2b7a1d4386");
        async move {
            let out = cmd.output().await.unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
            assert!(
                out.status.success(),
                "{args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            stdout
        }
    };
    let secret = relay(&["keys", "create", "--name", "ops", "--quota", "100"]).await;
    assert!(secret.trim().starts_with("sk-relay-"), "{secret}");
    let list = relay(&["keys", "list"]).await;
    let line = list
        .lines()
        .find(|l| l.contains("\tops\t"))
        .expect("the new key listed");
    let id = line.split('\t').next().unwrap().to_owned();
    let topped = relay(&["keys", "topup", &id, "50"]).await;
    assert!(topped.contains("150"), "{topped}");
    let usage = relay(&["usage", &id]).await;
    assert!(usage.contains("quota remaining: 150"), "{usage}");
    relay(&["keys", "revoke", &id]).await;
    let http = Http::new();
    let res = http
        .send(
            Method::GET,
            &format!("{}/v1/videos", running.base),
            Body::Empty,
            &[("authorization", format!("Bearer {}", secret.trim()))],
        )
        .await;
    res.assert_error(401, "unauthorized", None);
    // A wrong admin token is a clear failure.
    let out = Command::new(env!("CARGO_BIN_EXE_relay"))
        .args(["keys", "list"])
        .env("RELAY_URL", &running.base)
        .env("RELAY_ADMIN_TOKEN", "wrong")
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("401"));
}

/// A SIGKILL while a message waits on its upstream (and after a task submission flushed the
/// store): after the restart the message has no ledger entry and the key lost nothing to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_cut_off_by_a_crash_costs_nothing() {
    use crate::fake_chat::{FakeChat, Switches, UPSTREAM_KEY};
    let fake = FakeChat::start(Switches {
        slow_first_byte: Some(Duration::from_secs(120)),
        ..Switches::default()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let config = dir.path().join("relay.toml");
    std::fs::write(
        &config,
        format!(
            "[models.model_h3]\nkind = \"video\"\nprice_per_second = 10\n\
             [models.native-chat]\nkind = \"chat\"\ninput_price_per_mtok = 100000\noutput_price_per_mtok = 300000\n\
             [[channels]]\nname = \"simulator\"\nkind = \"simulator\"\nmodels = [\"model_h3\"]\n\
             [[channels]]\nname = \"native\"\nkind = \"anthropic\"\nmodels = [\"native-chat\"]\n\
             base_url = \"{}\"\napi_key = \"{UPSTREAM_KEY}\"\nfirst_byte_timeout_secs = 300\n",
            fake.base
        ),
    )
    .unwrap();
    let first = start_binary(&data, &config).await;
    let http = Http::new();
    let admin = [(
        "authorization",
        "Bearer restart-admin-token-5f0c9e2b7a1d4386".to_owned(),
    )];
    let created = http
        .send(
            Method::POST,
            &format!("{}/admin/keys", first.base),
            Body::Json(json!({"name": "chat", "quota": 100000})),
            &admin,
        )
        .await;
    assert_eq!(created.status, 200, "{}", created.text());
    let secret = created.json()["key"].as_str().unwrap().to_owned();
    let key_id = created.json()["id"].as_str().unwrap().to_owned();
    let auth = [("authorization", format!("Bearer {secret}"))];

    // A raw connection that stays open: dropping it would end the message.
    let body = json!({
        "model": "native-chat", "max_tokens": 100,
        "messages": [{"role": "user", "content": "hello"}]
    });
    let message = crate::harness::message_held_open(&first.base, &secret, &body).await;
    poll_until(Duration::from_secs(20), || async {
        (!fake.received().is_empty()).then_some(())
    })
    .await
    .expect("the message reached the upstream");
    // A task submission flushes the store: whatever the message wrote is on disk.
    let task = http
        .send(
            Method::POST,
            &format!("{}/v1/videos", first.base),
            Body::Json(json!({"model": "model_h3", "prompt": "flush", "size": "64x64"})),
            &auth,
        )
        .await;
    assert_eq!(task.status, 200, "{}", task.text());
    let mut child = first.child;
    child.kill().await.expect("SIGKILL");
    drop(message);

    let second = start_binary(&data, &config).await;
    let ledger = http
        .send(
            Method::GET,
            &format!("{}/admin/keys/{key_id}/ledger", second.base),
            Body::Empty,
            &admin,
        )
        .await;
    assert_eq!(ledger.status, 200, "{}", ledger.text());
    let entries = ledger.json()["data"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let of_message: Vec<(String, i64)> = entries
        .iter()
        .filter(|e| e["task_id"].as_str().is_some_and(|t| t.starts_with("msg_")))
        .map(|e| {
            (
                e["kind"].as_str().unwrap().to_owned(),
                e["amount"].as_i64().unwrap(),
            )
        })
        .collect();
    assert!(of_message.is_empty(), "{entries:?}");
    let key = http
        .send(
            Method::GET,
            &format!("{}/admin/keys/{key_id}", second.base),
            Body::Empty,
            &admin,
        )
        .await;
    // Only the video task's price is gone.
    let task_price = entries
        .iter()
        .find(|e| e["kind"] == "prededuct" && !e["task_id"].as_str().unwrap().starts_with("msg_"))
        .and_then(|e| e["amount"].as_i64())
        .expect("the task's pre-deduction");
    assert_eq!(
        key.json()["quota_remaining"].as_i64(),
        Some(100000 + task_price),
        "{}",
        key.text()
    );
}
