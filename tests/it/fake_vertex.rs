//! A fake of Google Veo on Vertex AI with the two services a channel needs beside it, checking
//! what the real ones check:
//!
//! - the token endpoint (`POST /token`, the key file's own `token_uri`): a form of the JWT
//!   bearer grant whose RS256 assertion is verified with the public key of the test's key pair,
//!   its `kid`, `iss`, `aud` (this very endpoint), `scope`, `iat` and `exp` checked; a wrong
//!   signature is `400 invalid_grant` as Google answers it;
//! - the Vertex AI API: the bearer of a token it issued on every call (none or unknown: 401;
//!   one it was told to expire: 401 `ACCESS_TOKEN_EXPIRED`), the paths of the project and
//!   location, and every field of a submission with its type and the model's limits (an
//!   unknown field or a value the model does not take is `400 INVALID_ARGUMENT`).
//!   Operations run for `run_ms`, then end with the video inline as base64 (the answer sent in
//!   small pieces), or, when the submission named a `storageUri`, as a `gcsUri` stored in
//!   the fake Cloud Storage; or with an error or an RAI refusal;
//! - Cloud Storage's JSON API (`GET /storage/v1/b/{bucket}/o/{object}?alt=media`), with the
//!   same bearer.
//!
//! Switches, changeable while it runs, give 429 `RESOURCE_EXHAUSTED` bursts, failures,
//! refusals and short-lived tokens.

use std::collections::HashMap;
use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::fake_veo::veo_mp4;

/// The service account the fake knows.
pub const CLIENT_EMAIL: &str = "relay@relay-test.iam.gserviceaccount.com";
pub const KEY_ID: &str = "5f1c0ffee0ddba11";
/// The project (as the channel names it, and as the API numbers it in operation names).
pub const PROJECT: &str = "relay-test";
pub const PROJECT_NUMBER: &str = "123456789012";
pub const LOCATION: &str = "us-central1";
/// The OAuth scope every token must be asked for.
const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";
const GRANT_TYPE: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";

/// A 2048-bit RSA key pair: (private key PKCS#8 PEM, public key PEM).
type KeyPair = (String, String);

fn make_key_pair() -> KeyPair {
    use rsa::pkcs8::{EncodePrivateKey, EncodePublicKey, LineEnding};
    let private = rsa::RsaPrivateKey::new(&mut rsa::rand_core::OsRng, 2048).expect("an RSA key");
    let public = rsa::RsaPublicKey::from(&private);
    (
        private
            .to_pkcs8_pem(LineEnding::LF)
            .expect("PEM")
            .to_string(),
        public.to_public_key_pem(LineEnding::LF).expect("PEM"),
    )
}

/// The service account's key pair, made once per test run.
pub fn account_key() -> &'static KeyPair {
    static PAIR: OnceLock<KeyPair> = OnceLock::new();
    PAIR.get_or_init(make_key_pair)
}

/// Another key pair, which the fake does not know.
pub fn stranger_key() -> &'static KeyPair {
    static PAIR: OnceLock<KeyPair> = OnceLock::new();
    PAIR.get_or_init(make_key_pair)
}

/// Writes a service account's JSON key file signed with `private_pem` into `dir`.
pub fn write_key_file(dir: &Path, name: &str, private_pem: &str, token_uri: &str) -> PathBuf {
    let path = dir.join(name);
    let file = json!({
        "type": "service_account",
        "project_id": PROJECT,
        "private_key_id": KEY_ID,
        "private_key": private_pem,
        "client_email": CLIENT_EMAIL,
        "client_id": "109876543210987654321",
        "auth_uri": "https://accounts.google.com/o/oauth2/auth",
        "token_uri": token_uri,
        "universe_domain": "googleapis.com",
    });
    std::fs::write(&path, serde_json::to_vec_pretty(&file).expect("JSON")).expect("key file");
    path
}

/// How the fake behaves.
#[derive(Debug, Default)]
pub struct VertexSwitches {
    /// How long an operation runs, in ms.
    pub run_ms: AtomicU64,
    /// The next this many submissions are answered 429 `RESOURCE_EXHAUSTED`.
    pub rate_limited: AtomicU32,
    /// Operations end refused by the safety filters (no videos).
    pub rai: AtomicBool,
    /// Operations end with an error (gRPC 13).
    pub fail: AtomicBool,
    /// The lifetime of the tokens issued from now on, in seconds.
    pub expires_in: AtomicU64,
}

#[derive(Debug, Clone)]
struct Operation {
    model: String,
    started: Instant,
    storage_uri: Option<String>,
}

#[derive(Default)]
struct State {
    /// Issued tokens -> expired.
    tokens: HashMap<String, bool>,
    operations: HashMap<String, Operation>,
    /// Cloud Storage: "bucket/object" -> bytes.
    objects: HashMap<String, Vec<u8>>,
    next: u64,
    /// Accepted submission bodies, oldest first.
    bodies: Vec<Value>,
    /// Refused submissions: (status, message), oldest first.
    refused: Vec<(u16, String)>,
    /// Token exchanges that issued a token.
    exchanges: u32,
    /// Token exchanges refused: their `error_description`.
    refused_grants: Vec<String>,
    /// Calls answered 401, by reason.
    unauthorized: Vec<String>,
    /// Calls to the API or the storage with a good token.
    authorized_calls: u32,
    /// Objects read from the storage.
    storage_gets: u32,
    /// Channel tests (`GET /v1/publishers/google/models/{model}`) answered.
    model_gets: u32,
}

pub struct FakeVertex {
    /// The API's base, a channel's `base_url` (and `storage_base_url`).
    pub base: String,
    /// The token endpoint, a key file's `token_uri`.
    pub token_uri: String,
    pub switches: Arc<VertexSwitches>,
    state: Arc<Mutex<State>>,
    _stop: oneshot::Sender<()>,
}

type Answer = Response<BoxBody<Bytes, Infallible>>;

fn answer(status: StatusCode, body: Value) -> Answer {
    Response::builder()
        .status(status)
        .header("content-type", "application/json; charset=UTF-8")
        .body(Full::new(Bytes::from(body.to_string())).boxed())
        .expect("response")
}

/// Google's error body.
fn google_error(status: StatusCode, name: &str, message: &str, details: Value) -> Answer {
    answer(
        status,
        json!({"error": {"code": status.as_u16(), "message": message, "status": name, "details": details}}),
    )
}

impl FakeVertex {
    pub async fn start() -> FakeVertex {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let switches = Arc::new(VertexSwitches::default());
        switches.run_ms.store(100, Ordering::SeqCst);
        switches.expires_in.store(3599, Ordering::SeqCst);
        let state: Arc<Mutex<State>> = Arc::default();
        let ctx = Arc::new(Ctx {
            token_uri: format!("{base}/token"),
            public_key: jsonwebtoken::DecodingKey::from_rsa_pem(account_key().1.as_bytes())
                .expect("public key"),
            switches: switches.clone(),
            state: state.clone(),
        });
        let stop = serve(listener, ctx);
        FakeVertex {
            token_uri: format!("{base}/token"),
            base,
            switches,
            state,
            _stop: stop,
        }
    }

    /// A key file of the account the fake knows, in `dir`.
    pub fn key_file(&self, dir: &Path, name: &str) -> PathBuf {
        write_key_file(dir, name, &account_key().0, &self.token_uri)
    }

    pub fn set_flag(&self, flag: &AtomicBool, on: bool) {
        flag.store(on, Ordering::SeqCst);
    }

    /// Every token issued so far is expired from now on.
    pub fn expire_tokens(&self) {
        for expired in self.state.lock().expect("state").tokens.values_mut() {
            *expired = true;
        }
    }

    /// Accepted submission bodies, oldest first.
    pub fn bodies(&self) -> Vec<Value> {
        self.state.lock().expect("state").bodies.clone()
    }

    /// Refused submissions: (status, message).
    pub fn refused(&self) -> Vec<(u16, String)> {
        self.state.lock().expect("state").refused.clone()
    }

    /// Tokens issued.
    pub fn exchanges(&self) -> u32 {
        self.state.lock().expect("state").exchanges
    }

    /// Token exchanges refused, by their `error_description`.
    pub fn refused_grants(&self) -> Vec<String> {
        self.state.lock().expect("state").refused_grants.clone()
    }

    /// Calls answered 401, by reason.
    pub fn unauthorized(&self) -> Vec<String> {
        self.state.lock().expect("state").unauthorized.clone()
    }

    /// Calls with a good token.
    pub fn authorized_calls(&self) -> u32 {
        self.state.lock().expect("state").authorized_calls
    }

    /// Objects read from the storage.
    pub fn storage_gets(&self) -> u32 {
        self.state.lock().expect("state").storage_gets
    }

    /// Channel tests answered.
    pub fn model_gets(&self) -> u32 {
        self.state.lock().expect("state").model_gets
    }
}

struct Ctx {
    token_uri: String,
    public_key: jsonwebtoken::DecodingKey,
    switches: Arc<VertexSwitches>,
    state: Arc<Mutex<State>>,
}

fn serve(listener: TcpListener, ctx: Arc<Ctx>) -> oneshot::Sender<()> {
    let (stop, mut stopped) = oneshot::channel::<()>();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = &mut stopped => break,
                accepted = listener.accept() => {
                    let Ok((stream, _)) = accepted else { continue };
                    let ctx = ctx.clone();
                    tokio::spawn(async move {
                        let svc = service_fn(move |req: Request<Incoming>| {
                            let ctx = ctx.clone();
                            async move { Ok::<_, Infallible>(route(&ctx, req).await) }
                        });
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), svc)
                            .await;
                    });
                }
            }
        }
    });
    stop
}

async fn route(ctx: &Ctx, req: Request<Incoming>) -> Answer {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let query = req.uri().query().unwrap_or_default().to_owned();
    let content_type = req
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    if method == Method::POST && path == "/token" {
        let body = req.into_body().collect().await.map(|b| b.to_bytes());
        return token(ctx, &content_type, &body.unwrap_or_default());
    }
    if let Some(refused) = refuse_token(ctx, &req) {
        return refused;
    }
    let not_found = || {
        google_error(
            StatusCode::NOT_FOUND,
            "NOT_FOUND",
            "Requested entity was not found.",
            json!([]),
        )
    };
    if method == Method::GET
        && let Some(rest) = path.strip_prefix("/storage/v1/b/")
        && let Some((bucket, object)) = rest.split_once("/o/")
    {
        if query != "alt=media" {
            return answer(StatusCode::OK, json!({"kind": "storage#object"}));
        }
        let key = format!("{bucket}/{}", percent_decode(object));
        let mut state = ctx.state.lock().expect("state");
        return match state.objects.get(&key).cloned() {
            Some(bytes) => {
                state.storage_gets += 1;
                Response::builder()
                    .status(StatusCode::OK)
                    .header("content-type", "video/mp4")
                    .body(Full::new(Bytes::from(bytes)).boxed())
                    .expect("response")
            }
            None => google_error(
                StatusCode::NOT_FOUND,
                "NOT_FOUND",
                &format!("No such object: {key}"),
                json!([]),
            ),
        };
    }
    if method == Method::GET
        && let Some(model) = path.strip_prefix("/v1/publishers/google/models/")
    {
        if !model.starts_with("veo-") {
            return not_found();
        }
        ctx.state.lock().expect("state").model_gets += 1;
        return answer(
            StatusCode::OK,
            json!({"name": format!("publishers/google/models/{model}"), "versionId": "001",
                   "openSourceCategory": "PROPRIETARY", "launchStage": "GA"}),
        );
    }
    let Some(rest) = path.strip_prefix("/v1/projects/") else {
        return not_found();
    };
    let segments: Vec<&str> = rest.split('/').collect();
    let [
        project,
        "locations",
        location,
        "publishers",
        "google",
        "models",
        call,
    ] = segments.as_slice()
    else {
        return not_found();
    };
    if (*project != PROJECT && *project != PROJECT_NUMBER) || *location != LOCATION {
        return google_error(
            StatusCode::FORBIDDEN,
            "PERMISSION_DENIED",
            &format!(
                "Permission 'aiplatform.endpoints.predict' denied on resource '//aiplatform.googleapis.com/projects/{project}/locations/{location}/publishers/google/models/x' (or it may not exist)."
            ),
            json!([]),
        );
    }
    let Some((model, verb)) = call.split_once(':') else {
        return not_found();
    };
    let (model, verb) = (model.to_owned(), verb.to_owned());
    if method != Method::POST {
        return not_found();
    }
    let body = req.into_body().collect().await.map(|b| b.to_bytes());
    let body = body.unwrap_or_default();
    if !content_type.starts_with("application/json") {
        return invalid(ctx, format!("Content-Type {content_type:?} is not JSON"));
    }
    match verb.as_str() {
        "predictLongRunning" => submit(ctx, &model, &body),
        "fetchPredictOperation" => fetch(ctx, &model, &body),
        _ => not_found(),
    }
}

/// The bearer check every API and storage call makes: `None` when the token is good.
fn refuse_token(ctx: &Ctx, req: &Request<Incoming>) -> Option<Answer> {
    let mut state = ctx.state.lock().expect("state");
    let bearer = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let (reason, message) = match bearer.map(|t| state.tokens.get(t).copied()) {
        None => (
            "CREDENTIALS_MISSING",
            "Request is missing required authentication credential. Expected OAuth 2 access token, login cookie or other valid authentication credential.",
        ),
        Some(None) => (
            "ACCESS_TOKEN_TYPE_UNSUPPORTED",
            "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential.",
        ),
        Some(Some(true)) => (
            "ACCESS_TOKEN_EXPIRED",
            "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential.",
        ),
        Some(Some(false)) => {
            state.authorized_calls += 1;
            return None;
        }
    };
    state.unauthorized.push(reason.to_owned());
    Some(google_error(
        StatusCode::UNAUTHORIZED,
        "UNAUTHENTICATED",
        message,
        json!([{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason,
                "domain": "googleapis.com",
                "metadata": {"service": "aiplatform.googleapis.com", "method": "google.cloud.aiplatform.v1.PredictionService.PredictLongRunning"}}]),
    ))
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Some(b) = std::str::from_utf8(&bytes[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(if bytes[i] == b'+' { b' ' } else { bytes[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The token endpoint's refusal, as Google words it.
fn grant_refused(ctx: &Ctx, description: &str) -> Answer {
    ctx.state
        .lock()
        .expect("state")
        .refused_grants
        .push(description.to_owned());
    answer(
        StatusCode::BAD_REQUEST,
        json!({"error": "invalid_grant", "error_description": description}),
    )
}

#[derive(Debug, serde::Deserialize)]
struct Claims {
    iss: String,
    scope: String,
    aud: String,
    iat: u64,
    exp: u64,
}

/// `POST /token`: the JWT bearer grant.
fn token(ctx: &Ctx, content_type: &str, body: &[u8]) -> Answer {
    if content_type != "application/x-www-form-urlencoded" {
        return answer(
            StatusCode::BAD_REQUEST,
            json!({"error": "invalid_request", "error_description": "Bad Request"}),
        );
    }
    let form: HashMap<String, String> = String::from_utf8_lossy(body)
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (percent_decode(k), percent_decode(v)))
        .collect();
    if form.get("grant_type").map(String::as_str) != Some(GRANT_TYPE) {
        return answer(
            StatusCode::BAD_REQUEST,
            json!({"error": "unsupported_grant_type", "error_description": "Invalid grant_type"}),
        );
    }
    let Some(assertion) = form.get("assertion") else {
        return grant_refused(ctx, "Invalid JWT: missing assertion");
    };
    let Ok(header) = jsonwebtoken::decode_header(assertion) else {
        return grant_refused(ctx, "Invalid JWT Signature.");
    };
    if header.alg != jsonwebtoken::Algorithm::RS256 || header.kid.as_deref() != Some(KEY_ID) {
        return grant_refused(ctx, "Invalid JWT Signature.");
    }
    let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::RS256);
    validation.set_audience(&[&ctx.token_uri]);
    validation.set_issuer(&[CLIENT_EMAIL]);
    validation.set_required_spec_claims(&["exp", "iss", "aud"]);
    let claims = match jsonwebtoken::decode::<Claims>(assertion, &ctx.public_key, &validation) {
        Ok(data) => data.claims,
        Err(e) => {
            return match e.kind() {
                jsonwebtoken::errors::ErrorKind::InvalidSignature => {
                    grant_refused(ctx, "Invalid JWT Signature.")
                }
                _ => grant_refused(ctx, &format!("Invalid JWT: {e}")),
            };
        }
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    if claims.iss != CLIENT_EMAIL || claims.aud != ctx.token_uri {
        return grant_refused(ctx, "Invalid JWT: iss or aud");
    }
    if claims.scope != SCOPE {
        return grant_refused(ctx, "Invalid OAuth scope or ID token audience provided.");
    }
    if claims.exp <= claims.iat || claims.exp - claims.iat > 3600 || claims.iat.abs_diff(now) > 300
    {
        return grant_refused(
            ctx,
            "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe. Check your iat and exp values in the JWT claim.",
        );
    }
    let mut state = ctx.state.lock().expect("state");
    state.exchanges += 1;
    let token = format!("ya29.c.fake-{:04}-secret", state.exchanges);
    state.tokens.insert(token.clone(), false);
    answer(
        StatusCode::OK,
        json!({"access_token": token,
               "expires_in": ctx.switches.expires_in.load(Ordering::SeqCst),
               "token_type": "Bearer"}),
    )
}

/// A refused submission: recorded, answered 400 `INVALID_ARGUMENT`.
fn invalid(ctx: &Ctx, message: String) -> Answer {
    ctx.state
        .lock()
        .expect("state")
        .refused
        .push((400, message.clone()));
    google_error(
        StatusCode::BAD_REQUEST,
        "INVALID_ARGUMENT",
        &message,
        json!([]),
    )
}

fn submit(ctx: &Ctx, model: &str, body: &[u8]) -> Answer {
    if ctx
        .switches
        .rate_limited
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
    {
        ctx.state
            .lock()
            .expect("state")
            .refused
            .push((429, "RESOURCE_EXHAUSTED".into()));
        return google_error(
            StatusCode::TOO_MANY_REQUESTS,
            "RESOURCE_EXHAUSTED",
            &format!(
                "Quota exceeded for aiplatform.googleapis.com/online_prediction_requests_per_base_model with base model: {model}. Please submit a quota increase request."
            ),
            json!([{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1s"}]),
        );
    }
    if !model.starts_with("veo-") {
        return google_error(
            StatusCode::NOT_FOUND,
            "NOT_FOUND",
            &format!(
                "Publisher Model `projects/{PROJECT}/locations/{LOCATION}/publishers/google/models/{model}` not found."
            ),
            json!([]),
        );
    }
    let Ok(value) = serde_json::from_slice::<Value>(body) else {
        return invalid(ctx, "Invalid JSON payload received.".into());
    };
    if let Err(message) = check_request(model, &value) {
        return invalid(ctx, message);
    }
    let storage_uri = value["parameters"]["storageUri"]
        .as_str()
        .map(str::to_owned);
    let mut state = ctx.state.lock().expect("state");
    state.next += 1;
    let id = format!("0d2c9e4f-1b7a-4c3e-9a5d-{:012}", state.next);
    state.operations.insert(
        id.clone(),
        Operation {
            model: model.to_owned(),
            started: Instant::now(),
            storage_uri,
        },
    );
    state.bodies.push(value);
    answer(
        StatusCode::OK,
        json!({"name": format!(
            "projects/{PROJECT_NUMBER}/locations/{LOCATION}/publishers/google/models/{model}/operations/{id}"
        )}),
    )
}

/// Google's word for a field it does not know.
fn unknown(name: &str, at: &str) -> String {
    format!("Invalid JSON payload received. Unknown name \"{name}\" at '{at}': Cannot find field.")
}

/// Every field and type of a submission, as Vertex AI checks them for a Veo model.
fn check_request(model: &str, value: &Value) -> Result<(), String> {
    let top = value.as_object().ok_or("the body must be an object")?;
    for key in top.keys() {
        if key != "instances" && key != "parameters" {
            return Err(unknown(key, ""));
        }
    }
    let instances = top
        .get("instances")
        .and_then(Value::as_array)
        .ok_or("instances must be a list")?;
    let [instance] = instances.as_slice() else {
        return Err("exactly one instance is supported".into());
    };
    let instance = instance
        .as_object()
        .ok_or("an instance must be an object")?;
    for key in instance.keys() {
        if !["prompt", "image", "lastFrame", "referenceImages", "video"].contains(&key.as_str()) {
            return Err(unknown(key, "instances[0]"));
        }
    }
    match instance.get("prompt") {
        Some(Value::String(p)) if !p.trim().is_empty() => {}
        _ => return Err("instances[0].prompt must be a non-empty string".into()),
    }
    for field in ["image", "lastFrame"] {
        if let Some(image) = instance.get(field) {
            check_image(image, &format!("instances[0].{field}"))?;
        }
    }
    let veo2 = model.starts_with("veo-2");
    let veo31 = model.starts_with("veo-3.1");
    if instance.contains_key("lastFrame") {
        if !instance.contains_key("image") {
            return Err("lastFrame needs image".into());
        }
        if !veo2 && !veo31 {
            return Err(format!("lastFrame is not supported by {model}"));
        }
    }
    let params = top
        .get("parameters")
        .and_then(Value::as_object)
        .ok_or("parameters must be an object")?;
    let known = [
        "aspectRatio",
        "durationSeconds",
        "enhancePrompt",
        "generateAudio",
        "negativePrompt",
        "personGeneration",
        "resolution",
        "sampleCount",
        "seed",
        "storageUri",
        "compressionQuality",
    ];
    for key in params.keys() {
        if !known.contains(&key.as_str()) {
            return Err(unknown(key, "parameters"));
        }
    }
    let duration = match params.get("durationSeconds") {
        Some(Value::Number(n)) => n.as_u64().ok_or("durationSeconds must be an integer")?,
        Some(other) => return Err(format!("durationSeconds must be an integer, got {other}")),
        None => return Err("durationSeconds is required".into()),
    };
    let durations: &[u64] = if veo2 { &[5, 6, 7, 8] } else { &[4, 6, 8] };
    if !durations.contains(&duration) {
        return Err(format!(
            "Unsupported output video duration {duration} seconds, supported durations are {durations:?}."
        ));
    }
    let ratio = match params.get("aspectRatio") {
        None => "16:9",
        Some(Value::String(r)) if r == "16:9" || r == "9:16" => r.as_str(),
        Some(other) => return Err(format!("aspectRatio {other} is not supported")),
    };
    match params.get("generateAudio") {
        None if !veo2 => return Err(format!("generateAudio is required for {model}")),
        None => {}
        Some(Value::Bool(_)) if !veo2 => {}
        Some(Value::Bool(_)) => return Err(format!("generateAudio isn't supported by {model}")),
        Some(other) => return Err(format!("generateAudio must be a boolean, got {other}")),
    }
    match params.get("resolution") {
        None => {}
        Some(Value::String(r)) if !veo2 && (r == "720p" || r == "1080p") => {}
        Some(other) => return Err(format!("resolution {other} is not supported by {model}")),
    }
    match params.get("sampleCount") {
        None => {}
        Some(Value::Number(n)) if n.as_u64().is_some_and(|n| (1..=4).contains(&n)) => {}
        Some(other) => return Err(format!("sampleCount must be from 1 to 4, got {other}")),
    }
    match params.get("seed") {
        None => {}
        Some(Value::Number(n)) if n.as_u64().is_some_and(|n| n <= u64::from(u32::MAX)) => {}
        Some(other) => return Err(format!("seed must be a uint32, got {other}")),
    }
    match params.get("storageUri") {
        None => {}
        Some(Value::String(uri)) if uri.starts_with("gs://") && uri.len() > 5 => {}
        Some(other) => return Err(format!("storageUri must be a gs:// URI, got {other}")),
    }
    match instance.get("referenceImages") {
        None => {}
        Some(Value::Array(refs)) => {
            if !model.starts_with("veo-3.1-generate") {
                return Err(format!("referenceImages is not supported by {model}"));
            }
            if refs.is_empty() || refs.len() > 3 || duration != 8 || ratio != "16:9" {
                return Err("up to 3 referenceImages, at 8 seconds and 16:9".into());
            }
            if instance.contains_key("image") || instance.contains_key("lastFrame") {
                return Err("referenceImages cannot be used with image or lastFrame".into());
            }
            for (i, r) in refs.iter().enumerate() {
                let r = r.as_object().ok_or("a reference image must be an object")?;
                for key in r.keys() {
                    if key != "image" && key != "referenceType" {
                        return Err(unknown(key, &format!("instances[0].referenceImages[{i}]")));
                    }
                }
                check_image(
                    r.get("image")
                        .ok_or("referenceImages[].image is required")?,
                    "referenceImages[].image",
                )?;
                if r.get("referenceType") != Some(&json!("asset")) {
                    return Err("referenceType must be \"asset\"".into());
                }
            }
        }
        Some(_) => return Err("referenceImages must be a list".into()),
    }
    Ok(())
}

fn check_image(image: &Value, at: &str) -> Result<(), String> {
    let image = image.as_object().ok_or(format!("{at} must be an object"))?;
    for key in image.keys() {
        if !["bytesBase64Encoded", "gcsUri", "mimeType"].contains(&key.as_str()) {
            return Err(unknown(key, at));
        }
    }
    let data = image
        .get("bytesBase64Encoded")
        .and_then(Value::as_str)
        .ok_or(format!("{at}.bytesBase64Encoded must be a string"))?;
    base64::engine::general_purpose::STANDARD
        .decode(data)
        .map_err(|_| format!("{at}.bytesBase64Encoded is not base64"))?;
    match image.get("mimeType").and_then(Value::as_str) {
        Some("image/png" | "image/jpeg") => Ok(()),
        other => Err(format!(
            "{at}.mimeType {other:?} is not image/jpeg or image/png"
        )),
    }
}

/// `POST ...:fetchPredictOperation`.
fn fetch(ctx: &Ctx, model: &str, body: &[u8]) -> Answer {
    let request = serde_json::from_slice::<Value>(body).unwrap_or_default();
    let Some(fields) = request.as_object() else {
        return invalid(ctx, "Invalid JSON payload received.".into());
    };
    if let Some(key) = fields.keys().find(|k| *k != "operationName") {
        return invalid(ctx, unknown(key, ""));
    }
    let Some(name) = fields.get("operationName").and_then(Value::as_str) else {
        return invalid(ctx, "operationName is required".into());
    };
    let prefix = format!(
        "projects/{PROJECT_NUMBER}/locations/{LOCATION}/publishers/google/models/{model}/operations/"
    );
    let op = name
        .strip_prefix(&prefix)
        .and_then(|id| {
            let op = ctx.state.lock().expect("state").operations.get(id).cloned();
            op.map(|op| (id.to_owned(), op))
        })
        .filter(|(_, op)| op.model == model);
    let Some((id, op)) = op else {
        return google_error(
            StatusCode::NOT_FOUND,
            "NOT_FOUND",
            "Operation not found.",
            json!([]),
        );
    };
    let run = Duration::from_millis(ctx.switches.run_ms.load(Ordering::SeqCst));
    if op.started.elapsed() < run {
        return answer(StatusCode::OK, json!({"name": name}));
    }
    let kind = "type.googleapis.com/cloud.ai.large_models.vision.GenerateVideoResponse";
    if ctx.switches.fail.load(Ordering::SeqCst) {
        return answer(
            StatusCode::OK,
            json!({"name": name, "done": true,
                   "error": {"code": 13, "message": "Internal error encountered at vertex.internal.example"}}),
        );
    }
    if ctx.switches.rai.load(Ordering::SeqCst) {
        return answer(
            StatusCode::OK,
            json!({"name": name, "done": true, "response": {"@type": kind,
                "raiMediaFilteredCount": 1,
                "raiMediaFilteredReasons": ["Unable to show generated videos. All videos were filtered out because they violated Vertex AI's usage guidelines. You will not be charged for blocked videos. Try rephrasing the prompt. Support codes: 90789179"]}}),
        );
    }
    if let Some(uri) = op.storage_uri {
        let prefix = uri.trim_start_matches("gs://").trim_end_matches('/');
        let object = format!("{prefix}/{id}/sample_0.mp4");
        ctx.state
            .lock()
            .expect("state")
            .objects
            .insert(object.clone(), veo_mp4().to_vec());
        return answer(
            StatusCode::OK,
            json!({"name": name, "done": true, "response": {"@type": kind,
                "raiMediaFilteredCount": 0,
                "videos": [{"gcsUri": format!("gs://{object}"), "mimeType": "video/mp4"}]}}),
        );
    }
    // The video inline, the answer sent in small pieces as a large one arrives.
    let text = json!({"name": name, "done": true, "response": {"@type": kind,
        "raiMediaFilteredCount": 0,
        "videos": [{"bytesBase64Encoded": base64::engine::general_purpose::STANDARD.encode(veo_mp4()),
                    "mimeType": "video/mp4"}]}})
    .to_string();
    let pieces: Vec<Result<Frame<Bytes>, Infallible>> = Bytes::from(text)
        .chunks(777)
        .map(|c| Ok(Frame::data(Bytes::copy_from_slice(c))))
        .collect();
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/json; charset=UTF-8")
        .body(StreamBody::new(futures_util::stream::iter(pieces)).boxed())
        .expect("response")
}
