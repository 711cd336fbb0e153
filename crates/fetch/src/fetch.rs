//! Fetching reference media from client-given URLs, behind the SSRF guard.

use std::error::Error as StdError;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::header::{ACCEPT, ACCEPT_ENCODING, LOCATION, USER_AGENT};
use http::uri::Scheme;
use http::{Request, StatusCode, Uri};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::data_uri::{DataUriDecoder, decode_data_uri, is_data_uri};
use crate::error::FetchError;
use crate::guard::{BlockedError, GuardedConnector, Policy, literal_ip};

/// The `User-Agent` of every fetch.
pub const FETCH_USER_AGENT: &str = concat!(
    "video-relay/",
    env!("CARGO_PKG_VERSION"),
    " (reference media fetcher)"
);

/// How a [`Fetcher`] behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchConfig {
    /// Limit on the whole fetch: DNS, connect, TLS, headers, every redirect and the body.
    pub timeout: Duration,
    /// Allow loopback, private, link-local, ... addresses (`allow_private_urls`: tests and
    /// closed networks only).
    pub allow_private: bool,
    /// Redirects followed before giving up with [`FetchError::TooManyRedirects`].
    pub max_redirects: u8,
}

impl Default for FetchConfig {
    /// 10 s, private addresses refused, 5 redirects.
    fn default() -> Self {
        FetchConfig {
            timeout: Duration::from_secs(10),
            allow_private: false,
            max_redirects: 5,
        }
    }
}

type HttpClient = Client<HttpsConnector<GuardedConnector>, Empty<Bytes>>;

/// Fetches URLs and decodes `data:` URIs. Cheap to clone: clones share one connection pool.
#[derive(Clone)]
pub struct Fetcher {
    client: HttpClient,
    config: Arc<FetchConfig>,
    policy: Arc<Policy>,
}

impl std::fmt::Debug for Fetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fetcher")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone, Copy)]
enum Limit {
    /// The whole body, refused when longer.
    Max(u64),
    /// The first bytes only; the rest is never read.
    Prefix(usize),
}

impl Fetcher {
    /// One pooled client (http and https, HTTP/1.1 and HTTP/2 by ALPN, rustls with the ring
    /// provider and the webpki roots). Needs a tokio runtime when used, not when built.
    pub fn new(config: FetchConfig) -> Fetcher {
        let policy = Policy::new(config.allow_private);
        Fetcher::with_policy(config, policy)
    }

    /// A fetcher that refuses private addresses except `ips`: lets a test serve a "public"
    /// first hop on loopback.
    #[cfg(test)]
    pub(crate) fn exempting(config: FetchConfig, ips: &[std::net::IpAddr]) -> Fetcher {
        let policy = Policy::new(config.allow_private).exempting(ips);
        Fetcher::with_policy(config, policy)
    }

    fn with_policy(config: FetchConfig, policy: Policy) -> Fetcher {
        let policy = Arc::new(policy);
        let tls = tls_config();
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .wrap_connector(GuardedConnector::new(Arc::clone(&policy), config.timeout));
        let client = Client::builder(TokioExecutor::new())
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(4)
            .build(connector);
        Fetcher {
            client,
            config: Arc::new(config),
            policy,
        }
    }

    pub fn config(&self) -> &FetchConfig {
        &self.config
    }

    /// GETs an http(s) URL, or decodes a `data:` URI. The body is read up to `max_bytes`
    /// (more: [`FetchError::TooLarge`], without reading the rest); a non-2xx answer is
    /// [`FetchError::Status`]; redirects are followed up to `max_redirects`, each target
    /// checked by the guard again. The configured timeout covers all of it.
    pub async fn fetch(&self, url: &str, max_bytes: u64) -> Result<Bytes, FetchError> {
        if is_data_uri(url) {
            return decode_data_uri(url, max_bytes).map(Bytes::from);
        }
        self.get(url, Limit::Max(max_bytes)).await
    }

    /// Like [`Fetcher::fetch`], but reads at most the first `n` bytes and then stops without
    /// error (enough to sniff a large video); a shorter body is returned whole.
    pub async fn fetch_prefix(&self, url: &str, n: usize) -> Result<Bytes, FetchError> {
        if is_data_uri(url) {
            // Only as much decoded as the prefix needs.
            let mut decoder = DataUriDecoder::new(url, u64::MAX)?;
            let mut bytes = Vec::new();
            while bytes.len() < n
                && let Some(chunk) = decoder.next_chunk()?
            {
                bytes.extend_from_slice(&chunk);
            }
            bytes.truncate(n);
            return Ok(Bytes::from(bytes));
        }
        self.get(url, Limit::Prefix(n)).await
    }

    async fn get(&self, url: &str, limit: Limit) -> Result<Bytes, FetchError> {
        let uri = parse_http_url(url)?;
        let result = match tokio::time::timeout(self.config.timeout, self.follow(uri, limit)).await
        {
            Ok(result) => result,
            Err(_) => Err(FetchError::Timeout),
        };
        if let Err(err) = &result {
            tracing::debug!(error = %err, "fetch failed");
        }
        result
    }

    /// The request loop: one request per redirect hop.
    async fn follow(&self, mut uri: Uri, limit: Limit) -> Result<Bytes, FetchError> {
        let mut redirects = 0u8;
        loop {
            let host = uri.host().unwrap_or_default().to_owned();
            // The connector refuses these too; checking here gives the answer without a
            // trip through the pool.
            if literal_ip(&uri).is_some_and(|ip| self.policy.refuses(ip)) {
                return Err(FetchError::Blocked { host });
            }
            let request = Request::get(uri.clone())
                .header(USER_AGENT, FETCH_USER_AGENT)
                .header(ACCEPT, "*/*")
                .header(ACCEPT_ENCODING, "identity")
                .body(Empty::new())
                .map_err(|_| FetchError::InvalidUrl("not a valid URL".to_owned()))?;
            let response = self
                .client
                .request(request)
                .await
                .map_err(|err| client_error(&err, &host))?;
            let status = response.status();
            if is_followed_redirect(status)
                && let Some(location) = response.headers().get(LOCATION)
            {
                if redirects >= self.config.max_redirects {
                    return Err(FetchError::TooManyRedirects);
                }
                redirects += 1;
                let location = location.to_str().map_err(|_| {
                    FetchError::InvalidUrl(format!("redirect from {host} to an invalid URL"))
                })?;
                uri = resolve_location(&uri, location)?;
                tracing::debug!(from = %host, to = ?uri.host(), "following redirect");
                continue;
            }
            if !status.is_success() {
                return Err(FetchError::Status(status.as_u16()));
            }
            return read_body(response, limit, &host).await;
        }
    }
}

/// rustls with the ring provider and the webpki roots.
pub fn tls_config() -> rustls::ClientConfig {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        // Cannot fail: ring's default provider supports both default protocol versions.
        .expect("the ring provider supports TLS 1.2 and 1.3")
        .with_root_certificates(roots)
        .with_no_client_auth()
}

fn is_followed_redirect(status: StatusCode) -> bool {
    matches!(status.as_u16(), 301 | 302 | 303 | 307 | 308)
}

/// A client error as a [`FetchError`]; details go to the log, not to the message.
pub(crate) fn client_error(err: &hyper_util::client::legacy::Error, host: &str) -> FetchError {
    let mut source: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = source {
        if e.downcast_ref::<BlockedError>().is_some() {
            return FetchError::Blocked {
                host: host.to_owned(),
            };
        }
        source = e.source();
    }
    tracing::debug!(host, error = %ErrorChain(err), "fetch request failed");
    if err.is_connect() {
        FetchError::Connect(host.to_owned())
    } else {
        FetchError::Http(host.to_owned())
    }
}

/// Displays an error and its sources, `: `-separated, for logs.
struct ErrorChain<'a>(&'a (dyn StdError + 'static));

impl std::fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(e) = source {
            write!(f, ": {e}")?;
            source = e.source();
        }
        Ok(())
    }
}

async fn read_body(
    response: http::Response<Incoming>,
    limit: Limit,
    host: &str,
) -> Result<Bytes, FetchError> {
    let declared = response
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let cap = match limit {
        Limit::Max(max) => {
            if declared.is_some_and(|len| len > max) {
                return Err(FetchError::TooLarge);
            }
            max
        }
        Limit::Prefix(n) => n as u64,
    };
    if cap == 0 {
        return Ok(Bytes::new());
    }
    // The declared length is the sender's word: preallocate at most 1 MiB on it.
    let initial = declared.unwrap_or(0).min(cap).min(1 << 20);
    let mut buf = BytesMut::with_capacity(usize::try_from(initial).unwrap_or(0));
    let mut body = response.into_body();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|err| {
            tracing::debug!(host, error = %ErrorChain(&err), "reading body failed");
            FetchError::Http(host.to_owned())
        })?;
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        let room = cap - buf.len() as u64;
        if (data.len() as u64) <= room {
            buf.extend_from_slice(&data);
        } else if let Limit::Prefix(_) = limit {
            buf.extend_from_slice(&data[..room as usize]);
        } else {
            return Err(FetchError::TooLarge);
        }
        if matches!(limit, Limit::Prefix(_)) && buf.len() as u64 >= cap {
            // Dropping the body closes the connection: the rest is never read.
            break;
        }
    }
    Ok(buf.freeze())
}

/// Parses a client-given URL: http or https, a host, no credentials.
pub(crate) fn parse_http_url(url: &str) -> Result<Uri, FetchError> {
    let invalid = |reason: &str| FetchError::InvalidUrl(reason.to_owned());
    let uri: Uri = url.trim().parse().map_err(|_| invalid("not a valid URL"))?;
    match uri.scheme() {
        Some(s) if *s == Scheme::HTTP || *s == Scheme::HTTPS => {}
        _ => return Err(invalid("only http, https and data URLs are accepted")),
    }
    let Some(authority) = uri.authority() else {
        return Err(invalid("URL without a host"));
    };
    if authority.as_str().contains('@') {
        return Err(invalid("credentials in URLs are not accepted"));
    }
    if authority.host().is_empty() {
        return Err(invalid("URL without a host"));
    }
    Ok(uri)
}

/// The URL a `Location` header points to, relative to the URL that answered it.
pub(crate) fn resolve_location(base: &Uri, location: &str) -> Result<Uri, FetchError> {
    let location = location.trim();
    let location = location.split('#').next().unwrap_or_default();
    let scheme = base.scheme_str().unwrap_or("http");
    let authority = base.authority().map(|a| a.as_str()).unwrap_or_default();
    let path = base.path();
    let target = if has_scheme(location) {
        location.to_owned()
    } else if location.starts_with("//") {
        format!("{scheme}:{location}")
    } else if location.starts_with('/') {
        format!("{scheme}://{authority}{location}")
    } else if location.is_empty() || location.starts_with('?') {
        format!("{scheme}://{authority}{path}{location}")
    } else {
        let dir = path.rfind('/').map_or("/", |i| &path[..=i]);
        format!("{scheme}://{authority}{dir}{location}")
    };
    let uri = parse_http_url(&target)?;
    let path = uri.path();
    if !path.split('/').any(|s| s == "." || s == "..") {
        return Ok(uri);
    }
    let query = uri.query().map(|q| format!("?{q}")).unwrap_or_default();
    let path_and_query = format!("{}{query}", remove_dot_segments(path));
    let mut parts = uri.into_parts();
    parts.path_and_query = Some(
        path_and_query
            .parse()
            .map_err(|_| FetchError::InvalidUrl("invalid redirect location".to_owned()))?,
    );
    Uri::from_parts(parts)
        .map_err(|_| FetchError::InvalidUrl("invalid redirect location".to_owned()))
}

/// RFC 3986 §5.2.4 for an absolute path: `/a/b/../c/./d` -> `/a/c/d`.
fn remove_dot_segments(path: &str) -> String {
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    let mut out: Vec<&str> = Vec::with_capacity(segments.len());
    for (i, segment) in segments.iter().enumerate() {
        let last = i + 1 == segments.len();
        match *segment {
            "." => {}
            ".." => {
                out.pop();
            }
            s => out.push(s),
        }
        if last && matches!(*segment, "." | "..") {
            out.push("");
        }
    }
    format!("/{}", out.join("/"))
}

/// Whether a URL reference starts with `scheme:` (RFC 3986: ALPHA *( ALPHA / DIGIT / + - . )).
fn has_scheme(reference: &str) -> bool {
    let Some((scheme, _)) = reference.split_once(':') else {
        return false;
    };
    let mut chars = scheme.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

#[cfg(test)]
mod tests;
