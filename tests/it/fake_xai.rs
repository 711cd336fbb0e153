//! A fake of xAI's video API, strict as the vendor: every call carries `Authorization: Bearer`
//! [`API_KEY`] (none: `401`; another key: `400` "Incorrect API key provided", as xAI answers
//! it, here with the key echoed whole so that a test sees the relay keep it out of what it
//! shows). A submission is `POST /v1/videos/generations` with `Content-Type: application/json`
//! (else `415`), checked field by field and type by type: `prompt` a non-empty string, `model`
//! one xAI makes (else `404`), `duration` an integer 1 to 15, `aspect_ratio` one of xAI's seven,
//! `resolution` `480p` or `720p` (`1080p` on the 1.5 models), `image` and each of
//! `reference_images` an object `{url}` whose URL is http(s) or a `data:image/...;base64,` of a
//! real image, never both; no other field (`422`). It answers `{request_id}`.
//!
//! A job answers `GET /v1/videos/{request_id}` with only its `request_id` at first, then
//! `status: pending` with a `progress`, and after `run_ms` `done` with `video: {url, duration,
//! respect_moderation}` (its URL on a second server, the file host, as xAI's videos are on their
//! own host; the file host counts requests that carried a key). A prompt with `[fail]` ends
//! `failed` and `[expire]` `expired`, both HTTP 200 with `error: {code, message}`; `[withhold]`
//! ends `done` without a URL and `respect_moderation: false`; `[short]` reports two seconds
//! fewer than asked. `next_errors` answers the next submissions with (HTTP status, message) in
//! xAI's `{code, error}` body; `hang_up_submissions` takes the next ones (a job is made) and
//! closes the connection unanswered, `no_id_submissions` takes them and answers `200 {}`.
//! `expire_results` makes the file host answer `403` as an expired link. `GET /v1/api-key`
//! answers the key's record (`api_key_blocked` when `block_key` is set).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request, Response};
use http_body_util::Full;
use serde_json::{Value, json};

use crate::fake_vendor::{
    self, FakeServer, header, is_image, is_url, playable_mp4, take_one, unbase64,
};

pub const API_KEY: &str = "xai-test-key-5e1f0c93d2";

const GENERATIONS: &str = "/v1/videos/generations";

const RATIOS: [&str; 7] = ["1:1", "16:9", "9:16", "4:3", "3:4", "3:2", "2:3"];

#[derive(Default)]
pub struct State {
    pub run_ms: AtomicU64,
    pub expire_results: AtomicBool,
    pub block_key: AtomicBool,
    /// The next submissions are answered with these (HTTP status, message), in order.
    pub next_errors: Mutex<VecDeque<(u16, &'static str)>>,
    /// The next this many submissions are taken and their connection closed unanswered.
    pub hang_up_submissions: AtomicU32,
    /// The next this many submissions are taken and answered `200 {}`.
    pub no_id_submissions: AtomicU32,
    /// Accepted submissions' bodies, oldest first.
    pub submissions: Mutex<Vec<Value>>,
    /// `(method, path)` of every call to the API, oldest first.
    pub calls: Mutex<Vec<(String, String)>>,
    /// Requests to the file host, and how many of them carried an `Authorization` header.
    pub file_requests: AtomicU32,
    pub file_requests_with_key: AtomicU32,
    tasks: Mutex<HashMap<String, Job>>,
    next_id: AtomicU64,
}

#[derive(Debug, Clone)]
struct Job {
    started: Instant,
    prompt: String,
    model: String,
    duration: u64,
}

pub struct FakeXai {
    pub base: String,
    pub files_base: String,
    pub state: Arc<State>,
    _server: FakeServer,
    _files: FakeServer,
}

impl FakeXai {
    pub async fn start() -> FakeXai {
        let state = Arc::new(State::default());
        state.run_ms.store(150, Ordering::SeqCst);
        let (server, files) = fake_vendor::serve_with_file_host(
            state.clone(),
            |st, req| file(st, req),
            |st, files, req| answer(st, files, req),
        )
        .await;
        FakeXai {
            base: server.base.clone(),
            files_base: files.base.clone(),
            state,
            _server: server,
            _files: files,
        }
    }

    pub fn submissions(&self) -> Vec<Value> {
        self.state.submissions.lock().unwrap().clone()
    }

    pub fn calls(&self) -> Vec<(String, String)> {
        self.state.calls.lock().unwrap().clone()
    }

    pub fn fail_next(&self, status: u16, message: &'static str) {
        self.state
            .next_errors
            .lock()
            .unwrap()
            .push_back((status, message));
    }
}

// The shared flows' switches; a submission "without an id" is answered
// 200 without a request_id.
fake_vendor::takes_submissions!(FakeXai, |body| body["prompt"].clone());

/// xAI's error body: a gRPC-style status text as `code`, the message as `error`.
fn error(status: u16, message: &str) -> Response<Full<Bytes>> {
    let code = match status {
        400 => "Client specified an invalid argument",
        401 => "Unauthenticated",
        403 => "The caller does not have permission to execute the specified operation",
        404 => "Some requested entity was not found",
        415 | 422 => "Client specified an invalid argument",
        429 => "Some resource has been exhausted",
        _ => "Internal error",
    };
    fake_vendor::json(status, &json!({"code": code, "error": message}))
}

/// The answer to `req`; `None` to close the connection without one.
fn answer(state: &State, files: &str, req: Request<Bytes>) -> Option<Response<Full<Bytes>>> {
    let path = req.uri().path().to_owned();
    state
        .calls
        .lock()
        .unwrap()
        .push((req.method().to_string(), path.clone()));
    match header(&req, "authorization") {
        None => {
            return Some(error(
                401,
                "No authorization header or an invalid authorization token was provided.",
            ));
        }
        Some(auth) if auth != format!("Bearer {API_KEY}") => {
            let given = auth.strip_prefix("Bearer ").unwrap_or(auth);
            return Some(error(
                400,
                &format!(
                    "Incorrect API key provided: {given}. You can obtain an API key from https://console.x.ai."
                ),
            ));
        }
        Some(_) => {}
    }
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    Some(match (req.method(), segments.as_slice()) {
        (&Method::POST, _) if path == GENERATIONS => return submit(state, &req),
        (&Method::GET, ["v1", "videos", id]) if *id != "generations" => poll(state, files, id),
        (&Method::GET, ["v1", "api-key"]) => key_info(state),
        _ => error(404, "no such route"),
    })
}

/// (tiers) each model makes.
fn tiers(model: &str) -> Option<&'static [&'static str]> {
    Some(match model {
        "grok-imagine-video" | "grok-imagine-video-1.5-preview" => &["480p", "720p"],
        "grok-imagine-video-1.5" => &["480p", "720p", "1080p"],
        _ => return None,
    })
}

fn image_ok(v: &Value, field: &str) -> Result<(), String> {
    let Some(obj) = v.as_object() else {
        return Err(format!("{field} must be an object {{url}}"));
    };
    if let Some(k) = obj.keys().find(|k| k.as_str() != "url") {
        return Err(format!("{field}.{k} is not a field"));
    }
    let Some(url) = obj.get("url").and_then(Value::as_str) else {
        return Err(format!("{field}.url must be a string"));
    };
    if is_url(url) {
        return Ok(());
    }
    let Some((_, data)) = url
        .strip_prefix("data:image/")
        .and_then(|r| r.split_once(";base64,"))
    else {
        return Err(format!(
            "{field}.url must be a URL or a data:image/...;base64, URI"
        ));
    };
    match unbase64(data) {
        Some(bytes) if is_image(&bytes) => Ok(()),
        _ => Err(format!("{field}.url is not an image")),
    }
}

/// Checks a submission as xAI would: (HTTP status, message) when it is wrong; else the job.
fn check_body(body: &Value) -> Result<Job, (u16, String)> {
    let Some(obj) = body.as_object() else {
        return Err((422, "the body must be a JSON object".into()));
    };
    let allowed = [
        "model",
        "prompt",
        "image",
        "reference_images",
        "duration",
        "aspect_ratio",
        "resolution",
    ];
    if let Some(k) = obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err((422, format!("unknown field `{k}`")));
    }
    let prompt = match body.get("prompt") {
        Some(Value::String(p)) if !p.is_empty() => p.clone(),
        Some(_) => return Err((422, "prompt must be a non-empty string".into())),
        None => return Err((422, "missing field `prompt`".into())),
    };
    let model = match body.get("model") {
        None => "grok-imagine-video".to_owned(),
        Some(Value::String(m)) => m.clone(),
        Some(_) => return Err((422, "model must be a string".into())),
    };
    let Some(model_tiers) = tiers(&model) else {
        return Err((
            404,
            format!("The model {model} does not exist or your team does not have access to it."),
        ));
    };
    let duration = match body.get("duration") {
        None => 8,
        Some(v) => v
            .as_u64()
            .ok_or((400, "duration must be an integer".to_owned()))?,
    };
    if !(1..=15).contains(&duration) {
        return Err((400, format!("duration {duration} is not in [1, 15]")));
    }
    if let Some(r) = body.get("aspect_ratio")
        && !r.as_str().is_some_and(|r| RATIOS.contains(&r))
    {
        return Err((400, format!("aspect_ratio {r} is not one of {RATIOS:?}")));
    }
    if let Some(r) = body.get("resolution")
        && !r.as_str().is_some_and(|r| model_tiers.contains(&r))
    {
        return Err((400, format!("resolution {r} is not one of {model_tiers:?}")));
    }
    if let Some(image) = body.get("image") {
        image_ok(image, "image").map_err(|m| (400, m))?;
    }
    if let Some(refs) = body.get("reference_images") {
        let Some(list) = refs.as_array().filter(|l| !l.is_empty()) else {
            return Err((400, "reference_images must be a non-empty array".into()));
        };
        for r in list {
            image_ok(r, "reference_images[]").map_err(|m| (400, m))?;
        }
        if body.get("image").is_some() {
            return Err((400, "image and reference_images cannot be combined".into()));
        }
    }
    Ok(Job {
        started: Instant::now(),
        prompt,
        model,
        duration,
    })
}

fn submit(state: &State, req: &Request<Bytes>) -> Option<Response<Full<Bytes>>> {
    if header(req, "content-type") != Some("application/json") {
        return Some(error(415, "Content-Type must be application/json"));
    }
    if let Some((status, message)) = state.next_errors.lock().unwrap().pop_front() {
        return Some(error(status, message));
    }
    let Ok(body) = serde_json::from_slice::<Value>(req.body()) else {
        return Some(error(422, "the body is not JSON"));
    };
    let job = match check_body(&body) {
        Ok(job) => job,
        Err((status, message)) => return Some(error(status, &message)),
    };
    let id = format!(
        "d97415a1-5796-b7ec-379f-{:012}",
        state.next_id.fetch_add(1, Ordering::SeqCst)
    );
    state.tasks.lock().unwrap().insert(id.clone(), job);
    state.submissions.lock().unwrap().push(body);
    // Taken: how the relay hears of it is decided now.
    if take_one(&state.hang_up_submissions) {
        return None;
    }
    if take_one(&state.no_id_submissions) {
        return Some(fake_vendor::json(200, &json!({})));
    }
    Some(fake_vendor::json(200, &json!({"request_id": id})))
}

fn poll(state: &State, files: &str, id: &str) -> Response<Full<Bytes>> {
    let Some(job) = state.tasks.lock().unwrap().get(id).cloned() else {
        return error(404, &format!("No deferred request found for {id}"));
    };
    let run = Duration::from_millis(state.run_ms.load(Ordering::SeqCst));
    let elapsed = job.started.elapsed();
    if elapsed < run / 3 {
        return fake_vendor::json(200, &json!({"request_id": id}));
    }
    if elapsed < run {
        let progress = (elapsed.as_millis() * 100 / run.as_millis().max(1)).min(99) as u64;
        return fake_vendor::json(200, &json!({"status": "pending", "progress": progress}));
    }
    let body = if job.prompt.contains("[fail]") {
        json!({"status": "failed", "model": job.model,
               "error": {"code": "internal_error", "message": "Video generation failed."}})
    } else if job.prompt.contains("[expire]") {
        json!({"status": "expired", "model": job.model,
               "error": {"code": "deadline_exceeded", "message": "The request expired before it completed."}})
    } else if job.prompt.contains("[withhold]") {
        json!({"status": "done", "model": job.model, "progress": 100,
               "video": {"url": "", "duration": job.duration, "respect_moderation": false}})
    } else {
        let made = if job.prompt.contains("[short]") {
            job.duration.saturating_sub(2).max(1)
        } else {
            job.duration
        };
        json!({"status": "done", "model": job.model, "progress": 100,
               "usage": {"cost_in_usd_ticks": made * 500_000_000},
               "video": {"url": format!("{files}/xai-vidgen-bucket/xai-video-{id}.mp4"),
                         "duration": made, "respect_moderation": true}})
    };
    fake_vendor::json(200, &body)
}

fn key_info(state: &State) -> Response<Full<Bytes>> {
    fake_vendor::json(
        200,
        &json!({
            "redacted_api_key": "xai-...d2",
            "user_id": "59fbe5f2-040b-46d5-8325-868bb8f23eb2",
            "name": "relay",
            "create_time": "2026-01-01T12:55:18.139305Z",
            "modify_time": "2026-08-28T17:20:12.343321Z",
            "modified_by": "3d38b4dc-4eb7-4785-ae26-c3fa8997ffc7",
            "team_id": "5ea6f6bd-7815-4b8a-9135-28b2d7ba6722",
            "acls": ["api-key:model:*", "api-key:endpoint:*"],
            "api_key_id": "ae1e1841-4326-a8a9-8a91-9a5f3b2f3f5d",
            "team_blocked": false,
            "api_key_blocked": state.block_key.load(Ordering::SeqCst),
            "api_key_disabled": false
        }),
    )
}

/// The file host: a video by its path, whoever asks (a key sent along is counted).
fn file(state: &State, req: &Request<Bytes>) -> Response<Full<Bytes>> {
    state.file_requests.fetch_add(1, Ordering::SeqCst);
    if req.headers().contains_key("authorization") {
        state.file_requests_with_key.fetch_add(1, Ordering::SeqCst);
    }
    let id = req
        .uri()
        .path()
        .strip_prefix("/xai-vidgen-bucket/xai-video-")
        .and_then(|f| f.strip_suffix(".mp4"));
    if !id.is_some_and(|id| state.tasks.lock().unwrap().contains_key(id)) {
        return fake_vendor::bytes(404, "text/plain", Bytes::from_static(b"Not Found"));
    }
    if state.expire_results.load(Ordering::SeqCst) {
        return fake_vendor::bytes(
            403,
            "application/xml",
            Bytes::from_static(
                b"<Error><Code>AccessDenied</Code><Message>Request has expired</Message></Error>",
            ),
        );
    }
    fake_vendor::bytes(200, "video/mp4", playable_mp4())
}
