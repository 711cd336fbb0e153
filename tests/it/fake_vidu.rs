//! A fake of Vidu's API, strict as the vendor: every call carries `Authorization: Token`
//! [`API_KEY`] (none or another: `401 Unauthorized`), and every error is Vidu's body `{code,
//! reason, message, metadata: {trace_id}}`. A submission is `POST /ent/v2/text2video`,
//! `img2video`, `start-end2video` or `reference2video` with `Content-Type: application/json`
//! (else `400 BadRequest`), checked field by field and type by type: `model` one the endpoint
//! takes (else `400 ModelUnavailable`), `prompt` a string (required on text), `duration` an
//! integer the model makes, `seed` an integer, `resolution` a tier the model makes,
//! `aspect_ratio` one of the model's on text and reference only, `images` absent on text and
//! exactly 1 (image), 2 (start-end) or 1 to 7 (reference) URLs or `data:image/...;base64,` URIs
//! of real images; no other field (`400 FieldUnwanted`). It answers `{task_id, state:
//! created, ...}`.
//!
//! A task answers `GET /ent/v2/tasks/{id}/creations` with `created`, then `queueing`,
//! `processing`, and after `run_ms` `success` with `credits` and `creations[{id, url,
//! cover_url}]` (the URL on a second server, the file host). A prompt with `[fail]` ends
//! `failed` with `err_code: InternalServiceFailure`, `[refuse]` with `CreationPolicyViolation`;
//! `[hold]` never ends. `POST /ent/v2/tasks/{id}/cancel` cancels a task not yet ended (it then
//! reads `failed` with `UserCancelled`) and answers `{}`. `next_errors` answers the next
//! submissions with (HTTP status, reason, message); `hang_up_submissions` takes the next ones (a
//! task is made) and closes the connection unanswered, `no_id_submissions` takes them and
//! answers `200 {}`. `expire_results` makes the file host answer `403` as an expired link. `GET
//! /ent/v2/credits` answers the account's remaining credits.
//!
//! A submission may carry `callback_url` (an http(s) URL); [`FakeVidu::call_back`] posts the
//! task to it as Vidu does, its body the query's, signed as Vidu documents: `Date`,
//! `x-request-nonce`, `X-HMAC-SIGNED-HEADERS: Date;x-request-nonce`, `X-HMAC-ALGORITHM:
//! hmac-sha256`, `X-HMAC-ACCESS-KEY: vidu` and `X-HMAC-SIGNATURE`, the base64 HMAC-SHA256
//! under the key of the method, the URL's path and query, `vidu`, the date and each signed
//! header as `Name:value`, each followed by a newline (this fake's own implementation). The
//! relay's polls are kept with the task's age (`query_ages`).

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

pub const API_KEY: &str = "vda_test_key_3c9e71b0a4";

#[derive(Default)]
pub struct State {
    pub run_ms: AtomicU64,
    pub expire_results: AtomicBool,
    /// The next submissions are answered with these (HTTP status, reason, message), in order.
    pub next_errors: Mutex<VecDeque<(u16, &'static str, &'static str)>>,
    pub hang_up_submissions: AtomicU32,
    pub no_id_submissions: AtomicU32,
    /// Accepted submissions: (path, body), oldest first.
    pub submissions: Mutex<Vec<(String, Value)>>,
    /// `(method, path)` of every call to the API, oldest first.
    pub calls: Mutex<Vec<(String, String)>>,
    pub file_requests: AtomicU32,
    pub file_requests_with_key: AtomicU32,
    /// The task's age at each of the relay's polls, by task id.
    polls: Mutex<HashMap<String, Vec<Duration>>>,
    tasks: Mutex<HashMap<String, Job>>,
    next_id: AtomicU64,
}

#[derive(Debug, Clone)]
struct Job {
    started: Instant,
    prompt: String,
    duration: u64,
    cancelled: bool,
    callback_url: Option<String>,
    /// Ended by the test, whatever `run_ms` says.
    done: bool,
}

pub struct FakeVidu {
    pub base: String,
    pub files_base: String,
    pub state: Arc<State>,
    _server: FakeServer,
    _files: FakeServer,
}

impl FakeVidu {
    pub async fn start() -> FakeVidu {
        let state = Arc::new(State::default());
        state.run_ms.store(150, Ordering::SeqCst);
        let (server, files) = fake_vendor::serve_with_file_host(
            state.clone(),
            |st, req| file(st, req),
            |st, files, req| answer(st, files, req),
        )
        .await;
        FakeVidu {
            base: server.base.clone(),
            files_base: files.base.clone(),
            state,
            _server: server,
            _files: files,
        }
    }

    pub fn submissions(&self) -> Vec<(String, Value)> {
        self.state.submissions.lock().unwrap().clone()
    }

    pub fn calls(&self) -> Vec<(String, String)> {
        self.state.calls.lock().unwrap().clone()
    }

    /// The id Vidu gave the relay's task: the one whose `callback_url` names it.
    pub fn task_of(&self, relay_task: &str) -> Option<String> {
        let needle = format!("task={relay_task}&");
        self.state
            .tasks
            .lock()
            .unwrap()
            .iter()
            .find(|(_, job)| {
                job.callback_url
                    .as_deref()
                    .is_some_and(|u| u.contains(&needle))
            })
            .map(|(id, _)| id.clone())
    }

    /// The ages at which Vidu's task `id` was polled, oldest first.
    pub fn query_ages(&self, id: &str) -> Vec<Duration> {
        self.state
            .polls
            .lock()
            .unwrap()
            .get(id)
            .cloned()
            .unwrap_or_default()
    }

    /// Ends Vidu's task `id` with success now.
    pub fn finish(&self, id: &str) {
        if let Some(job) = self.state.tasks.lock().unwrap().get_mut(id) {
            job.done = true;
        }
    }

    /// Posts Vidu's task `id` to its `callback_url`, signed under `key` at `date` (an HTTP
    /// date); the receiver's status and body.
    pub async fn call_back(&self, id: &str, key: &str, date: &str) -> (u16, Value) {
        let url = self.state.tasks.lock().unwrap()[id]
            .callback_url
            .clone()
            .expect("a callback_url");
        let body = task_body(&self.state, &self.files_base, id).to_string();
        let nonce = format!("{:032x}", rand::random::<u128>());
        let signature = sign(&url, key, date, &nonce);
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http::<Full<Bytes>>();
        let req = Request::post(url.as_str())
            .header("content-type", "application/json")
            .header("date", date)
            .header("x-request-nonce", &nonce)
            .header("x-hmac-signed-headers", "Date;x-request-nonce")
            .header("x-hmac-signature", signature)
            .header("x-hmac-algorithm", "hmac-sha256")
            .header("x-hmac-access-key", "vidu")
            .body(Full::new(Bytes::from(body)))
            .expect("a request");
        let res = client.request(req).await.expect("the relay answers");
        let status = res.status().as_u16();
        let bytes = http_body_util::BodyExt::collect(res.into_body())
            .await
            .expect("the answer's body")
            .to_bytes();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    pub fn fail_next(&self, status: u16, reason: &'static str, message: &'static str) {
        self.state
            .next_errors
            .lock()
            .unwrap()
            .push_back((status, reason, message));
    }
}

// The shared flows' switches; a submission "without an id" is answered
// without a task id.
fake_vendor::takes_submissions!(FakeVidu, |(_, body)| body["prompt"].clone());

/// Vidu's callback signature of a `POST` to `url` at `date` with `nonce`, under `key`.
fn sign(url: &str, key: &str, date: &str, nonce: &str) -> String {
    use base64::Engine as _;
    use hmac::Mac as _;
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.find('/').map_or("/", |at| &rest[at..]);
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    let text =
        format!("POST\n{path}\n{query}\nvidu\n{date}\nDate:{date}\nx-request-nonce:{nonce}\n");
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key.as_bytes()).expect("a key");
    mac.update(text.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
}

/// Vidu's error body.
fn error(status: u16, reason: &str, message: &str) -> Response<Full<Bytes>> {
    fake_vendor::json(
        status,
        &json!({"code": status, "reason": reason, "message": message,
                "metadata": {"trace_id": "04e5c2fe159ff7c574acd0424e78c35f"}}),
    )
}

/// The answer to `req`; `None` to close the connection without one.
fn answer(state: &State, files: &str, req: Request<Bytes>) -> Option<Response<Full<Bytes>>> {
    let path = req.uri().path().to_owned();
    state
        .calls
        .lock()
        .unwrap()
        .push((req.method().to_string(), path.clone()));
    if header(&req, "authorization") != Some(&format!("Token {API_KEY}")) {
        return Some(error(401, "Unauthorized", "unauthorized"));
    }
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    Some(match (req.method(), segments.as_slice()) {
        (
            &Method::POST,
            [
                "ent",
                "v2",
                endpoint @ ("text2video" | "img2video" | "start-end2video" | "reference2video"),
            ],
        ) => return submit(state, endpoint, &req),
        (&Method::GET, ["ent", "v2", "tasks", id, "creations"]) => poll(state, files, id),
        (&Method::POST, ["ent", "v2", "tasks", id, "cancel"]) => cancel(state, id, &req),
        (&Method::GET, ["ent", "v2", "credits"]) => fake_vendor::json(
            200,
            &json!({"remains": [{"type": "metered", "credit_remain": 800,
                                 "concurrency_limit": 5, "current_concurrency": 0,
                                 "queue_count": 0}]}),
        ),
        _ => error(404, "NotFound", "not found"),
    })
}

/// (endpoints, durations, tiers, ratios) each model takes.
type Rules = (
    &'static [&'static str],
    &'static [u64],
    &'static [&'static str],
    &'static [&'static str],
);

fn rules(model: &str) -> Option<Rules> {
    const FIVE: &[&str] = &["16:9", "9:16", "1:1", "3:4", "4:3"];
    const THREE: &[&str] = &["16:9", "9:16", "1:1"];
    const Q3: &[u64] = &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16];
    Some(match model {
        "viduq3-pro" | "viduq3-turbo" => (
            &["text2video", "img2video", "start-end2video"],
            Q3,
            &["540p", "720p", "1080p"],
            FIVE,
        ),
        "viduq2" => (
            &["text2video", "reference2video"],
            &Q3[..10],
            &["540p", "720p", "1080p"],
            FIVE,
        ),
        "viduq1" => (
            &[
                "text2video",
                "img2video",
                "start-end2video",
                "reference2video",
            ],
            &[5],
            &["1080p"],
            THREE,
        ),
        "vidu2.0" | "vidu1.5" => (
            &["img2video", "start-end2video", "reference2video"],
            &[4, 8],
            &["360p", "720p", "1080p"],
            THREE,
        ),
        _ => return None,
    })
}

fn image_ok(v: &Value) -> Result<(), String> {
    let Some(url) = v.as_str() else {
        return Err("images[] must be strings".into());
    };
    if is_url(url) {
        return Ok(());
    }
    let Some((_, data)) = url
        .strip_prefix("data:image/")
        .and_then(|r| r.split_once(";base64,"))
    else {
        return Err("images[] must be a URL or a data:image/...;base64, URI".into());
    };
    match unbase64(data) {
        Some(bytes) if is_image(&bytes) => Ok(()),
        _ => Err("images[] is not an image".into()),
    }
}

/// Checks a submission as Vidu would: (HTTP status, reason, message) when it is wrong.
fn check_body(endpoint: &str, body: &Value) -> Result<Job, (u16, &'static str, String)> {
    let invalid = |m: String| (400, "FieldInvalid", m);
    let Some(obj) = body.as_object() else {
        return Err((400, "BadRequest", "the body must be a JSON object".into()));
    };
    let allowed = [
        "model",
        "images",
        "prompt",
        "duration",
        "seed",
        "resolution",
        "aspect_ratio",
        "callback_url",
    ];
    if let Some(k) = obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err((400, "FieldUnwanted", format!("unwanted field: {k}")));
    }
    let Some(model) = body.get("model").and_then(Value::as_str) else {
        return Err((
            400,
            "FieldLacking",
            "field is missing or empty: model".into(),
        ));
    };
    let Some((endpoints, durations, tiers, ratios)) = rules(model) else {
        return Err((400, "ModelUnavailable", "model unavailable".into()));
    };
    if !endpoints.contains(&endpoint) {
        return Err((400, "ModelUnavailable", "model unavailable".into()));
    }
    let prompt = match body.get("prompt") {
        Some(Value::String(p)) => p.clone(),
        Some(_) => return Err(invalid("invalid field: prompt".into())),
        None if endpoint == "text2video" => {
            return Err((
                400,
                "FieldLacking",
                "field is missing or empty: prompt".into(),
            ));
        }
        None => String::new(),
    };
    let duration = match body.get("duration") {
        None => 5,
        Some(v) => v
            .as_u64()
            .ok_or_else(|| invalid("invalid field: duration".into()))?,
    };
    if !durations.contains(&duration) {
        return Err(invalid(format!("invalid field: duration {duration}")));
    }
    if let Some(s) = body.get("seed")
        && !s.is_u64()
    {
        return Err(invalid("invalid field: seed".into()));
    }
    if let Some(r) = body.get("resolution")
        && !r.as_str().is_some_and(|r| tiers.contains(&r))
    {
        return Err(invalid(format!("invalid field: resolution {r}")));
    }
    match body.get("aspect_ratio") {
        Some(_) if matches!(endpoint, "img2video" | "start-end2video") => {
            return Err((400, "FieldUnwanted", "unwanted field: aspect_ratio".into()));
        }
        Some(r) if !r.as_str().is_some_and(|r| ratios.contains(&r)) => {
            return Err(invalid(format!("invalid field: aspect_ratio {r}")));
        }
        _ => {}
    }
    let callback_url = match body.get("callback_url") {
        None => None,
        Some(Value::String(u)) if is_url(u) => Some(u.clone()),
        Some(_) => return Err(invalid("invalid field: callback_url".into())),
    };
    let images = body.get("images").map(|v| v.as_array().cloned());
    let count = match (endpoint, &images) {
        ("text2video", None) => 0,
        ("text2video", Some(_)) => {
            return Err((400, "FieldUnwanted", "unwanted field: images".into()));
        }
        (_, None) => {
            return Err((
                400,
                "FieldLacking",
                "field is missing or empty: images".into(),
            ));
        }
        (_, Some(None)) => return Err(invalid("invalid field: images".into())),
        (_, Some(Some(list))) => {
            for image in list {
                image_ok(image).map_err(invalid)?;
            }
            list.len()
        }
    };
    let count_ok = match endpoint {
        "img2video" => count == 1,
        "start-end2video" => count == 2,
        "reference2video" => (1..=7).contains(&count),
        _ => true,
    };
    if !count_ok {
        return Err((
            400,
            "FieldItemCountOutOfRange",
            "field item count out of range: images".into(),
        ));
    }
    Ok(Job {
        started: Instant::now(),
        prompt,
        duration,
        cancelled: false,
        callback_url,
        done: false,
    })
}

fn submit(state: &State, endpoint: &str, req: &Request<Bytes>) -> Option<Response<Full<Bytes>>> {
    if header(req, "content-type") != Some("application/json") {
        return Some(error(400, "BadRequest", "bad request"));
    }
    if let Some((status, reason, message)) = state.next_errors.lock().unwrap().pop_front() {
        return Some(error(status, reason, message));
    }
    let Ok(body) = serde_json::from_slice::<Value>(req.body()) else {
        return Some(error(400, "BadRequest", "bad request"));
    };
    let job = match check_body(endpoint, &body) {
        Ok(job) => job,
        Err((status, reason, message)) => return Some(error(status, reason, &message)),
    };
    let id = format!(
        "8155198631275{:05}",
        state.next_id.fetch_add(1, Ordering::SeqCst)
    );
    state.tasks.lock().unwrap().insert(id.clone(), job);
    state
        .submissions
        .lock()
        .unwrap()
        .push((req.uri().path().to_owned(), body.clone()));
    if take_one(&state.hang_up_submissions) {
        return None;
    }
    if take_one(&state.no_id_submissions) {
        return Some(fake_vendor::json(200, &json!({})));
    }
    Some(fake_vendor::json(
        200,
        &json!({"task_id": id, "state": "created", "model": body["model"],
                "prompt": body.get("prompt").cloned().unwrap_or(json!("")),
                "duration": body.get("duration").cloned().unwrap_or(json!(5)),
                "created_at": "2026-12-06T12:00:00.000Z"}),
    ))
}

fn poll(state: &State, files: &str, id: &str) -> Response<Full<Bytes>> {
    let Some(started) = state.tasks.lock().unwrap().get(id).map(|j| j.started) else {
        return error(404, "TaskNotFound", "task not found");
    };
    state
        .polls
        .lock()
        .unwrap()
        .entry(id.to_owned())
        .or_default()
        .push(started.elapsed());
    fake_vendor::json(200, &task_body(state, files, id))
}

/// The task `id` as the query (and a callback) gives it.
fn task_body(state: &State, files: &str, id: &str) -> Value {
    let job = state.tasks.lock().unwrap()[id].clone();
    let failed = |code: &str| {
        json!({"id": id, "state": "failed", "err_code": code, "credits": 0, "payload": "",
               "creations": []})
    };
    if job.cancelled {
        return failed("UserCancelled");
    }
    let run = Duration::from_millis(state.run_ms.load(Ordering::SeqCst));
    let elapsed = job.started.elapsed();
    let running = |s: &str| json!({"id": id, "state": s, "err_code": "", "credits": 0, "payload": "", "creations": []});
    if !job.done {
        if job.prompt.contains("[hold]") {
            return running("processing");
        }
        if elapsed < run / 3 {
            return running("created");
        }
        if elapsed < run * 2 / 3 {
            return running("queueing");
        }
        if elapsed < run {
            return running("processing");
        }
    }
    if job.prompt.contains("[fail]") {
        failed("InternalServiceFailure")
    } else if job.prompt.contains("[refuse]") {
        failed("CreationPolicyViolation")
    } else {
        json!({"id": id, "state": "success", "err_code": "", "credits": job.duration * 4,
               "payload": "", "bgm": false, "off_peak": false,
               "creations": [{"id": format!("c{id}"),
                              "url": format!("{files}/vidu/{id}.mp4"),
                              "cover_url": format!("{files}/vidu/{id}.jpeg")}]})
    }
}

fn cancel(state: &State, id: &str, req: &Request<Bytes>) -> Response<Full<Bytes>> {
    let mut tasks = state.tasks.lock().unwrap();
    let Some(job) = tasks.get_mut(id) else {
        return error(404, "TaskNotFound", "task not found");
    };
    let named = serde_json::from_slice::<Value>(req.body())
        .ok()
        .and_then(|b| b.get("id").and_then(Value::as_str).map(str::to_owned));
    if named.as_deref() != Some(id) {
        return error(400, "FieldInvalid", "invalid field: id");
    }
    let run = Duration::from_millis(state.run_ms.load(Ordering::SeqCst));
    if !job.prompt.contains("[hold]") && job.started.elapsed() >= run {
        return error(400, "BadRequest", "task state is success, can not cancel");
    }
    job.cancelled = true;
    fake_vendor::json(200, &json!({}))
}

/// The file host: a video by its path, whoever asks (a key sent along is counted).
fn file(state: &State, req: &Request<Bytes>) -> Response<Full<Bytes>> {
    state.file_requests.fetch_add(1, Ordering::SeqCst);
    if req.headers().contains_key("authorization") {
        state.file_requests_with_key.fetch_add(1, Ordering::SeqCst);
    }
    let path = req.uri().path();
    let id = path
        .strip_prefix("/vidu/")
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
