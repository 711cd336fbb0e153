//! The plain sections of the configuration: `[server]`, `[store]`, `[cluster]`, `[blobs]`,
//! `[assets]`, `[security]`, `[upstream]`, `[webhooks]`, `[limits]`, `[simulator]`.

use serde::Deserialize;

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
    /// `/v1/messages` streams: the most bytes one upstream event (all its lines), and the bytes
    /// held back of an unfinished one, may take; past it the stream ends with an `error`.
    pub max_stream_event_bytes: u64,
    /// A request head must arrive within this, and a new connection's first request too.
    pub header_read_timeout_secs: u64,
    /// The longest silence between two pieces of a request body.
    pub body_read_timeout_secs: u64,
    /// Open connections in all; 0: as many as the descriptor limit allows (see
    /// [`crate::serve::conns`]). Always capped so that descriptors stay in reserve.
    pub max_connections: u32,
    /// Open connections from one client address; 0: no cap.
    pub max_connections_per_client: u32,
    /// Threads serving connections, each with a single-threaded runtime of its own; 0: one
    /// per CPU core.
    pub workers: u32,
    /// The largest request head (request line and headers) read, in bytes: past it `431`.
    pub max_head_bytes: u64,
    /// File parts one multipart body may carry.
    pub max_upload_files: u32,
    /// How long a connection thread keeps looking for work after a request began or ended
    /// before it sleeps, in microseconds ([`crate::serve::spin`]); 0: it sleeps at once.
    /// Unset: by the store ([`crate::Config::spin_us`]).
    pub spin_us: Option<u64>,
}

impl ServerConfig {
    /// The threads that serve connections: `workers`, or one per CPU core when 0.
    pub fn worker_count(&self) -> usize {
        match self.workers {
            0 => std::thread::available_parallelism().map_or(1, usize::from),
            n => n as usize,
        }
    }
}

impl ServerConfig {
    /// The limit of a JSON body.
    pub fn json_limit(&self) -> crate::ground::http::Limit {
        crate::ground::http::Limit {
            bytes: self.max_body_bytes,
            idle: std::time::Duration::from_secs(self.body_read_timeout_secs),
        }
    }

    /// The limit of a multipart body: its bytes and pace, and its file parts.
    pub fn upload_limit(&self) -> crate::ground::multipart::UploadLimit {
        crate::ground::multipart::UploadLimit {
            body: crate::ground::http::Limit {
                bytes: self.max_upload_bytes,
                idle: std::time::Duration::from_secs(self.body_read_timeout_secs),
            },
            files: self.max_upload_files,
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
    pub(super) fn check(&self) -> Result<(), String> {
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

/// `[characters]`: what one key may keep of `POST /v1/videos/characters`, and its price.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CharactersConfig {
    /// Characters one key may have at once; 0: none (creating them is turned off).
    pub max_per_key: u64,
    /// Credits a creation takes from its key (a `charge` ledger entry); 0: free.
    pub price: u64,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SecurityConfig {
    pub allow_private_urls: bool,
    pub url_fetch_timeout_secs: u64,
    pub max_image_bytes: u64,
}

/// `[upstream]`: how the channels reach their upstreams, beyond each channel's own settings.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UpstreamConfig {
    /// The roots upstream certificates are checked against.
    pub roots: RootsChoice,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RootsChoice {
    /// The Mozilla roots built into the relay.
    #[default]
    Webpki,
    /// The system's trust store.
    System,
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
    /// Deliveries under way at once to one receiver (a URL's origin) in this instance.
    pub per_receiver_concurrency: u32,
    /// Deliveries under way at once of one key's tasks in this instance.
    pub per_key_concurrency: u32,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    pub rps: u32,
    pub burst: u32,
    pub poll_rps_per_task: u32,
    /// Task poll buckets held at most (each made for a poll of the caller's own task).
    pub task_buckets_max: usize,
    /// Failed authentications a client address (or a credential prefix) may have in a row
    /// before its requests are answered `429`.
    pub auth_failures_burst: u32,
    /// How fast those tries come back.
    pub auth_failures_per_minute: u32,
    /// Client addresses and credential prefixes tracked at most; past it they share one
    /// bucket.
    pub auth_failure_sources_max: usize,
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
