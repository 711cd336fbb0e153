//! The seam every vendor stands behind: the [`Vendor`] trait, what a kind needs from the
//! configuration ([`Need`], [`KindSettings`], [`CallbackSettings`], the operator's own status
//! words [`StatusMeaning`]), what it is built from ([`VendorSettings`]) and its
//! [`Registration`].

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use store::BlobStore;

use crate::http::client::{UpstreamError, UpstreamResponse};
use crate::vendors::common::{Remote, RemoteSettings, path_part};
use crate::video::caps::ModelCaps;
use crate::video::job::{ChannelCheck, PollOutcome, StoredReference, SubmitOutcome, VideoJob};

/// One upstream video vendor's protocol. The engine reaches it through
/// [`VideoChannel`](crate::VideoChannel), which also holds its capabilities.
#[async_trait]
pub trait Vendor: Send + Sync {
    /// The pieces every HTTP vendor holds (settings, clients, blobs).
    fn remote(&self) -> &Remote;

    /// Submits `job` with its stored `references`; references the vendor has no field for
    /// are left out with a warning.
    async fn submit(&self, job: &VideoJob, references: &[StoredReference]) -> SubmitOutcome;

    /// Looks at an accepted task.
    async fn poll(&self, job: &VideoJob, upstream_id: &str) -> PollOutcome;

    /// Best effort: asks the vendor to stop a task (default: the vendor has no cancel).
    async fn cancel(&self, upstream_id: &str) {
        let _ = upstream_id;
    }

    /// Starts the download of a result URL given by `poll` (default: the key goes along to
    /// the channel's own origin only; other hosts go through the SSRF guard).
    async fn download(&self, url: &str) -> Result<UpstreamResponse, UpstreamError> {
        self.remote().download(url).await
    }

    /// The cheapest authenticated call the vendor offers, generating nothing: reachable and
    /// key accepted, or why not.
    async fn check(&self) -> ChannelCheck;

    /// Whether a callback about task `callback.task_id`, already let in by the relay's own
    /// token in its URL, also carries the vendor's signature (default: the vendor signs
    /// nothing, and the token is all). `Err` says why not, for the log.
    fn verify_callback(&self, callback: &InboundCallback<'_>) -> Result<(), String> {
        let _ = callback;
        Ok(())
    }
}

/// A callback as the relay received it, for a vendor that signs its callbacks.
pub struct InboundCallback<'a> {
    /// The relay's task the callback's URL names (its token matched).
    pub task_id: &'a str,
    pub method: &'a http::Method,
    pub headers: &'a http::HeaderMap,
}

/// A setting a kind needs beyond the shared ones, by its configuration key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// `api_key` or `api_key_env`.
    ApiKey,
    /// `access_key` or `access_key_env`.
    AccessKey,
    /// `secret_key` or `secret_key_env`.
    SecretKey,
    /// `credentials_file`.
    CredentialsFile,
    /// `project`.
    Project,
    /// `location`.
    Location,
}

impl Need {
    /// The configuration keys that meet it, as an error names them.
    pub const fn keys(self) -> &'static str {
        match self {
            Need::ApiKey => "api_key (or api_key_env)",
            Need::AccessKey => "access_key (or access_key_env)",
            Need::SecretKey => "secret_key (or secret_key_env)",
            Need::CredentialsFile => "credentials_file",
            Need::Project => "project",
            Need::Location => "location",
        }
    }
}

/// The kind-specific settings of a channel (read from the configuration, secrets from the
/// environment where it names a variable).
#[derive(Debug, Clone, Default)]
pub struct KindSettings {
    pub access_key: Option<String>,
    pub secret_key: Option<String>,
    /// A service account's key file (JSON).
    pub credentials_file: Option<PathBuf>,
    pub project: Option<String>,
    pub location: Option<String>,
    /// The region and service a request is signed for (`jimeng`; unset: the kind's defaults).
    pub region: Option<String>,
    pub service: Option<String>,
    /// Where the vendor writes its results (`gs://bucket/prefix/`), when not inline.
    pub storage_uri: Option<String>,
    /// The Cloud Storage JSON API's base, when not Google's own (a proxy or a fake).
    pub storage_base_url: Option<String>,
    /// Status words the operator taught the channel (config `status_words`), lower case, with
    /// what each means; they win over the kind's own reading of a word.
    pub status_words: BTreeMap<String, StatusMeaning>,
}

/// What an upstream's word for a task's status means, as an operator names it in a channel's
/// `status_words`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusMeaning {
    /// Still going (queued or running).
    Running,
    /// Finished with a video.
    Completed,
    /// Ended without one.
    Failed,
    /// Cancelled by the upstream.
    Cancelled,
    /// Expired before it finished.
    Expired,
}

impl StatusMeaning {
    /// Every meaning, by the name the configuration gives it.
    pub const ALL: [(&'static str, StatusMeaning); 5] = [
        ("running", StatusMeaning::Running),
        ("completed", StatusMeaning::Completed),
        ("failed", StatusMeaning::Failed),
        ("cancelled", StatusMeaning::Cancelled),
        ("expired", StatusMeaning::Expired),
    ];

    /// The meaning named `name` (exactly, lower case).
    pub fn parse(name: &str) -> Option<StatusMeaning> {
        StatusMeaning::ALL
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, m)| *m)
    }
}

/// An upstream's status word as it is compared: trimmed, ASCII lower case.
pub fn status_word(word: &str) -> String {
    word.trim().to_ascii_lowercase()
}

/// A channel's `status_words` (word -> meaning) read: the words compared as
/// [`status_word`] makes them; an empty word, an unknown meaning, or two spellings of one word
/// with different meanings is refused, naming the word.
pub fn status_words(
    words: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, StatusMeaning>, String> {
    let mut out = BTreeMap::new();
    for (word, meaning) in words {
        let key = status_word(word);
        if key.is_empty() {
            return Err("status_words: a word is empty".into());
        }
        let Some(parsed) = StatusMeaning::parse(meaning) else {
            let names: Vec<&str> = StatusMeaning::ALL.iter().map(|(n, _)| *n).collect();
            return Err(format!(
                "status_words.{word:?}: unknown meaning {meaning:?}, expected one of {}",
                names.join(", ")
            ));
        };
        if out
            .insert(key, parsed)
            .is_some_and(|before| before != parsed)
        {
            return Err(format!(
                "status_words.{word:?}: the word is given twice (case aside) with different meanings"
            ));
        }
    }
    Ok(out)
}

/// Where and how a channel asks its vendor to call back: a callback URL on the relay
/// (`<public base>/callbacks/<kind>/<channel>?task=..&token=..`).
#[derive(Debug, Clone)]
pub struct CallbackSettings {
    /// The channel's callback secret (config `callback_secret`).
    pub secret: String,
    /// The relay's public base URL, known once the relay is bound; no callback URL is sent
    /// before.
    pub public_base: Arc<OnceLock<String>>,
}

impl CallbackSettings {
    /// The `callback_url` of the relay's task `task_id` on `channel`, a channel of `kind`,
    /// once the relay knows its public base:
    /// `<public base>/callbacks/<kind>/<channel>?task=..&token=..` ([`callback_token`]).
    pub fn url(&self, kind: &str, channel: &str, task_id: &str) -> Option<String> {
        let base = self.public_base.get()?.trim_end_matches('/');
        let token = callback_token(&self.secret, channel, task_id);
        Some(format!(
            "{base}/callbacks/{kind}/{}?task={}&token={token}",
            path_part(channel),
            path_part(task_id)
        ))
    }
}

/// The token of `task_id`'s callback on `channel`: the unpadded base64url HMAC-SHA256, keyed
/// with `secret`, of `<channel>\n<task id>`.
pub fn callback_token(secret: &str, channel: &str, task_id: &str) -> String {
    use base64::Engine as _;
    use hmac::Mac as _;
    // An HMAC takes a key of any length: this cannot fail.
    let Ok(mut mac) = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()) else {
        return String::new();
    };
    mac.update(channel.as_bytes());
    mac.update(b"\n");
    mac.update(task_id.as_bytes());
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
}

/// What a vendor's constructor gets.
pub struct VendorSettings {
    /// The shared settings; `base_url` is the configured one or the kind's default.
    pub remote: RemoteSettings,
    pub kind: KindSettings,
    pub callback: Option<CallbackSettings>,
    pub blobs: Arc<dyn BlobStore>,
}

/// A kind's constructor: its settings and its model catalog (by vendor model).
pub type Build =
    fn(VendorSettings, &BTreeMap<String, ModelCaps>) -> Result<Box<dyn Vendor>, String>;

/// One kind of vendor channel, as the configuration names it.
pub struct Registration {
    /// The `kind` of a `[[channels]]` entry.
    pub kind: &'static str,
    /// The vendor's public endpoint, used when a channel sets no `base_url` (empty: the
    /// channel must set one).
    pub default_base_url: &'static str,
    /// The settings the kind needs beyond `name`, `kind` and `models` or `family`.
    pub needs: &'static [Need],
    /// Whether the kind takes a `callback_secret`.
    pub callbacks: bool,
    /// Whether the kind reads the operator's `status_words`.
    pub status_words: bool,
    /// Its built-in model catalog: the vendor models it documents and what each can do.
    pub models: fn() -> Vec<(&'static str, ModelCaps)>,
    /// Builds a channel of the kind, given its model catalog (the built-in one with the
    /// configuration's entries), for vendors whose requests follow what a model can make.
    pub build: Build,
}
