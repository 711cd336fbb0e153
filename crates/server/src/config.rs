//! The relay's configuration: the embedded default, overridden key by key by an operator's
//! TOML file. Unknown keys are refused at start-up, naming the key and the file.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

pub use engine::TasksConfig;

/// The embedded default, parsed by the same code as an operator's file.
pub const EMBEDDED_DEFAULT: &str = include_str!("default.toml");

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
    pub security: SecurityConfig,
    pub webhooks: WebhooksConfig,
    pub limits: LimitsConfig,
    pub simulator: SimulatorConfig,
    pub store: StoreConfig,
    pub cluster: ClusterConfig,
    pub blobs: BlobsConfig,
    /// group -> channel family.
    pub groups: BTreeMap<String, String>,
    pub models: BTreeMap<String, ModelConfig>,
    pub channels: Vec<ChannelConfig>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContentMode {
    #[default]
    Proxy,
    Redirect,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    pub listen: String,
    pub public_base_url: String,
    pub max_body_bytes: u64,
    pub max_upload_bytes: u64,
    pub content_mode: ContentMode,
    pub signed_url_ttl_secs: u64,
    /// `/v1/messages` streams: a `ping` after this long without upstream bytes.
    pub stream_ping_ms: u64,
    /// A request head must arrive within this, and a new connection's first request too.
    pub header_read_timeout_secs: u64,
    /// The longest silence between two pieces of a request body.
    pub body_read_timeout_secs: u64,
    /// Open connections in all; 0: as many as the descriptor limit allows (see
    /// [`crate::conns`]). Always capped so that descriptors stay in reserve.
    pub max_connections: u32,
    /// Open connections from one client address; 0: no cap.
    pub max_connections_per_client: u32,
}

impl ServerConfig {
    /// The limit of a JSON body.
    pub fn json_limit(&self) -> crate::http::Limit {
        crate::http::Limit {
            bytes: self.max_body_bytes,
            idle: std::time::Duration::from_secs(self.body_read_timeout_secs),
        }
    }

    /// The limit of a multipart body.
    pub fn upload_limit(&self) -> crate::http::Limit {
        crate::http::Limit {
            bytes: self.max_upload_bytes,
            idle: std::time::Duration::from_secs(self.body_read_timeout_secs),
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// Memory the embedded store may use to cache its pages, in MiB.
    pub cache_mb: u64,
    /// `sled` (embedded, under the data directory) or `postgres`; unset: `postgres` when a
    /// `url` is given, else `sled`.
    pub backend: Option<StoreBackend>,
    /// The PostgreSQL connection URL (`RELAY_STORE_URL` overrides it).
    pub url: Option<String>,
    /// Connections to PostgreSQL this relay keeps at most.
    pub pool_size: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreBackend {
    Sled,
    Postgres,
}

impl StoreConfig {
    /// The backend in use, after the rule for an unset `backend`.
    pub fn backend(&self) -> StoreBackend {
        match (self.backend, &self.url) {
            (Some(backend), _) => backend,
            (None, Some(_)) => StoreBackend::Postgres,
            (None, None) => StoreBackend::Sled,
        }
    }
}

/// `[cluster]`: state shared with the other relays of a deployment through Redis.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterConfig {
    /// `redis://host:port/db`; empty (the default): no Redis, every limit and reservation
    /// in this process only. `RELAY_REDIS_URL` overrides it.
    pub redis_url: String,
    /// This relay's name in logs and in Redis; empty: a fresh ULID per start.
    pub instance_id: String,
    /// Prefix of every Redis key and channel, so deployments can share one Redis.
    pub prefix: String,
}

/// Where blobs (videos, frames, uploads) are kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BlobBackend {
    /// `<data>/files`.
    #[default]
    Local,
    /// An S3-compatible object store; credentials from `AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY` and optionally `AWS_SESSION_TOKEN`.
    S3,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BlobsConfig {
    pub backend: BlobBackend,
    pub bucket: Option<String>,
    /// An S3-compatible server's `http(s)://host[:port]`; none: AWS's endpoint of `region`.
    pub endpoint: Option<String>,
    pub region: Option<String>,
    /// A key prefix (`prefix/<blob id>`).
    pub prefix: Option<String>,
    /// Content and `/files` requests answer `302` to a presigned URL of the object instead of
    /// streaming it through the relay.
    pub presign: bool,
    /// Multipart uploads: the size of a part (at least 5 MiB).
    pub part_bytes: Option<u64>,
}

/// The region of an S3 backend without `region`.
pub const DEFAULT_S3_REGION: &str = "us-east-1";

impl BlobsConfig {
    /// The rules of `[blobs]`: an S3 backend needs a bucket; the S3 keys mean nothing to a
    /// local one.
    fn check(&self) -> Result<(), String> {
        match self.backend {
            BlobBackend::Local => {
                let s3_only = [
                    ("bucket", self.bucket.is_some()),
                    ("endpoint", self.endpoint.is_some()),
                    ("region", self.region.is_some()),
                    ("prefix", self.prefix.is_some()),
                    ("presign", self.presign),
                    ("part_bytes", self.part_bytes.is_some()),
                ];
                if let Some((key, _)) = s3_only.iter().find(|(_, set)| *set) {
                    return Err(format!(
                        "blobs.{key} applies to backend = \"s3\" only (blobs.backend is \"local\")"
                    ));
                }
            }
            BlobBackend::S3 => {
                match self.bucket.as_deref() {
                    None => {
                        return Err("blobs.bucket is required when blobs.backend = \"s3\"".into());
                    }
                    Some(b) if !valid_bucket(b) => {
                        return Err(format!(
                            "blobs.bucket: {b:?} is not a bucket name (3 to 63 of a-z, 0-9, '.', '-')"
                        ));
                    }
                    Some(_) => {}
                }
                if let Some(endpoint) = self.endpoint.as_deref() {
                    let rest = endpoint
                        .strip_prefix("http://")
                        .or_else(|| endpoint.strip_prefix("https://"));
                    if rest.is_none_or(|r| r.trim_end_matches('/').is_empty()) {
                        return Err(format!(
                            "blobs.endpoint: {endpoint:?} is not an http:// or https:// URL"
                        ));
                    }
                }
                if self.region.as_deref().is_some_and(str::is_empty) {
                    return Err(
                        "blobs.region must not be empty (leave it out for us-east-1)".into(),
                    );
                }
                if let Some(prefix) = self.prefix.as_deref() {
                    let trimmed = prefix.trim_matches('/');
                    let ok = !trimmed.is_empty()
                        && trimmed.split('/').all(|seg| {
                            !seg.is_empty()
                                && seg != "."
                                && seg != ".."
                                && seg.chars().all(|c| {
                                    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
                                })
                        });
                    if !ok {
                        return Err(format!(
                            "blobs.prefix: {prefix:?} must be segments of A-Z, a-z, 0-9, '.', '_', '-' separated by '/'"
                        ));
                    }
                }
                if let Some(part) = self.part_bytes
                    && part < store::MIN_PART_BYTES as u64
                {
                    return Err(format!(
                        "blobs.part_bytes must be at least {} (S3's smallest part), got {part}",
                        store::MIN_PART_BYTES
                    ));
                }
            }
        }
        Ok(())
    }
}

/// S3's bucket naming rules, loosely: 3 to 63 lowercase letters, digits, dots and hyphens,
/// starting and ending with a letter or digit.
fn valid_bucket(name: &str) -> bool {
    (3..=63).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '-'))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AssetsConfig {
    pub ttl_secs: u64,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SecurityConfig {
    pub allow_private_urls: bool,
    pub url_fetch_timeout_secs: u64,
    pub max_image_bytes: u64,
}

/// `[webhooks]`: delivery of the signed webhooks of finished tasks.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WebhooksConfig {
    /// One attempt, from connecting to the answer's head.
    pub timeout_ms: u64,
    /// Wait after the first failed attempt; doubled after each further one.
    pub retry_initial_ms: u64,
    /// Cap of the wait between attempts.
    pub retry_max_ms: u64,
    /// No attempt starts later than this after the task ended; the delivery is then `failed`.
    pub max_age_secs: u64,
    /// How often due deliveries are looked for.
    pub poll_interval_ms: u64,
    /// Deliveries under way at once in this instance.
    pub concurrency: u32,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    pub rps: u32,
    pub burst: u32,
    pub poll_rps_per_task: u32,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SimulatorConfig {
    /// Seconds a simulated video task runs (fractions allowed).
    pub task_secs: f64,
    pub scenarios: bool,
    pub blocked_words: Vec<String>,
    pub fps: u32,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelKind {
    /// First format (`/v1/videos`).
    #[default]
    Video,
    /// Second format (`/v1/video/generations`).
    Generation,
    Chat,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelConfig {
    pub kind: ModelKind,
    pub family: Option<String>,
    pub resolutions: Vec<String>,
    pub durations: Vec<u32>,
    pub ratios: Vec<String>,
    pub max_duration_by_resolution: BTreeMap<String, u32>,
    pub price_per_second: Option<u64>,
    pub price_per_second_by_resolution: BTreeMap<String, u64>,
    pub input_price_per_mtok: Option<u64>,
    pub output_price_per_mtok: Option<u64>,
}

impl ModelConfig {
    /// Credits per second of video at `resolution` (a resolution-specific price wins).
    pub fn price_per_second(&self, resolution: Option<&str>) -> Option<u64> {
        resolution
            .and_then(|r| self.price_per_second_by_resolution.get(r).copied())
            .or(self.price_per_second)
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ChannelKind {
    #[default]
    Simulator,
    OpenaiVideos,
    Ark,
    Anthropic,
    OpenaiChat,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ChannelConfig {
    pub name: String,
    pub kind: ChannelKind,
    pub family: Option<String>,
    pub models: Vec<String>,
    pub base_url: Option<String>,
    pub api_key: Option<String>,
    pub api_key_env: Option<String>,
    pub priority: i32,
    pub weight: u32,
    pub model_map: BTreeMap<String, String>,
    pub connect_timeout_secs: Option<u64>,
    pub request_timeout_secs: Option<u64>,
    /// Chat channels: seconds from sending a request to the upstream's answer head.
    pub first_byte_timeout_secs: Option<u64>,
    /// Chat channels: the longest silence inside a streamed upstream answer, in seconds.
    pub idle_timeout_secs: Option<u64>,
    /// Video channels: upstream calls at once (default 16).
    pub max_concurrency: Option<u32>,
    /// Video channels: upstream calls per second (default: no cap).
    pub max_calls_per_sec: Option<f64>,
    /// Video channels: reference images up to this size are sent inline (default 10 MiB).
    pub max_inline_bytes: Option<u64>,
    /// Video channels: hosts of result URLs fetched without the SSRF guard (`host` or
    /// `host:port`); the channel's own `base_url` is always trusted.
    pub trusted_hosts: Vec<String>,
    /// `ark` channels: with a secret, submissions carry a `callback_url` on the relay
    /// (`POST /callbacks/ark/{channel}`), and the upstream's callbacks wake the task's poll.
    pub callback_secret: Option<String>,
}

impl Config {
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
        {
            return Err(
                "webhooks.timeout_ms, webhooks.retry_initial_ms, webhooks.poll_interval_ms and \
                 webhooks.concurrency must be above 0"
                    .into(),
            );
        }
        if hooks.retry_max_ms < hooks.retry_initial_ms {
            return Err("webhooks.retry_max_ms must be at least webhooks.retry_initial_ms".into());
        }
        if !(self.simulator.task_secs >= 0.0 && self.simulator.task_secs <= 3600.0) {
            return Err("simulator.task_secs must be from 0 to 3600".into());
        }
        if self.limits.rps == 0 || self.limits.burst == 0 || self.limits.poll_rps_per_task == 0 {
            return Err(
                "limits.rps, limits.burst and limits.poll_rps_per_task must be above 0".into(),
            );
        }
        self.check_cluster()?;
        if self.simulator.fps == 0 || self.simulator.fps > 60 {
            return Err("simulator.fps must be from 1 to 60".into());
        }
        self.blobs.check()?;
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
                check_chat_channel(self, channel)?;
            }
            if matches!(channel.kind, ChannelKind::OpenaiVideos | ChannelKind::Ark) {
                check_video_channel(self, channel)?;
            }
            match (&channel.callback_secret, channel.kind) {
                (Some(_), kind) if kind != ChannelKind::Ark => {
                    return Err(format!(
                        "channels.{}: callback_secret applies to ark channels only",
                        channel.name
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

/// Bounds of a channel's `max_calls_per_sec` (one call in 100 s at the least).
const MIN_CALLS_PER_SEC: f64 = 0.01;
const MAX_CALLS_PER_SEC: f64 = 100_000.0;

/// A chat channel (`anthropic`, `openai-chat`) needs an http(s) `base_url` and serves chat
/// models only.
fn check_chat_channel(config: &Config, channel: &ChannelConfig) -> Result<(), String> {
    let name = &channel.name;
    match channel.base_url.as_deref() {
        Some(url) if url.starts_with("http://") || url.starts_with("https://") => {}
        Some(url) => {
            return Err(format!(
                "channels.{name}: base_url {url:?} must start with http:// or https://"
            ));
        }
        None => return Err(format!("channels.{name}: base_url is required")),
    }
    for model in &channel.models {
        if config.models.get(model).map(|m| m.kind) != Some(ModelKind::Chat) {
            return Err(format!(
                "channels.{name}: model {model} is not a chat model (kind = \"chat\")"
            ));
        }
    }
    for (what, secs) in [
        ("connect_timeout_secs", channel.connect_timeout_secs),
        ("first_byte_timeout_secs", channel.first_byte_timeout_secs),
        ("idle_timeout_secs", channel.idle_timeout_secs),
    ] {
        if secs == Some(0) {
            return Err(format!("channels.{name}: {what} must be above 0"));
        }
    }
    Ok(())
}

/// A remote video channel (`openai-videos`, `ark`) needs an http(s) `base_url` and serves
/// video models only.
fn check_video_channel(config: &Config, channel: &ChannelConfig) -> Result<(), String> {
    let name = &channel.name;
    match channel.base_url.as_deref() {
        Some(url) if url.starts_with("http://") || url.starts_with("https://") => {}
        Some(url) => {
            return Err(format!(
                "channels.{name}: base_url {url:?} must start with http:// or https://"
            ));
        }
        None => return Err(format!("channels.{name}: base_url is required")),
    }
    for model in &channel.models {
        if config.models.get(model).map(|m| m.kind) == Some(ModelKind::Chat) {
            return Err(format!(
                "channels.{name}: model {model} is a chat model; this channel serves videos"
            ));
        }
    }
    if channel.models.is_empty() && channel.family.is_none() {
        return Err(format!("channels.{name}: set models or family"));
    }
    for (what, secs) in [
        ("connect_timeout_secs", channel.connect_timeout_secs),
        ("request_timeout_secs", channel.request_timeout_secs),
    ] {
        if secs == Some(0) {
            return Err(format!("channels.{name}: {what} must be above 0"));
        }
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_default_parses() {
        let config = Config::embedded().unwrap();
        assert_eq!(config.server.listen, "127.0.0.1:8080");
        assert_eq!(config.server.max_body_bytes, 10 * 1024 * 1024);
        assert_eq!(config.tasks.timeout_secs, 600);
        assert_eq!(config.models["model_h3"].price_per_second, Some(10));
        assert_eq!(
            config.models["gen2-pro"].price_per_second(Some("1080p")),
            Some(12)
        );
        assert_eq!(config.groups["gen2"], "gen2");
    }

    #[test]
    fn file_overrides_key_by_key() {
        let config = Config::from_toml(
            Some("[server]\nlisten = \"127.0.0.1:0\"\n[simulator]\ntask_secs = 0.5\n"),
            "t.toml",
        )
        .unwrap();
        assert_eq!(config.server.listen, "127.0.0.1:0");
        assert_eq!(config.server.max_body_bytes, 10 * 1024 * 1024);
        assert_eq!(config.simulator.task_secs, 0.5);
        assert!(config.simulator.scenarios);
    }

    #[test]
    fn unknown_keys_are_refused_naming_key_and_file() {
        let err = Config::from_toml(Some("[server]\nlisen = \"x\"\n"), "relay.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("relay.toml"), "{err}");
        assert!(err.contains("lisen"), "{err}");
        let err = Config::from_toml(Some("[nope]\na = 1\n"), "relay.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("nope"), "{err}");
    }

    #[test]
    fn missing_price_is_refused_naming_the_model() {
        let err = Config::from_toml(
            Some("[models.x]\nkind = \"video\"\n[[channels]]\nname = \"s\"\nmodels = [\"x\"]\n"),
            "relay.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("models.x"), "{err}");
    }

    #[test]
    fn the_store_backend_follows_its_url() {
        let sled = Config::from_toml(None, "t.toml").unwrap();
        assert_eq!(sled.store.backend(), StoreBackend::Sled);
        let pg = Config::from_toml(
            Some("[store]\nurl = \"postgres://relay@127.0.0.1:5432/relay\"\n"),
            "t.toml",
        )
        .unwrap();
        assert_eq!(pg.store.backend(), StoreBackend::Postgres);
        for (text, named) in [
            (
                "[store]\nbackend = \"postgres\"\n",
                "store.url (or RELAY_STORE_URL) is required",
            ),
            (
                "[store]\nurl = \"mysql://x\"\n",
                "store.url must be a PostgreSQL URL",
            ),
            (
                "[store]\nurl = \"postgres://x/y\"\npool_size = 0\n",
                "store.pool_size must be above 0",
            ),
            ("[store]\nbackend = \"mongo\"\n", "backend"),
        ] {
            let err = Config::from_toml(Some(text), "t.toml")
                .unwrap_err()
                .to_string();
            assert!(err.contains(named), "{text}: {err}");
        }
    }

    #[test]
    fn zero_intervals_and_sizes_are_refused() {
        for (text, named) in [
            ("[server]\nstream_ping_ms = 0\n", "server.stream_ping_ms"),
            ("[server]\nmax_body_bytes = 0\n", "server.max_body_bytes"),
        ] {
            let err = Config::from_toml(Some(text), "relay.toml")
                .unwrap_err()
                .to_string();
            assert!(err.contains(named), "{err}");
        }
        let ok = Config::from_toml(Some("[server]\nstream_ping_ms = 250\n"), "relay.toml").unwrap();
        assert_eq!(ok.server.stream_ping_ms, 250);
    }

    #[test]
    fn chat_channels_need_a_base_url_and_chat_models() {
        let chat = "[models.c]\nkind = \"chat\"\ninput_price_per_mtok = 1\noutput_price_per_mtok = 1\n[models.model_h3]\nkind = \"video\"\nprice_per_second = 1\n";
        let with = |channel: &str| Config::from_toml(Some(&format!("{chat}{channel}")), "t.toml");
        let err = with("[[channels]]\nname = \"u\"\nkind = \"openai-chat\"\nmodels = [\"c\"]\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("channels.u: base_url is required"), "{err}");
        let err = with("[[channels]]\nname = \"u\"\nkind = \"anthropic\"\nbase_url = \"http://h\"\nmodels = [\"model_h3\"]\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("model_h3 is not a chat model"), "{err}");
        let ok = with("[[channels]]\nname = \"u\"\nkind = \"openai-chat\"\nbase_url = \"http://h/v1\"\nmodels = [\"c\"]\nidle_timeout_secs = 5\n")
            .unwrap();
        assert_eq!(ok.channels[0].idle_timeout_secs, Some(5));
    }

    #[test]
    fn a_callback_secret_is_for_ark_channels_and_long_enough() {
        let channel = |kind: &str, secret: &str| {
            Config::from_toml(
                Some(&format!(
                    "[[channels]]\nname = \"u\"\nkind = \"{kind}\"\nbase_url = \"http://h/api/v3\"\nmodels = [\"model_h3\"]\ncallback_secret = \"{secret}\"\n"
                )),
                "t.toml",
            )
        };
        let ok = channel("ark", "0123456789abcdef").unwrap();
        assert_eq!(
            ok.channels[0].callback_secret.as_deref(),
            Some("0123456789abcdef")
        );
        let err = channel("ark", "short").unwrap_err().to_string();
        assert!(
            err.contains("channels.u: callback_secret must be at least 16"),
            "{err}"
        );
        let err = channel("openai-videos", "0123456789abcdef")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("callback_secret applies to ark channels only"),
            "{err}"
        );
    }

    #[test]
    fn a_channel_call_rate_is_checked() {
        let channel = |kind: &str, rate: &str| {
            let chat = "[models.c]\nkind = \"chat\"\ninput_price_per_mtok = 1\noutput_price_per_mtok = 1\n[models.model_h3]\nkind = \"video\"\nprice_per_second = 1\n";
            Config::from_toml(
                Some(&format!(
                    "{chat}[[channels]]\nname = \"u\"\nkind = \"{kind}\"\nbase_url = \"http://h/v1\"\nmodels = [\"{}\"]\nmax_calls_per_sec = {rate}\n",
                    if kind == "openai-chat" {
                        "c"
                    } else {
                        "model_h3"
                    }
                )),
                "t.toml",
            )
        };
        let ok = channel("ark", "5").unwrap();
        assert_eq!(ok.channels[0].max_calls_per_sec, Some(5.0));
        assert_eq!(
            channel("openai-videos", "0.5").unwrap().channels[0].max_calls_per_sec,
            Some(0.5)
        );
        for bad in ["0", "-1", "nan", "inf"] {
            let err = channel("ark", bad).unwrap_err().to_string();
            assert!(
                err.contains("channels.u: max_calls_per_sec"),
                "{bad}: {err}"
            );
        }
        let err = channel("openai-chat", "5").unwrap_err().to_string();
        assert!(err.contains("video channels only"), "{err}");
        assert!(
            Config::embedded().unwrap().channels[0]
                .max_calls_per_sec
                .is_none()
        );
    }

    #[test]
    fn cluster_is_off_by_default_and_its_url_is_checked() {
        let config = Config::embedded().unwrap();
        assert!(config.cluster.redis_url.is_empty());
        assert_eq!(config.cluster.prefix, "relay:");
        let ok = Config::from_toml(
            Some("[cluster]\nredis_url = \"redis://127.0.0.1:6379/2\"\ninstance_id = \"a\"\n"),
            "t.toml",
        )
        .unwrap();
        assert_eq!(ok.cluster.instance_id, "a");
        let err = Config::from_toml(
            Some("[cluster]\nredis_url = \"http://127.0.0.1:6379\"\n"),
            "t.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("cluster.redis_url"), "{err}");
        let err = Config::from_toml(Some("[cluster]\nprefix = \"\"\n"), "t.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("cluster.prefix"), "{err}");
    }

    #[test]
    fn channels_replace_the_default_list() {
        let config = Config::from_toml(
            Some("[[channels]]\nname = \"only\"\nkind = \"simulator\"\nmodels = [\"model_h3\"]\n"),
            "t.toml",
        )
        .unwrap();
        assert_eq!(config.channels.len(), 1);
        assert_eq!(config.channels[0].name, "only");
    }
}
