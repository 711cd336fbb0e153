//! A fake of Kling's video API, strict as the vendor: every call must carry a Bearer JWT signed
//! HS256 with [`SECRET_KEY`] whose `iss` is [`ACCESS_KEY`], `exp` 1800 s and `nbf` 5 s from
//! its making, valid now (else 401 with code 1000 or 1004); submissions are checked field by
//! field and type by type per kind (a duration is a string, an image a URL or raw base64
//! without a `data:` prefix, no `aspect_ratio` on image to video, `image_tail` only with
//! `image`, an `external_task_id` used once); tasks are polled on the path of their kind.
//!
//! A task runs for `run_ms`, then succeeds with a playable MP4 at `/kcdn/<id>.mp4` (403 once
//! `expire_results` is set) and the duration in `reported_duration` (the asked one when
//! unset); a prompt with `[fail]` fails, with `[refuse]` fails as the risk control's, with
//! `[blocked]` is refused at submission (400, code 1301). `next_errors` answers the next
//! submissions with (HTTP status, code); `hang_up_submissions` takes the next ones (a task is
//! made) and closes the connection unanswered, `no_id_submissions` takes them and answers
//! `200` with code 0 and no task. A finished task is posted to its `callback_url` (the
//! receiver's answers kept in `callbacks`); a test can also end a task at once (`finish`) and
//! post it when it likes (`call_back`), and read when each task was queried (`query_ages`).

use std::collections::{HashMap, HashSet, VecDeque};
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

pub const ACCESS_KEY: &str = "kling-access-key-test-41";
pub const SECRET_KEY: &str = "kling-secret-key-test-77";

/// What the fake was sent and does.
#[derive(Default)]
pub struct State {
    pub run_ms: AtomicU64,
    pub expire_results: AtomicBool,
    /// The next submissions are answered with these (HTTP status, code), in order.
    pub next_errors: Mutex<VecDeque<(u16, i64)>>,
    /// The next this many submissions are taken and their connection closed unanswered.
    pub hang_up_submissions: AtomicU32,
    /// The next this many submissions are taken and answered `200` without a task.
    pub no_id_submissions: AtomicU32,
    /// The `duration` string reported for finished tasks (the asked one when unset).
    pub reported_duration: Mutex<Option<String>>,
    /// Accepted submissions: (kind, body), oldest first.
    pub submissions: Mutex<Vec<(String, Value)>>,
    /// Calls refused for their token, and why.
    pub refused_tokens: Mutex<Vec<String>>,
    /// Paths of every call, oldest first.
    pub calls: Mutex<Vec<String>>,
    /// Callbacks posted: (task id, status posted, the receiver's status or 0).
    pub callbacks: Mutex<Vec<(String, String, u16)>>,
    /// Queries of a task: (task id, the task's age then), oldest first.
    pub queries: Mutex<Vec<(String, Duration)>>,
    tasks: Mutex<HashMap<String, Task>>,
    external_ids: Mutex<HashSet<String>>,
    next_id: AtomicU64,
}

#[derive(Debug, Clone)]
struct Task {
    kind: String,
    started: Instant,
    prompt: String,
    duration: String,
    callback_url: Option<String>,
    external_task_id: String,
    /// Ended by the test, whatever `run_ms` says.
    done: bool,
}

pub struct FakeKling {
    pub base: String,
    pub state: Arc<State>,
    _server: FakeServer,
}

impl FakeKling {
    pub async fn start() -> FakeKling {
        let state = Arc::new(State::default());
        state.run_ms.store(100, Ordering::SeqCst);
        let server = fake_vendor::serve_knowing_base(state.clone(), answer).await;
        FakeKling {
            base: server.base.clone(),
            state,
            _server: server,
        }
    }

    pub fn submissions(&self) -> Vec<(String, Value)> {
        self.state.submissions.lock().unwrap().clone()
    }

    /// The id Kling gave the task the relay submitted as `external` (its task id).
    fn task_of(&self, external: &str) -> Option<String> {
        let tasks = self.state.tasks.lock().unwrap();
        tasks
            .iter()
            .find(|(_, t)| t.external_task_id == external)
            .map(|(id, _)| id.clone())
    }

    /// Ends the relay's task `external` now: its next query finds it finished.
    pub fn finish(&self, external: &str) {
        let id = self.task_of(external).expect("a task of that external id");
        if let Some(task) = self.state.tasks.lock().unwrap().get_mut(&id) {
            task.done = true;
        }
    }

    /// Posts the relay's task `external` to its `callback_url` now; the receiver's answer
    /// lands in `callbacks`.
    pub fn call_back(&self, external: &str) {
        let id = self.task_of(external).expect("a task of that external id");
        let url = self.state.tasks.lock().unwrap()[&id]
            .callback_url
            .clone()
            .expect("a callback_url");
        call_back(
            self.state.clone(),
            self.base.clone(),
            url,
            id,
            Duration::ZERO,
        );
    }

    /// The ages at which the relay's task `external` was queried, oldest first.
    pub fn query_ages(&self, external: &str) -> Vec<Duration> {
        let Some(id) = self.task_of(external) else {
            return Vec::new();
        };
        let queries = self.state.queries.lock().unwrap();
        queries
            .iter()
            .filter(|(q, _)| *q == id)
            .map(|(_, age)| *age)
            .collect()
    }

    pub fn fail_next(&self, status: u16, code: i64) {
        self.state
            .next_errors
            .lock()
            .unwrap()
            .push_back((status, code));
    }
}

// The shared flows' switches; a submission "without an id" is answered
// code 0 without a task id.
fake_vendor::takes_submissions!(FakeKling, |(_, body)| body["prompt"].clone());

fn error(status: u16, code: i64, message: &str) -> Response<Full<Bytes>> {
    fake_vendor::json(
        status,
        &json!({"code": code, "message": message, "request_id": "req-fake"}),
    )
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[derive(serde::Deserialize)]
struct Claims {
    iss: String,
    exp: u64,
    nbf: u64,
}

/// Checks the call's token as Kling does: the refusal's code and message when it is bad.
fn check_token(req: &Request<Bytes>) -> Result<(), (i64, &'static str)> {
    let Some(token) = header(req, "authorization").and_then(|h| h.strip_prefix("Bearer ")) else {
        return Err((1001, "Authorization is empty"));
    };
    let invalid = Err((1002, "Authorization is invalid"));
    let Ok(head) = jsonwebtoken::decode_header(token) else {
        return invalid;
    };
    if head.alg != jsonwebtoken::Algorithm::HS256 || head.typ.as_deref() != Some("JWT") {
        return invalid;
    }
    let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::HS256);
    validation.validate_exp = false;
    validation.required_spec_claims.clear();
    let key = jsonwebtoken::DecodingKey::from_secret(SECRET_KEY.as_bytes());
    let Ok(data) = jsonwebtoken::decode::<Claims>(token, &key, &validation) else {
        return Err((1000, "Authorization failed: bad signature"));
    };
    let claims = data.claims;
    let now = now_secs();
    if claims.iss != ACCESS_KEY {
        return Err((1000, "Authorization failed: unknown access key"));
    }
    if claims.exp.saturating_sub(claims.nbf) != 1805 {
        return invalid;
    }
    if claims.nbf > now + 1 {
        return Err((1003, "Authorization is not yet valid"));
    }
    if claims.exp <= now {
        return Err((1004, "Authorization has expired"));
    }
    Ok(())
}

/// The answer to `req`; `None` to close the connection without one.
fn answer(state: &Arc<State>, base: &str, req: Request<Bytes>) -> Option<Response<Full<Bytes>>> {
    let path = req.uri().path().to_owned();
    state.calls.lock().unwrap().push(path.clone());
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    // Result files live on the vendor's CDN: no token there.
    if let ["kcdn", file] = segments.as_slice() {
        return Some(download(state, file));
    }
    if let Err((code, why)) = check_token(&req) {
        state.refused_tokens.lock().unwrap().push(why.to_owned());
        return Some(error(401, code, why));
    }
    match (req.method(), segments.as_slice()) {
        (&Method::POST, ["v1", "videos", kind]) => submit(state, base, kind, &req),
        (&Method::GET, ["v1", "videos", kind, id]) => Some(query(state, base, kind, id)),
        (&Method::GET, ["account", "costs"]) => Some(costs(&req)),
        _ => Some(error(404, 1202, "The requested method is invalid")),
    }
}

/// A body of the size Kling's docs print for the account's resource packs.
fn costs(req: &Request<Bytes>) -> Response<Full<Bytes>> {
    let start = fake_vendor::query(req, "start_time").and_then(|v| v.parse::<u64>().ok());
    let end = fake_vendor::query(req, "end_time").and_then(|v| v.parse::<u64>().ok());
    match (start, end) {
        (Some(s), Some(e)) if s < e => fake_vendor::json(
            200,
            &json!({"code": 0, "message": "SUCCEED", "request_id": "req-fake", "data": {
                "code": 0, "msg": "ok", "resource_pack_subscribe_infos": [{
                    "resource_pack_name": "Video Generation - 10,000 entries",
                    "resource_pack_id": "509f3fd3d4ab4a3f9eec5db27aa44f27",
                    "resource_pack_type": "decreasing_total",
                    "total_quantity": 200.0, "remaining_quantity": 118.0,
                    "purchase_time": s, "effective_time": s, "invalid_time": e,
                    "status": "online"}]}}),
        ),
        _ => error(400, 1201, "start_time and end_time (ms) are required"),
    }
}

const MODELS: &[&str] = &[
    "kling-v1",
    "kling-v1-5",
    "kling-v1-6",
    "kling-v2-master",
    "kling-v2-1",
    "kling-v2-1-master",
    "kling-v2-5-turbo",
    "kling-v2-6",
    "kling-v3",
];

/// The fields each kind takes.
fn fields_of(kind: &str) -> Option<&'static [&'static str]> {
    const COMMON: [&str; 7] = [
        "model_name",
        "prompt",
        "negative_prompt",
        "duration",
        "mode",
        "callback_url",
        "external_task_id",
    ];
    static T2V: [&str; 10] = [
        COMMON[0],
        COMMON[1],
        COMMON[2],
        COMMON[3],
        COMMON[4],
        COMMON[5],
        COMMON[6],
        "sound",
        "aspect_ratio",
        "cfg_scale",
    ];
    static I2V: [&str; 11] = [
        COMMON[0],
        COMMON[1],
        COMMON[2],
        COMMON[3],
        COMMON[4],
        COMMON[5],
        COMMON[6],
        "sound",
        "image",
        "image_tail",
        "cfg_scale",
    ];
    static MULTI: [&str; 9] = [
        COMMON[0],
        COMMON[1],
        COMMON[2],
        COMMON[3],
        COMMON[4],
        COMMON[5],
        COMMON[6],
        "aspect_ratio",
        "image_list",
    ];
    match kind {
        "text2video" => Some(&T2V),
        "image2video" => Some(&I2V),
        "multi-image2video" => Some(&MULTI),
        _ => None,
    }
}

/// An image as Kling takes it: a URL, or raw base64 (no `data:` prefix) of a PNG or JPEG.
fn image_ok(v: &Value) -> Result<(), String> {
    let Some(s) = v.as_str() else {
        return Err("an image must be a string".into());
    };
    if is_url(s) {
        return Ok(());
    }
    if s.starts_with("data:") {
        return Err("do not add a data: prefix to base64".into());
    }
    match unbase64(s) {
        Some(bytes) if is_image(&bytes) => Ok(()),
        _ => Err("an image must be a URL or base64 of a jpg or png".into()),
    }
}

/// Checks a submission of `kind` as Kling would: the refusal's message when it is wrong.
fn check_body(kind: &str, body: &Value) -> Result<(), String> {
    let Some(fields) = fields_of(kind) else {
        return Err(format!("no task kind {kind}"));
    };
    let Some(obj) = body.as_object() else {
        return Err("the body must be a JSON object".into());
    };
    if let Some(extra) = obj.keys().find(|k| !fields.contains(&k.as_str())) {
        return Err(format!("unknown parameter {extra} for {kind}"));
    }
    let model = obj
        .get("model_name")
        .and_then(Value::as_str)
        .unwrap_or("kling-v1");
    if !MODELS.contains(&model) {
        return Err(format!("model {model}"));
    }
    for text in [
        "prompt",
        "negative_prompt",
        "callback_url",
        "external_task_id",
    ] {
        if obj.get(text).is_some_and(|v| !v.is_string()) {
            return Err(format!("{text} must be a string"));
        }
    }
    if kind == "text2video"
        && obj
            .get("prompt")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
    {
        return Err("prompt is required".into());
    }
    match obj.get("duration") {
        None => {}
        Some(Value::String(d)) => {
            let allowed: &[&str] = if model == "kling-v3" {
                &[
                    "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15",
                ]
            } else {
                &["5", "10"]
            };
            if !allowed.contains(&d.as_str()) {
                return Err(format!("duration {d} is not one of {allowed:?}"));
            }
        }
        Some(other) => return Err(format!("duration must be a string, not {other}")),
    }
    if let Some(mode) = obj.get("mode")
        && !matches!(mode.as_str(), Some("std" | "pro"))
    {
        return Err("mode must be std or pro".into());
    }
    if let Some(sound) = obj.get("sound")
        && !matches!(sound.as_str(), Some("on" | "off"))
    {
        return Err("sound must be on or off".into());
    }
    if let Some(ratio) = obj.get("aspect_ratio")
        && !matches!(ratio.as_str(), Some("16:9" | "9:16" | "1:1"))
    {
        return Err("aspect_ratio must be 16:9, 9:16 or 1:1".into());
    }
    if kind == "image2video" {
        match (obj.get("image"), obj.get("image_tail")) {
            (None, None) => return Err("image or image_tail is required".into()),
            (image, tail) => {
                for v in [image, tail].into_iter().flatten() {
                    image_ok(v)?;
                }
            }
        }
    }
    if kind == "multi-image2video" {
        if model != "kling-v1-6" {
            return Err("multi-image2video takes kling-v1-6 only".into());
        }
        let Some(list) = obj.get("image_list").and_then(Value::as_array) else {
            return Err("image_list is required".into());
        };
        if list.is_empty() || list.len() > 4 {
            return Err("image_list takes 1 to 4 images".into());
        }
        for item in list {
            let keys: Vec<&String> = item
                .as_object()
                .map(|o| o.keys().collect())
                .unwrap_or_default();
            if keys != ["image"] {
                return Err("image_list items are {image}".into());
            }
            image_ok(&item["image"])?;
        }
    }
    Ok(())
}

fn submit(
    state: &Arc<State>,
    base: &str,
    kind: &str,
    req: &Request<Bytes>,
) -> Option<Response<Full<Bytes>>> {
    if header(req, "content-type") != Some("application/json") {
        return Some(error(400, 1200, "Content-Type must be application/json"));
    }
    if let Some((status, code)) = state.next_errors.lock().unwrap().pop_front() {
        return Some(error(status, code, "as the test asked"));
    }
    let Ok(body) = serde_json::from_slice::<Value>(req.body()) else {
        return Some(error(400, 1200, "the body is not JSON"));
    };
    if let Err(why) = check_body(kind, &body) {
        return Some(error(400, 1201, &format!("Invalid parameters: {why}")));
    }
    let prompt = body["prompt"].as_str().unwrap_or_default().to_owned();
    if prompt.contains("[blocked]") {
        return Some(error(
            400,
            1301,
            "Trigger the content security policy of the platform",
        ));
    }
    let external = body["external_task_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    if !external.is_empty() && !state.external_ids.lock().unwrap().insert(external.clone()) {
        return Some(error(400, 1201, "external_task_id already exists"));
    }
    let id = format!(
        "8{:017}",
        state.next_id.fetch_add(1, Ordering::SeqCst) + 786_329_374_510_137
    );
    let task = Task {
        kind: kind.to_owned(),
        started: Instant::now(),
        prompt,
        duration: body["duration"].as_str().unwrap_or("5").to_owned(),
        callback_url: body["callback_url"].as_str().map(str::to_owned),
        external_task_id: external.clone(),
        done: false,
    };
    if let Some(url) = task.callback_url.clone() {
        // Posted once the task has ended, by the vendor's own clock.
        let run = Duration::from_millis(state.run_ms.load(Ordering::SeqCst));
        let after = run + Duration::from_millis(20);
        call_back(state.clone(), base.to_owned(), url, id.clone(), after);
    }
    state.tasks.lock().unwrap().insert(id.clone(), task);
    state
        .submissions
        .lock()
        .unwrap()
        .push((kind.to_owned(), body));
    // Taken: how the relay hears of it is decided now.
    if take_one(&state.hang_up_submissions) {
        return None;
    }
    if take_one(&state.no_id_submissions) {
        return Some(fake_vendor::json(
            200,
            &json!({"code": 0, "message": "SUCCEED", "request_id": "req-fake"}),
        ));
    }
    let ms = now_secs() * 1000;
    Some(fake_vendor::json(
        200,
        &json!({"code": 0, "message": "SUCCEED", "request_id": "req-fake", "data": {
            "task_id": id, "task_info": {"external_task_id": external},
            "task_status": "submitted", "created_at": ms, "updated_at": ms}}),
    ))
}

/// The task object as query and callback give it.
fn task_object(state: &State, base: &str, id: &str, task: &Task) -> Value {
    let run = Duration::from_millis(state.run_ms.load(Ordering::SeqCst));
    let elapsed = if task.done {
        run
    } else {
        task.started.elapsed()
    };
    let ms = now_secs() * 1000;
    let mut data = json!({"task_id": id, "task_status_msg": "",
        "task_info": {"external_task_id": task.external_task_id},
        "created_at": ms, "updated_at": ms});
    if elapsed < run / 3 {
        data["task_status"] = json!("submitted");
    } else if elapsed < run {
        data["task_status"] = json!("processing");
    } else if task.prompt.contains("[refuse]") {
        data["task_status"] = json!("failed");
        data["task_status_msg"] = json!("Failure to pass the risk control system");
    } else if task.prompt.contains("[fail]") {
        data["task_status"] = json!("failed");
        data["task_status_msg"] = json!("Video generation failed, internal error");
    } else {
        let duration = state
            .reported_duration
            .lock()
            .unwrap()
            .clone()
            .unwrap_or_else(|| task.duration.clone());
        data["task_status"] = json!("succeed");
        data["final_unit_deduction"] = json!("1");
        data["watermark_info"] = json!({"enabled": false});
        data["task_result"] = json!({"videos": [{
            "id": format!("vid-{id}"), "url": format!("{base}/kcdn/{id}.mp4"),
            "watermark_url": "", "duration": duration}]});
    }
    data
}

fn query(state: &State, base: &str, kind: &str, id: &str) -> Response<Full<Bytes>> {
    let task = state.tasks.lock().unwrap().get(id).cloned();
    match task {
        // A task is known on the path of its own kind only.
        Some(task) if task.kind == kind => {
            let age = task.started.elapsed();
            state.queries.lock().unwrap().push((id.to_owned(), age));
            fake_vendor::json(
                200,
                &json!({"code": 0, "message": "SUCCEED", "request_id": "req-fake",
                        "data": task_object(state, base, id, &task)}),
            )
        }
        _ => error(404, 1203, "The requested resource does not exist"),
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
            Bytes::from_static(b"<Error>AccessDenied: Request has expired</Error>"),
        );
    }
    fake_vendor::bytes(200, "video/mp4", playable_mp4())
}

/// Posts the task to `url` `after` this long, as Kling does when a task's status changes.
fn call_back(state: Arc<State>, base: String, url: String, id: String, after: Duration) {
    tokio::spawn(async move {
        if !after.is_zero() {
            tokio::time::sleep(after).await;
        }
        let Some(task) = state.tasks.lock().unwrap().get(&id).cloned() else {
            return;
        };
        let body = task_object(&state, &base, &id, &task);
        let status = body["task_status"].as_str().unwrap_or_default().to_owned();
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http::<Full<Bytes>>();
        let req = Request::post(url.as_str())
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_string())));
        let answered = match req {
            Ok(req) => client.request(req).await.map_or(0, |r| r.status().as_u16()),
            Err(_) => 0,
        };
        state.callbacks.lock().unwrap().push((id, status, answered));
    });
}
