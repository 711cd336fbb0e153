//! `Idempotency-Key` on `POST /v1/videos`: the same key and body twice give one task (the
//! repeat marked `idempotent-replayed: true`); another body under the key is `409`.

use serde_json::json;

use super::{id_of, video};
use crate::conformance::checks;
use crate::conformance::client::Req;
use crate::conformance::suite::Suite;

pub async fn idempotency(suite: &mut Suite) {
    let s = "docs/api.md#idempotent-requests";
    let key = suite.args.key.clone();
    // A key of this run only: a kept answer lives for a day.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let idem = format!("conformance-{nanos}");
    let create = |prompt: &str| {
        Req::post("/v1/videos")
            .bearer(&key)
            .header("Idempotency-Key", &idem)
            .json(&video(json!({"prompt": prompt})))
    };
    let first = suite.send(create("an idempotent request")).await;
    if !suite.check(
        s,
        "a first request with a key runs",
        checks::status(&first, 200),
    ) {
        return;
    }
    let again = suite.send(create("an idempotent request")).await;
    let same = if again.status == 200 && id_of(&again, "id") == id_of(&first, "id") {
        Ok(())
    } else {
        Err(format!(
            "expected 200 with id {}, got {}",
            id_of(&first, "id"),
            again.describe()
        ))
    };
    suite.check(s, "the same key and body again: the same task", same);
    suite.check(
        s,
        "a replayed answer says so",
        checks::header(&again, "idempotent-replayed", "true"),
    );
    let other = suite.send(create("another request")).await;
    suite.check(
        s,
        "another body under the key: 409 idempotency conflict",
        checks::api_error(&other, 409, "idempotency conflict"),
    );
    let _ = suite
        .send(Req::post(format!("/v1/videos/{}/cancel", id_of(&first, "id"))).bearer(&key))
        .await;
}
