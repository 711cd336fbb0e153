//! A fake of DashScope's Wan video tasks, strict as the vendor: every call carries
//! `Authorization: Bearer` [`API_KEY`] (else 401 `InvalidApiKey`); a submission needs
//! `X-DashScope-Async: enable` (else 403 `AccessDenied`, "current user api does not support
//! synchronous calls") and goes to its model's path (`*-kf2v-*` on `image2video`, the rest on
//! `video-generation`; a model on the wrong path is 400 "Model not exist."). Bodies are checked
//! field by field and type by type: text to video up to wan2.6 takes `parameters.size` from
//! DashScope's table with an asterisk, image to video and kf2v an upper-case `resolution`,
//! images are URLs or `data:` URIs, durations integers the model makes.
//!
//! A task is PENDING, then RUNNING, then SUCCEEDED after `run_ms` with a playable MP4 at a
//! signed `video_url` (403 once `expire_results` is set) and `usage` (`duration`, `SR`); a
//! prompt with `[fail]` fails, with `[refuse]` fails with `DataInspectionFailed`, with
//! `[blocked]` is refused at submission (400 `DataInspectionFailed`). `next_errors` answers
//! the next submissions with (HTTP status, code); `hang_up_submissions` takes the next ones (a
//! task is made) and closes the connection unanswered, `no_id_submissions` takes them and
//! answers `200` without `output`. An id it never made reads UNKNOWN.

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

pub const API_KEY: &str = "sk-wan-test-61";

#[derive(Default)]
pub struct State {
    pub run_ms: AtomicU64,
    pub expire_results: AtomicBool,
    /// The next submissions are answered with these (HTTP status, code), in order.
    pub next_errors: Mutex<VecDeque<(u16, &'static str)>>,
    /// The next this many submissions are taken and their connection closed unanswered.
    pub hang_up_submissions: AtomicU32,
    /// The next this many submissions are taken and answered `200` without a task.
    pub no_id_submissions: AtomicU32,
    /// Accepted submissions: (path, body), oldest first.
    pub submissions: Mutex<Vec<(String, Value)>>,
    /// `(method, path)` of every call, oldest first.
    pub calls: Mutex<Vec<(String, String)>>,
    tasks: Mutex<HashMap<String, Task>>,
    next_id: AtomicU64,
}

#[derive(Debug, Clone)]
struct Task {
    started: Instant,
    prompt: String,
    duration: u64,
    tier: u64,
    cancelled: bool,
}

pub struct FakeWan {
    pub base: String,
    pub state: Arc<State>,
    _server: FakeServer,
}

impl FakeWan {
    pub async fn start() -> FakeWan {
        let state = Arc::new(State::default());
        state.run_ms.store(100, Ordering::SeqCst);
        let server =
            fake_vendor::serve_knowing_base(state.clone(), |st, base, req| answer(st, base, req))
                .await;
        FakeWan {
            base: server.base.clone(),
            state,
            _server: server,
        }
    }

    pub fn submissions(&self) -> Vec<(String, Value)> {
        self.state.submissions.lock().unwrap().clone()
    }

    pub fn fail_next(&self, status: u16, code: &'static str) {
        self.state
            .next_errors
            .lock()
            .unwrap()
            .push_back((status, code));
    }
}

// The shared flows' switches; a submission "without an id" is answered
// 200 without a task.
fake_vendor::takes_submissions!(FakeWan, |(_, body)| body["input"]["prompt"].clone());

fn error(status: u16, code: &str, message: &str) -> Response<Full<Bytes>> {
    fake_vendor::json(
        status,
        &json!({"code": code, "message": message, "request_id": "fb53c4ec-1c12-4fc4-a580-cdb7c3261fc1"}),
    )
}

const SYNTHESIS: &str = "/api/v1/services/aigc/video-generation/video-synthesis";
const KF2V: &str = "/api/v1/services/aigc/image2video/video-synthesis";

/// The answer to `req`; `None` to close the connection without one.
fn answer(state: &State, base: &str, req: Request<Bytes>) -> Option<Response<Full<Bytes>>> {
    let path = req.uri().path().to_owned();
    state
        .calls
        .lock()
        .unwrap()
        .push((req.method().to_string(), path.clone()));
    if let Some(file) = path.strip_prefix("/result/") {
        return Some(download(state, file));
    }
    if header(&req, "authorization") != Some(&format!("Bearer {API_KEY}")) {
        return Some(error(401, "InvalidApiKey", "Invalid API-key provided."));
    }
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    Some(match (req.method(), segments.as_slice()) {
        (&Method::POST, _) if path == SYNTHESIS || path == KF2V => {
            return submit(state, &path, &req);
        }
        (&Method::GET, ["api", "v1", "tasks", id]) => query(state, base, id),
        (&Method::POST, ["api", "v1", "tasks", id, "cancel"]) => cancel(state, id),
        _ => error(404, "NotFound", "not found"),
    })
}

/// The sizes of DashScope's text-to-video table, by tier.
fn sizes(tier: &str) -> &'static [&'static str] {
    match tier {
        "480P" => &["832*480", "480*832", "624*624"],
        "720P" => &["1280*720", "720*1280", "960*960", "1088*832", "832*1088"],
        "1080P" => &[
            "1920*1080",
            "1080*1920",
            "1440*1440",
            "1632*1248",
            "1248*1632",
        ],
        _ => &[],
    }
}

/// (durations, tiers) each model makes.
fn model(name: &str) -> Option<(&'static [u64], &'static [&'static str])> {
    Some(match name {
        "wan2.7-t2v" | "wan2.7-i2v" | "wan2.7-r2v" => (
            &[2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
            &["720P", "1080P"],
        ),
        "wan2.6-t2v" | "wan2.6-i2v" => (&[5, 10, 15], &["720P", "1080P"]),
        "wan2.5-t2v-preview" | "wan2.5-i2v-preview" => (&[5, 10], &["480P", "720P", "1080P"]),
        "wan2.2-t2v-plus" | "wan2.2-i2v-plus" => (&[5], &["480P", "1080P"]),
        "wan2.2-i2v-flash" => (&[5], &["480P", "720P"]),
        "wan2.2-kf2v-flash" => (&[5], &["480P", "720P", "1080P"]),
        "wan2.1-kf2v-plus" | "wan2.1-t2v-plus" | "wan2.1-i2v-plus" => (&[5], &["720P"]),
        _ => return None,
    })
}

fn image_ok(v: &Value) -> Result<(), String> {
    let Some(s) = v.as_str() else {
        return Err("an image must be a string".into());
    };
    if is_url(s) {
        return Ok(());
    }
    let Some((_, data)) = s
        .strip_prefix("data:image/")
        .and_then(|r| r.split_once(";base64,"))
    else {
        return Err("an image must be a URL or a data:image/...;base64, URI".into());
    };
    match unbase64(data) {
        Some(bytes) if is_image(&bytes) => Ok(()),
        _ => Err("the image is not a jpg or png".into()),
    }
}

/// Checks a submission as DashScope would: (HTTP status, code, message) when it is wrong;
/// else the task's duration and tier.
fn check_body(path: &str, body: &Value) -> Result<(u64, u64), (u16, &'static str, String)> {
    let bad = |m: String| (400, "InvalidParameter", m);
    let name = body["model"]
        .as_str()
        .ok_or(bad("model is required".into()))?;
    let (durations, tiers) = model(name).ok_or(bad("Model not exist.".into()))?;
    let kf2v = name.contains("kf2v");
    if (path == KF2V) != kf2v {
        return Err(bad("Model not exist.".into()));
    }
    let (input, params) = (&body["input"], &body["parameters"]);
    let allowed_top = ["model", "input", "parameters"];
    if body
        .as_object()
        .is_some_and(|o| o.keys().any(|k| !allowed_top.contains(&k.as_str())))
    {
        return Err(bad("unknown field".into()));
    }
    if name.starts_with("wan2.7") {
        return check_media_body(name, body, durations, tiers);
    }
    let input_fields: &[&str] = if kf2v {
        &[
            "prompt",
            "negative_prompt",
            "first_frame_url",
            "last_frame_url",
        ]
    } else if name.contains("i2v") {
        &["prompt", "negative_prompt", "img_url", "audio_url"]
    } else {
        &["prompt", "negative_prompt", "audio_url"]
    };
    let Some(input_obj) = input.as_object() else {
        return Err(bad("input must be an object".into()));
    };
    if let Some(k) = input_obj
        .keys()
        .find(|k| !input_fields.contains(&k.as_str()))
    {
        return Err(bad(format!("input.{k} is not a field of {name}")));
    }
    if !input["prompt"].is_string() {
        return Err(bad("input.prompt must be a string".into()));
    }
    for field in ["img_url", "first_frame_url", "last_frame_url"] {
        if let Some(v) = input.get(field) {
            image_ok(v).map_err(bad)?;
        }
    }
    if name.contains("i2v") && input.get("img_url").is_none() {
        return Err(bad("input.img_url is required".into()));
    }
    if kf2v && input.get("first_frame_url").is_none() {
        return Err(bad("input.first_frame_url is required".into()));
    }
    let duration = match params.get("duration") {
        None => durations[0],
        Some(v) => v
            .as_u64()
            .ok_or(bad("parameters.duration must be an integer".into()))?,
    };
    if !durations.contains(&duration) {
        return Err(bad(format!("duration {duration} is not supported")));
    }
    if params.get("seed").is_some_and(|s| !s.is_u64()) {
        return Err(bad("parameters.seed must be an integer".into()));
    }
    let tier = if name.contains("t2v") {
        if params.get("resolution").is_some() {
            return Err(bad("text to video takes parameters.size".into()));
        }
        let size = params["size"].as_str().unwrap_or("1920*1080");
        tiers
            .iter()
            .find(|t| sizes(t).contains(&size))
            .ok_or(bad(format!(
                "size must be in {}",
                tiers
                    .iter()
                    .flat_map(|t| sizes(t).iter())
                    .copied()
                    .collect::<Vec<_>>()
                    .join(",")
            )))?
            .to_owned()
    } else {
        if params.get("size").is_some() {
            return Err(bad("image to video takes parameters.resolution".into()));
        }
        let tier = params["resolution"]
            .as_str()
            .unwrap_or(tiers[tiers.len() - 1]);
        if !tiers.contains(&tier) {
            return Err(bad(format!("resolution {tier} is not supported")));
        }
        tier
    };
    let short: u64 = tier.trim_end_matches('P').parse().unwrap_or(0);
    Ok((duration, short))
}

/// A wan2.7 submission (`input.media[]`, `resolution` and `ratio`), checked as DashScope's
/// pages for wan2.7-t2v, -i2v and -r2v describe it.
fn check_media_body(
    name: &str,
    body: &Value,
    durations: &[u64],
    tiers: &[&str],
) -> Result<(u64, u64), (u16, &'static str, String)> {
    let bad = |m: String| (400, "InvalidParameter", m);
    let (input, params) = (&body["input"], &body["parameters"]);
    let Some(input_obj) = input.as_object() else {
        return Err(bad("input must be an object".into()));
    };
    let fields: &[&str] = if name.ends_with("t2v") {
        &["prompt", "negative_prompt", "audio_url"]
    } else {
        &["prompt", "negative_prompt", "media"]
    };
    if let Some(k) = input_obj.keys().find(|k| !fields.contains(&k.as_str())) {
        return Err(bad(format!("input.{k} is not a field of {name}")));
    }
    if !input["prompt"].is_string() {
        return Err(bad("input.prompt must be a string".into()));
    }
    let kinds: &[&str] = if name.ends_with("i2v") {
        &["first_frame", "last_frame", "driving_audio"]
    } else {
        &["first_frame", "reference_image", "reference_video"]
    };
    let mut seen = Vec::new();
    for item in input["media"].as_array().into_iter().flatten() {
        let Some(obj) = item.as_object() else {
            return Err(bad("input.media[] items must be objects".into()));
        };
        if let Some(k) = obj.keys().find(|k| !["type", "url"].contains(&k.as_str())) {
            return Err(bad(format!("input.media[].{k} is not a field")));
        }
        let kind = item["type"].as_str().unwrap_or_default();
        if !kinds.contains(&kind) {
            return Err(bad(format!(
                "input.media[].type {kind:?} is not one of {name}'s"
            )));
        }
        if kind.ends_with("frame") || kind == "reference_image" {
            image_ok(&item["url"]).map_err(bad)?;
        } else if !item["url"].is_string() {
            return Err(bad("input.media[].url must be a string".into()));
        }
        seen.push(kind.to_owned());
    }
    let count = |k: &str| seen.iter().filter(|s| *s == k).count();
    if name.ends_with("i2v") && count("first_frame") != 1 {
        return Err(bad(format!(
            "image-to-video model {name} must provide an image"
        )));
    }
    let references = count("reference_image") + count("reference_video");
    if name.ends_with("r2v") && !(1..=5).contains(&references) {
        return Err(bad("reference images and videos: 1 to 5 together".into()));
    }
    if params.get("size").is_some() {
        return Err(bad(format!("{name} takes parameters.resolution and ratio")));
    }
    if params.get("seed").is_some_and(|s| !s.is_u64()) {
        return Err(bad("parameters.seed must be an integer".into()));
    }
    let duration = params["duration"].as_u64().unwrap_or(5);
    let longest = if count("reference_video") > 0 { 10 } else { 15 };
    if !durations.contains(&duration) || duration > longest {
        return Err(bad(format!("duration {duration} is not supported")));
    }
    let tier = params["resolution"].as_str().unwrap_or("1080P");
    if !tiers.contains(&tier) {
        return Err(bad(format!("resolution {tier} is not supported")));
    }
    if let Some(ratio) = params.get("ratio")
        && !["16:9", "9:16", "1:1", "4:3", "3:4"].contains(&ratio.as_str().unwrap_or_default())
    {
        return Err(bad(format!("ratio {ratio} is not supported")));
    }
    let short: u64 = tier.trim_end_matches('P').parse().unwrap_or(0);
    Ok((duration, short))
}

fn submit(state: &State, path: &str, req: &Request<Bytes>) -> Option<Response<Full<Bytes>>> {
    if header(req, "x-dashscope-async") != Some("enable") {
        return Some(error(
            403,
            "AccessDenied",
            "current user api does not support synchronous calls",
        ));
    }
    if header(req, "content-type") != Some("application/json") {
        return Some(error(
            400,
            "InvalidParameter",
            "Content-Type must be application/json",
        ));
    }
    if let Some((status, code)) = state.next_errors.lock().unwrap().pop_front() {
        return Some(error(status, code, "as the test asked"));
    }
    let Ok(body) = serde_json::from_slice::<Value>(req.body()) else {
        return Some(error(400, "InvalidParameter", "the body is not JSON"));
    };
    let (duration, tier) = match check_body(path, &body) {
        Ok(v) => v,
        Err((status, code, message)) => return Some(error(status, code, &message)),
    };
    let prompt = body["input"]["prompt"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    if prompt.contains("[blocked]") {
        return Some(error(
            400,
            "DataInspectionFailed",
            "Input data may contain inappropriate content.",
        ));
    }
    let id = format!(
        "0385dc79-5ff8-4d82-bcb6-{:012}",
        state.next_id.fetch_add(1, Ordering::SeqCst)
    );
    state.tasks.lock().unwrap().insert(
        id.clone(),
        Task {
            started: Instant::now(),
            prompt,
            duration,
            tier,
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
        return Some(fake_vendor::json(
            200,
            &json!({"request_id": "4909100c-7b5a-9f92-bfe5-000000000000"}),
        ));
    }
    Some(fake_vendor::json(
        200,
        &json!({"output": {"task_status": "PENDING", "task_id": id},
                "request_id": "4909100c-7b5a-9f92-bfe5-000000000000"}),
    ))
}

fn query(state: &State, base: &str, id: &str) -> Response<Full<Bytes>> {
    let Some(task) = state.tasks.lock().unwrap().get(id).cloned() else {
        return fake_vendor::json(
            200,
            &json!({"request_id": "r", "output": {"task_id": id, "task_status": "UNKNOWN"}}),
        );
    };
    let run = Duration::from_millis(state.run_ms.load(Ordering::SeqCst));
    let times = json!({"submit_time": "2025-09-29 14:18:52.331"});
    let mut output = json!({"task_id": id, "submit_time": times["submit_time"]});
    let mut usage = Value::Null;
    if task.cancelled {
        output["task_status"] = json!("CANCELED");
    } else if task.started.elapsed() < run / 3 {
        output["task_status"] = json!("PENDING");
    } else if task.started.elapsed() < run {
        output["task_status"] = json!("RUNNING");
    } else if task.prompt.contains("[refuse]") {
        output["task_status"] = json!("FAILED");
        output["code"] = json!("DataInspectionFailed");
        output["message"] = json!("Output data may contain inappropriate content.");
    } else if task.prompt.contains("[fail]") {
        output["task_status"] = json!("FAILED");
        output["code"] = json!("InternalError");
        output["message"] = json!("An internal error has occured, please try again later.");
    } else {
        output["task_status"] = json!("SUCCEEDED");
        output["video_url"] = json!(format!(
            "{base}/result/{id}.mp4?Expires=1700000000&Signature=x"
        ));
        usage = json!({"duration": task.duration, "output_video_duration": task.duration,
                       "video_count": 1, "SR": task.tier});
    }
    let mut body = json!({"request_id": "e5d70b02-ebd3-98ce-9fe8-759d7d7b107d", "output": output});
    if !usage.is_null() {
        body["usage"] = usage;
    }
    fake_vendor::json(200, &body)
}

fn cancel(state: &State, id: &str) -> Response<Full<Bytes>> {
    let run = Duration::from_millis(state.run_ms.load(Ordering::SeqCst));
    let mut tasks = state.tasks.lock().unwrap();
    match tasks.get_mut(id) {
        Some(task) if task.started.elapsed() < run / 3 => {
            task.cancelled = true;
            fake_vendor::json(200, &json!({"request_id": "r"}))
        }
        Some(_) => error(
            400,
            "UnsupportedOperation",
            "only a PENDING task can be cancelled",
        ),
        None => error(404, "NotFound", "no such task"),
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
                b"<Error><Code>AccessDenied</Code><Message>Request has expired.</Message></Error>",
            ),
        );
    }
    fake_vendor::bytes(200, "video/mp4", playable_mp4())
}
