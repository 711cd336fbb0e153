//! A fake of Runway's developer API, strict as the vendor: every call (submissions, task
//! reads, deletes, the organization) carries `Authorization: Bearer` [`API_KEY`] (else 401)
//! and `X-Runway-Version: 2024-11-06` (else 400); errors are `{"error": "..."}`. A submission
//! goes to its model's endpoint (gen4_turbo on `/v1/image_to_video` only) and is checked field
//! by field and type by type as the API reference lists them per model: `promptText` a
//! non-empty string of at most 1000 characters, `ratio` one of the model's pixel sizes
//! (`"1280:720"`), `duration` an integer the model makes, `seed` an integer and only where the
//! model takes one, `promptImage` a URL or `data:image/...` URI, or an array of `{uri,
//! position}` whose `last` only Veo takes; any other member is refused. A video edit
//! (`gen4_aleph` on `/v1/video_to_video`) needs `promptText` and a `videoUri` (a URL or an MP4
//! `data:` URI) and takes at most one `{type: "image", uri}` reference and a `seed`.
//!
//! A task is PENDING, THROTTLED, RUNNING (a fractional `progress`), then SUCCEEDED after
//! `run_ms` with a playable MP4 at a signed `output[0]` (403 once `expire_results` is set); a
//! prompt with `[fail]` fails with `INTERNAL.BAD_OUTPUT.CODE01`, with `[refuse]` with
//! `SAFETY.INPUT.TEXT`. `DELETE /v1/tasks/{id}` answers 204 and cancels a task not finished
//! (deleting a finished one). `next_errors` answers the next submissions with (HTTP status,
//! message); `hang_up_submissions` takes the next ones (a task is made) and closes the
//! connection unanswered, `no_id_submissions` takes them and answers `200 {}`. An id it
//! never made is 404.

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

pub const API_KEY: &str = "key_runway_test_5c0e1f7a9b";

/// The version the fake speaks.
pub const VERSION: &str = "2024-11-06";

#[derive(Default)]
pub struct State {
    pub run_ms: AtomicU64,
    pub expire_results: AtomicBool,
    /// The next submissions are answered with these (HTTP status, message), in order.
    pub next_errors: Mutex<VecDeque<(u16, &'static str)>>,
    /// The next this many submissions are taken and their connection closed unanswered.
    pub hang_up_submissions: AtomicU32,
    /// The next this many submissions are taken and answered `200` without an id.
    pub no_id_submissions: AtomicU32,
    /// Accepted submissions: (path, body), oldest first.
    pub submissions: Mutex<Vec<(String, Value)>>,
    /// `(method, path, X-Runway-Version)` of every API call, oldest first.
    pub calls: Mutex<Vec<(String, String, String)>>,
    tasks: Mutex<HashMap<String, Task>>,
    next_id: AtomicU64,
}

#[derive(Debug, Clone)]
struct Task {
    started: Instant,
    prompt: String,
    cancelled: bool,
}

pub struct FakeRunway {
    pub base: String,
    pub state: Arc<State>,
    _server: FakeServer,
}

impl FakeRunway {
    pub async fn start() -> FakeRunway {
        let state = Arc::new(State::default());
        state.run_ms.store(100, Ordering::SeqCst);
        let server =
            fake_vendor::serve_knowing_base(state.clone(), |st, base, req| answer(st, base, req))
                .await;
        FakeRunway {
            base: server.base.clone(),
            state,
            _server: server,
        }
    }

    pub fn submissions(&self) -> Vec<(String, Value)> {
        self.state.submissions.lock().unwrap().clone()
    }

    pub fn calls(&self) -> Vec<(String, String, String)> {
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
// 200 without an id.
fake_vendor::takes_submissions!(FakeRunway, |(_, body)| body["promptText"].clone());

fn error(status: u16, message: &str) -> Response<Full<Bytes>> {
    fake_vendor::json(status, &json!({"error": message}))
}

/// The answer to `req`; `None` to close the connection without one.
fn answer(state: &State, base: &str, req: Request<Bytes>) -> Option<Response<Full<Bytes>>> {
    let path = req.uri().path().to_owned();
    if let Some(file) = path.strip_prefix("/result/") {
        return Some(download(state, file));
    }
    state.calls.lock().unwrap().push((
        req.method().to_string(),
        path.clone(),
        header(&req, "x-runway-version")
            .unwrap_or_default()
            .to_owned(),
    ));
    if header(&req, "authorization") != Some(&format!("Bearer {API_KEY}")) {
        return Some(error(401, "Invalid API key"));
    }
    match header(&req, "x-runway-version") {
        Some(VERSION) => {}
        Some(_) => return Some(error(400, "Invalid API version")),
        None => {
            return Some(error(
                400,
                "You must specify an API version in the X-Runway-Version header",
            ));
        }
    }
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    Some(match (req.method(), segments.as_slice()) {
        (&Method::POST, ["v1", "text_to_video" | "image_to_video" | "video_to_video"]) => {
            return submit(state, &path, &req);
        }
        (&Method::GET, ["v1", "tasks", id]) => read(state, base, id),
        (&Method::DELETE, ["v1", "tasks", id]) => delete(state, id),
        (&Method::GET, ["v1", "organization"]) => fake_vendor::json(
            200,
            &json!({"creditBalance": 12500,
                    "tier": {"maxMonthlyCreditSpend": 100000,
                             "models": {"gen4.5": {"maxConcurrentGenerations": 2, "maxDailyGenerations": 50}}},
                    "usage": {"models": {"gen4.5": {"dailyGenerations": 3}}}}),
        ),
        (m, _) if *m != Method::GET && *m != Method::POST && *m != Method::DELETE => {
            error(405, "Method not allowed")
        }
        _ => error(404, "Not found"),
    })
}

/// What a model takes on one endpoint: its ratios, durations, whether `seed` and a last frame
/// are fields of it, and whether `promptText` is required.
struct Schema {
    ratios: &'static [&'static str],
    durations: &'static [u64],
    seed: bool,
    last_frame: bool,
    text_required: bool,
}

const VEO_RATIOS: &[&str] = &["1280:720", "720:1280", "1080:1920", "1920:1080"];
const GEN4_IMAGE_RATIOS: &[&str] = &[
    "1280:720", "720:1280", "1104:832", "832:1104", "960:960", "1584:672",
];

/// The schema of `model` on `endpoint` (`text_to_video` or `image_to_video`), from the API
/// reference; `None` when the model is not one of the endpoint's.
fn schema(endpoint: &str, model: &str) -> Option<Schema> {
    let gen45 = |ratios| Schema {
        ratios,
        durations: &[2, 3, 4, 5, 6, 7, 8, 9, 10],
        seed: true,
        last_frame: false,
        text_required: true,
    };
    let veo = |text_required| Schema {
        ratios: VEO_RATIOS,
        durations: &[4, 6, 8],
        seed: false,
        last_frame: true,
        text_required,
    };
    Some(match (endpoint, model) {
        ("text_to_video", "gen4.5") => gen45(&["1280:720", "720:1280"]),
        ("image_to_video", "gen4.5") => gen45(GEN4_IMAGE_RATIOS),
        ("image_to_video", "gen4_turbo") => Schema {
            ratios: GEN4_IMAGE_RATIOS,
            durations: &[2, 3, 4, 5, 6, 7, 8, 9, 10],
            seed: true,
            last_frame: false,
            text_required: false,
        },
        ("text_to_video", "veo3.1" | "veo3.1_fast") => veo(true),
        ("image_to_video", "veo3.1" | "veo3.1_fast") => veo(false),
        _ => return None,
    })
}

fn image_ok(v: &Value) -> Result<(), String> {
    let Some(s) = v.as_str() else {
        return Err("an image uri must be a string".into());
    };
    if is_url(s) {
        return Ok(());
    }
    let Some((_, data)) = s
        .strip_prefix("data:image/")
        .and_then(|r| r.split_once(";base64,"))
    else {
        return Err("an image must be a HTTPS URL or a data URI".into());
    };
    match unbase64(data) {
        Some(bytes) if is_image(&bytes) => Ok(()),
        _ => Err("the image could not be decoded".into()),
    }
}

/// Checks a video edit (`gen4_aleph` on `/v1/video_to_video`) as Runway would.
fn check_edit(obj: &serde_json::Map<String, Value>) -> Result<(), String> {
    let bad = |m: &str| Err(format!("Validation of body failed: {m}"));
    if obj.get("model").and_then(Value::as_str) != Some("gen4_aleph") {
        return bad("model must be gen4_aleph");
    }
    let allowed = ["model", "promptText", "videoUri", "references", "seed"];
    if let Some(k) = obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(format!("Validation of body failed: unrecognized key {k:?}"));
    }
    match obj.get("promptText") {
        Some(Value::String(t)) if !t.is_empty() && t.encode_utf16().count() <= 1000 => {}
        _ => return bad("promptText must be a non-empty string up to 1000 characters"),
    }
    let video = obj
        .get("videoUri")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let video_ok = is_url(video)
        || video
            .strip_prefix("data:video/mp4;base64,")
            .and_then(unbase64)
            .is_some_and(|b| b.len() > 8 && &b[4..8] == b"ftyp");
    if !video_ok {
        return bad("videoUri must be a HTTPS URL or a data URI of a video");
    }
    if let Some(refs) = obj.get("references") {
        let Some(refs) = refs.as_array().filter(|r| r.len() <= 1) else {
            return bad("references must be an array of at most one item");
        };
        for r in refs {
            if r["type"] != "image" || r.as_object().is_some_and(|o| o.len() != 2) {
                return bad("references items are {type: image, uri}");
            }
            image_ok(&r["uri"]).map_err(|e| format!("Validation of body failed: {e}"))?;
        }
    }
    if obj.get("seed").is_some_and(|s| !s.is_u64()) {
        return bad("seed must be an integer");
    }
    Ok(())
}

/// Checks a submission to `endpoint` as Runway would: the message of its 400 when wrong.
fn check_body(endpoint: &str, body: &Value) -> Result<(), String> {
    let Some(obj) = body.as_object() else {
        return Err("Validation of body failed: not an object".into());
    };
    if endpoint == "video_to_video" {
        return check_edit(obj);
    }
    let model = body["model"]
        .as_str()
        .ok_or("Validation of body failed: model is required")?;
    let schema = schema(endpoint, model).ok_or(format!(
        "Validation of body failed: model {model} is not available on {endpoint}"
    ))?;
    let mut allowed = vec!["model", "promptText", "ratio", "duration"];
    if endpoint == "image_to_video" {
        allowed.push("promptImage");
    }
    if schema.seed {
        allowed.push("seed");
    }
    if let Some(k) = obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(format!(
            "Validation of body failed: unrecognized key {k:?} for {model}"
        ));
    }
    match body.get("promptText") {
        Some(Value::String(t)) if !t.is_empty() && t.encode_utf16().count() <= 1000 => {}
        None if !schema.text_required => {}
        _ => {
            return Err(
                "Validation of body failed: promptText must be a non-empty string up to 1000 characters"
                    .into(),
            );
        }
    }
    let ratio = body["ratio"]
        .as_str()
        .ok_or("Validation of body failed: ratio is required")?;
    if !schema.ratios.contains(&ratio) {
        return Err(format!(
            "Validation of body failed: ratio must be one of {}",
            schema.ratios.join(", ")
        ));
    }
    if let Some(d) = body.get("duration") {
        let d = d
            .as_u64()
            .ok_or("Validation of body failed: duration must be an integer")?;
        if !schema.durations.contains(&d) {
            return Err(format!(
                "Validation of body failed: duration {d} is not allowed"
            ));
        }
    } else if model == "gen4.5" {
        return Err("Validation of body failed: duration is required".into());
    }
    if body.get("seed").is_some_and(|s| !s.is_u64()) {
        return Err("Validation of body failed: seed must be an integer".into());
    }
    if endpoint == "image_to_video" {
        match &body["promptImage"] {
            Value::String(_) => image_ok(&body["promptImage"])
                .map_err(|e| format!("Validation of body failed: {e}"))?,
            Value::Array(images) => {
                let positions: Vec<&str> = images
                    .iter()
                    .map(|i| i["position"].as_str().unwrap_or(""))
                    .collect();
                for i in images {
                    image_ok(&i["uri"]).map_err(|e| format!("Validation of body failed: {e}"))?;
                    if i.as_object().is_some_and(|o| o.len() != 2) {
                        return Err(
                            "Validation of body failed: promptImage items are {uri, position}"
                                .into(),
                        );
                    }
                }
                let ok = match positions.as_slice() {
                    ["first"] => true,
                    ["first", "last"] => schema.last_frame,
                    _ => false,
                };
                if !ok {
                    return Err(format!(
                        "Validation of body failed: promptImage positions {positions:?} are not allowed for {model}"
                    ));
                }
            }
            _ => return Err("Validation of body failed: promptImage is required".into()),
        }
    }
    Ok(())
}

fn submit(state: &State, path: &str, req: &Request<Bytes>) -> Option<Response<Full<Bytes>>> {
    if header(req, "content-type") != Some("application/json") {
        return Some(error(400, "Content-Type must be application/json"));
    }
    if let Some((status, message)) = state.next_errors.lock().unwrap().pop_front() {
        return Some(error(status, message));
    }
    let Ok(body) = serde_json::from_slice::<Value>(req.body()) else {
        return Some(error(400, "Invalid JSON body"));
    };
    let endpoint = path.trim_start_matches("/v1/");
    if let Err(message) = check_body(endpoint, &body) {
        return Some(error(400, &message));
    }
    let id = format!(
        "17f20503-6c24-4c16-946b-{:012}",
        state.next_id.fetch_add(1, Ordering::SeqCst)
    );
    state.tasks.lock().unwrap().insert(
        id.clone(),
        Task {
            started: Instant::now(),
            prompt: body["promptText"].as_str().unwrap_or_default().to_owned(),
            cancelled: false,
        },
    );
    state
        .submissions
        .lock()
        .unwrap()
        .push((path.to_owned(), body));
    // Taken: how the relay hears of it is decided now.
    if take_one(&state.hang_up_submissions) {
        return None;
    }
    if take_one(&state.no_id_submissions) {
        return Some(fake_vendor::json(200, &json!({})));
    }
    Some(fake_vendor::json(
        200,
        &json!({"id": id, "estimatedCost": {"credits": 60}}),
    ))
}

fn read(state: &State, base: &str, id: &str) -> Response<Full<Bytes>> {
    let Some(task) = state.tasks.lock().unwrap().get(id).cloned() else {
        return error(404, "Task not found");
    };
    let run = Duration::from_millis(state.run_ms.load(Ordering::SeqCst));
    let elapsed = task.started.elapsed();
    let mut body = json!({"id": id, "createdAt": "2024-06-27T19:49:32.334Z"});
    if task.cancelled {
        body["status"] = json!("CANCELLED");
    } else if elapsed < run / 4 {
        body["status"] = json!("PENDING");
    } else if elapsed < run / 2 {
        body["status"] = json!("THROTTLED");
    } else if elapsed < run {
        body["status"] = json!("RUNNING");
        body["progress"] = json!(elapsed.as_secs_f64() / run.as_secs_f64());
    } else if task.prompt.contains("[refuse]") {
        body["status"] = json!("FAILED");
        body["failure"] = json!("The prompt text did not pass content moderation.");
        body["failureCode"] = json!("SAFETY.INPUT.TEXT");
    } else if task.prompt.contains("[fail]") {
        body["status"] = json!("FAILED");
        body["failure"] = json!("An unexpected error occurred.");
        body["failureCode"] = json!("INTERNAL.BAD_OUTPUT.CODE01");
    } else {
        body["status"] = json!("SUCCEEDED");
        body["output"] = json!([format!("{base}/result/{id}.mp4?_jwt=eyJhbGciOi.x.y")]);
    }
    fake_vendor::json(200, &body)
}

fn delete(state: &State, id: &str) -> Response<Full<Bytes>> {
    let run = Duration::from_millis(state.run_ms.load(Ordering::SeqCst));
    let mut tasks = state.tasks.lock().unwrap();
    match tasks.get_mut(id) {
        Some(task) if task.started.elapsed() < run && !task.cancelled => {
            task.cancelled = true;
            fake_vendor::bytes(204, "text/plain", Bytes::new())
        }
        Some(_) => {
            tasks.remove(id);
            fake_vendor::bytes(204, "text/plain", Bytes::new())
        }
        None => error(404, "Task not found"),
    }
}

fn download(state: &State, file: &str) -> Response<Full<Bytes>> {
    let id = file.trim_end_matches(".mp4");
    if !state.tasks.lock().unwrap().contains_key(id) {
        return fake_vendor::bytes(404, "text/plain", Bytes::from_static(b"no such file"));
    }
    if state.expire_results.load(Ordering::SeqCst) {
        return fake_vendor::bytes(
            403,
            "application/xml",
            Bytes::from_static(
                b"<?xml version=\"1.0\"?><Error><Code>AccessDenied</Code><Message>Access denied</Message></Error>",
            ),
        );
    }
    fake_vendor::bytes(200, "video/mp4", playable_mp4())
}
