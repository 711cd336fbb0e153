//! The relay's configuration: the embedded default, overridden key by key by an operator's
//! TOML file. Unknown keys are refused at start-up, naming the key and the file. Here: the
//! whole [`Config`], reading and overlaying files and the checks across sections; the plain
//! sections in `sections`, the model catalog and the channels in `channels`.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

pub use engine::TasksConfig;

/// The embedded default, parsed by the same code as an operator's file.
pub const EMBEDDED_DEFAULT: &str = include_str!("default.toml");

/// The longest `server.spin_us` taken: 10 ms.
pub const MAX_SPIN_US: u64 = 10_000;

/// The range of `server.max_head_bytes`: hyper reads no less than 8 KiB, and 16 MiB is more
/// than any client needs.
pub const HEAD_BYTES: std::ops::RangeInclusive<u64> = 8192..=16 << 20;
/// The bounds of `server.max_stream_event_bytes`: 1 KiB (smaller would cut ordinary events)
/// to 1 GiB.
pub const MIN_STREAM_EVENT_BYTES: u64 = 1024;
pub const MAX_STREAM_EVENT_BYTES: u64 = 1 << 30;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config {origin}: {message}")]
    Parse { origin: String, message: String },
    #[error("config {origin}: {message}")]
    Invalid { origin: String, message: String },
    #[error("config {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub server: ServerConfig,
    pub tasks: TasksConfig,
    pub assets: AssetsConfig,
    pub characters: CharactersConfig,
    pub security: SecurityConfig,
    pub upstream: UpstreamConfig,
    pub webhooks: WebhooksConfig,
    pub limits: LimitsConfig,
    pub simulator: SimulatorConfig,
    pub store: StoreConfig,
    pub cluster: ClusterConfig,
    pub blobs: BlobsConfig,
    /// group -> channel family.
    pub groups: BTreeMap<String, String>,
    pub models: BTreeMap<String, ModelConfig>,
    /// What each vendor model can make, by the vendor's model name: added to, or replacing,
    /// the built-in catalog of the kinds that serve it.
    pub vendor_models: BTreeMap<String, ::channels::ModelCaps>,
    pub channels: Vec<ChannelConfig>,
}

mod channels;
mod sections;
#[cfg(test)]
mod tests;

pub use channels::{ChannelConfig, ChannelKind, ModelConfig, ModelKind, NO_PROXY};
use channels::{
    MAX_CALLS_PER_SEC, MIN_CALLS_PER_SEC, check_chat_channel, check_network, check_video_channel,
    system_roots_usable,
};
pub use sections::{
    AssetsConfig, BlobBackend, BlobsConfig, CharactersConfig, ClusterConfig, ContentMode,
    DEFAULT_S3_REGION, LimitsConfig, RootsChoice, SecurityConfig, ServerConfig, SimulatorConfig,
    StoreBackend, StoreConfig, UpstreamConfig, WebhooksConfig,
};

/// A connection thread's spin on the embedded store, unless `server.spin_us` says otherwise.
pub const EMBEDDED_SPIN_US: u64 = 50;

impl Config {
    /// How long a connection thread looks for work after a request before it sleeps, in
    /// microseconds: `server.spin_us`, else [`EMBEDDED_SPIN_US`] on the embedded store and 0
    /// on PostgreSQL. There a request waits for the database's round trips, longer than any
    /// window, and on a machine it shares with the database a spinning thread takes the core
    /// its answer is computed on (three relays polling one task on two cores answered about
    /// 1.4 times as many polls without the spin).
    pub fn spin_us(&self) -> u64 {
        self.server.spin_us.unwrap_or(match self.store.backend() {
            StoreBackend::Sled => EMBEDDED_SPIN_US,
            StoreBackend::Postgres => 0,
        })
    }

    /// The embedded default alone.
    pub fn embedded() -> Result<Config, ConfigError> {
        Config::from_toml(None, "embedded default")
    }

    /// Reads an operator's file over the embedded default.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: origin.clone(),
            source,
        })?;
        Config::from_toml(Some(&text), &origin)
    }

    /// Parses `text` (an operator's file; `None` = none) over the embedded default.
    pub fn from_toml(text: Option<&str>, origin: &str) -> Result<Config, ConfigError> {
        let parse_err = |origin: &str, e: toml::de::Error| ConfigError::Parse {
            origin: origin.to_owned(),
            message: e.to_string().trim_end().replace('\n', " "),
        };
        let mut merged: toml::Table =
            toml::from_str(EMBEDDED_DEFAULT).map_err(|e| parse_err("embedded default", e))?;
        if let Some(text) = text {
            // First pass on the file alone: unknown keys and wrong types, with line numbers.
            toml::from_str::<Config>(text).map_err(|e| parse_err(origin, e))?;
            let overlay: toml::Table = toml::from_str(text).map_err(|e| parse_err(origin, e))?;
            merge(&mut merged, overlay);
        }
        let config: Config = toml::Value::Table(merged)
            .try_into()
            .map_err(|e| parse_err(origin, e))?;
        config.check().map_err(|message| ConfigError::Invalid {
            origin: origin.to_owned(),
            message,
        })?;
        Ok(config)
    }

    /// Settings the environment gives over the file's: `RELAY_STORE_URL` (`store.url`).
    /// Checked again as a whole afterwards.
    pub fn apply_env(&mut self, origin: &str) -> Result<(), ConfigError> {
        if let Some(url) = std::env::var("RELAY_STORE_URL")
            .ok()
            .filter(|u| !u.is_empty())
        {
            self.store.url = Some(url);
        }
        self.check().map_err(|message| ConfigError::Invalid {
            origin: format!("{origin} with the environment"),
            message,
        })
    }

    /// Rules serde cannot express: prices for every billable model, channels of known models.
    fn check(&self) -> Result<(), String> {
        if self.server.listen.parse::<std::net::SocketAddr>().is_err() {
            return Err(format!(
                "server.listen: {:?} is not an address like 127.0.0.1:8080",
                self.server.listen
            ));
        }
        if self.server.stream_ping_ms == 0 {
            return Err("server.stream_ping_ms must be above 0".into());
        }
        if !(MIN_STREAM_EVENT_BYTES..=MAX_STREAM_EVENT_BYTES)
            .contains(&self.server.max_stream_event_bytes)
        {
            return Err(format!(
                "server.max_stream_event_bytes must be from {MIN_STREAM_EVENT_BYTES} to {MAX_STREAM_EVENT_BYTES}"
            ));
        }
        if self.server.spin_us.is_some_and(|us| us > MAX_SPIN_US) {
            return Err(format!(
                "server.spin_us must be at most {MAX_SPIN_US} (a connection thread would burn its core for that long after every request)"
            ));
        }
        if !HEAD_BYTES.contains(&self.server.max_head_bytes) {
            return Err(format!(
                "server.max_head_bytes must be from {} to {}",
                HEAD_BYTES.start(),
                HEAD_BYTES.end()
            ));
        }
        if self.server.max_upload_files == 0 {
            return Err("server.max_upload_files must be above 0".into());
        }
        if self.server.header_read_timeout_secs == 0 || self.server.body_read_timeout_secs == 0 {
            return Err(
                "server.header_read_timeout_secs and server.body_read_timeout_secs must be above 0"
                    .into(),
            );
        }
        if self.server.max_body_bytes == 0 || self.server.max_upload_bytes == 0 {
            return Err("server.max_body_bytes and server.max_upload_bytes must be above 0".into());
        }
        if self.store.backend() == StoreBackend::Postgres {
            match self.store.url.as_deref() {
                Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
                }
                Some(_) => {
                    return Err(
                        "store.url must be a PostgreSQL URL: postgres://user@host:port/database"
                            .into(),
                    );
                }
                None => {
                    return Err(
                        "store.url (or RELAY_STORE_URL) is required with store.backend = \"postgres\""
                            .into(),
                    );
                }
            }
            if self.store.pool_size == 0 {
                return Err("store.pool_size must be above 0".into());
            }
        }
        if self.tasks.timeout_secs == 0 {
            return Err("tasks.timeout_secs must be above 0".into());
        }
        let hooks = &self.webhooks;
        if hooks.timeout_ms == 0
            || hooks.retry_initial_ms == 0
            || hooks.poll_interval_ms == 0
            || hooks.concurrency == 0
            || hooks.per_receiver_concurrency == 0
            || hooks.per_key_concurrency == 0
        {
            return Err(
                "webhooks.timeout_ms, webhooks.retry_initial_ms, webhooks.poll_interval_ms, \
                 webhooks.concurrency, webhooks.per_receiver_concurrency and \
                 webhooks.per_key_concurrency must be above 0"
                    .into(),
            );
        }
        if hooks.retry_max_ms < hooks.retry_initial_ms {
            return Err("webhooks.retry_max_ms must be at least webhooks.retry_initial_ms".into());
        }
        if !(self.simulator.task_secs >= 0.0 && self.simulator.task_secs <= 3600.0) {
            return Err("simulator.task_secs must be from 0 to 3600".into());
        }
        let limits = &self.limits;
        if limits.rps == 0 || limits.burst == 0 || limits.poll_rps_per_task == 0 {
            return Err(
                "limits.rps, limits.burst and limits.poll_rps_per_task must be above 0".into(),
            );
        }
        if limits.task_buckets_max == 0
            || limits.auth_failures_burst == 0
            || limits.auth_failures_per_minute == 0
            || limits.auth_failure_sources_max == 0
        {
            return Err(
                "limits.task_buckets_max, limits.auth_failures_burst, \
                 limits.auth_failures_per_minute and limits.auth_failure_sources_max must be above 0"
                    .into(),
            );
        }
        self.check_cluster()?;
        if self.simulator.fps == 0 || self.simulator.fps > 60 {
            return Err("simulator.fps must be from 1 to 60".into());
        }
        self.blobs.check()?;
        if self.upstream.roots == RootsChoice::System {
            system_roots_usable()?;
        }
        for (name, model) in &self.models {
            match model.kind {
                ModelKind::Video => {
                    if model.price_per_second.is_none() {
                        return Err(format!("models.{name}: price_per_second is required"));
                    }
                }
                ModelKind::Generation => {
                    if model.family.is_none() {
                        return Err(format!("models.{name}: family is required"));
                    }
                    for res in &model.resolutions {
                        if model.price_per_second(Some(res)).is_none() {
                            return Err(format!(
                                "models.{name}: no price for resolution {res} (set price_per_second or price_per_second_by_resolution)"
                            ));
                        }
                    }
                }
                ModelKind::Chat => {
                    if model.input_price_per_mtok.is_none() || model.output_price_per_mtok.is_none()
                    {
                        return Err(format!(
                            "models.{name}: input_price_per_mtok and output_price_per_mtok are required"
                        ));
                    }
                }
            }
        }
        let mut names = std::collections::BTreeSet::new();
        for channel in &self.channels {
            if channel.name.is_empty() {
                return Err("channels: every channel needs a name".into());
            }
            if !names.insert(channel.name.as_str()) {
                return Err(format!("channels: duplicate channel name {}", channel.name));
            }
            for model in &channel.models {
                if !self.models.contains_key(model) {
                    return Err(format!(
                        "channels.{}: model {model} has no [models.{model}] entry",
                        channel.name
                    ));
                }
            }
            if matches!(
                channel.kind,
                ChannelKind::Anthropic | ChannelKind::OpenaiChat
            ) {
                check_chat_channel(&self.models, channel)?;
            }
            if let Some(registration) = channel.kind.vendor() {
                check_video_channel(&self.models, channel, registration)?;
            }
            check_network(channel)?;
            match (&channel.callback_secret, channel.kind.vendor()) {
                (Some(_), registration) if !registration.is_some_and(|r| r.callbacks) => {
                    let kinds: Vec<&str> = ::channels::vendors::REGISTRY
                        .iter()
                        .filter(|r| r.callbacks)
                        .map(|r| r.kind)
                        .collect();
                    return Err(format!(
                        "channels.{}: callback_secret applies to {} channels only",
                        channel.name,
                        kinds.join(" and ")
                    ));
                }
                (Some(secret), _) if secret.len() < 16 => {
                    return Err(format!(
                        "channels.{}: callback_secret must be at least 16 characters",
                        channel.name
                    ));
                }
                _ => {}
            }
            if !channel.status_words.is_empty() {
                if !channel.kind.vendor().is_some_and(|r| r.status_words) {
                    let kinds: Vec<&str> = ::channels::vendors::REGISTRY
                        .iter()
                        .filter(|r| r.status_words)
                        .map(|r| r.kind)
                        .collect();
                    return Err(format!(
                        "channels.{}: status_words applies to {} channels only",
                        channel.name,
                        kinds.join(" and ")
                    ));
                }
                ::channels::vendors::seam::status_words(&channel.status_words)
                    .map_err(|e| format!("channels.{}: {e}", channel.name))?;
            }
            if let Some(rate) = channel.max_calls_per_sec {
                if matches!(
                    channel.kind,
                    ChannelKind::Anthropic | ChannelKind::OpenaiChat
                ) {
                    return Err(format!(
                        "channels.{}: max_calls_per_sec applies to video channels only",
                        channel.name
                    ));
                }
                if !(MIN_CALLS_PER_SEC..=MAX_CALLS_PER_SEC).contains(&rate) {
                    return Err(format!(
                        "channels.{}: max_calls_per_sec must be from {MIN_CALLS_PER_SEC} to {MAX_CALLS_PER_SEC}, got {rate}",
                        channel.name
                    ));
                }
            }
        }
        Ok(())
    }

    /// `[cluster]`: a Redis URL of a kind the relay speaks, a prefix.
    pub fn check_cluster(&self) -> Result<(), String> {
        let url = self.cluster.redis_url.trim();
        if !(url.is_empty() || url.starts_with("redis://") || url.starts_with("redis+unix://")) {
            return Err(format!(
                "cluster.redis_url: {url:?} must start with redis:// (or redis+unix://)"
            ));
        }
        if self.cluster.prefix.is_empty() {
            return Err("cluster.prefix must not be empty".into());
        }
        Ok(())
    }

    /// The first-format model's settings, if the catalog has it.
    pub fn model(&self, name: &str) -> Option<&ModelConfig> {
        self.models.get(name)
    }
}

/// Overlays `overlay` on `base` key by key; `models` and `channels` given in the overlay
/// replace the base's whole lists.
fn merge(base: &mut toml::Table, overlay: toml::Table) {
    for (key, value) in overlay {
        let replace_whole = key == "models" || key == "channels";
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) if !replace_whole => merge(b, o),
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}
