//! Real video upstreams, stood in for by [`FakeVideo`]: both adapters end to end with the
//! relay's own copy served, failover, 429s, submissions taken without an answer (never sent
//! again), unknown statuses, truncated downloads, and many tasks through two flaky channels,
//! one going down and coming back. The tests are in the
//! modules below, by area; here is what they share.

use std::time::Duration;

use http::Method;
use serde_json::{Value, json};

use crate::fake_video::{FAKE_KEY, FakeVideo};
use crate::harness::{Body, Relay};

const WAIT: Duration = Duration::from_secs(20);

/// Fast polls and a short cool-down, then the channels.
fn config(channels: &str) -> String {
    format!(
        "[tasks]\npoll_interval_min_ms = 20\npoll_interval_max_ms = 300\nchannel_cooldown_ms = 300\nunknown_status_polls = 3\n{channels}"
    )
}

fn openai_channel(name: &str, fake: &FakeVideo, priority: i32) -> String {
    format!(
        "[[channels]]\nname = \"{name}\"\nkind = \"openai-videos\"\nbase_url = \"{}\"\napi_key = \"{FAKE_KEY}\"\nmodels = [\"model_h3\"]\npriority = {priority}\nrequest_timeout_secs = 2\n",
        fake.openai_base()
    )
}

fn ark_channel(name: &str, fake: &FakeVideo) -> String {
    format!(
        "[[channels]]\nname = \"{name}\"\nkind = \"ark\"\nbase_url = \"{}\"\napi_key = \"{FAKE_KEY}\"\nfamily = \"gen2\"\nmodel_map = {{ \"gen2-pro\" = \"seedance-pro\" }}\n",
        fake.ark_base()
    )
}

async fn create_video(relay: &Relay, key: &str, prompt: &str) -> String {
    let res = relay
        .call_as(
            key,
            Method::POST,
            "/v1/videos",
            Body::Json(
                json!({"model": "model_h3", "prompt": prompt, "size": "64x64", "seconds": "5"}),
            ),
            &[],
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    res.json()["id"].as_str().expect("id").to_owned()
}

/// Nothing of the upstream reaches a client.
fn assert_clean(text: &str, fake: &FakeVideo) {
    for secret in [
        FAKE_KEY,
        fake.base.trim_start_matches("http://"),
        "video_up_",
        "cgt-",
        "secret-host-detail",
    ] {
        assert!(!text.contains(secret), "{secret} leaked: {text}");
    }
}

async fn quota(relay: &Relay, key_id: &str) -> Value {
    relay
        .admin(Method::GET, &format!("/admin/keys/{key_id}"), Body::Empty)
        .await
        .json()
}

async fn channel_view(relay: &Relay, name: &str) -> Value {
    let list = relay
        .admin(Method::GET, "/admin/channels", Body::Empty)
        .await
        .json();
    list["data"]
        .as_array()
        .and_then(|d| d.iter().find(|c| c["name"] == name).cloned())
        .unwrap_or_else(|| panic!("no channel {name}: {list}"))
}

mod adapters;
mod ambiguous;
mod ark;
mod failures;
mod load;
