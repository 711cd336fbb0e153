//! A fake of Google Veo on the Gemini API, as strict as the real one where the relay could go
//! wrong: the key in `x-goog-api-key` (none: 403; another: 400 `API_KEY_INVALID`; a bearer
//! token besides: 401), the paths, and every field of a submission with its type (an unknown
//! or Vertex-only field such as `seed` or `generateAudio` is a 400 `INVALID_ARGUMENT`, as are
//! durations, tiers, ratios and reference images the model does not take). Operations run
//! for `run_ms`, then end with a sample, an error or an RAI refusal; a sample's file answers
//! with a redirect to a second server (the storage), which must be reached without the key.
//! Switches, changeable while it runs, give 429 `RESOURCE_EXHAUSTED` bursts and expired files.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use base64::Engine as _;
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// The key the fake accepts unless started with others.
pub const VEO_KEY: &str = "fake-veo-key-51";

/// How the fake behaves.
#[derive(Debug, Default)]
pub struct VeoSwitches {
    /// How long an operation runs, in ms.
    pub run_ms: AtomicU64,
    /// The next this many submissions are answered 429 `RESOURCE_EXHAUSTED`.
    pub rate_limited: AtomicU32,
    /// Operations end refused by the safety filters (no samples).
    pub rai: AtomicBool,
    /// Operations end with an error (gRPC 13).
    pub fail: AtomicBool,
    /// Files answer 403, as after the two days they are kept.
    pub expired: AtomicBool,
}

#[derive(Debug, Clone)]
struct Operation {
    model: String,
    started: Instant,
}

#[derive(Default)]
struct State {
    operations: HashMap<String, Operation>,
    next: u64,
    /// Accepted submission bodies, oldest first.
    bodies: Vec<Value>,
    /// Submissions refused: (status, message), oldest first.
    refused: Vec<(u16, String)>,
    /// Requests to the storage that carried the key (must stay empty).
    storage_with_key: u32,
    /// Files fetched from the storage.
    storage_gets: u32,
    /// Channel tests (`GET /v1beta/models`) answered.
    model_lists: u32,
}

pub struct FakeVeo {
    /// The API's base, a channel's `base_url`.
    pub base: String,
    pub switches: Arc<VeoSwitches>,
    state: Arc<Mutex<State>>,
    _stops: [oneshot::Sender<()>; 2],
}

/// A small playable H.264 MP4, rendered once.
pub fn veo_mp4() -> &'static [u8] {
    static MP4: OnceLock<Vec<u8>> = OnceLock::new();
    MP4.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = |name: &str| dir.path().join(name);
        let spec = channels::sim::render::RenderSpec {
            width: 128,
            height: 72,
            duration_secs: 1,
            fps: 4,
            text: "veo".into(),
            first_frame: None,
        };
        channels::sim::render::render(&spec, &path("v.mp4"), &path("t.png"), &path("l.png"))
            .expect("render the fake's video");
        std::fs::read(path("v.mp4")).expect("read the fake's video")
    })
}

type Answer = Response<Full<Bytes>>;

fn answer(status: StatusCode, body: Value) -> Answer {
    Response::builder()
        .status(status)
        .header("content-type", "application/json; charset=UTF-8")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("response")
}

/// Google's error body.
fn google_error(status: StatusCode, name: &str, message: &str, details: Value) -> Answer {
    answer(
        status,
        json!({"error": {"code": status.as_u16(), "message": message, "status": name, "details": details}}),
    )
}

impl FakeVeo {
    pub async fn start() -> FakeVeo {
        FakeVeo::start_with_keys(&[VEO_KEY]).await
    }

    /// A fake accepting only `keys`.
    pub async fn start_with_keys(keys: &[&str]) -> FakeVeo {
        let api = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let storage = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base = format!("http://{}", api.local_addr().expect("addr"));
        let storage_base = format!("http://{}", storage.local_addr().expect("addr"));
        let switches = Arc::new(VeoSwitches::default());
        switches.run_ms.store(100, Ordering::SeqCst);
        let state: Arc<Mutex<State>> = Arc::default();
        let keys: Arc<Vec<String>> = Arc::new(keys.iter().map(|k| (*k).to_owned()).collect());
        let ctx = Arc::new(Ctx {
            base: base.clone(),
            storage: storage_base.clone(),
            switches: switches.clone(),
            state: state.clone(),
            keys,
        });
        let stop_api = serve(api, ctx.clone(), false);
        let stop_storage = serve(storage, ctx, true);
        FakeVeo {
            base,
            switches,
            state,
            _stops: [stop_api, stop_storage],
        }
    }

    pub fn set_flag(&self, flag: &AtomicBool, on: bool) {
        flag.store(on, Ordering::SeqCst);
    }

    /// Accepted submission bodies, oldest first.
    pub fn bodies(&self) -> Vec<Value> {
        self.state.lock().expect("state").bodies.clone()
    }

    /// Refused submissions: (status, message).
    pub fn refused(&self) -> Vec<(u16, String)> {
        self.state.lock().expect("state").refused.clone()
    }

    /// (files fetched from the storage, of them with the key).
    pub fn storage_gets(&self) -> (u32, u32) {
        let s = self.state.lock().expect("state");
        (s.storage_gets, s.storage_with_key)
    }
}

struct Ctx {
    base: String,
    storage: String,
    switches: Arc<VeoSwitches>,
    state: Arc<Mutex<State>>,
    keys: Arc<Vec<String>>,
}

fn serve(listener: TcpListener, ctx: Arc<Ctx>, storage: bool) -> oneshot::Sender<()> {
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
                            async move {
                                let res = if storage {
                                    storage_answer(&ctx, &req)
                                } else {
                                    api_answer(&ctx, req).await
                                };
                                Ok::<_, Infallible>(res)
                            }
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

/// The key check every API call makes: `None` when the key is good.
fn refuse_key(ctx: &Ctx, req: &Request<Incoming>) -> Option<Answer> {
    if req.headers().contains_key("authorization") {
        return Some(google_error(
            StatusCode::UNAUTHORIZED,
            "UNAUTHENTICATED",
            "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential.",
            json!([]),
        ));
    }
    match req
        .headers()
        .get("x-goog-api-key")
        .and_then(|v| v.to_str().ok())
    {
        None => Some(google_error(
            StatusCode::FORBIDDEN,
            "PERMISSION_DENIED",
            "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.",
            json!([]),
        )),
        Some(key) if ctx.keys.iter().any(|k| k == key) => None,
        Some(_) => Some(google_error(
            StatusCode::BAD_REQUEST,
            "INVALID_ARGUMENT",
            "API key not valid. Please pass a valid API key.",
            json!([{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID",
                    "domain": "googleapis.com", "metadata": {"service": "generativelanguage.googleapis.com"}}]),
        )),
    }
}

async fn api_answer(ctx: &Ctx, req: Request<Incoming>) -> Answer {
    if let Some(refused) = refuse_key(ctx, &req) {
        return refused;
    }
    let path = req.uri().path().to_owned();
    let query = req.uri().query().unwrap_or_default().to_owned();
    let method = req.method().clone();
    let not_found = || {
        google_error(
            StatusCode::NOT_FOUND,
            "NOT_FOUND",
            "Requested entity was not found.",
            json!([]),
        )
    };
    if method == Method::POST
        && let Some(model) = path
            .strip_prefix("/v1beta/models/")
            .and_then(|rest| rest.strip_suffix(":predictLongRunning"))
    {
        let model = model.to_owned();
        let content_type = req
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let body = req.into_body().collect().await.map(|b| b.to_bytes());
        let Ok(body) = body else {
            return not_found();
        };
        return submit(ctx, &model, &content_type, &body);
    }
    if method == Method::GET && path == "/v1beta/models" {
        if !query.split('&').any(|p| {
            p.strip_prefix("pageSize=")
                .is_some_and(|n| n.parse::<u32>().is_ok())
        }) {
            return google_error(
                StatusCode::BAD_REQUEST,
                "INVALID_ARGUMENT",
                "Invalid value for pageSize",
                json!([]),
            );
        }
        ctx.state.lock().expect("state").model_lists += 1;
        return answer(
            StatusCode::OK,
            json!({"models": [{"name": "models/veo-3.1-generate-preview", "version": "3.1",
                               "supportedGenerationMethods": ["predictLongRunning"]}],
                   "nextPageToken": "next"}),
        );
    }
    if method == Method::GET
        && let Some(rest) = path.strip_prefix("/v1beta/models/")
        && let Some((model, id)) = rest.split_once("/operations/")
    {
        let op = ctx.state.lock().expect("state").operations.get(id).cloned();
        return match op {
            Some(op) if op.model == model => operation(ctx, &op, id),
            _ => not_found(),
        };
    }
    if method == Method::GET
        && let Some(id) = path
            .strip_prefix("/v1beta/files/")
            .and_then(|rest| rest.strip_suffix(":download"))
    {
        if query != "alt=media" {
            return google_error(
                StatusCode::BAD_REQUEST,
                "INVALID_ARGUMENT",
                "alt=media is required",
                json!([]),
            );
        }
        if ctx.switches.expired.load(Ordering::SeqCst) {
            return google_error(
                StatusCode::FORBIDDEN,
                "PERMISSION_DENIED",
                "You do not have permission to access the File or it may not exist.",
                json!([]),
            );
        }
        return Response::builder()
            .status(StatusCode::FOUND)
            .header("location", format!("{}/video/{id}.mp4?sig=s1", ctx.storage))
            .body(Full::new(Bytes::new()))
            .expect("response");
    }
    not_found()
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

fn submit(ctx: &Ctx, model: &str, content_type: &str, body: &[u8]) -> Answer {
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
            "You exceeded your current quota, please check your plan and billing details.",
            json!([{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1s"}]),
        );
    }
    if !content_type.starts_with("application/json") {
        return invalid(ctx, format!("Content-Type {content_type:?} is not JSON"));
    }
    if !model.starts_with("veo-") {
        return google_error(
            StatusCode::NOT_FOUND,
            "NOT_FOUND",
            &format!("models/{model} is not found for API version v1beta"),
            json!([]),
        );
    }
    let Ok(value) = serde_json::from_slice::<Value>(body) else {
        return invalid(ctx, "Invalid JSON payload received.".into());
    };
    if let Err(message) = check_request(model, &value) {
        return invalid(ctx, message);
    }
    let mut state = ctx.state.lock().expect("state");
    state.next += 1;
    let id = format!("op{:06}", state.next);
    state.operations.insert(
        id.clone(),
        Operation {
            model: model.to_owned(),
            started: Instant::now(),
        },
    );
    state.bodies.push(value);
    answer(
        StatusCode::OK,
        json!({"name": format!("models/{model}/operations/{id}")}),
    )
}

/// Google's word for a field it does not know.
fn unknown(name: &str, at: &str) -> String {
    format!("Invalid JSON payload received. Unknown name \"{name}\" at '{at}': Cannot find field.")
}

/// Every field and type of a submission, as the Gemini API checks them for a Veo model.
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
    if instance.contains_key("lastFrame") && !instance.contains_key("image") {
        return Err("lastFrame needs image".into());
    }
    let references = match instance.get("referenceImages") {
        None => 0,
        Some(Value::Array(refs)) => {
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
            refs.len()
        }
        Some(_) => return Err("referenceImages must be a list".into()),
    };
    let params = top
        .get("parameters")
        .and_then(Value::as_object)
        .ok_or("parameters must be an object")?;
    for key in params.keys() {
        let known = [
            "aspectRatio",
            "durationSeconds",
            "resolution",
            "negativePrompt",
            "personGeneration",
            "sampleCount",
            "enhancePrompt",
        ];
        if !known.contains(&key.as_str()) {
            // `seed`, `generateAudio`, `fps`, `storageUri`...: Vertex AI only.
            return Err(unknown(key, "parameters"));
        }
    }
    let duration = match params.get("durationSeconds") {
        None => 8,
        Some(Value::Number(n)) => n.as_u64().ok_or("durationSeconds must be an integer")?,
        Some(other) => return Err(format!("durationSeconds must be a number, got {other}")),
    };
    let veo2 = model.starts_with("veo-2");
    let durations: &[u64] = if veo2 { &[5, 6, 7, 8] } else { &[4, 6, 8] };
    if !durations.contains(&duration) {
        return Err(format!(
            "The number value for `durationSeconds` is out of bound. Please provide a value from {durations:?}."
        ));
    }
    match params.get("aspectRatio") {
        None => {}
        Some(Value::String(r)) if r == "16:9" || r == "9:16" => {}
        Some(other) => return Err(format!("aspectRatio {other} is not supported")),
    }
    let resolution = match params.get("resolution") {
        None => "720p",
        Some(Value::String(r)) if ["720p", "1080p", "4k"].contains(&r.as_str()) && !veo2 => {
            r.as_str()
        }
        Some(other) => return Err(format!("resolution {other} is not supported")),
    };
    if resolution != "720p" && duration != 8 {
        return Err(format!("{resolution} is only supported with 8s duration"));
    }
    if references > 0 {
        if !model.starts_with("veo-3.1-generate") {
            return Err(format!("referenceImages are not supported by {model}"));
        }
        if references > 3 || duration != 8 {
            return Err("up to 3 referenceImages, with 8s duration".into());
        }
    }
    Ok(())
}

fn check_image(image: &Value, at: &str) -> Result<(), String> {
    let image = image.as_object().ok_or(format!("{at} must be an object"))?;
    for key in image.keys() {
        if key == "gcsUri" {
            return Err(format!("{at}.gcsUri is not supported in the Gemini API"));
        }
        if key != "bytesBase64Encoded" && key != "mimeType" {
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
        Some("image/png" | "image/jpeg" | "image/webp") => Ok(()),
        other => Err(format!("{at}.mimeType {other:?} is not an image type")),
    }
}

/// An operation as a poll sees it now.
fn operation(ctx: &Ctx, op: &Operation, id: &str) -> Answer {
    let name = format!("models/{}/operations/{id}", op.model);
    let run = Duration::from_millis(ctx.switches.run_ms.load(Ordering::SeqCst));
    if op.started.elapsed() < run {
        return answer(StatusCode::OK, json!({"name": name}));
    }
    let wrapper =
        "type.googleapis.com/google.ai.generativelanguage.v1beta.PredictLongRunningResponse";
    if ctx.switches.fail.load(Ordering::SeqCst) {
        return answer(
            StatusCode::OK,
            json!({"name": name, "done": true,
                   "error": {"code": 13, "message": "Internal error encountered at veo.internal.example"}}),
        );
    }
    if ctx.switches.rai.load(Ordering::SeqCst) {
        return answer(
            StatusCode::OK,
            json!({"name": name, "done": true, "response": {"@type": wrapper,
                "generateVideoResponse": {"raiMediaFilteredCount": 1,
                  "raiMediaFilteredReasons": ["Veo could not generate 1 videos based on the prompt provided. You will not be charged for this request. Try rephrasing the prompt."]}}}),
        );
    }
    answer(
        StatusCode::OK,
        json!({"name": name, "done": true, "response": {"@type": wrapper,
            "generateVideoResponse": {"generatedSamples": [
                {"video": {"uri": format!("{}/v1beta/files/{id}:download?alt=media", ctx.base)}}]}}}),
    )
}

/// The storage: the file, to a request without the key.
fn storage_answer(ctx: &Ctx, req: &Request<Incoming>) -> Answer {
    let mut state = ctx.state.lock().expect("state");
    if req.headers().contains_key("x-goog-api-key") || req.headers().contains_key("authorization") {
        state.storage_with_key += 1;
        return google_error(
            StatusCode::BAD_REQUEST,
            "INVALID_ARGUMENT",
            "a signed URL takes no credentials",
            json!([]),
        );
    }
    if !req.uri().path().starts_with("/video/") {
        return answer(StatusCode::NOT_FOUND, json!({}));
    }
    state.storage_gets += 1;
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "video/mp4")
        .body(Full::new(Bytes::from_static(veo_mp4())))
        .expect("response")
}
