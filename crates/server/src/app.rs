//! The relay's shared state, built from parts made below it (the configuration, the store,
//! the channels, the engine), and opening it from a configuration and a data directory.

pub mod setup;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use engine::{ChannelStats, Engine, now_secs};
use fetch::{FetchConfig, Fetcher};
use store::{
    BlobStore, Key, KeyStatus, LocalBlobs, PgStore, S3Blobs, S3Settings, SledStore, Store,
};
use tokio::sync::Notify;

use crate::config::{BlobBackend, BlobsConfig, Config, DEFAULT_S3_REGION, StoreBackend};
use crate::ground::auth::{KeyCache, admin_token_weakness, generate_secret, hash_secret};
use crate::ground::auth_throttle::AuthThrottle;
use crate::ground::chat_ledger::{ChargeQueue, Reservations};
use crate::ground::cluster::Cluster;
use crate::ground::limits::Limiter;
use crate::ground::signed::{self, Signer};
use crate::ops::metrics::Metrics;

/// Everything a request handler needs, shared read-only (plus the store).
pub struct App {
    pub config: Config,
    pub store: Arc<dyn Store>,
    pub blobs: Arc<dyn BlobStore>,
    pub fetcher: Fetcher,
    /// Delivers webhooks (behind the same SSRF guard as `fetcher`).
    pub poster: fetch::Poster,
    /// Drives the video tasks; holds the video channels and their routing.
    pub engine: Arc<Engine>,
    /// Channels of `/v1/messages`, in configuration order.
    pub chat_channels: Vec<Arc<channels::ChatChannel>>,
    /// SHA-256 of the admin token.
    pub admin_hash: String,
    /// Wakes the asset processor when an upload was stored.
    pub asset_wake: Notify,
    /// Wakes the batch runner ([`crate::formats::batch_run`]) when a batch was created or canceled.
    pub batch_wake: Notify,
    pub shutting_down: AtomicBool,
    /// Upstream calls by channel name, for `/admin/channels` (shared with the engine).
    pub channel_stats: Arc<HashMap<String, ChannelStats>>,
    /// The second format's models.
    pub catalog: video_generations::Catalog,
    /// Signs `/files/...` URLs.
    pub signer: Arc<Signer>,
    /// The address the server is bound to (set by `serve`).
    pub bound: std::sync::OnceLock<std::net::SocketAddr>,
    /// [`App::public_base_url`] once it is known (set by `serve`), for channels that hand the
    /// relay's address to their upstream (an `ark` channel's `callback_url`).
    pub public_base: Arc<std::sync::OnceLock<String>>,
    /// Rate-limit buckets of this process (all of them without a cluster; the fallback with one).
    pub limiter: Limiter,
    /// Client addresses and credential prefixes whose authentication failed lately.
    pub auth_throttle: AuthThrottle,
    /// State shared with the other relays through Redis (`[cluster] redis_url`); `None`:
    /// limits, key-cache invalidation and chat reservations hold in this process only.
    pub cluster: Option<Arc<Cluster>>,
    /// Keys by secret hash, cleared by every key change.
    pub key_cache: KeyCache,
    /// Chat estimates reserved by the messages under way.
    pub reservations: Reservations,
    /// Chat charges on their way to the store.
    pub charges: ChargeQueue,
    /// What the request path counts, for `GET /metrics`.
    pub metrics: Metrics,
    /// First-format task records as last rendered.
    pub records: crate::ground::record_cache::RecordCache,
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
    /// Opens the store and blobs under `data_dir`, builds the channels and the engine, and on
    /// a first start creates the first key and the admin token.
    pub async fn open(
        config: Config,
        data_dir: &Path,
        admin_token: Option<&str>,
    ) -> anyhow::Result<(Arc<App>, Bootstrap)> {
        App::open_with_env(config, data_dir, admin_token, &|name| {
            std::env::var(name).ok()
        })
        .await
    }

    /// [`App::open`] with the environment variables it reads (the blob store's credentials)
    /// taken from `env`.
    pub async fn open_with_env(
        config: Config,
        data_dir: &Path,
        admin_token: Option<&str>,
        env: &(dyn Fn(&str) -> Option<String> + Sync),
    ) -> anyhow::Result<(Arc<App>, Bootstrap)> {
        if let Some(why) = admin_token.and_then(admin_token_weakness) {
            anyhow::bail!(why);
        }
        std::fs::create_dir_all(data_dir)
            .with_context(|| format!("creating data dir {}", data_dir.display()))?;
        let store: Arc<dyn Store> = match config.store.backend() {
            StoreBackend::Sled => Arc::new(
                SledStore::open_with_cache(&data_dir.join("store"), config.store.cache_mb << 20)
                    .with_context(|| format!("opening the store in {}", data_dir.display()))?,
            ),
            StoreBackend::Postgres => {
                let url = config.store.url.as_deref().unwrap_or_default();
                Arc::new(
                    PgStore::connect(url, config.store.pool_size as usize)
                        .await
                        .context("opening the PostgreSQL store")?,
                )
            }
        };
        let blobs = open_blobs(&config.blobs, data_dir, env)?;
        let public_base: Arc<std::sync::OnceLock<String>> = Arc::default();

        let mut bootstrap = Bootstrap::default();
        let admin_hash = match admin_token {
            Some(token) if !token.is_empty() => hash_secret(token),
            _ => match store.meta(ADMIN_HASH).await? {
                Some(hash) => String::from_utf8_lossy(&hash).into_owned(),
                None => {
                    let token = generate_secret("adm-relay-");
                    let stored = store
                        .meta_init(ADMIN_HASH, hash_secret(&token).as_bytes())
                        .await?;
                    bootstrap.admin_token = Some(token);
                    String::from_utf8_lossy(&stored).into_owned()
                }
            },
        };
        if store.key_count().await? == 0 {
            let (key, secret) = new_key("first key", "gen2", None);
            store.create_key(&key).await?;
            bootstrap.first_key = Some(secret);
        }

        let signer = {
            let fresh = generate_secret("");
            let stored = store
                .meta_init(signed::SECRET_META, fresh.as_bytes())
                .await?;
            Arc::new(Signer::new(stored))
        };
        let channel_stats: Arc<HashMap<String, ChannelStats>> = Arc::new(
            config
                .channels
                .iter()
                .map(|c| (c.name.clone(), ChannelStats::default()))
                .collect(),
        );
        let engine = Engine::new(engine::Parts {
            store: store.clone(),
            blobs: blobs.clone(),
            channels: setup::video_channels(&config, &blobs, &public_base, env)?,
            routes: setup::routes(&config),
            stats: channel_stats.clone(),
            settings: config.tasks.clone(),
            public_urls: public_urls(&config, &signer),
            prices: setup::prices(&config),
        });
        let chat_channels = setup::chat_channels(&config)?;
        let fetcher = Fetcher::new(FetchConfig {
            timeout: Duration::from_secs(config.security.url_fetch_timeout_secs.max(1)),
            allow_private: config.security.allow_private_urls,
            max_redirects: 5,
        });
        let poster = fetch::Poster::new(
            config.security.allow_private_urls,
            Duration::from_millis(config.webhooks.timeout_ms.max(1)),
        );
        let catalog = setup::catalog(&config);
        let cluster = match config.cluster.redis_url.trim() {
            "" => None,
            url => {
                let cluster =
                    Cluster::new(url, &config.cluster.prefix, &config.cluster.instance_id)?;
                tracing::info!(
                    "cluster: instance {}, shared state in Redis under {:?}",
                    cluster.instance(),
                    config.cluster.prefix
                );
                Some(Arc::new(cluster))
            }
        };
        let key_cache = match &cluster {
            Some(cluster) => KeyCache::following(cluster.heard()),
            None => KeyCache::default(),
        };
        let metrics = Metrics::new(
            config
                .models
                .iter()
                .filter(|(_, m)| m.kind == crate::config::ModelKind::Chat)
                .map(|(name, _)| name),
        );
        let limiter = Limiter::new(config.limits.task_buckets_max);
        let auth_throttle = AuthThrottle::of(&config.limits);
        let app = App {
            config,
            store,
            blobs,
            fetcher,
            poster,
            engine: Arc::new(engine),
            chat_channels,
            admin_hash,
            asset_wake: Notify::new(),
            batch_wake: Notify::new(),
            shutting_down: AtomicBool::new(false),
            limiter,
            auth_throttle,
            metrics,
            key_cache,
            cluster,
            reservations: Reservations::default(),
            charges: ChargeQueue::default(),
            bound: std::sync::OnceLock::new(),
            public_base,
            signer,
            catalog,
            channel_stats,
            records: Default::default(),
        };
        Ok((Arc::new(app), bootstrap))
    }

    /// How long a presigned blob URL is handed out for, when `[blobs] presign` is on.
    pub fn presign_ttl(&self) -> Option<Duration> {
        self.config
            .blobs
            .presign
            .then(|| Duration::from_secs(self.config.server.signed_url_ttl_secs.max(1)))
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

/// The URLs upstreams fetch the relay's stored files at (frames too large to inline,
/// references), when other machines can reach the relay: signed `/files/...` URLs valid for
/// at least an hour.
fn public_urls(config: &Config, signer: &Arc<Signer>) -> Option<engine::PublicUrls> {
    let base = config.server.public_base_url.clone();
    if !signed::is_public(&base) {
        return None;
    }
    let ttl = config.server.signed_url_ttl_secs.max(3600);
    let signer = signer.clone();
    Some(Box::new(move |blob: &str| {
        signer.url(&base, blob, now_secs() + ttl)
    }))
}

/// A new active key record and its secret (shown once).
pub fn new_key(name: &str, group: &str, quota: Option<i64>) -> (Key, String) {
    let secret = generate_secret("sk-relay-");
    let key = Key {
        id: crate::ground::http::new_id("key"),
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
        webhook_url: None,
        webhook_secret: Some(crate::ground::webhook_signing::new_secret()),
    };
    (key, secret)
}

/// Opens the configured blob store: `<data>/files`, or an S3 bucket with its temporary files
/// in `<data>/files/tmp` and its credentials from `env` (`AWS_ACCESS_KEY_ID`,
/// `AWS_SECRET_ACCESS_KEY`, optionally `AWS_SESSION_TOKEN`).
pub fn open_blobs(
    config: &BlobsConfig,
    data_dir: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> anyhow::Result<Arc<dyn BlobStore>> {
    let files = data_dir.join("files");
    match config.backend {
        BlobBackend::Local => {
            let blobs = LocalBlobs::open(&files)
                .with_context(|| format!("opening the blob directory in {}", data_dir.display()))?;
            Ok(Arc::new(blobs))
        }
        BlobBackend::S3 => {
            let required = |name: &str| {
                env(name).filter(|v| !v.is_empty()).with_context(|| {
                    format!("blobs: backend \"s3\" needs {name} in the environment")
                })
            };
            let bucket = config
                .bucket
                .clone()
                .context("blobs.bucket is required when blobs.backend = \"s3\"")?;
            let settings = S3Settings {
                endpoint: config.endpoint.clone(),
                region: config
                    .region
                    .clone()
                    .unwrap_or_else(|| DEFAULT_S3_REGION.to_owned()),
                prefix: config.prefix.clone().unwrap_or_default(),
                access_key_id: required("AWS_ACCESS_KEY_ID")?,
                secret_access_key: required("AWS_SECRET_ACCESS_KEY")?,
                session_token: env("AWS_SESSION_TOKEN").filter(|v| !v.is_empty()),
                part_bytes: config.part_bytes.map_or(store::DEFAULT_PART_BYTES, |p| {
                    usize::try_from(p).unwrap_or(usize::MAX)
                }),
                bucket,
            };
            let blobs = S3Blobs::open(settings, &files.join("tmp"))
                .with_context(|| format!("opening the blob store in bucket {:?}", config.bucket))?;
            Ok(Arc::new(blobs))
        }
    }
}
