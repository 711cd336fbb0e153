//! `openai-videos` channels in front of another relay ([`FakeRelay`]) that speaks the shape
//! loosely: new-api's upper-case statuses and progress as `"45%"`, lower-case ones with a
//! fraction, a result served as bytes, as a redirect, or only as a URL in the record (fetched
//! through the address guard); errors as a string, an OpenAI error body, new-api's
//! `fail_reason` or a moderation refusal, each failed and refunded once with the relay's own
//! words; an unknown word tolerated for `tasks.unknown_status_polls` polls, then failed; the
//! operator's `status_words`, and `relay config check` refusing a meaning it does not know.

use std::time::Duration;

use http::Method;
use serde_json::{Value, json};

use crate::fake_relay::{Content, FakeRelay, KEY, Script};
use crate::harness::{Body, Relay, poll_until};
use crate::vendor_flows::{WAIT, config, entries_of, first_format, playable, refunded, settled};

/// An `openai-videos` channel in front of `fake`, with `extra` keys.
fn channel(fake: &FakeRelay, extra: &str) -> String {
    format!(
        "[[channels]]\nname = \"behind\"\nkind = \"openai-videos\"\nbase_url = \"{}\"\n\
         api_key = \"{KEY}\"\nmodels = [\"model_h3\"]\n{extra}",
        fake.base
    )
}

/// A first-format task of 5 s (50 credits of model_h3) as `key`.
async fn create(relay: &Relay, key: &str, prompt: &str) -> String {
    first_format(
        relay,
        key,
        json!({"model": "model_h3", "prompt": prompt, "seconds": "5", "size": "1280x720"}),
    )
    .await
}

/// Nothing of the relay behind (its key, its addresses, its words) in what a client sees.
fn assert_clean(seen: &Value, fake: &FakeRelay, words: &[&str]) {
    let text = seen.to_string();
    for secret in [KEY, &fake.base, &fake.files, "video_behind_"]
        .iter()
        .chain(words)
    {
        assert!(
            !text.contains(secret),
            "{secret} reached the client: {text}"
        );
    }
}

/// A finished task downloaded from our relay, playable, settled once.
async fn completed_and_settled(relay: &Relay, key: &str, key_id: &str, id: &str, fake: &FakeRelay) {
    let done = relay.wait_video_as(key, id, WAIT).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert!(done["error"].is_null(), "{done}");
    assert_eq!(done["progress"], 100, "{done}");
    assert_clean(&done, fake, &[]);
    let info = playable(relay, key, &format!("/v1/videos/{id}/content")).await;
    assert_eq!(info.codec, "avc1");
    assert_eq!(entries_of(relay, key_id, id).await, settled(50));
    assert_eq!(fake.creations(id), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_api_statuses_and_percent_strings_complete_playable_and_settled_once() {
    let fake = FakeRelay::start().await;
    let relay = Relay::start(&config(&channel(&fake, ""))).await;
    let (key_id, key) = relay.new_key("behind", Some(1000)).await;
    // new-api's task record in its envelope: IN_PROGRESS without a progress, then "45%" (held
    // there until the relay shows it), then SUCCESS.
    fake.script(Script {
        polls: vec![
            json!({"code": "success", "data": {"task_id": "{id}", "status": "IN_PROGRESS",
                   "progress": "", "fail_reason": ""}}),
            json!({"code": "success", "data": {"task_id": "{id}", "status": "IN_PROGRESS",
                   "progress": "45%", "fail_reason": ""}}),
            json!({"code": "success", "data": {"task_id": "{id}", "status": "SUCCESS",
                   "progress": "100%", "fail_reason": ""}}),
        ],
        content: Content::Bytes,
        hold_at: Some(1),
    });
    let id = create(&relay, &key, "a kettle whistles").await;
    let shown = poll_until(WAIT, || async {
        let v = relay
            .call_as(
                &key,
                Method::GET,
                &format!("/v1/videos/{id}"),
                Body::Empty,
                &[],
            )
            .await
            .json();
        (v["progress"] == 45).then_some(v)
    })
    .await
    .expect("the relay showed the relay behind's 45%");
    assert_eq!(shown["status"], "in_progress", "{shown}");
    fake.release();
    completed_and_settled(&relay, &key, &key_id, &id, &fake).await;
    // The result came from /content with the key, and from nowhere else.
    let downloads = fake.downloads(&id);
    assert!(!downloads.is_empty());
    assert!(
        downloads
            .iter()
            .all(|(host, path, keyed)| *host == fake.base && path.contains("/content") && *keyed),
        "{downloads:?}"
    );
    assert!(fake.refused().is_empty(), "{:?}", fake.refused());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lower_case_statuses_with_a_fraction_complete_through_a_redirect() {
    let fake = FakeRelay::start().await;
    let relay = Relay::start(&config(&channel(&fake, ""))).await;
    let (key_id, key) = relay.new_key("behind", Some(1000)).await;
    fake.script(Script {
        polls: vec![
            json!({"id": "{id}", "object": "video", "status": "queued", "progress": 0}),
            json!({"id": "{id}", "object": "video", "status": "processing", "progress": 0.45}),
            json!({"id": "{id}", "object": "video", "status": "succeeded", "progress": 1.0,
                   "seconds": "5", "size": "1280x720"}),
        ],
        content: Content::Redirect,
        hold_at: Some(1),
    });
    let id = create(&relay, &key, "a paper plane").await;
    poll_until(WAIT, || async {
        let v = relay
            .call_as(
                &key,
                Method::GET,
                &format!("/v1/videos/{id}"),
                Body::Empty,
                &[],
            )
            .await
            .json();
        (v["progress"] == 45).then_some(())
    })
    .await
    .expect("a fraction of 0.45 shown as 45 %");
    fake.release();
    completed_and_settled(&relay, &key, &key_id, &id, &fake).await;
    // /content with the key, then the file host it redirected to, without it.
    let downloads = fake.downloads(&id);
    assert!(
        downloads
            .iter()
            .any(|(host, path, keyed)| *host == fake.base && path.ends_with("/content") && *keyed),
        "{downloads:?}"
    );
    assert!(
        downloads
            .iter()
            .any(|(host, path, keyed)| *host == fake.files
                && path.starts_with("/files/")
                && !keyed),
        "{downloads:?}"
    );
    assert!(
        !downloads
            .iter()
            .any(|(host, _, keyed)| *host == fake.files && *keyed),
        "the key went to the file host: {downloads:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_in_the_record_is_fetched_when_content_is_not_served() {
    let fake = FakeRelay::start().await;
    let relay = Relay::start(&config(&channel(&fake, ""))).await;
    let (key_id, key) = relay.new_key("behind", Some(1000)).await;
    // `video_url`, new-api's `metadata.url` on its video object, and `result_url` on its task
    // record; the first on the file host, the last as a path on the relay behind's own host.
    let records = [
        json!({"id": "{id}", "status": "completed", "progress": 100,
               "video_url": "{files}/files/{id}.mp4?sig=1"}),
        json!({"id": "{id}", "object": "video", "status": "completed", "progress": 100,
               "metadata": {"url": "{files}/files/{id}.mp4"}}),
        json!({"code": "success", "data": {"task_id": "{id}", "status": "SUCCESS",
               "progress": "100%", "result_url": "{files}/files/{id}.mp4"}}),
    ];
    // The last again, its /content answering a JSON error inside a 200.
    let contents = [
        Content::Missing,
        Content::Missing,
        Content::Missing,
        Content::ErrorInOk,
    ];
    let records = records.iter().chain(records.last()).cloned();
    for (n, (record, content)) in records.zip(contents).enumerate() {
        fake.script(Script::new(
            vec![
                json!({"id": "{id}", "status": "in_progress", "progress": 10}),
                record,
            ],
            content,
        ));
        let id = create(&relay, &key, &format!("a record's url {n}")).await;
        completed_and_settled(&relay, &key, &key_id, &id, &fake).await;
        let downloads = fake.downloads(&id);
        // /content was asked first (with the key), then the named URL (without it).
        assert_eq!(downloads[0].0, fake.base, "{downloads:?}");
        assert!(downloads[0].1.ends_with("/content") && downloads[0].2);
        assert!(
            downloads
                .iter()
                .any(|(host, path, keyed)| *host == fake.files
                    && path == &format!("/files/{}.mp4", fake.upstream_id(&id))
                    && !keyed),
            "{downloads:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_in_the_record_goes_through_the_address_guard() {
    // To a relay that does not allow private URLs, the file host (another loopback address
    // the record names) is an internal host: refused, the task failed and refunded.
    let fake = FakeRelay::start().await;
    let closed = format!(
        "[security]\nallow_private_urls = false\n{}",
        config(&channel(&fake, ""))
    );
    let relay = Relay::start(&closed).await;
    let (key_id, key) = relay.new_key("guarded", Some(1000)).await;
    let script = Script::new(
        vec![json!({"id": "{id}", "status": "completed", "video_url": "{files}/files/{id}.mp4"})],
        Content::Missing,
    );
    fake.script(script.clone());
    let id = create(&relay, &key, "an internal file").await;
    let done = relay.wait_video_as(&key, &id, WAIT).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["error"]["code"], "upstream_error", "{done}");
    assert_clean(&done, &fake, &[]);
    assert_eq!(entries_of(&relay, &key_id, &id).await, refunded(50));
    let downloads = fake.downloads(&id);
    assert!(
        downloads.iter().all(|(host, _, _)| *host == fake.base),
        "the guarded address was reached: {downloads:?}"
    );
    assert!(!downloads.is_empty(), "/content was never asked");

    // A host the channel trusts is fetched.
    let authority = fake.files.trim_start_matches("http://");
    let trusting = format!(
        "[security]\nallow_private_urls = false\n{}",
        config(&channel(
            &fake,
            &format!("trusted_hosts = [\"{authority}\"]\n")
        ))
    );
    let relay = Relay::start(&trusting).await;
    let (key_id, key) = relay.new_key("trusting", Some(1000)).await;
    fake.script(script);
    let id = create(&relay, &key, "a trusted file").await;
    completed_and_settled(&relay, &key, &key_id, &id, &fake).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_in_every_shape_are_refunded_once_in_the_relays_own_words() {
    let fake = FakeRelay::start().await;
    let relay = Relay::start(&config(&channel(&fake, ""))).await;
    let (key_id, key) = relay.new_key("behind", Some(1000)).await;
    // The relay behind's words, its own key among them (as a careless one echoes it).
    let secret = format!("boom at secret-host-7.internal with {KEY}");
    let secret = secret.as_str();
    let cases = [
        (
            json!({"id": "{id}", "status": "failed", "error": secret}),
            "upstream_error",
            "the upstream failed the task",
        ),
        (
            json!({"id": "{id}", "object": "video", "status": "failed",
                   "error": {"message": secret, "code": "internal_error"}}),
            "upstream_error",
            "the upstream failed the task",
        ),
        (
            json!({"code": "success", "data": {"task_id": "{id}", "status": "FAILURE",
                   "progress": "100%", "fail_reason": secret}}),
            "upstream_error",
            "the upstream failed the task",
        ),
        (
            json!({"id": "{id}", "status": "canceled", "error": null}),
            "upstream_error",
            "the upstream cancelled the task",
        ),
        (
            json!({"id": "{id}", "object": "video", "status": "failed",
                   "error": {"message": format!("{secret}: the prompt violates our content policy"),
                             "code": "content_policy_violation"}}),
            "moderation_blocked",
            "the upstream refused the content",
        ),
        (
            json!({"code": "success", "data": {"status": "FAILURE",
                   "fail_reason": format!("moderation: {secret}")}}),
            "moderation_blocked",
            "the upstream refused the content",
        ),
    ];
    for (n, (record, code, message)) in cases.into_iter().enumerate() {
        fake.script(Script::new(
            vec![
                json!({"id": "{id}", "status": "in_progress", "progress": "30%"}),
                record,
            ],
            Content::Bytes,
        ));
        let id = create(&relay, &key, &format!("failing {n}")).await;
        let done = relay.wait_video_as(&key, &id, WAIT).await;
        assert_eq!(done["status"], "failed", "{n}: {done}");
        assert_eq!(done["error"]["code"], code, "{n}: {done}");
        assert_eq!(done["error"]["message"], message, "{n}: {done}");
        assert_clean(&done, &fake, &["secret-host", "boom", "content policy"]);
        assert_eq!(entries_of(&relay, &key_id, &id).await, refunded(50), "{n}");
        assert!(fake.downloads(&id).is_empty(), "{n}");
    }
    let k = relay
        .admin(Method::GET, &format!("/admin/keys/{key_id}"), Body::Empty)
        .await
        .json();
    assert_eq!(k["quota_remaining"], 1000, "{k}");
}

/// The number of polls `vendor_flows::config` tolerates an unknown status for.
const UNKNOWN_POLLS: usize = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_word_fails_the_task_only_after_the_configured_polls() {
    let fake = FakeRelay::start().await;
    let relay = Relay::start(&config(&channel(&fake, ""))).await;
    let (key_id, key) = relay.new_key("behind", Some(1000)).await;
    // new-api's own UNKNOWN, and a word no one knows.
    for (n, word) in ["UNKNOWN", "RENDERING"].into_iter().enumerate() {
        fake.script(Script::new(
            vec![json!({"id": "{id}", "status": word, "progress": 20})],
            Content::Bytes,
        ));
        let id = create(&relay, &key, &format!("never known {n}")).await;
        let done = relay.wait_video_as(&key, &id, WAIT).await;
        assert_eq!(done["status"], "failed", "{done}");
        assert_eq!(done["error"]["code"], "upstream_error", "{done}");
        assert_eq!(
            done["error"]["message"], "the upstream reported a status the relay does not know",
            "{done}"
        );
        assert_eq!(fake.polls(&id), UNKNOWN_POLLS, "{word}");
        assert_eq!(entries_of(&relay, &key_id, &id).await, refunded(50));
        assert_clean(&done, &fake, &[word]);
    }

    // Known words between unknown ones start the count again.
    let mut polls = Vec::new();
    for _ in 0..UNKNOWN_POLLS - 1 {
        polls.push(json!({"id": "{id}", "status": "RENDERING"}));
    }
    polls.push(json!({"id": "{id}", "status": "in_progress", "progress": 50}));
    for _ in 0..UNKNOWN_POLLS - 1 {
        polls.push(json!({"id": "{id}", "status": "RENDERING"}));
    }
    polls.push(json!({"id": "{id}", "status": "completed", "progress": 100}));
    fake.script(Script::new(polls, Content::Bytes));
    let id = create(&relay, &key, "known now and then").await;
    completed_and_settled(&relay, &key, &key_id, &id, &fake).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_words_teach_the_channel_a_resellers_words() {
    let fake = FakeRelay::start().await;
    let words = "status_words = { \"RENDERING\" = \"running\", \"DONE_OK\" = \"completed\", \
                 \"BROKEN\" = \"failed\" }\n";
    let relay = Relay::start(&config(&channel(&fake, words))).await;
    let (key_id, key) = relay.new_key("behind", Some(1000)).await;
    // More RENDERING polls than unknown words would be tolerated: it is running.
    let mut polls = vec![json!({"id": "{id}", "status": "rendering", "progress": "40%"}); 5];
    polls.push(json!({"id": "{id}", "status": "Done_OK"}));
    fake.script(Script::new(polls, Content::Bytes));
    let id = create(&relay, &key, "in the reseller's words").await;
    completed_and_settled(&relay, &key, &key_id, &id, &fake).await;
    assert!(fake.polls(&id) > UNKNOWN_POLLS);

    fake.script(Script::new(
        vec![
            json!({"id": "{id}", "status": "RENDERING"}),
            json!({"id": "{id}", "status": "BROKEN", "error": "gpu melted at secret-host-7"}),
        ],
        Content::Bytes,
    ));
    let id = create(&relay, &key, "broken in the reseller's words").await;
    let done = relay.wait_video_as(&key, &id, WAIT).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["error"]["code"], "upstream_error", "{done}");
    assert_clean(&done, &fake, &["secret-host", "gpu"]);
    assert_eq!(entries_of(&relay, &key_id, &id).await, refunded(50));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_check_refuses_a_status_word_of_unknown_meaning() {
    let dir = tempfile::tempdir().unwrap();
    let check = |text: String| {
        let path = dir.path().join("relay.toml");
        std::fs::write(&path, text).unwrap();
        async move {
            tokio::time::timeout(
                Duration::from_secs(60),
                tokio::process::Command::new(env!("CARGO_BIN_EXE_relay"))
                    .args(["config", "check"])
                    .arg(&path)
                    .output(),
            )
            .await
            .expect("config check ended")
            .unwrap()
        }
    };
    let text = |words: &str| {
        format!(
            "[[channels]]\nname = \"behind\"\nkind = \"openai-videos\"\n\
             base_url = \"https://videos.example.com\"\nmodels = [\"model_h3\"]\n\
             status_words = {{ {words} }}\n"
        )
    };
    let out = check(text(r#""RENDERING" = "running", "BROKEN" = "borked""#)).await;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("channels.behind: status_words.\"BROKEN\": unknown meaning \"borked\""),
        "{err}"
    );
    assert!(
        err.contains("running, completed, failed, cancelled, expired"),
        "{err}"
    );
    let out = check(text(r#""RENDERING" = "running", "DONE_OK" = "completed""#)).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
