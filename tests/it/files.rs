//! Stored files as an abuser would use them: every route that serves one answers with
//! `nosniff`, a sandboxing Content-Security-Policy and `Content-Disposition: attachment` (a
//! file name) unless `?disposition=inline` asked to play it in place, on whole and ranged
//! answers and in the `redirect` content mode; signed `/files/...` links die with their
//! content's expiry and with the revocation of the key that owns it, answering as a forged
//! link does.

use std::time::Duration;

use http::Method;
use serde_json::json;

use crate::harness::{Answer, Body, Relay, poll_until};

const WAIT: Duration = Duration::from_secs(60);

/// The Content-Security-Policy of every served file.
const CSP: &str =
    "sandbox; default-src 'none'; img-src 'self'; media-src 'self'; style-src 'unsafe-inline'";

/// Asserts the headers of a served file; `disposition` is the expected Content-Disposition.
fn assert_guarded(res: &Answer, disposition: &str) {
    assert!(
        res.status == 200 || res.status == 206,
        "{}: {}",
        res.status,
        res.text()
    );
    assert_eq!(res.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(res.header("content-security-policy"), Some(CSP));
    assert_eq!(res.header("content-disposition"), Some(disposition));
}

async fn get(relay: &Relay, url: &str, headers: &[(&str, String)]) -> Answer {
    relay
        .client
        .send(Method::GET, url, Body::Empty, headers)
        .await
}

/// A completed video of the relay's first key.
async fn video(relay: &Relay) -> String {
    let res = relay
        .post_json(
            "/v1/videos",
            json!({"model": "model_h3", "prompt": "a heron", "size": "160x96", "duration": 5}),
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let id = res.json()["id"].as_str().unwrap().to_owned();
    let done = relay.wait_video(&id, WAIT).await;
    assert_eq!(done["status"], "completed", "{done}");
    id
}

/// A succeeded generation of `key`: its `video_url`.
async fn generation_link(relay: &Relay, key: &str) -> String {
    let res = relay
        .call_as(
            key,
            Method::POST,
            "/v1/video/generations",
            Body::Json(json!({"model": "gen2-lite", "prompt": "a fox", "duration": 5})),
            &[],
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let id = res.json()["task_id"].as_str().unwrap().to_owned();
    let done = relay.wait_generation_as(key, &id, WAIT).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    done["video_url"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn served_files_are_sandboxed_and_saved_unless_asked_inline() {
    let relay = Relay::start("").await;
    let id = video(&relay).await;
    let key = relay.key.clone();
    let bearer = || ("authorization", format!("Bearer {key}"));
    let content = relay.url(&format!("/v1/videos/{id}/content"));
    let attachment = format!("attachment; filename=\"{id}_video.mp4\"");

    // As the OpenAI SDK asks: bytes, saved under a name.
    let res = get(
        &relay,
        &content,
        &[bearer(), ("accept", "application/binary".to_owned())],
    )
    .await;
    assert_guarded(&res, &attachment);
    assert_eq!(res.header("content-type"), Some("video/mp4"));
    assert!(res.body.len() > 100);
    // A range answer carries them too.
    let res = get(
        &relay,
        &content,
        &[bearer(), ("range", "bytes=0-9".to_owned())],
    )
    .await;
    assert_eq!(res.status, 206);
    assert_guarded(&res, &attachment);
    // Played in place when asked.
    let res = get(
        &relay,
        &format!("{content}?disposition=inline"),
        &[bearer()],
    )
    .await;
    assert_guarded(&res, "inline");
    let res = get(
        &relay,
        &format!("{content}?variant=thumbnail&disposition=attachment"),
        &[bearer()],
    )
    .await;
    let thumbnail = res.header("content-disposition").unwrap_or_default();
    assert!(
        thumbnail.starts_with(&format!("attachment; filename=\"{id}_thumbnail.")),
        "{thumbnail}"
    );
    assert_guarded(&res, thumbnail);
    let res = get(
        &relay,
        &format!("{content}?disposition=download"),
        &[bearer()],
    )
    .await;
    res.assert_error(400, "invalid request", Some("disposition"));

    // Signed links of the second format.
    let link = generation_link(&relay, &key).await;
    let res = get(&relay, &link, &[]).await;
    let saved = res.header("content-disposition").unwrap_or_default();
    assert!(
        saved.starts_with("attachment; filename=\"gen_") && saved.ends_with(".mp4\""),
        "{saved}"
    );
    assert_guarded(&res, saved);
    let res = get(&relay, &format!("{link}&disposition=inline"), &[]).await;
    assert_guarded(&res, "inline");
    let res = get(&relay, &format!("{link}&disposition=x"), &[]).await;
    res.assert_error(400, "invalid request", Some("disposition"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redirect_mode_keeps_the_disposition_asked_for() {
    let relay = Relay::start("[server]\ncontent_mode = \"redirect\"\n").await;
    let id = video(&relay).await;
    let bearer = ("authorization", format!("Bearer {}", relay.key));
    let content = relay.url(&format!("/v1/videos/{id}/content"));
    for (query, disposition) in [
        ("", format!("attachment; filename=\"{id}_video.mp4\"")),
        ("?disposition=inline", "inline".to_owned()),
    ] {
        let res = get(
            &relay,
            &format!("{content}{query}"),
            std::slice::from_ref(&bearer),
        )
        .await;
        assert_eq!(res.status, 302, "{}", res.text());
        let location = res.header("location").unwrap().to_owned();
        let res = get(&relay, &location, &[]).await;
        assert_guarded(&res, &disposition);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_links_die_with_the_revocation_of_their_key() {
    let relay = Relay::start("").await;
    let (key_id, key) = relay.new_key("revoked soon", None).await;
    let link = generation_link(&relay, &key).await;
    assert_eq!(get(&relay, &link, &[]).await.status, 200);
    // A forged signature: the answer a dead link must give too.
    let forged = get(&relay, &format!("{}0000", &link[..link.len() - 4]), &[]).await;
    forged.assert_error(404, "not found", None);

    let res = relay
        .admin(
            Method::DELETE,
            &format!("/admin/keys/{key_id}"),
            Body::Empty,
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let dead = get(&relay, &link, &[]).await;
    dead.assert_error(404, "not found", None);
    assert_eq!(
        dead.json()["error"]["detail"],
        forged.json()["error"]["detail"]
    );
    let inline = get(&relay, &format!("{link}&disposition=inline"), &[]).await;
    inline.assert_error(404, "not found", None);
    // Another key's links stand.
    let other = generation_link(&relay, &relay.key.clone()).await;
    assert_eq!(get(&relay, &other, &[]).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_links_die_with_their_contents_expiry() {
    let relay = Relay::start("[tasks]\ncontent_ttl_secs = 3\n").await;
    let link = generation_link(&relay, &relay.key.clone()).await;
    // The link itself is good for a day (signed_url_ttl_secs); the content for 3 s.
    let first = get(&relay, &link, &[]).await;
    assert_eq!(first.status, 200, "{}", first.text());
    let dead = poll_until(Duration::from_secs(20), || async {
        let res = get(&relay, &link, &[]).await;
        (res.status != 200).then_some(res)
    })
    .await
    .expect("the link dies once its content has expired");
    dead.assert_error(404, "not found", None);
}
