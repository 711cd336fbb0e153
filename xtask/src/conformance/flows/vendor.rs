//! The first format with a vendor behind `model_h3` (`--vendor`): what the vendor's catalog
//! refuses before any charge, a submission as JSON and as the SDK's multipart polled to
//! `completed`, the vendor's video served back whole and by range, a duration it does not make
//! served by the next longer one, a cancel, and the ledger of it all.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{PNG_1X1, TASK_DEADLINE, id_of, video, wait_final};
use crate::conformance::checks::{self, Verdict};
use crate::conformance::client::{Req, Resp, multipart};
use crate::conformance::suite::Suite;

/// A body the vendor's catalog fits: 1280x720 (its 720p, 16:9) for 8 s.
fn fitting(extra: Value) -> Value {
    let mut body = video(json!({"size": "1280x720", "seconds": "8"}));
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            if v.is_null() {
                b.remove(k);
            } else {
                b.insert(k.clone(), v.clone());
            }
        }
    }
    body
}

const FINALS: [&str; 3] = ["completed", "failed", "cancelled"];
const RUNNING: [&str; 3] = ["queued", "in_progress", "completed"];

pub async fn vendor_flows(suite: &mut Suite) {
    let vendor = suite.args.vendor.clone().unwrap_or_default();
    let s = "SPEC§4.1";
    let key = suite.args.key.clone();
    let create = |body: Value| Req::post("/v1/videos").bearer(&key).json(&body);

    // What no channel of the model makes is refused before a task exists.
    let refusals: [(&str, Value, &str); 2] = [
        (
            "a ratio the vendor does not make (64x64 is 1:1): 400 invalid ratio",
            fitting(json!({"size": "64x64"})),
            "invalid ratio",
        ),
        (
            "a duration the vendor does not make, even longer (10 s): 400 invalid duration",
            fitting(json!({"seconds": "10"})),
            "invalid duration",
        ),
    ];
    for (name, body, message) in refusals {
        let r = suite.send(create(body)).await;
        suite.check(
            "docs/api.md#what-the-channels-can-make",
            &format!("{vendor}: {name}"),
            checks::api_error(&r, 400, message),
        );
    }

    // Submissions side by side: JSON, the SDK's multipart with a first frame, a 5 s task the
    // vendor makes as 6 s, and one to cancel.
    let main = suite.send(create(fitting(json!({})))).await;
    let v = checks::status(&main, 200)
        .and_then(|()| checks::field(&main, "/duration", &json!(8)))
        .and_then(|()| checks::field(&main, "/size", &json!("1280x720")));
    suite.check(
        s,
        &format!("{vendor}: create answers an 8 s 1280x720 record"),
        v,
    );
    let (ctype, body) = multipart(&[
        ("model", None, "", b"model_h3"),
        ("prompt", None, "", b"a multipart conformance test"),
        ("seconds", None, "", b"8"),
        ("size", None, "", b"1280x720"),
        ("input_reference", Some("first.png"), "image/png", PNG_1X1),
    ]);
    let multi = suite
        .send(Req::post("/v1/videos").bearer(&key).raw(&ctype, body))
        .await;
    suite.check(
        s,
        &format!("{vendor}: multipart create with a first frame"),
        checks::status(&multi, 200),
    );
    let longer = suite.send(create(fitting(json!({"seconds": "5"})))).await;
    suite.check(
        "docs/api.md#what-the-channels-can-make",
        &format!("{vendor}: 5 s, made by the next longer duration, is accepted as 5 s"),
        checks::status(&longer, 200).and_then(|()| checks::field(&longer, "/duration", &json!(5))),
    );
    let to_cancel = suite.send(create(fitting(json!({})))).await;
    let r = suite
        .send(Req::post(format!("/v1/videos/{}/cancel", id_of(&to_cancel, "id"))).bearer(&key))
        .await;
    suite.check(
        "CONTRACT§1.3",
        &format!("{vendor}: cancel of a running task answers it cancelled"),
        checks::field(&r, "/status", &json!("cancelled")),
    );

    // Polling to completion, and the vendor's video.
    let path = format!("/v1/videos/{}", id_of(&main, "id"));
    let (done, v) = wait_final(suite, &path, &FINALS, &RUNNING).await;
    suite.check(
        "CONTRACT§1.2",
        &format!("{vendor}: statuses queued -> in_progress -> completed, progress rising"),
        v.and_then(|()| checks::field(&done, "/status", &json!("completed")))
            .and_then(|()| checks::field(&done, "/progress", &json!(100))),
    );
    suite.check(
        "CONTRACT§0",
        &format!("{vendor}: the record names nothing of the vendor"),
        clean(&done),
    );
    let r = suite
        .send(Req::get(format!("{path}/content")).bearer(&key))
        .await;
    let whole = r.body.clone();
    let expected = suite
        .args
        .vendor_mp4
        .as_ref()
        .and_then(|p| std::fs::read(p).ok());
    let v = checks::status(&r, 200)
        .and_then(|()| checks::header(&r, "content-type", "video/mp4"))
        .and_then(|()| checks::mp4(&whole, None, None))
        .and_then(|()| match &expected {
            Some(want) if want.as_slice() != whole.as_ref() => Err(format!(
                "expected the vendor's {} bytes, got {} other bytes",
                want.len(),
                whole.len()
            )),
            _ => Ok(()),
        });
    suite.check(
        "SPEC§4.3",
        &format!("{vendor}: content is the vendor's MP4"),
        v,
    );
    if whole.len() > 100 {
        let r = suite
            .send(
                Req::get(format!("{path}/content"))
                    .bearer(&key)
                    .header("range", "bytes=0-99"),
            )
            .await;
        suite.check(
            "CONTRACT§1.3",
            &format!("{vendor}: Range bytes=0-99 of the vendor's video is 206"),
            checks::range(&r, &whole, 0, 99),
        );
    }
    let r = suite
        .send(Req::post(format!("{path}/cancel")).bearer(&key))
        .await;
    suite.check(
        "CONTRACT§1.3",
        &format!("{vendor}: cancel of a completed task: 409 task not cancellable"),
        checks::api_error(&r, 409, "task not cancellable"),
    );
    for (name, r) in [("the multipart task", &multi), ("the 5 s task", &longer)] {
        let (done, v) = wait_final(
            suite,
            &format!("/v1/videos/{}", id_of(r, "id")),
            &FINALS,
            &RUNNING,
        )
        .await;
        suite.check(
            "SPEC§4.2",
            &format!("{vendor}: {name} reaches completed"),
            v.and_then(|()| checks::field(&done, "/status", &json!("completed"))),
        );
    }
    let r = suite
        .send(Req::get(format!("/v1/videos/{}", id_of(&to_cancel, "id"))).bearer(&key))
        .await;
    suite.check(
        "CONTRACT§1.3",
        &format!("{vendor}: a cancelled task stays cancelled"),
        checks::field(&r, "/status", &json!("cancelled")),
    );
    billing(suite, &vendor).await;
}

/// Nothing of the vendor (its operation names, hosts or key) reaches a client.
fn clean(r: &Resp) -> Verdict {
    let text = String::from_utf8_lossy(&r.body);
    for word in ["operations/", "googleapis", "127.0.0.1", "fake-veo-key"] {
        if text.contains(word) {
            return Err(format!(
                "expected no {word:?} in the record, got {}",
                r.describe()
            ));
        }
    }
    Ok(())
}

/// SPEC §7 with the vendor: a completed task settles at its pre-deduction, a cancelled one
/// is refunded in full, and the ledger sums to what was made.
async fn billing(suite: &mut Suite, vendor: &str) {
    let s = "SPEC§7";
    let Some(admin) = suite.args.admin_token.clone() else {
        suite.skip(s, "billing", "no --admin-token to read a key's ledger");
        return;
    };
    let r = suite
        .send(
            Req::post("/admin/keys")
                .bearer(&admin)
                .json(&json!({"name": "conformance-vendor", "group": "gen2", "quota": 1000})),
        )
        .await;
    let (id, k) = (id_of(&r, "id"), id_of(&r, "key"));
    let create = || Req::post("/v1/videos").bearer(&k).json(&fitting(json!({})));
    let made = suite.send(create()).await;
    let cancelled = suite.send(create()).await;
    let r = suite
        .send(Req::get(format!("/admin/keys/{id}")).bearer(&admin))
        .await;
    suite.check(
        "CONTRACT§4.1",
        &format!("{vendor}: two 8 s tasks at 10 a second are pre-deducted 160"),
        checks::field(&r, "/quota_remaining", &json!(840)),
    );
    let _ = suite
        .send(Req::post(format!("/v1/videos/{}/cancel", id_of(&cancelled, "id"))).bearer(&k))
        .await;
    let started = Instant::now();
    loop {
        let r = suite
            .send(Req::get(format!("/v1/videos/{}", id_of(&made, "id"))).bearer(&k))
            .await;
        let status = r.json()["status"].as_str().unwrap_or_default().to_owned();
        if r.status != 200 || FINALS.contains(&status.as_str()) || started.elapsed() > TASK_DEADLINE
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let r = suite
        .send(Req::get(format!("/admin/keys/{id}/ledger")).bearer(&admin))
        .await;
    let mut entries: Vec<(String, i64)> = r.json()["data"]
        .as_array()
        .map(|d| {
            d.iter()
                .map(|e| {
                    (
                        e["kind"].as_str().unwrap_or("?").to_owned(),
                        e["amount"].as_i64().unwrap_or(i64::MIN),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    entries.sort();
    let want: Vec<(String, i64)> = [
        ("prededuct", -80),
        ("prededuct", -80),
        ("refund", 80),
        ("settle", 0),
    ]
    .iter()
    .map(|(k, a)| ((*k).to_owned(), *a))
    .collect();
    let v = if entries == want {
        Ok(())
    } else {
        Err(format!("expected the entries {want:?}, got {entries:?}"))
    };
    suite.check(
        s,
        &format!(
            "{vendor}: the ledger settles the made task as asked and refunds the cancelled one"
        ),
        v,
    );
    let r = suite
        .send(Req::get(format!("/admin/keys/{id}")).bearer(&admin))
        .await;
    suite.check(
        s,
        &format!("{vendor}: the quota is short of the made task only"),
        checks::field(&r, "/quota_remaining", &json!(920)),
    );
    let _ = suite
        .send(Req::new(http::Method::DELETE, format!("/admin/keys/{id}")).bearer(&admin))
        .await;
}
