//! Channel tests: the cheapest authenticated call a channel's upstream offers, generating
//! nothing, bounded in time. `POST /admin/channels/{name}/test` runs it on the running
//! relay's own channel (its clients, proxy and CA); `relay channels test NAME` on that one
//! channel built alone from a configuration.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use channels::{ChannelTest, ChatChannel, NoBlobs, VideoChannel};
use error_codes::{ApiError, ErrorCode};
use serde_json::{Value, json};
use store::BlobStore;

use crate::app::{App, setup};
use crate::config::Config;
use crate::ground::http::{Answer, error, ok};

/// How long a channel test may take before the channel counts as unreachable.
pub const LIMIT: Duration = Duration::from_secs(20);

/// A channel to test: a video channel (vendor or simulator) or a chat channel. A simulator
/// entry that serves both is tested as a video channel (there is nothing to call either way).
pub enum Tested<'a> {
    Video(&'a VideoChannel),
    Chat(&'a ChatChannel),
}

impl Tested<'_> {
    /// The channel's kind as configured.
    pub fn kind(&self) -> &'static str {
        match self {
            Tested::Video(c) => c.kind(),
            Tested::Chat(c) => c.kind(),
        }
    }

    /// Runs the channel's test for at most `limit`.
    pub async fn run(&self, limit: Duration) -> ChannelTest {
        match self {
            Tested::Video(c) => ChannelTest::run(limit, c.check()).await,
            Tested::Chat(c) => ChannelTest::run(limit, c.check()).await,
        }
    }
}

/// A test's answer as the admin API gives it.
pub fn record(name: &str, kind: &str, test: &ChannelTest) -> Value {
    json!({
        "channel": name,
        "kind": kind,
        "ok": test.verdict.is_ok(),
        "status": test.verdict.as_str(),
        "detail": test.detail,
        "http_status": test.http_status,
        "latency_ms": u64::try_from(test.latency.as_millis()).unwrap_or(u64::MAX),
    })
}

/// Why `name` names no channel, with the names there are.
fn unknown<'a>(name: &str, names: impl Iterator<Item = &'a str>) -> String {
    let names: Vec<&str> = names.collect();
    if names.is_empty() {
        format!("no channel named {name:?}: no channel is configured")
    } else {
        format!(
            "no channel named {name:?}; the channels are {}",
            names.join(", ")
        )
    }
}

/// `POST /admin/channels/{name}/test`: the running relay's channel `name`, tested.
pub async fn admin(app: &Arc<App>, name: &str) -> Answer {
    let video = app.engine.channel_named(name);
    let chat = app.chat_channels.iter().find(|c| c.name() == name);
    let tested = match (video, chat) {
        (Some(c), _) => Tested::Video(c),
        (None, Some(c)) => Tested::Chat(c),
        (None, None) => {
            let names = app.config.channels.iter().map(|c| c.name.as_str());
            return error(&ApiError::field(
                ErrorCode::NotFound,
                "name",
                unknown(name, names),
            ));
        }
    };
    let test = tested.run(LIMIT).await;
    ok(&record(name, tested.kind(), &test))
}

/// Channel `name` of `config`, built alone (secrets from the environment, no store, no
/// files), tested for at most `limit`: its kind and the outcome. An unknown name is an error
/// that names the channels there are.
pub async fn from_config(
    config: &Config,
    name: &str,
    limit: Duration,
) -> anyhow::Result<(&'static str, ChannelTest)> {
    let Some(entry) = config.channels.iter().find(|c| c.name == name) else {
        anyhow::bail!(unknown(
            name,
            config.channels.iter().map(|c| c.name.as_str())
        ));
    };
    let blobs: Arc<dyn BlobStore> = Arc::new(NoBlobs);
    let public_base = Arc::default();
    let env = |var: &str| std::env::var(var).ok();
    let video = match setup::vendor_channel(config, entry, &blobs, &public_base, &env)? {
        Some(channel) => Some(channel),
        None => setup::simulator_channel(config, entry, &blobs),
    };
    if let Some(video) = video {
        let tested = Tested::Video(&video);
        return Ok((tested.kind(), tested.run(limit).await));
    }
    let chat = setup::chat_channel(config, entry)?
        .with_context(|| format!("channel {name}: its kind has nothing to test"))?;
    let tested = Tested::Chat(&chat);
    Ok((tested.kind(), tested.run(limit).await))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_name_names_the_channels() {
        assert_eq!(
            unknown("nope", ["sim", "veo"].into_iter()),
            r#"no channel named "nope"; the channels are sim, veo"#
        );
        assert_eq!(
            unknown("nope", std::iter::empty()),
            r#"no channel named "nope": no channel is configured"#
        );
    }
}
