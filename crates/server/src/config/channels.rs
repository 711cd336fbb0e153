//! The model catalog (`[models.<name>]`) and the channels (`[[channels]]`), with the checks
//! of a remote channel's settings: the keys each video vendor kind needs come from its
//! registration in the channels crate.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

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

/// A channel's `kind`: the built-in simulator, a chat upstream, or a video vendor of the
/// channels crate's registry (`openai-videos`, `ark`, `veo`, ...).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ChannelKind {
    #[default]
    Simulator,
    Anthropic,
    OpenaiChat,
    /// A video vendor, by its registered kind name.
    Video(&'static str),
}

impl ChannelKind {
    /// The kind as the configuration names it.
    pub fn as_str(self) -> &'static str {
        match self {
            ChannelKind::Simulator => "simulator",
            ChannelKind::Anthropic => "anthropic",
            ChannelKind::OpenaiChat => "openai-chat",
            ChannelKind::Video(kind) => kind,
        }
    }

    /// The kind's registration, for a video vendor.
    pub fn vendor(self) -> Option<&'static channels::vendors::Registration> {
        match self {
            ChannelKind::Video(kind) => channels::vendors::registration(kind),
            _ => None,
        }
    }

    /// Every kind name, for an error.
    fn all() -> String {
        let mut all = vec!["simulator", "anthropic", "openai-chat"];
        all.extend(channels::vendors::REGISTRY.iter().map(|r| r.kind));
        all.join(", ")
    }
}

impl<'de> Deserialize<'de> for ChannelKind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        Ok(match name.as_str() {
            "simulator" => ChannelKind::Simulator,
            "anthropic" => ChannelKind::Anthropic,
            "openai-chat" => ChannelKind::OpenaiChat,
            other => match channels::vendors::registration(other) {
                Some(r) => ChannelKind::Video(r.kind),
                None => {
                    return Err(serde::de::Error::custom(format!(
                        "unknown channel kind {other:?}, expected one of {}",
                        ChannelKind::all()
                    )));
                }
            },
        })
    }
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
    /// Kinds signing their own tokens (Kling): the access key, or the variable holding it.
    pub access_key: Option<String>,
    pub access_key_env: Option<String>,
    /// ... and the secret key they sign with, or the variable holding it.
    pub secret_key: Option<String>,
    pub secret_key_env: Option<String>,
    /// Kinds authenticating as a service account (Vertex AI): its JSON key file.
    pub credentials_file: Option<PathBuf>,
    /// Cloud project and location (Vertex AI).
    pub project: Option<String>,
    pub location: Option<String>,
    /// Kinds signing requests for a region and service (`jimeng`): unset, the kind's defaults.
    pub region: Option<String>,
    pub service: Option<String>,
    /// Vertex AI: a Cloud Storage location (`gs://bucket/prefix/`) the vendor writes videos
    /// to, read back with the channel's token; unset, videos come inline in the answer.
    pub storage_uri: Option<String>,
    /// Vertex AI: the Cloud Storage JSON API's base (default `https://storage.googleapis.com`).
    pub storage_base_url: Option<String>,
    /// Video vendors: a duration the model does not make is served by the next longer one it
    /// makes (billed as asked); by default a duration must be served exactly.
    pub nearest_longer_duration: bool,
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
    /// Kinds with callbacks (`ark`, `kling`, `minimax`: those whose registration says so):
    /// with a secret, submissions carry a `callback_url` on the relay (`POST
    /// /callbacks/<kind>/{channel}`), and the upstream's callbacks wake the task's poll.
    pub callback_secret: Option<String>,
    /// Kinds that read them (`openai-videos`): the upstream's own status words and what each
    /// means (`running`, `completed`, `failed`, `cancelled`, `expired`), matched case aside,
    /// before the kind's built-in words.
    pub status_words: BTreeMap<String, String>,
    /// Remote channels: a PEM file of CA certificates trusted beside `[upstream] roots`.
    pub ca_file: Option<String>,
    /// Remote channels: the HTTP proxy of every upstream call (`http://[user:pass@]host:port`),
    /// or `"none"`; unset: the environment's `HTTPS_PROXY` / `HTTP_PROXY` / `NO_PROXY`.
    pub proxy: Option<String>,
}

/// The `proxy` value that means no proxy, whatever the environment says.
pub const NO_PROXY: &str = "none";

impl ChannelConfig {
    /// Whether the channel calls an upstream over HTTP (not the built-in simulator).
    pub fn is_remote(&self) -> bool {
        self.kind != ChannelKind::Simulator
    }
}

/// A channel's `ca_file` (a readable PEM file of certificates) and `proxy` (`"none"` or an
/// http:// URL), for remote channels only.
pub(super) fn check_network(channel: &ChannelConfig) -> Result<(), String> {
    let name = &channel.name;
    if !channel.is_remote() {
        for (key, set) in [
            ("ca_file", channel.ca_file.is_some()),
            ("proxy", channel.proxy.is_some()),
        ] {
            if set {
                return Err(format!(
                    "channels.{name}: {key} applies to remote channels only (the simulator calls no upstream)"
                ));
            }
        }
        return Ok(());
    }
    if let Some(path) = &channel.ca_file {
        ::channels::http::network::check_ca_file(std::path::Path::new(path))
            .map_err(|e| format!("channels.{name}: {e}"))?;
    }
    if let Some(proxy) = channel.proxy.as_deref().filter(|p| *p != NO_PROXY) {
        ::channels::http::network::check_proxy_url(proxy)
            .map_err(|message| format!("channels.{name}: proxy: {message}"))?;
    }
    Ok(())
}

/// Whether the system's trust store has roots (for `[upstream] roots = "system"`).
pub(super) fn system_roots_usable() -> Result<(), String> {
    ::channels::http::network::check_system_roots().map_err(|e| format!("upstream.roots: {e}"))
}

impl ChannelConfig {
    /// Whether the channel sets what `need` asks for.
    fn has(&self, need: channels::Need) -> bool {
        use channels::Need;
        match need {
            Need::ApiKey => self.api_key.is_some() || self.api_key_env.is_some(),
            Need::AccessKey => self.access_key.is_some() || self.access_key_env.is_some(),
            Need::SecretKey => self.secret_key.is_some() || self.secret_key_env.is_some(),
            Need::CredentialsFile => self.credentials_file.is_some(),
            Need::Project => self.project.is_some(),
            Need::Location => self.location.is_some(),
        }
    }
}

/// The settings of a Google Cloud channel (a kind that needs a `credentials_file`): the key
/// file must be a usable service account key, `project` and `location` fit for a path and a
/// host name, and the storage settings are for such channels only.
fn check_google_settings(
    channel: &ChannelConfig,
    registration: &channels::vendors::Registration,
) -> Result<(), String> {
    use ::channels::vendors::{google_auth, vertex_veo};
    let name = &channel.name;
    let google = registration
        .needs
        .contains(&channels::Need::CredentialsFile);
    if !google {
        for (key, set) in [
            ("storage_uri", channel.storage_uri.is_some()),
            ("storage_base_url", channel.storage_base_url.is_some()),
        ] {
            if set {
                return Err(format!(
                    "channels.{name}: {key} applies to vertex-veo channels only"
                ));
            }
        }
        return Ok(());
    }
    if let Some(path) = &channel.credentials_file {
        google_auth::check_key_file(path)
            .map_err(|e| format!("channels.{name}: credentials_file {}: {e}", path.display()))?;
    }
    if let Some(project) = &channel.project {
        vertex_veo::check_project(project).map_err(|e| format!("channels.{name}: {e}"))?;
    }
    if let Some(location) = &channel.location {
        vertex_veo::check_location(location).map_err(|e| format!("channels.{name}: {e}"))?;
    }
    if let Some(uri) = &channel.storage_uri {
        vertex_veo::check_storage_uri(uri).map_err(|e| format!("channels.{name}: {e}"))?;
    }
    if let Some(url) = &channel.storage_base_url
        && !(url.starts_with("http://") || url.starts_with("https://"))
    {
        return Err(format!(
            "channels.{name}: storage_base_url {url:?} must start with http:// or https://"
        ));
    }
    Ok(())
}

/// A channel's `region` and `service` (the scope its requests are signed for): on `jimeng`
/// channels only, each a short word of letters, digits, `-` and `_`.
fn check_signing_scope(
    channel: &ChannelConfig,
    registration: &channels::vendors::Registration,
) -> Result<(), String> {
    use ::channels::vendors::jimeng;
    let name = &channel.name;
    for (key, value) in [("region", &channel.region), ("service", &channel.service)] {
        let Some(value) = value else { continue };
        if registration.kind != jimeng::REGISTRATION.kind {
            return Err(format!(
                "channels.{name}: {key} applies to jimeng channels only"
            ));
        }
        jimeng::check_scope_part(key, value).map_err(|e| format!("channels.{name}: {e}"))?;
    }
    Ok(())
}

/// Bounds of a channel's `max_calls_per_sec` (one call in 100 s at the least).
pub(super) const MIN_CALLS_PER_SEC: f64 = 0.01;
pub(super) const MAX_CALLS_PER_SEC: f64 = 100_000.0;

/// A chat channel (`anthropic`, `openai-chat`) needs an http(s) `base_url` and serves chat
/// models only.
pub(super) fn check_chat_channel(
    models: &BTreeMap<String, ModelConfig>,
    channel: &ChannelConfig,
) -> Result<(), String> {
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
        if models.get(model).map(|m| m.kind) != Some(ModelKind::Chat) {
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

/// A video vendor channel needs an http(s) `base_url` (unless its kind has a default
/// endpoint) and every setting its kind's registration names, and serves video models only.
pub(super) fn check_video_channel(
    models: &BTreeMap<String, ModelConfig>,
    channel: &ChannelConfig,
    registration: &channels::vendors::Registration,
) -> Result<(), String> {
    let name = &channel.name;
    let kind = registration.kind;
    match channel.base_url.as_deref() {
        Some(url) if url.starts_with("http://") || url.starts_with("https://") => {}
        Some(url) => {
            return Err(format!(
                "channels.{name}: base_url {url:?} must start with http:// or https://"
            ));
        }
        None if registration.default_base_url.is_empty() => {
            return Err(format!(
                "channels.{name}: base_url is required for kind {kind}"
            ));
        }
        None => {}
    }
    for need in registration.needs {
        if !channel.has(*need) {
            return Err(format!(
                "channels.{name}: kind {kind} needs {}",
                need.keys()
            ));
        }
    }
    check_google_settings(channel, registration)?;
    check_signing_scope(channel, registration)?;
    for model in &channel.models {
        if models.get(model).map(|m| m.kind) == Some(ModelKind::Chat) {
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
