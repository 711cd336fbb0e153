//! The relay's shared state, and opening it from a configuration and a data directory.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use channels::{Simulator, SimulatorSettings, VideoChannel};
use fetch::{FetchConfig, Fetcher};
use store::{BlobStore, Key, KeyStatus, LocalBlobs, SledStore, Store};
use tokio::sync::Notify;

use crate::auth::{generate_secret, hash_secret};
use crate::config::{ChannelKind, Config};

/// Everything a request handler or the engine needs, shared read-only (plus the store).
pub struct App {
    pub config: Config,
    pub store: Arc<dyn Store>,
    pub blobs: Arc<dyn BlobStore>,
    pub fetcher: Fetcher,
    pub video_channels: Vec<Arc<VideoChannel>>,
    /// Channels of `/v1/messages`, in configuration order.
    pub chat_channels: Vec<Arc<channels::ChatChannel>>,
    /// SHA-256 of the admin token.
    pub admin_hash: String,
    /// Wakes the engine when a task was created or changed by a request.
    pub engine_wake: Notify,
    /// Wakes the asset processor when an upload was stored.
    pub asset_wake: Notify,
    pub shutting_down: AtomicBool,
    /// Upstream calls by channel name, for `/admin/channels`.
    pub channel_stats: std::collections::HashMap<String, ChannelStats>,
    /// The second format's models.
    pub catalog: video_generations::Catalog,
    /// Signs `/files/...` URLs.
    pub signer: crate::signed::Signer,
    /// The address the server is bound to (set by `serve`).
    pub bound: std::sync::OnceLock<std::net::SocketAddr>,
    /// Rate-limit buckets (in memory; shared limits across instances come later).
    pub limiter: crate::limits::Limiter,
    /// Keys by secret hash, cleared by every key change.
    pub key_cache: crate::auth::KeyCache,
    /// Chat estimates reserved by the messages under way.
    pub reservations: crate::chat_billing::Reservations,
    /// Chat charges on their way to the store.
    pub charges: crate::chat_billing::ChargeQueue,
    /// Video channel choice, health and call caps.
    pub routing: crate::routing::Routing,
}

/// Counts of one channel's upstream calls since start.
#[derive(Debug, Default)]
pub struct ChannelStats {
    calls: std::sync::atomic::AtomicU64,
    failures: std::sync::atomic::AtomicU64,
}

impl ChannelStats {
    pub fn record(&self, ok: bool) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if !ok {
            self.failures.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// (calls, failures).
    pub fn totals(&self) -> (u64, u64) {
        (
            self.calls.load(Ordering::Relaxed),
            self.failures.load(Ordering::Relaxed),
        )
    }
}

/// Secrets created on a first start, to be shown once.
#[derive(Debug, Default)]
pub struct Bootstrap {
    /// The first API key, when the store had none.
    pub first_key: Option<String>,
    /// The generated admin token, when none was configured and none was stored.
    pub admin_token: Option<String>,
}

const ADMIN_HASH: &str = "admin_token_sha256";

impl App {
    /// Opens the store and blobs under `data_dir`, builds the channels, and on a first start
    /// creates the first key and the admin token.
    pub fn open(
        config: Config,
        data_dir: &Path,
        admin_token: Option<&str>,
    ) -> anyhow::Result<(Arc<App>, Bootstrap)> {
        std::fs::create_dir_all(data_dir)
            .with_context(|| format!("creating data dir {}", data_dir.display()))?;
        let store =
            SledStore::open_with_cache(&data_dir.join("store"), config.store.cache_mb << 20)
                .with_context(|| format!("opening the store in {}", data_dir.display()))?;
        let blobs = LocalBlobs::open(&data_dir.join("files"))
            .with_context(|| format!("opening the blob directory in {}", data_dir.display()))?;
        let store: Arc<dyn Store> = Arc::new(store);
        let blobs: Arc<dyn BlobStore> = Arc::new(blobs);

        let mut bootstrap = Bootstrap::default();
        let admin_hash = match admin_token {
            Some(token) if !token.is_empty() => hash_secret(token),
            _ => match store.meta(ADMIN_HASH)? {
                Some(hash) => String::from_utf8_lossy(&hash).into_owned(),
                None => {
                    let token = generate_secret("adm-relay-");
                    let stored = store.meta_init(ADMIN_HASH, hash_secret(&token).as_bytes())?;
                    bootstrap.admin_token = Some(token);
                    String::from_utf8_lossy(&stored).into_owned()
                }
            },
        };
        if store.key_count()? == 0 {
            let (key, secret) = new_key("first key", "gen2", None);
            store.create_key(&key)?;
            bootstrap.first_key = Some(secret);
        }

        let mut video_channels = remote_video_channels(&config, &blobs)?;
        let simulators = config
            .channels
            .iter()
            .filter(|c| c.kind == ChannelKind::Simulator)
            .map(|c| {
                Arc::new(VideoChannel::Simulator(Simulator::new(
                    SimulatorSettings {
                        name: c.name.clone(),
                        models: c.models.clone(),
                        task_ms: (config.simulator.task_secs * 1000.0) as u64,
                        fps: config.simulator.fps,
                        scenarios: config.simulator.scenarios,
                        blocked_words: config.simulator.blocked_words.clone(),
                    },
                    blobs.clone(),
                )))
            });
        video_channels.extend(simulators);

        let signer = {
            let fresh = generate_secret("");
            let stored = store.meta_init(crate::signed::SECRET_META, fresh.as_bytes())?;
            crate::signed::Signer::new(stored)
        };
        let chat_channels = crate::messages::chat_channels(&config)?;

        let channel_stats = config
            .channels
            .iter()
            .map(|c| (c.name.clone(), ChannelStats::default()))
            .collect();
        let fetcher = Fetcher::new(FetchConfig {
            timeout: Duration::from_secs(config.security.url_fetch_timeout_secs.max(1)),
            allow_private: config.security.allow_private_urls,
            max_redirects: 5,
        });
        let catalog = crate::generations::catalog(&config);
        let routing = crate::routing::Routing::new(&config);
        let app = App {
            config,
            store,
            blobs,
            fetcher,
            video_channels,
            chat_channels,
            admin_hash,
            engine_wake: Notify::new(),
            asset_wake: Notify::new(),
            shutting_down: AtomicBool::new(false),
            limiter: crate::limits::Limiter::default(),
            key_cache: crate::auth::KeyCache::default(),
            reservations: crate::chat_billing::Reservations::default(),
            charges: crate::chat_billing::ChargeQueue::default(),
            bound: std::sync::OnceLock::new(),
            signer,
            catalog,
            channel_stats,
            routing,
        };
        Ok((Arc::new(app), bootstrap))
    }

    /// The channel that runs `model`, if any.
    pub fn video_channel_for(&self, model: &str) -> Option<&Arc<VideoChannel>> {
        self.video_channels.iter().find(|c| c.serves(model))
    }

    pub fn video_channel_named(&self, name: &str) -> Option<&Arc<VideoChannel>> {
        self.video_channels.iter().find(|c| c.name() == name)
    }

    /// What the relay writes into URLs it hands out: `server.public_base_url`, or when that is
    /// empty, `http://` and the bound address (loopback for an unspecified bind address).
    pub fn public_base_url(&self) -> String {
        let configured = self.config.server.public_base_url.trim_end_matches('/');
        if !configured.is_empty() {
            return configured.to_owned();
        }
        match self.bound.get() {
            Some(addr) if addr.ip().is_unspecified() => {
                format!("http://127.0.0.1:{}", addr.port())
            }
            Some(addr) => format!("http://{addr}"),
            None => format!("http://{}", self.config.server.listen),
        }
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Relaxed)
    }

    /// Whether a simulator directive header is honoured.
    pub fn sim_scenarios(&self) -> bool {
        self.config.simulator.scenarios
    }
}

/// The `openai-videos` and `ark` channels of a configuration. A channel serves the video
/// models it lists and every video model of its `family`.
fn remote_video_channels(
    config: &Config,
    blobs: &Arc<dyn BlobStore>,
) -> anyhow::Result<Vec<Arc<VideoChannel>>> {
    use crate::config::ModelKind;
    let mut out = Vec::new();
    for c in &config.channels {
        if !matches!(c.kind, ChannelKind::OpenaiVideos | ChannelKind::Ark) {
            continue;
        }
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
        let api_key = match (&c.api_key, &c.api_key_env) {
            (Some(key), _) => Some(key.clone()),
            (None, Some(var)) => Some(std::env::var(var).with_context(|| {
                format!(
                    "channel {}: the environment variable {var} (api_key_env) is not set",
                    c.name
                )
            })?),
            (None, None) => None,
        };
        let defaults = channels::UpstreamTimeouts::default();
        let request = c
            .request_timeout_secs
            .map(Duration::from_secs)
            .unwrap_or(Duration::from_secs(60));
        let settings = channels::RemoteSettings {
            name: c.name.clone(),
            models,
            base_url: c.base_url.clone().unwrap_or_default(),
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
        };
        let channel = if c.kind == ChannelKind::Ark {
            VideoChannel::Ark(channels::ark::Ark::new(settings, blobs.clone()))
        } else {
            VideoChannel::OpenaiVideos(channels::openai_videos::OpenaiVideos::new(
                settings,
                blobs.clone(),
            ))
        };
        out.push(Arc::new(channel));
    }
    Ok(out)
}

/// A new active key record and its secret (shown once).
pub fn new_key(name: &str, group: &str, quota: Option<i64>) -> (Key, String) {
    let secret = generate_secret("sk-relay-");
    let key = Key {
        id: format!("key_{}", ulid::Ulid::new()),
        name: name.to_owned(),
        group: group.to_owned(),
        hash: hash_secret(&secret),
        prefix: secret.chars().take(14).collect(),
        quota,
        quota_used: 0,
        rate_limit: None,
        models: None,
        expires_at: None,
        status: KeyStatus::Active,
        created_at: now_secs(),
    };
    (key, secret)
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

pub fn now_secs() -> u64 {
    now_ms() / 1000
}
