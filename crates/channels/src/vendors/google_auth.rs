//! A Google service account as a channel's credentials: its JSON key file read and checked,
//! the OAuth 2.0 JWT bearer grant (RFC 7523) that turns it into an access token at the key's
//! own `token_uri`, and the token kept until shortly before it expires, refreshed by one
//! caller at a time (the others wait for that refresh and share its outcome).
//!
//! The private key and the tokens never reach a log or an error: [`ServiceAccountKey`] and
//! [`AccessToken`] print as `[redacted]`, and errors name the file and what is wrong with it.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::http::client::UpstreamHttp;
use crate::vendors::redact;

/// The scope of every Vertex AI (and Cloud Storage) call.
pub const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";

/// The grant type of RFC 7523 (a JWT as an authorization grant).
pub const GRANT_TYPE: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";

/// An assertion's lifetime: Google takes at most an hour.
pub const ASSERTION_SECS: u64 = 3600;

/// A token is refreshed when less than this is left of it.
pub const REFRESH_MARGIN: Duration = Duration::from_secs(300);

/// A token's lifetime when the token endpoint names none.
const DEFAULT_LIFETIME: Duration = Duration::from_secs(3600);

/// Largest key file read: a service account's key is about 2 KiB.
const MAX_KEY_FILE_BYTES: u64 = 64 * 1024;

/// Largest token endpoint answer read.
const MAX_TOKEN_ANSWER_BYTES: usize = 64 * 1024;

/// A service account's key, as its JSON key file gives it.
pub struct ServiceAccountKey {
    pub client_email: String,
    /// The `kid` of every assertion.
    pub private_key_id: String,
    /// Where assertions are exchanged for tokens (and their `aud`).
    pub token_uri: String,
    key: jsonwebtoken::EncodingKey,
}

impl std::fmt::Debug for ServiceAccountKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceAccountKey")
            .field("client_email", &self.client_email)
            .field("token_uri", &self.token_uri)
            .field("private_key", &"[redacted]")
            .finish_non_exhaustive()
    }
}

/// An assertion's claims (RFC 7523 section 3, with Google's `scope`).
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Claims {
    pub iss: String,
    pub scope: String,
    pub aud: String,
    pub iat: u64,
    pub exp: u64,
}

impl ServiceAccountKey {
    /// Reads and checks the key file at `path`; the error says what is wrong with it, never
    /// what it holds.
    pub fn read(path: &Path) -> Result<ServiceAccountKey, String> {
        let len = std::fs::metadata(path)
            .map_err(|e| format!("cannot be read: {e}"))?
            .len();
        if len > MAX_KEY_FILE_BYTES {
            return Err(format!(
                "is {len} bytes, too large for a service account key (at most {MAX_KEY_FILE_BYTES})"
            ));
        }
        let bytes = std::fs::read(path).map_err(|e| format!("cannot be read: {e}"))?;
        ServiceAccountKey::parse(&bytes)
    }

    /// A key file's contents, checked: a JSON object of `"type": "service_account"` (when
    /// given) with `client_email`, `private_key_id`, `private_key` (an RSA key in PEM) and an
    /// http(s) `token_uri`; the key must sign.
    pub fn parse(bytes: &[u8]) -> Result<ServiceAccountKey, String> {
        let value: Value = serde_json::from_slice(bytes).map_err(|e| {
            format!(
                "is not JSON (line {}, column {}): not a service account key file",
                e.line(),
                e.column()
            )
        })?;
        let fields = value
            .as_object()
            .ok_or("is not a JSON object: not a service account key file")?;
        match fields.get("type") {
            None => {}
            Some(Value::String(t)) if t == "service_account" => {}
            Some(Value::String(t)) => {
                let shown: String = t
                    .chars()
                    .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .take(40)
                    .collect();
                return Err(format!(
                    "is a key of type \"{shown}\", not a service account's (\"service_account\")"
                ));
            }
            Some(_) => return Err("type is not a string".into()),
        }
        let field = |name: &str| -> Result<String, String> {
            match fields.get(name) {
                Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.trim().to_owned()),
                Some(Value::String(_)) => Err(format!("{name} is empty")),
                Some(_) => Err(format!("{name} is not a string")),
                None => Err(format!("lacks {name}")),
            }
        };
        let client_email = field("client_email")?;
        let private_key_id = field("private_key_id")?;
        let private_key = field("private_key")?;
        let token_uri = field("token_uri")?;
        let uri_ok = (token_uri.starts_with("https://") || token_uri.starts_with("http://"))
            && token_uri
                .parse::<http::Uri>()
                .is_ok_and(|u| u.host().is_some_and(|h| !h.is_empty()));
        if !uri_ok {
            return Err("token_uri is not an http(s) URL".into());
        }
        let key = jsonwebtoken::EncodingKey::from_rsa_pem(private_key.as_bytes())
            .map_err(|_| "private_key is not an RSA private key in PEM form".to_owned())?;
        let account = ServiceAccountKey {
            client_email,
            private_key_id,
            token_uri,
            key,
        };
        // The PEM parses lazily: a key that cannot sign is found now, not at the first call.
        account
            .assertion(0)
            .map_err(|_| "private_key is not a usable RSA key".to_owned())?;
        Ok(account)
    }

    /// The claims of an assertion made at `now_secs` (Unix seconds).
    pub fn claims(&self, now_secs: u64) -> Claims {
        Claims {
            iss: self.client_email.clone(),
            scope: SCOPE.to_owned(),
            aud: self.token_uri.clone(),
            iat: now_secs,
            exp: now_secs + ASSERTION_SECS,
        }
    }

    /// An RS256 JWT of [`ServiceAccountKey::claims`], its header naming the key
    /// (`kid` = `private_key_id`).
    pub fn assertion(&self, now_secs: u64) -> Result<String, String> {
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
        header.kid = Some(self.private_key_id.clone());
        jsonwebtoken::encode(&header, &self.claims(now_secs), &self.key)
            .map_err(|e| format!("signing an assertion: {}", e.kind_name()))
    }
}

/// The kind of a signing error, without anything of the key.
trait KindName {
    fn kind_name(&self) -> &'static str;
}

impl KindName for jsonwebtoken::errors::Error {
    fn kind_name(&self) -> &'static str {
        match self.kind() {
            jsonwebtoken::errors::ErrorKind::InvalidRsaKey(_) => "invalid RSA key",
            jsonwebtoken::errors::ErrorKind::InvalidKeyFormat => "invalid key format",
            _ => "the key cannot sign",
        }
    }
}

/// The checks of a channel's `credentials_file`, as `relay config check` runs them: `Err`
/// names what is wrong with the file.
pub fn check_key_file(path: &Path) -> Result<(), String> {
    ServiceAccountKey::read(path).map(|_| ())
}

/// An OAuth 2.0 access token; it prints as `[redacted]`.
#[derive(Clone, PartialEq, Eq)]
pub struct AccessToken(String);

impl AccessToken {
    /// The `authorization` header's value.
    pub fn bearer(&self) -> String {
        format!("Bearer {}", self.0)
    }
}

impl std::fmt::Debug for AccessToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AccessToken([redacted])")
    }
}

/// Why no token could be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// The token endpoint refused the assertion (a key deleted or disabled, a wrong key or
    /// account, a clock far off): the channel's credentials are wrong.
    #[error("the token endpoint refused the service account key: {0}")]
    Refused(String),
    /// No answer, or one that says nothing of the key (5xx, 429, an unreadable body).
    #[error("no access token: {0}")]
    Unavailable(String),
}

/// The answer of the token endpoint.
#[derive(Debug, Deserialize)]
struct TokenAnswer {
    #[serde(default)]
    access_token: Option<String>,
    #[serde(default)]
    expires_in: Option<u64>,
}

struct Cached {
    token: AccessToken,
    expires_at: Instant,
}

#[derive(Default)]
struct TokenState {
    token: Option<Cached>,
    /// The outcome of the last refresh when it failed: given to those who waited for it.
    last_failure: Option<TokenError>,
}

/// Whether a token expiring at `expires_at` may still be used at `now`: more than
/// [`REFRESH_MARGIN`] left.
pub fn is_fresh(expires_at: Instant, now: Instant) -> bool {
    expires_at.checked_duration_since(now).unwrap_or_default() > REFRESH_MARGIN
}

/// A service account's access tokens: one kept while fresh, refreshed by one caller at a time.
pub struct TokenSource {
    key: ServiceAccountKey,
    state: Mutex<TokenState>,
    /// Refreshes ended, successful or not: a caller that sees it move while it waited for the
    /// lock shares that refresh's outcome instead of making another.
    refreshes: AtomicU64,
}

impl TokenSource {
    pub fn new(key: ServiceAccountKey) -> TokenSource {
        TokenSource {
            key,
            state: Mutex::default(),
            refreshes: AtomicU64::new(0),
        }
    }

    pub fn key(&self) -> &ServiceAccountKey {
        &self.key
    }

    /// The current token, or a new one from the token endpoint through `http`. Concurrent
    /// callers wait for the one refresh under way and share its outcome.
    pub async fn token(&self, http: &UpstreamHttp) -> Result<AccessToken, TokenError> {
        let seen = self.refreshes.load(Ordering::Acquire);
        let mut state = self.state.lock().await;
        if let Some(cached) = &state.token
            && is_fresh(cached.expires_at, Instant::now())
        {
            return Ok(cached.token.clone());
        }
        if self.refreshes.load(Ordering::Acquire) != seen
            && let Some(failure) = &state.last_failure
        {
            return Err(failure.clone());
        }
        let outcome = self.exchange(http).await;
        self.refreshes.fetch_add(1, Ordering::AcqRel);
        match outcome {
            Ok((token, lifetime)) => {
                state.token = Some(Cached {
                    token: token.clone(),
                    expires_at: Instant::now() + lifetime,
                });
                state.last_failure = None;
                Ok(token)
            }
            Err(e) => {
                state.token = None;
                state.last_failure = Some(e.clone());
                Err(e)
            }
        }
    }

    /// Forgets `token` after an API refused it (expired or revoked early): the next call
    /// fetches another. A token already replaced is left alone.
    pub async fn forget(&self, token: &AccessToken) {
        let mut state = self.state.lock().await;
        if state.token.as_ref().is_some_and(|c| &c.token == token) {
            state.token = None;
        }
    }

    /// One exchange of a fresh assertion for a token and its lifetime.
    async fn exchange(&self, http: &UpstreamHttp) -> Result<(AccessToken, Duration), TokenError> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let assertion = self.key.assertion(now).map_err(TokenError::Refused)?;
        let body = format!(
            "grant_type={}&assertion={}",
            form_encode(GRANT_TYPE),
            form_encode(&assertion)
        );
        let req = Request::builder()
            .method(Method::POST)
            .uri(&self.key.token_uri)
            .header(
                "user-agent",
                concat!("video-relay/", env!("CARGO_PKG_VERSION")),
            )
            .header("content-type", "application/x-www-form-urlencoded")
            .header("accept", "application/json")
            .body(Bytes::from(body))
            .map_err(|e| TokenError::Unavailable(format!("token request: {e}")))?;
        let res = http
            .send(req)
            .await
            .map_err(|e| TokenError::Unavailable(e.to_string()))?;
        let status = res.status;
        let body = res
            .body
            .collect(MAX_TOKEN_ANSWER_BYTES)
            .await
            .map_err(|e| TokenError::Unavailable(format!("token answer: {e}")))?;
        read_token_answer(status, &body)
    }
}

/// The token endpoint's answer: a token and its lifetime, or why not. Its words go in the
/// error with secret-bearing members removed (`access_token` never appears).
pub fn read_token_answer(
    status: StatusCode,
    body: &[u8],
) -> Result<(AccessToken, Duration), TokenError> {
    let said = || format!("{status}: {}", redact::for_log(body, None));
    if status.is_success() {
        let answer: TokenAnswer = serde_json::from_slice(body)
            .map_err(|_| TokenError::Unavailable(format!("unreadable token answer: {}", said())))?;
        let token = answer
            .access_token
            .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_graphic()))
            .ok_or_else(|| {
                TokenError::Unavailable(format!("token answer without a token: {}", said()))
            })?;
        let lifetime = answer
            .expires_in
            .map(Duration::from_secs)
            .unwrap_or(DEFAULT_LIFETIME);
        return Ok((AccessToken(token), lifetime));
    }
    if status.is_client_error()
        && status != StatusCode::TOO_MANY_REQUESTS
        && status != StatusCode::REQUEST_TIMEOUT
    {
        return Err(TokenError::Refused(said()));
    }
    Err(TokenError::Unavailable(format!(
        "the token endpoint answered {}",
        said()
    )))
}

/// `application/x-www-form-urlencoded` of one value.
fn form_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::sync::OnceLock;

    /// A 2048-bit RSA key pair made once per test run: (private key PKCS#8 PEM, public key
    /// SPKI PEM).
    pub(crate) fn key_pair() -> &'static (String, String) {
        static PAIR: OnceLock<(String, String)> = OnceLock::new();
        PAIR.get_or_init(|| {
            use rsa::pkcs8::{EncodePrivateKey, EncodePublicKey, LineEnding};
            let private =
                rsa::RsaPrivateKey::new(&mut rsa::rand_core::OsRng, 2048).expect("an RSA key");
            let public = rsa::RsaPublicKey::from(&private);
            (
                private
                    .to_pkcs8_pem(LineEnding::LF)
                    .expect("PEM")
                    .to_string(),
                public.to_public_key_pem(LineEnding::LF).expect("PEM"),
            )
        })
    }

    pub(crate) fn key_file(token_uri: &str) -> Value {
        serde_json::json!({
            "type": "service_account",
            "project_id": "relay-test",
            "private_key_id": "k3y1d",
            "private_key": key_pair().0,
            "client_email": "relay@relay-test.iam.gserviceaccount.com",
            "client_id": "1234567890",
            "auth_uri": "https://accounts.google.com/o/oauth2/auth",
            "token_uri": token_uri,
        })
    }

    fn parse(value: &Value) -> Result<ServiceAccountKey, String> {
        ServiceAccountKey::parse(value.to_string().as_bytes())
    }

    #[test]
    fn an_assertion_is_the_documented_jwt() {
        let key = parse(&key_file("https://oauth2.googleapis.com/token")).unwrap();
        let jwt = key.assertion(1_700_000_000).unwrap();
        let header = jsonwebtoken::decode_header(&jwt).unwrap();
        assert_eq!(header.alg, jsonwebtoken::Algorithm::RS256);
        assert_eq!(header.kid.as_deref(), Some("k3y1d"));
        assert_eq!(header.typ.as_deref(), Some("JWT"));
        let public = jsonwebtoken::DecodingKey::from_rsa_pem(key_pair().1.as_bytes()).unwrap();
        let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::RS256);
        validation.validate_exp = false;
        validation.set_audience(&["https://oauth2.googleapis.com/token"]);
        let claims = jsonwebtoken::decode::<Claims>(&jwt, &public, &validation)
            .unwrap()
            .claims;
        assert_eq!(
            claims,
            Claims {
                iss: "relay@relay-test.iam.gserviceaccount.com".into(),
                scope: SCOPE.into(),
                aud: "https://oauth2.googleapis.com/token".into(),
                iat: 1_700_000_000,
                exp: 1_700_003_600,
            }
        );
        // Nothing of the key in its Debug.
        let shown = format!("{key:?}");
        assert!(!shown.contains("PRIVATE KEY"), "{shown}");
    }

    #[test]
    fn a_bad_key_file_is_named_for_what_is_wrong_never_for_what_it_holds() {
        let good = key_file("https://oauth2.googleapis.com/token");
        let with = |name: &str, value: Value| {
            let mut v = good.clone();
            v[name] = value;
            v
        };
        let without = |name: &str| {
            let mut v = good.clone();
            v.as_object_mut().unwrap().remove(name);
            v
        };
        let cases = [
            (without("private_key"), "lacks private_key"),
            (without("client_email"), "lacks client_email"),
            (without("private_key_id"), "lacks private_key_id"),
            (without("token_uri"), "lacks token_uri"),
            (
                with("client_email", Value::from(7)),
                "client_email is not a string",
            ),
            (
                with("token_uri", Value::from("ftp://x/token")),
                "token_uri is not an http(s) URL",
            ),
            (
                with(
                    "private_key",
                    Value::from(
                        "-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n",
                    ),
                ),
                "private_key is not",
            ),
            (
                with("type", Value::from("authorized_user")),
                "is a key of type \"authorized_user\"",
            ),
        ];
        for (file, expected) in cases {
            let err = parse(&file).unwrap_err();
            assert!(err.contains(expected), "{err} / {expected}");
            assert!(!err.contains("BEGIN"), "{err}");
        }
        let err = ServiceAccountKey::parse(b"{\"private_key\": \"-----BEGIN").unwrap_err();
        assert!(err.starts_with("is not JSON (line 1"), "{err}");
        assert!(!err.contains("BEGIN"), "{err}");
        assert!(
            ServiceAccountKey::parse(b"[1]")
                .unwrap_err()
                .contains("not a JSON object")
        );
        let missing = std::env::temp_dir().join("no-such-key-file-here.json");
        assert!(
            ServiceAccountKey::read(&missing)
                .unwrap_err()
                .starts_with("cannot be read")
        );
    }

    #[test]
    fn token_answers_are_read_without_showing_the_token() {
        let (token, lifetime) = read_token_answer(
            StatusCode::OK,
            br#"{"access_token":"ya29.c.abc","expires_in":3599,"token_type":"Bearer"}"#,
        )
        .unwrap();
        assert_eq!(token.bearer(), "Bearer ya29.c.abc");
        assert_eq!(lifetime, Duration::from_secs(3599));
        assert_eq!(format!("{token:?}"), "AccessToken([redacted])");
        let refused = read_token_answer(
            StatusCode::BAD_REQUEST,
            br#"{"error":"invalid_grant","error_description":"Invalid JWT Signature."}"#,
        )
        .unwrap_err();
        assert!(
            matches!(&refused, TokenError::Refused(d) if d.contains("Invalid JWT Signature")),
            "{refused:?}"
        );
        let busy = read_token_answer(StatusCode::SERVICE_UNAVAILABLE, b"").unwrap_err();
        assert!(matches!(busy, TokenError::Unavailable(_)));
        let odd = read_token_answer(StatusCode::OK, br#"{"access_token":"ya29.zz"}"#).unwrap();
        assert_eq!(odd.1, DEFAULT_LIFETIME);
        let empty = read_token_answer(StatusCode::OK, br#"{"token_type":"Bearer"}"#).unwrap_err();
        assert!(matches!(empty, TokenError::Unavailable(_)));
        let leaky = read_token_answer(
            StatusCode::OK,
            br#"{"access_token":"bad token with spaces","expires_in":10}"#,
        )
        .unwrap_err();
        assert!(!leaky.to_string().contains("spaces"), "{leaky}");
    }

    #[test]
    fn a_token_is_refreshed_when_less_than_five_minutes_are_left() {
        let now = Instant::now();
        assert!(is_fresh(now + Duration::from_secs(3599), now));
        assert!(is_fresh(now + Duration::from_secs(301), now));
        assert!(!is_fresh(now + Duration::from_secs(300), now));
        assert!(!is_fresh(now + Duration::from_secs(10), now));
        assert!(!is_fresh(now, now + Duration::from_secs(1)));
    }

    /// Many callers at once while no token is kept: one request to the token endpoint, whose
    /// token all of them get; then the kept token serves, until it is forgotten.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_refresh_serves_every_caller_waiting_for_it() {
        use std::sync::Arc;
        use std::sync::atomic::AtomicU32;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let token_uri = format!("http://{}/token", listener.local_addr().unwrap());
        let requests = Arc::new(AtomicU32::new(0));
        let release = Arc::new(tokio::sync::Notify::new());
        let (count, gate) = (requests.clone(), release.clone());
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let (count, gate) = (count.clone(), gate.clone());
                tokio::spawn(async move {
                    let mut seen = Vec::new();
                    let mut buf = [0u8; 4096];
                    loop {
                        let Ok(n) = stream.read(&mut buf).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        seen.extend_from_slice(&buf[..n]);
                        let text = String::from_utf8_lossy(&seen);
                        if let Some((head, body)) = text.split_once("\r\n\r\n") {
                            let len: usize = head
                                .lines()
                                .find_map(|l| {
                                    l.to_ascii_lowercase()
                                        .strip_prefix("content-length:")
                                        .map(|v| v.trim().parse().unwrap())
                                })
                                .unwrap_or(0);
                            if body.len() < len {
                                continue;
                            }
                            assert!(body.starts_with("grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion="), "{body}");
                            let n = count.fetch_add(1, Ordering::SeqCst) + 1;
                            gate.notified().await;
                            let answer =
                                format!("{{\"access_token\":\"ya29.t{n}\",\"expires_in\":3599}}");
                            let reply = format!(
                                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{answer}",
                                answer.len()
                            );
                            let _ = stream.write_all(reply.as_bytes()).await;
                            seen.clear();
                        }
                    }
                });
            }
        });

        let key = parse(&key_file(&token_uri)).unwrap();
        let source = Arc::new(TokenSource::new(key));
        let http = UpstreamHttp::new(crate::http::client::UpstreamTimeouts::default());
        let callers: Vec<_> = (0..8)
            .map(|_| {
                let (source, http) = (source.clone(), http.clone());
                tokio::spawn(async move { source.token(&http).await })
            })
            .collect();
        // The first refresh reached the endpoint; the others wait for it.
        let deadline = Instant::now() + Duration::from_secs(10);
        while requests.load(Ordering::SeqCst) == 0 {
            assert!(Instant::now() < deadline, "no token request");
            tokio::task::yield_now().await;
        }
        release.notify_one();
        for caller in callers {
            assert_eq!(caller.await.unwrap().unwrap().bearer(), "Bearer ya29.t1");
        }
        assert_eq!(requests.load(Ordering::SeqCst), 1);
        // Kept while fresh; forgotten, fetched again.
        let kept = source.token(&http).await.unwrap();
        assert_eq!(requests.load(Ordering::SeqCst), 1);
        source.forget(&kept).await;
        let again = tokio::spawn({
            let (source, http) = (source.clone(), http.clone());
            async move { source.token(&http).await }
        });
        while requests.load(Ordering::SeqCst) == 1 {
            assert!(Instant::now() < deadline, "no second token request");
            tokio::task::yield_now().await;
        }
        release.notify_one();
        assert_eq!(again.await.unwrap().unwrap().bearer(), "Bearer ya29.t2");
    }

    #[test]
    fn form_values_are_escaped() {
        assert_eq!(
            form_encode(GRANT_TYPE),
            "urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer"
        );
        assert_eq!(form_encode("a.b-c_d"), "a.b-c_d");
    }
}
