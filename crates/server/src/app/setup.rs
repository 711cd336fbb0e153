//! Builds the relay's parts from a configuration: the video and chat channels, their routes,
//! and the second format's catalog.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::Context;
use channels::{
    ChatChannel, ChatSettings, Network, NetworkSettings, ProxyChoice, Roots, Simulator,
    SimulatorSettings, UpstreamTimeouts, VideoChannel,
};
use engine::ChannelRoute;
use store::BlobStore;
use video_generations::{Catalog, JointRule, ModelSpec};

use crate::config::{ChannelConfig, ChannelKind, Config, ModelKind, NO_PROXY, RootsChoice};

/// The video channels of a configuration: the vendors' ones, then the simulators. Secrets
/// named by a `*_env` key are read through `env`.
pub fn video_channels(
    config: &Config,
    blobs: &Arc<dyn BlobStore>,
    public_base: &Arc<OnceLock<String>>,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> anyhow::Result<Vec<Arc<VideoChannel>>> {
    let mut video_channels = Vec::new();
    for c in &config.channels {
        if let Some(channel) = vendor_channel(config, c, blobs, public_base, env)? {
            video_channels.push(Arc::new(channel));
        }
    }
    let simulators = config
        .channels
        .iter()
        .filter_map(|c| simulator_channel(config, c, blobs))
        .map(Arc::new);
    video_channels.extend(simulators);
    Ok(video_channels)
}

/// The video channel of a `simulator` entry; `None` for another kind.
pub fn simulator_channel(
    config: &Config,
    c: &ChannelConfig,
    blobs: &Arc<dyn BlobStore>,
) -> Option<VideoChannel> {
    (c.kind == ChannelKind::Simulator).then(|| {
        VideoChannel::Simulator(Simulator::new(
            SimulatorSettings {
                name: c.name.clone(),
                models: c.models.clone(),
                task_ms: (config.simulator.task_secs * 1000.0) as u64,
                fps: config.simulator.fps,
                scenarios: config.simulator.scenarios,
                blocked_words: config.simulator.blocked_words.clone(),
            },
            blobs.clone(),
        ))
    })
}

/// The channel of a video vendor entry (`None` for another kind). It serves the video models
/// it lists and every video model of its `family`.
pub fn vendor_channel(
    config: &Config,
    c: &ChannelConfig,
    blobs: &Arc<dyn BlobStore>,
    public_base: &Arc<OnceLock<String>>,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> anyhow::Result<Option<VideoChannel>> {
    let Some(registration) = c.kind.vendor() else {
        return Ok(None);
    };
    let mut models: Vec<String> = c
        .models
        .iter()
        .filter(|m| config.models.get(*m).map(|m| m.kind) != Some(ModelKind::Chat))
        .cloned()
        .collect();
    if let Some(family) = &c.family {
        for (name, model) in &config.models {
            if model.kind != ModelKind::Chat
                && model.family.as_deref() == Some(family.as_str())
                && !models.contains(name)
            {
                models.push(name.clone());
            }
        }
    }
    let secret = |what: &str, value: &Option<String>, var: &Option<String>| {
        secret(&c.name, what, value, var, env)
    };
    let api_key = secret("api_key_env", &c.api_key, &c.api_key_env)?;
    let defaults = channels::UpstreamTimeouts::default();
    let request = c
        .request_timeout_secs
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(60));
    let base_url = c
        .base_url
        .clone()
        .unwrap_or_else(|| registration.default_base_url.to_owned());
    let remote = channels::RemoteSettings {
        name: c.name.clone(),
        models,
        base_url,
        api_key,
        model_map: c.model_map.clone(),
        timeouts: channels::UpstreamTimeouts {
            connect: c
                .connect_timeout_secs
                .map(Duration::from_secs)
                .unwrap_or(defaults.connect),
            first_byte: request,
            idle: request,
        },
        min_poll_interval: Duration::from_millis(config.tasks.poll_interval_min_ms),
        max_inline_bytes: c.max_inline_bytes.unwrap_or(10 * 1024 * 1024),
        result_urls: channels::ResultUrls {
            allow_private: config.security.allow_private_urls,
            trusted_hosts: c.trusted_hosts.clone(),
        },
        network: network(config, c)?,
    };
    let callback = c
        .callback_secret
        .clone()
        .map(|secret| channels::CallbackSettings {
            secret,
            public_base: public_base.clone(),
        });
    let kind = channels::KindSettings {
        access_key: secret("access_key_env", &c.access_key, &c.access_key_env)?,
        secret_key: secret("secret_key_env", &c.secret_key, &c.secret_key_env)?,
        credentials_file: c.credentials_file.clone(),
        project: c.project.clone(),
        location: c.location.clone(),
        region: c.region.clone(),
        service: c.service.clone(),
        storage_uri: c.storage_uri.clone(),
        storage_base_url: c.storage_base_url.clone(),
        status_words: channels::vendors::seam::status_words(&c.status_words)
            .map_err(|e| anyhow::anyhow!("channel {}: {e}", c.name))?,
    };
    let settings = channels::VendorSettings {
        remote,
        kind,
        callback,
        blobs: blobs.clone(),
    };
    let channel = VideoChannel::vendor(
        registration.kind,
        settings,
        &config.vendor_models,
        c.nearest_longer_duration,
    )
    .map_err(|e| anyhow::anyhow!("channel {}: {e}", c.name))?;
    Ok(Some(channel))
}

/// A channel's secret: its value in the configuration, or the environment variable `var`
/// (the key `what`) names, which must then be set.
fn secret(
    channel: &str,
    what: &str,
    value: &Option<String>,
    var: &Option<String>,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> anyhow::Result<Option<String>> {
    Ok(match (value, var) {
        (Some(value), _) => Some(value.clone()),
        (None, Some(var)) => Some(env(var).filter(|v| !v.is_empty()).with_context(|| {
            format!("channel {channel}: the environment variable {var} ({what}) is not set")
        })?),
        (None, None) => None,
    })
}

/// Each video model's price, for the engine's settlement.
pub fn prices(config: &Config) -> engine::Prices {
    config
        .models
        .iter()
        .filter(|(_, m)| m.kind != ModelKind::Chat)
        .map(|(name, m)| {
            let price = engine::ModelPrice {
                per_second: m.price_per_second,
                per_second_by_resolution: m.price_per_second_by_resolution.clone(),
            };
            (name.clone(), price)
        })
        .collect()
}

/// How each channel is routed to and capped.
pub fn routes(config: &Config) -> Vec<ChannelRoute> {
    config
        .channels
        .iter()
        .map(|c| ChannelRoute {
            name: c.name.clone(),
            priority: c.priority,
            weight: c.weight,
            tracked: c.kind != ChannelKind::Simulator,
            max_concurrency: c.max_concurrency,
            max_calls_per_sec: c.max_calls_per_sec,
        })
        .collect()
}

/// Builds the chat channels of a configuration: every `anthropic` and `openai-chat` channel,
/// and every `simulator` channel that lists a chat model.
pub fn chat_channels(config: &Config) -> anyhow::Result<Vec<Arc<ChatChannel>>> {
    let mut out = Vec::new();
    for c in &config.channels {
        if let Some(channel) = chat_channel(config, c)? {
            out.push(Arc::new(channel));
        }
    }
    Ok(out)
}

/// The chat channel of an entry: an `anthropic` or `openai-chat` one, or a `simulator` that
/// lists a chat model (`None` otherwise).
pub fn chat_channel(config: &Config, c: &ChannelConfig) -> anyhow::Result<Option<ChatChannel>> {
    let chat_models: Vec<String> = c
        .models
        .iter()
        .filter(|m| config.models.get(*m).map(|m| m.kind) == Some(ModelKind::Chat))
        .cloned()
        .collect();
    let api_key = api_key(c)?;
    let settings = ChatSettings {
        name: c.name.clone(),
        models: chat_models,
        base_url: c.base_url.clone().unwrap_or_default(),
        api_key,
        model_map: c.model_map.clone(),
        timeouts: timeouts(c),
        network: if c.is_remote() {
            network(config, c)?
        } else {
            Network::default()
        },
        // Checked at start-up to lie between 1 KiB and 1 GiB.
        max_event_bytes: usize::try_from(config.server.max_stream_event_bytes)
            .unwrap_or(usize::MAX),
    };
    Ok(match c.kind {
        ChannelKind::Simulator if !settings.models.is_empty() => Some(ChatChannel::Simulator(
            channels::chat::SimChat::new(settings),
        )),
        ChannelKind::Anthropic => Some(ChatChannel::Anthropic(channels::chat::AnthropicChat::new(
            settings,
        ))),
        ChannelKind::OpenaiChat => Some(ChatChannel::OpenaiChat(channels::chat::OpenaiChat::new(
            settings,
        ))),
        _ => None,
    })
}

/// A channel's API key: `api_key`, or the environment variable `api_key_env` names.
fn api_key(c: &ChannelConfig) -> anyhow::Result<Option<String>> {
    Ok(match (&c.api_key, &c.api_key_env) {
        (Some(key), _) => Some(key.clone()),
        (None, Some(var)) => Some(std::env::var(var).with_context(|| {
            format!(
                "channel {}: the environment variable {var} (api_key_env) is not set",
                c.name
            )
        })?),
        (None, None) => None,
    })
}

/// How a remote channel reaches its upstream: `[upstream] roots`, its `ca_file`, and its
/// `proxy` (unset: the environment's).
fn network(config: &Config, c: &ChannelConfig) -> anyhow::Result<Network> {
    let settings = NetworkSettings {
        roots: match config.upstream.roots {
            RootsChoice::Webpki => Roots::Webpki,
            RootsChoice::System => Roots::System,
        },
        ca_file: c.ca_file.as_ref().map(std::path::PathBuf::from),
        proxy: match c.proxy.as_deref() {
            None => ProxyChoice::Env,
            Some(NO_PROXY) => ProxyChoice::Direct,
            Some(url) => ProxyChoice::Url(url.to_owned()),
        },
    };
    Network::build(&settings).with_context(|| format!("channel {}", c.name))
}

fn timeouts(c: &ChannelConfig) -> UpstreamTimeouts {
    let default = UpstreamTimeouts::default();
    let secs = |v: Option<u64>, d: Duration| v.map(Duration::from_secs).unwrap_or(d);
    UpstreamTimeouts {
        connect: secs(c.connect_timeout_secs, default.connect),
        first_byte: secs(
            c.first_byte_timeout_secs.or(c.request_timeout_secs),
            default.first_byte,
        ),
        idle: secs(c.idle_timeout_secs, default.idle),
    }
}

/// The second format's catalog, from the configuration's `[models.*]` of kind `generation`.
pub fn catalog(config: &Config) -> Catalog {
    Catalog::new(
        config
            .models
            .iter()
            .filter(|(_, m)| m.kind == ModelKind::Generation)
            .map(|(name, m)| ModelSpec {
                name: name.clone(),
                family: m.family.clone().unwrap_or_default(),
                resolutions: m.resolutions.clone(),
                durations: m.durations.clone(),
                ratios: m.ratios.clone(),
                joint_rules: m
                    .max_duration_by_resolution
                    .iter()
                    .map(|(resolution, max)| JointRule::MaxDuration {
                        resolution: resolution.clone(),
                        max_secs: *max,
                    })
                    .collect(),
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_catalog_has_the_contract_models() {
        let config = Config::embedded().unwrap();
        let catalog = catalog(&config);
        let pro = catalog.model("gen2-pro").unwrap();
        assert_eq!(pro.family, "gen2");
        assert_eq!(pro.max_duration_at("1080p"), Some(10));
        assert!(catalog.model("motion-1").is_some());
        assert!(catalog.model("model_h3").is_none());
    }
}
