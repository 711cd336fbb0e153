//! What the HTTP video vendors share: their settings, the header their key goes in, the
//! classification of upstream answers (a submission's by whether it may have reached the
//! upstream), upstream ids in URL paths, reading references from the blob store, result
//! downloads (redirects followed, the key sent to the channel's own origin only), channel
//! tests, and upstream text made fit for a log.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use http::{Method, Request, StatusCode};
use store::BlobStore;

use crate::check;
use crate::http::client::{UpstreamError, UpstreamHttp, UpstreamResponse, UpstreamTimeouts};
use crate::http::network::Network;
use crate::vendors::redact;
use crate::video::job::{ChannelCheck, CheckVerdict, PollOutcome, SubmitOutcome};

/// Largest JSON answer read from a video upstream.
pub const MAX_JSON_BYTES: usize = 1 << 20;

/// Largest error answer read from a video upstream (for the log only).
const MAX_ERROR_BYTES: usize = 64 * 1024;

/// Redirects a result download follows at most.
const MAX_REDIRECTS: usize = 5;

/// Settings of one HTTP video channel.
#[derive(Debug, Clone)]
pub struct RemoteSettings {
    pub name: String,
    /// Our model names it serves.
    pub models: Vec<String>,
    /// e.g. `https://api.example.com` (`openai-videos`) or `https://host/api/v3` (`ark`): the
    /// configured one, or the kind's default endpoint.
    pub base_url: String,
    pub api_key: Option<String>,
    /// Our model name -> the upstream's.
    pub model_map: BTreeMap<String, String>,
    pub timeouts: UpstreamTimeouts,
    /// Polls of one task never come faster than this.
    pub min_poll_interval: Duration,
    /// Reference images up to this size are sent inline (`data:` URI or file part).
    pub max_inline_bytes: u64,
    /// How result URLs that do not point at `base_url` are fetched.
    pub result_urls: ResultUrls,
    /// The TLS roots and proxy of every upstream call of the channel.
    pub network: Network,
}

/// The guard on result URLs an upstream hands over: like a client's reference URLs, they may
/// not reach private addresses, unless the operator allows private URLs or trusts the host.
#[derive(Debug, Clone, Default)]
pub struct ResultUrls {
    /// `security.allow_private_urls`: every address allowed (tests, closed networks).
    pub allow_private: bool,
    /// Hosts (as in the URL, lowercase, `host` or `host:port`) fetched without the guard,
    /// e.g. the upstream's own file host on a private network.
    pub trusted_hosts: Vec<String>,
}

/// The header a channel's `api_key` goes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyHeader {
    /// `Authorization: Bearer <key>`.
    Bearer,
    /// `<name>: <key>` (`x-goog-api-key`).
    Named(&'static str),
    /// `Authorization: Token <key>` (Vidu).
    Token,
}

/// The pieces every HTTP video vendor holds.
pub struct Remote {
    pub settings: RemoteSettings,
    /// Where the key goes.
    pub key_header: KeyHeader,
    /// Calls to the channel's own API (`base_url`, configured and trusted).
    pub http: UpstreamHttp,
    /// Result downloads from anywhere else, through the SSRF guard.
    pub guarded: UpstreamHttp,
    pub blobs: Arc<dyn BlobStore>,
}

impl Remote {
    pub fn new(settings: RemoteSettings, blobs: Arc<dyn BlobStore>) -> Remote {
        let http = UpstreamHttp::reaching(settings.timeouts, None, &settings.network);
        let policy = fetch::GuardPolicy::new(settings.result_urls.allow_private);
        let guarded = UpstreamHttp::reaching(settings.timeouts, Some(policy), &settings.network);
        Remote {
            settings,
            key_header: KeyHeader::Bearer,
            http,
            guarded,
            blobs,
        }
    }

    /// The same, with the key sent in `header`.
    pub fn with_key_header(mut self, header: KeyHeader) -> Remote {
        self.key_header = header;
        self
    }

    /// Whether `url` may be fetched without the guard: it is on the channel's own origin
    /// (scheme, host and port of `base_url`, configured by the operator), or on a host the
    /// operator trusts.
    pub fn is_trusted(&self, url: &str) -> bool {
        let Ok(uri) = url.parse::<http::Uri>() else {
            return false;
        };
        let (Some(host), Some(authority)) = (uri.host(), uri.authority()) else {
            return false;
        };
        let same_origin = self
            .settings
            .base_url
            .parse::<http::Uri>()
            .is_ok_and(|base| {
                base.scheme() == uri.scheme()
                    && base
                        .authority()
                        .is_some_and(|a| a.as_str().eq_ignore_ascii_case(authority.as_str()))
            });
        same_origin
            || self
                .settings
                .result_urls
                .trusted_hosts
                .iter()
                .any(|t| t.eq_ignore_ascii_case(host) || t.eq_ignore_ascii_case(authority.as_str()))
    }

    pub fn name(&self) -> &str {
        &self.settings.name
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.settings.base_url.trim_end_matches('/'))
    }

    /// Whether `url` points at this channel's own API (so it may carry the key).
    pub fn is_own(&self, url: &str) -> bool {
        let base = self.settings.base_url.trim_end_matches('/');
        url.strip_prefix(base)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    }

    /// A request with the user agent and, when `with_key`, the upstream key.
    pub fn request(&self, method: Method, url: &str, with_key: bool) -> http::request::Builder {
        let mut req = Request::builder().method(method).uri(url).header(
            "user-agent",
            concat!("video-relay/", env!("CARGO_PKG_VERSION")),
        );
        if with_key && let Some(key) = &self.settings.api_key {
            req = match self.key_header {
                KeyHeader::Bearer => req.header("authorization", format!("Bearer {key}")),
                KeyHeader::Named(name) => req.header(name, key.as_str()),
                KeyHeader::Token => req.header("authorization", format!("Token {key}")),
            };
        }
        req
    }

    /// Sends a request and reads its whole (small) answer.
    pub async fn exchange(
        &self,
        req: Result<Request<Bytes>, http::Error>,
    ) -> Result<(StatusCode, http::HeaderMap, Bytes), UpstreamError> {
        let req = req.map_err(|e| UpstreamError::Build(e.to_string()))?;
        let res = self.http.send(req).await?;
        let status = res.status;
        check::note_status(status);
        let headers = res.headers();
        let body = res.body.collect(MAX_JSON_BYTES).await?;
        Ok((status, headers, body))
    }

    /// [`Remote::check_request`] for vendors whose own reading (`read`: status and body)
    /// writes the whole check, detail included; a transport failure by [`transport_check`].
    pub async fn check_with(
        &self,
        req: Result<Request<Bytes>, http::Error>,
        read: impl FnOnce(StatusCode, &[u8]) -> ChannelCheck,
    ) -> ChannelCheck {
        match self.exchange(req).await {
            Err(e) => transport_check(&e),
            Ok((status, _, body)) => read(status, &body),
        }
    }

    /// [`Remote::check_get`] for vendors whose own reading (`read`) writes the whole check,
    /// detail included.
    pub async fn check_get_with(
        &self,
        path: &str,
        read: impl FnOnce(StatusCode, &[u8]) -> ChannelCheck,
    ) -> ChannelCheck {
        let req = self
            .request(Method::GET, &self.url(path), true)
            .body(Bytes::new());
        self.check_with(req, read).await
    }

    /// Sends a submission and reads its answer: the body of a success, else what became of
    /// the submission. Nothing sent (no connection, a request that cannot be built): `Retry`.
    /// A failure after a byte may have left (the upstream closed after reading it, no answer
    /// within the first-byte timeout, a success whose body broke off): `Ambiguous`, never to
    /// be sent again. A refusal (408, 429, 5xx, another 4xx): by its status, as
    /// [`refusal`] says.
    pub async fn submit_exchange(
        &self,
        req: Result<Request<Bytes>, http::Error>,
    ) -> Result<Bytes, SubmitOutcome> {
        self.submit_exchange_with(req, |status, headers, body| {
            refusal(self.name(), status, headers, &self.log_text(body))
        })
        .await
    }

    /// [`Remote::submit_exchange`] with the vendor's own reading of a refusal (`refused`: its
    /// status, headers and body), for vendors whose statuses say more than the default.
    pub async fn submit_exchange_with(
        &self,
        req: Result<Request<Bytes>, http::Error>,
        refused: impl FnOnce(StatusCode, &http::HeaderMap, &[u8]) -> SubmitOutcome,
    ) -> Result<Bytes, SubmitOutcome> {
        self.submit_exchange_answer(req, refused)
            .await
            .map(|(_, _, body)| body)
    }

    /// [`Remote::submit_exchange_with`] answering a success's status and headers with its
    /// body, for vendors that answer errors inside a success (a code in the body) and may say
    /// there how long to rest.
    pub async fn submit_exchange_answer(
        &self,
        req: Result<Request<Bytes>, http::Error>,
        refused: impl FnOnce(StatusCode, &http::HeaderMap, &[u8]) -> SubmitOutcome,
    ) -> Result<(StatusCode, http::HeaderMap, Bytes), SubmitOutcome> {
        let name = self.name();
        let req = req.map_err(|e| SubmitOutcome::Retry(format!("channel {name}: request: {e}")))?;
        let res = match self.http.send(req).await {
            Ok(res) => res,
            Err(e) if e.is_unsent() => {
                return Err(SubmitOutcome::Retry(format!("channel {name}: {e}")));
            }
            Err(e) => return Err(SubmitOutcome::Ambiguous(format!("channel {name}: {e}"))),
        };
        let status = res.status;
        if !status.is_success() {
            // The status says what became of it; a body cut short changes nothing.
            let headers = res.headers();
            let body = res.body.collect(MAX_ERROR_BYTES).await.unwrap_or_default();
            return Err(refused(status, &headers, &body));
        }
        let headers = res.headers();
        let body = res.body.collect(MAX_JSON_BYTES).await.map_err(|e| {
            SubmitOutcome::Ambiguous(format!(
                "channel {name}: submission answered {status}, then: {e}"
            ))
        })?;
        Ok((status, headers, body))
    }

    /// The outcome of a submission answered with a success but no usable task id: a refusal
    /// when the answer is an error (an `error` member, as some upstreams answer inside a
    /// `200`), else ambiguous: the upstream may have made a task the relay cannot follow.
    pub fn without_id(&self, body: &[u8]) -> SubmitOutcome {
        let name = self.name();
        let error = serde_json::from_slice::<serde_json::Value>(body)
            .ok()
            .and_then(|v| v.get("error").filter(|e| !e.is_null()).cloned());
        match error {
            Some(_) => SubmitOutcome::Fatal(format!(
                "channel {name}: submission answered with an error: {}",
                self.log_text(body)
            )),
            None => SubmitOutcome::Ambiguous(format!(
                "channel {name}: submission answer without a task id: {}",
                self.log_text(body)
            )),
        }
    }

    /// An upstream body as a log may show it: secret-bearing members, URL queries and the
    /// channel's key removed, cut to [`redact::LOG_BYTES`].
    pub fn log_text(&self, body: &[u8]) -> String {
        redact::for_log(body, self.settings.api_key.as_deref())
    }

    /// GETs a task's status at `url` and reads it as `T`; a failed call, a status that is not a
    /// success, or an answer that is not a `T` comes back as the poll's outcome.
    pub async fn poll_json<T: serde::de::DeserializeOwned>(
        &self,
        url: &str,
    ) -> Result<T, PollOutcome> {
        let name = self.name();
        let req = self.request(Method::GET, url, true).body(Bytes::new());
        let result = self.exchange(req).await;
        if let Some(outcome) = poll_failure(name, &result, |body| self.log_text(body)) {
            return Err(outcome);
        }
        let Ok((_, _, body)) = result else {
            return Err(PollOutcome::Transient(format!("channel {name}: no answer")));
        };
        serde_json::from_slice(&body).map_err(|_| {
            PollOutcome::Unknown(format!(
                "channel {name}: unreadable poll answer: {}",
                self.log_text(&body)
            ))
        })
    }

    /// The failure recorded when the upstream ends a task without a result. The upstream's
    /// own words (`detail`, its error as JSON text) go to the log only, redacted.
    pub fn upstream_failed(&self, status: &str, detail: &str) -> PollOutcome {
        ended_without_result(self.name(), status, &self.log_text(detail.as_bytes()))
    }

    /// Starts a download of a result URL, following redirects: the key goes along only to
    /// the channel's own origin, and a URL elsewhere that is not trusted goes through the SSRF
    /// guard.
    pub async fn download(&self, url: &str) -> Result<UpstreamResponse, UpstreamError> {
        let mut url = url.to_owned();
        for _ in 0..MAX_REDIRECTS {
            let res = self.download_once(&url).await?;
            let location = res
                .status
                .is_redirection()
                .then(|| res.headers().get(http::header::LOCATION).cloned())
                .flatten();
            let Some(location) = location else {
                return Ok(res);
            };
            let next = location
                .to_str()
                .ok()
                .and_then(|l| resolve_location(&url, l))
                .ok_or_else(|| {
                    UpstreamError::Build("a redirect to a location that is no URL".into())
                })?;
            // Dropped unread: the redirect's own body is of no use.
            drop(res);
            url = next;
        }
        Err(UpstreamError::Build(format!(
            "more than {MAX_REDIRECTS} redirects"
        )))
    }

    async fn download_once(&self, url: &str) -> Result<UpstreamResponse, UpstreamError> {
        let req = self
            .request(Method::GET, url, self.is_own(url))
            .header("accept", "application/binary")
            .body(Bytes::new())
            .map_err(|e| UpstreamError::Build(e.to_string()))?;
        if self.is_trusted(url) {
            self.http.send(req).await
        } else {
            self.guarded.send(req).await
        }
    }

    /// A result that came inline as base64 (a vendor answering with the video's bytes),
    /// decoded off the async workers into a temp file of the blob store.
    pub async fn inline_result(&self, data: String) -> Result<crate::ResultSource, String> {
        use base64::Engine as _;
        let path = self.blobs.temp_path();
        let target = path.clone();
        let written = tokio::task::spawn_blocking(move || {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(data.trim())
                .map_err(|e| format!("not base64: {e}"))?;
            std::fs::write(&target, bytes).map_err(|e| format!("writing a temp file: {e}"))
        })
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r);
        match written {
            Ok(()) => Ok(crate::ResultSource::LocalFile(path)),
            Err(e) => {
                let _ = tokio::fs::remove_file(&path).await;
                Err(e)
            }
        }
    }

    /// A channel test: GETs `url` of the channel's own API with the key, and reads the answer
    /// by its status ([`check::verdict_of`]), or by `classify` when it knows the vendor's
    /// bodies better.
    pub async fn check_get(
        &self,
        url: &str,
        classify: impl Fn(StatusCode, &[u8]) -> Option<CheckVerdict>,
    ) -> ChannelCheck {
        let req = self.request(Method::GET, url, true).body(Bytes::new());
        self.check_request(req, classify).await
    }

    /// [`Remote::check_get`] of a request the vendor built (its own credentials on it).
    pub async fn check_request(
        &self,
        req: Result<Request<Bytes>, http::Error>,
        classify: impl Fn(StatusCode, &[u8]) -> Option<CheckVerdict>,
    ) -> ChannelCheck {
        match self.exchange(req).await {
            Err(e) => transport_check(&e),
            Ok((status, _, body)) => {
                let verdict = classify(status, &body).unwrap_or_else(|| check::verdict_of(status));
                check::answered(verdict, status, &self.log_text(&body))
            }
        }
    }

    /// Best effort DELETE; failures are logged.
    pub async fn delete(&self, url: &str) {
        let req = self.request(Method::DELETE, url, true).body(Bytes::new());
        match self.exchange(req).await {
            Ok((status, _, _)) if status.is_success() => {}
            Ok((status, _, _)) => {
                tracing::warn!(channel = self.name(), %status, "upstream cancel refused")
            }
            Err(e) => tracing::warn!(channel = self.name(), error = %e, "upstream cancel failed"),
        }
    }

    /// A stored reference (image, video or audio) and its media type (sniffed), when it is at
    /// most `max_inline_bytes`: its length is looked at before any byte is read.
    pub async fn read_blob(&self, blob_id: &str) -> Result<(Vec<u8>, &'static str), ReadBlobError> {
        let failed = |e: &dyn std::fmt::Display| ReadBlobError::Failed {
            id: blob_id.to_owned(),
            message: e.to_string(),
        };
        let max = self.settings.max_inline_bytes;
        let blob = self.blobs.open(blob_id).await.map_err(|e| failed(&e))?;
        let len = blob.len();
        if len > max {
            return Err(ReadBlobError::OverInlineCap {
                id: blob_id.to_owned(),
                len,
                max,
            });
        }
        let mut buf = Vec::with_capacity(len as usize);
        let mut chunks = blob.read_all().await.map_err(|e| failed(&e))?;
        while let Some(chunk) = chunks.next().await {
            buf.extend_from_slice(&chunk.map_err(|e| failed(&e))?);
            if buf.len() as u64 > max {
                return Err(ReadBlobError::OverInlineCap {
                    id: blob_id.to_owned(),
                    len: buf.len() as u64,
                    max,
                });
            }
        }
        let mime = media_mime(&buf);
        Ok((buf, mime))
    }
}

/// A channel test whose call got no answer: TLS trouble or no connection, the cause first
/// (`connection refused`, `DNS lookup failed`, `timed out`), then the error as it came.
pub fn transport_check(e: &UpstreamError) -> ChannelCheck {
    let text = e.to_string();
    let lower = text.to_ascii_lowercase();
    let has = |words: &[&str]| words.iter().any(|word| lower.contains(word));
    if has(&[
        "tls",
        "certificate",
        "handshake",
        "corrupt message",
        "alert",
    ]) {
        return ChannelCheck {
            verdict: CheckVerdict::Tls,
            detail: format!("TLS handshake failed: {text}"),
        };
    }
    let cause = if e.is_timeout() || has(&["timed out", "timeout", "deadline"]) {
        "timed out"
    } else if has(&["refused"]) {
        "connection refused"
    } else if matches!(e, UpstreamError::Blocked { .. }) {
        "address not allowed"
    } else if has(&[
        "dns",
        "lookup",
        "resolve",
        "name or service not known",
        "nodename nor servname",
        "no such host",
    ]) {
        "DNS lookup failed"
    } else {
        "no connection"
    };
    ChannelCheck {
        verdict: CheckVerdict::Unreachable,
        detail: format!("{cause}: {text}"),
    }
}

/// The absolute URL a redirect's `Location` names, relative to `from`.
fn resolve_location(from: &str, location: &str) -> Option<String> {
    let location = location.trim();
    if location.starts_with("http://") || location.starts_with("https://") {
        return Some(location.to_owned());
    }
    let uri = from.parse::<http::Uri>().ok()?;
    let origin = format!("{}://{}", uri.scheme_str()?, uri.authority()?);
    if location.starts_with("//") {
        return Some(format!("{}:{location}", uri.scheme_str()?));
    }
    if location.starts_with('/') {
        return Some(format!("{origin}{location}"));
    }
    None
}

/// Why a stored reference cannot be sent inline.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadBlobError {
    #[error("reference {id} is {len} bytes, over the inline cap of {max}")]
    OverInlineCap { id: String, len: u64, max: u64 },
    #[error("reading reference {id}: {message}")]
    Failed { id: String, message: String },
}

/// An upstream body for a log line where no channel is at hand: redacted as
/// [`Remote::log_text`] does, less the channel's own key.
pub fn snippet(body: &[u8]) -> String {
    redact::for_log(body, None)
}

/// [`Remote::upstream_failed`] where no channel is at hand (a pure mapping of an answer).
pub fn upstream_failed(name: &str, status: &str, detail: &str) -> PollOutcome {
    ended_without_result(name, status, &snippet(detail.as_bytes()))
}

/// The failure recorded when the upstream ends a task without a result; its own words
/// (`detail`, already redacted) go to the log only.
fn ended_without_result(name: &str, status: &str, detail: &str) -> PollOutcome {
    tracing::warn!(
        channel = name,
        status,
        detail,
        "upstream ended a task without a result"
    );
    let message = match status {
        "cancelled" => "the upstream cancelled the task",
        "expired" => "the upstream task expired before it finished",
        _ => "the upstream failed the task",
    };
    PollOutcome::Failed {
        code: "upstream_error".into(),
        message: message.into(),
    }
}

/// The media type of a stored reference by its first bytes (images, videos and audio the
/// relay accepts), `application/octet-stream` when it is none of them.
pub fn media_mime(bytes: &[u8]) -> &'static str {
    fetch::sniff(bytes).map_or("application/octet-stream", fetch::Format::mime)
}

/// A submission the upstream answered with `status`, not a success: 429 is a rate limit; 408
/// and 5xx say the upstream took nothing and may take it later or elsewhere; any other status
/// (a 4xx: the request's own fault) will not work anywhere. `body` is for the log, redacted.
pub fn refusal(
    name: &str,
    status: StatusCode,
    headers: &http::HeaderMap,
    body: &str,
) -> SubmitOutcome {
    let detail = format!("channel {name}: submission answered {status}: {body}");
    if status == StatusCode::TOO_MANY_REQUESTS {
        SubmitOutcome::RateLimited {
            retry_after: retry_after(headers),
            reason: detail,
        }
    } else if status.is_server_error() || status == StatusCode::REQUEST_TIMEOUT {
        SubmitOutcome::Retry(detail)
    } else {
        SubmitOutcome::Fatal(detail)
    }
}

/// A poll's answer by status: `None` when the caller should read the body. `log` makes an
/// upstream body fit for the log.
pub fn poll_failure(
    name: &str,
    result: &Result<(StatusCode, http::HeaderMap, Bytes), UpstreamError>,
    log: impl Fn(&[u8]) -> String,
) -> Option<PollOutcome> {
    match result {
        Err(e) => Some(PollOutcome::Transient(format!("channel {name}: {e}"))),
        Ok((status, _, _)) if *status == StatusCode::NOT_FOUND => Some(PollOutcome::Failed {
            code: "upstream_error".into(),
            message: "the upstream no longer knows the task".into(),
        }),
        Ok((status, _, body)) if !status.is_success() => Some(PollOutcome::Transient(format!(
            "channel {name}: poll answered {status}: {}",
            log(body)
        ))),
        Ok(_) => None,
    }
}

/// `retry-after-ms` or `retry-after` (seconds), capped at a minute.
pub fn retry_after(headers: &http::HeaderMap) -> Option<Duration> {
    let read = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|v| v.is_finite() && *v >= 0.0)
    };
    read("retry-after-ms")
        .map(|ms| ms / 1000.0)
        .or_else(|| read("retry-after"))
        .map(|secs| Duration::from_secs_f64(secs.min(60.0)))
}

/// An upstream id as one path segment: anything but unreserved characters is escaped.
pub fn path_part(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    for b in id.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A channel's pieces over an empty blob directory, for the vendors' unit tests.
/// Why a poll's answer says nothing of its task's state, and what the task does then.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PollError {
    /// The vendor no longer knows the task (its `404`): the task fails.
    Gone,
    /// Polled again.
    Transient(String),
    /// An answer that cannot be read: counted like an unknown status.
    Unreadable(String),
}

impl PollError {
    pub fn outcome(self) -> PollOutcome {
        match self {
            PollError::Gone => PollOutcome::Failed {
                code: "upstream_error".into(),
                message: "the upstream no longer knows the task".into(),
            },
            PollError::Transient(reason) => PollOutcome::Transient(reason),
            PollError::Unreadable(reason) => PollOutcome::Unknown(reason),
        }
    }
}

#[cfg(test)]
pub(crate) fn test_remote(name: &str) -> Remote {
    let dir = std::env::temp_dir().join(format!("channels-remote-{}", std::process::id()));
    let blobs: Arc<dyn BlobStore> = match store::LocalBlobs::open(&dir) {
        Ok(blobs) => Arc::new(blobs),
        Err(e) => panic!("a blob directory: {e}"),
    };
    let settings = RemoteSettings {
        name: name.to_owned(),
        models: Vec::new(),
        base_url: "http://127.0.0.1:9".to_owned(),
        api_key: Some("test-key".to_owned()),
        model_map: BTreeMap::new(),
        timeouts: UpstreamTimeouts::default(),
        min_poll_interval: Duration::from_secs(2),
        max_inline_bytes: 1024,
        result_urls: ResultUrls::default(),
        network: Network::default(),
    };
    Remote::new(settings, blobs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_classify() {
        let refused = |s: u16| {
            refusal(
                "c",
                StatusCode::from_u16(s).unwrap(),
                &http::HeaderMap::new(),
                "",
            )
        };
        for s in [500, 502, 503, 504, 408] {
            assert!(matches!(refused(s), SubmitOutcome::Retry(_)), "{s}");
        }
        for s in [400, 401, 403, 404, 413, 422, 301] {
            assert!(matches!(refused(s), SubmitOutcome::Fatal(_)), "{s}");
        }
        assert!(matches!(refused(429), SubmitOutcome::RateLimited { .. }));
        let ok = |s: u16| -> Result<(StatusCode, http::HeaderMap, Bytes), UpstreamError> {
            Ok((
                StatusCode::from_u16(s).unwrap(),
                http::HeaderMap::new(),
                Bytes::new(),
            ))
        };
        let log = |b: &[u8]| redact::for_log(b, None);
        assert!(poll_failure("c", &ok(200), log).is_none());
        assert!(matches!(
            poll_failure("c", &ok(404), log),
            Some(PollOutcome::Failed { .. })
        ));
        assert!(matches!(
            poll_failure("c", &ok(503), log),
            Some(PollOutcome::Transient(_))
        ));
        let mut h = http::HeaderMap::new();
        h.insert("retry-after", "2".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(2)));
    }

    #[test]
    fn redirect_locations_resolve_against_the_url_they_came_from() {
        let from = "https://api.example/v1/files/a:download?alt=media";
        assert_eq!(
            resolve_location(from, "https://cdn.example/x?sig=1").as_deref(),
            Some("https://cdn.example/x?sig=1")
        );
        assert_eq!(
            resolve_location(from, "/other/path").as_deref(),
            Some("https://api.example/other/path")
        );
        assert_eq!(
            resolve_location(from, "//cdn.example/y").as_deref(),
            Some("https://cdn.example/y")
        );
        assert_eq!(resolve_location(from, "relative/path"), None);
        assert_eq!(resolve_location(from, "ftp://x/y"), None);
    }
}
