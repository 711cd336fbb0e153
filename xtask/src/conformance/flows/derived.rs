//! The first format's derived videos and characters, as the OpenAI SDK sends them: an edit
//! and an extension of a completed video (multipart, the source as `video[id]`), their
//! records and errors; a character created from a video file and read back.

use serde_json::{Value, json};

use super::{id_of, video, wait_final};
use crate::conformance::checks::{self, Verdict};
use crate::conformance::client::{Req, multipart};
use crate::conformance::suite::Suite;

const S: &str = "docs/api.md#edits-and-extensions-post-v1videosedits-post-v1videosextensions";
const FINALS: [&str; 3] = ["completed", "failed", "cancelled"];
const RUNNING: [&str; 3] = ["queued", "in_progress", "completed"];

/// An SDK-shaped multipart body deriving from `source`.
fn derived(path: &str, key: &str, source: &str, seconds: Option<&str>) -> Req {
    let mut parts: Vec<(&str, Option<&str>, &str, &[u8])> = vec![
        ("prompt", None, "", b"a conformance derivation"),
        ("video[id]", None, "", source.as_bytes()),
    ];
    if let Some(s) = seconds {
        parts.push(("seconds", None, "", s.as_bytes()));
    }
    let (ctype, body) = multipart(&parts);
    Req::post(path).bearer(key).raw(&ctype, body)
}

fn field_is(r: &crate::conformance::client::Resp, pointer: &str, want: &Value) -> Verdict {
    checks::status(r, 200).and_then(|()| checks::field(r, pointer, want))
}

pub async fn derived_flows(suite: &mut Suite) {
    let key = suite.args.key.clone();
    let source = suite
        .send(
            Req::post("/v1/videos")
                .bearer(&key)
                .json(&video(json!({"seconds": "5"}))),
        )
        .await;
    let source_id = id_of(&source, "id");
    let (done, v) = wait_final(suite, &format!("/v1/videos/{source_id}"), &FINALS, &RUNNING).await;
    suite.check(
        S,
        "the source completes",
        v.and_then(|()| checks::field(&done, "/status", &json!("completed"))),
    );

    let edit = suite
        .send(derived("/v1/videos/edits", &key, &source_id, None))
        .await;
    let v = field_is(&edit, "/edited_from_video_id", &json!(source_id))
        .and_then(|()| checks::field(&edit, "/seconds", &json!("5")))
        .and_then(|()| checks::header(&edit, "openai-poll-after-ms", "5000"));
    suite.check(S, "an edit is a new task naming its source", v);
    let ext = suite
        .send(derived(
            "/v1/videos/extensions",
            &key,
            &source_id,
            Some("5"),
        ))
        .await;
    let v = field_is(&ext, "/extended_from_video_id", &json!(source_id))
        .and_then(|()| checks::field(&ext, "/seconds", &json!("10")));
    suite.check(
        S,
        "an extension names its source and the stitched seconds",
        v,
    );
    for (what, r) in [("edit", &edit), ("extension", &ext)] {
        let path = format!("/v1/videos/{}", id_of(r, "id"));
        let (done, v) = wait_final(suite, &path, &FINALS, &RUNNING).await;
        suite.check(
            S,
            &format!("the {what} reads with first-format statuses and completes"),
            v.and_then(|()| checks::field(&done, "/status", &json!("completed"))),
        );
    }

    let r = suite
        .send(derived(
            "/v1/videos/edits",
            &key,
            "video_no_such_source",
            None,
        ))
        .await;
    suite.check(
        S,
        "an unknown source is 404",
        checks::api_error(&r, 404, "not found"),
    );
    let (ctype, body) = multipart(&[("prompt", None, "", b"no source")]);
    let r = suite
        .send(Req::post("/v1/videos/edits").bearer(&key).raw(&ctype, body))
        .await;
    suite.check(
        S,
        "no video is 400 invalid request naming video",
        checks::api_error(&r, 400, "invalid request")
            .and_then(|()| checks::field(&r, "/error/param", &json!("video"))),
    );
    let r = suite
        .send(derived("/v1/videos/extensions", &key, &source_id, None))
        .await;
    suite.check(
        S,
        "an extension without seconds is 400 invalid duration",
        checks::api_error(&r, 400, "invalid duration")
            .and_then(|()| checks::field(&r, "/error/param", &json!("seconds"))),
    );
    if let Some(other) = suite.args.key_group2.clone() {
        let r = suite
            .send(derived("/v1/videos/edits", &other, &source_id, None))
            .await;
        suite.check(
            S,
            "another key's source is 404",
            checks::api_error(&r, 404, "not found"),
        );
    }

    // Characters: from the source's own video.
    let s = "docs/api.md#characters-post-v1videoscharacters";
    let clip = suite
        .send(Req::get(format!("/v1/videos/{source_id}/content")).bearer(&key))
        .await;
    let (ctype, body) = multipart(&[
        ("name", None, "", b"Conformance"),
        ("video", Some("clip.mp4"), "video/mp4", &clip.body),
    ]);
    let made = suite
        .send(
            Req::post("/v1/videos/characters")
                .bearer(&key)
                .raw(&ctype, body),
        )
        .await;
    suite.check(
        s,
        "a character is created from a video file",
        field_is(&made, "/name", &json!("Conformance")),
    );
    let id = id_of(&made, "id");
    let got = suite
        .send(Req::get(format!("/v1/videos/characters/{id}")).bearer(&key))
        .await;
    let v = checks::status(&got, 200).and_then(|()| {
        if got.json() == made.json() {
            Ok(())
        } else {
            Err(format!("expected {}, got {}", made.json(), got.describe()))
        }
    });
    suite.check(s, "a character reads back as created", v);
    let page = suite
        .send(Req::get("/v1/videos/characters?limit=1").bearer(&key))
        .await;
    suite.check(
        s,
        "the key's characters list newest first",
        field_is(&page, "/data/0/id", &json!(id)),
    );
    let path = format!("/v1/videos/characters/{id}");
    if let Some(other) = suite.args.key_group2.clone() {
        let r = suite.send(Req::get(path.clone()).bearer(&other)).await;
        suite.check(
            s,
            "another key's character is 404",
            checks::api_error(&r, 404, "not found"),
        );
        let r = suite
            .send(Req::new(http::Method::DELETE, path.clone()).bearer(&other))
            .await;
        suite.check(
            s,
            "another key's character is 404 to delete",
            checks::api_error(&r, 404, "not found"),
        );
    }
    let r = suite
        .send(Req::new(http::Method::DELETE, path.clone()).bearer(&key))
        .await;
    suite.check(
        s,
        "a character is deleted by its key",
        field_is(&r, "/object", &json!("video.character.deleted")),
    );
    let r = suite.send(Req::get(path).bearer(&key)).await;
    suite.check(
        s,
        "a deleted character is 404",
        checks::api_error(&r, 404, "not found"),
    );
}
