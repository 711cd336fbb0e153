//! A fake of MiniMax Hailuo's video API, strict as the vendor: every call carries
//! `Authorization: Bearer` [`API_KEY`] (else HTTP 200 with `base_resp.status_code` 1004, as
//! MiniMax answers errors); submissions are checked field by field and type by type (an integer
//! `duration` the model makes at that `resolution`, upper case; images a URL or a `data:` URI;
//! `last_frame_image` on MiniMax-Hailuo-02 only, with a first frame, not at 512P;
//! `subject_reference` on S2V-01 only, one character with one image); `files/list` needs one of
//! the documented `purpose`s.
//!
//! A task runs for `run_ms`, then succeeds with a `file_id`, resolved by `files/retrieve` to a
//! `download_url` serving a playable MP4 (403 once `expire_results` is set); a prompt with
//! `[fail]` fails, with `[refuse]` fails with 1027 (output sensitive), with `[blocked]` is
//! refused at submission with 1026. `next_errors` answers the next submissions with these
//! `status_code`s, in HTTP 200s; `hang_up_submissions` takes the next ones (a task is made) and
//! closes the connection unanswered, `no_id_submissions` takes them and answers `200` with
//! `base_resp` 0 and no `task_id`.
//!
//! A submission with a `callback_url` has its address checked as MiniMax does: a POST of
//! `{"challenge": ...}` that must be echoed within 3 s (kept in `challenges`). A test can end a
//! task at once (`finish`) and push its status to a checked address (`call_back`, the
//! receiver's answers kept in `callbacks`), and read when each task was queried (`query_ages`).

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

pub const API_KEY: &str = "minimax-key-test-58";

#[derive(Default)]
pub struct State {
    pub run_ms: AtomicU64,
    pub expire_results: AtomicBool,
    /// The next submissions are answered with these `base_resp.status_code`s, in order.
    pub next_errors: Mutex<VecDeque<i64>>,
    /// The next this many submissions are taken and their connection closed unanswered.
    pub hang_up_submissions: AtomicU32,
    /// The next this many submissions are taken and answered `200` without a task id.
    pub no_id_submissions: AtomicU32,
    /// Accepted submission bodies, oldest first.
    pub submissions: Mutex<Vec<Value>>,
    /// Paths of every call, oldest first.
    pub calls: Mutex<Vec<String>>,
    /// Address checks: (task id, the receiver's status or 0, whether it echoed the challenge
    /// in time).
    pub challenges: Mutex<Vec<(String, u16, bool)>>,
    /// Status pushes: (task id, status pushed, the receiver's status or 0).
    pub callbacks: Mutex<Vec<(String, String, u16)>>,
    /// Queries of a task: (task id, the task's age then), oldest first.
    pub queries: Mutex<Vec<(String, Duration)>>,
    tasks: Mutex<HashMap<String, Task>>,
    next_id: AtomicU64,
}

#[derive(Debug, Clone)]
struct Task {
    started: Instant,
    prompt: String,
    callback_url: Option<String>,
    /// Ended by the test, whatever `run_ms` says.
    done: bool,
}

pub struct FakeMinimax {
    pub base: String,
    pub state: Arc<State>,
    _server: FakeServer,
}

impl FakeMinimax {
    pub async fn start() -> FakeMinimax {
        let state = Arc::new(State::default());
        state.run_ms.store(100, Ordering::SeqCst);
        let server = fake_vendor::serve_knowing_base(state.clone(), answer).await;
        FakeMinimax {
            base: server.base.clone(),
            state,
            _server: server,
        }
    }

    pub fn submissions(&self) -> Vec<Value> {
        self.state.submissions.lock().unwrap().clone()
    }

    /// The id MiniMax gave the relay's task `relay_id` (found by its callback URL).
    fn task_of(&self, relay_id: &str) -> Option<String> {
        let wanted = format!("task={relay_id}&");
        let tasks = self.state.tasks.lock().unwrap();
        tasks
            .iter()
            .find(|(_, t)| {
                t.callback_url
                    .as_deref()
                    .is_some_and(|u| u.contains(&wanted))
            })
            .map(|(id, _)| id.clone())
    }

    /// Ends the relay's task `relay_id` now: its next query finds it finished.
    pub fn finish(&self, relay_id: &str) {
        let id = self.task_of(relay_id).expect("a task with that callback");
        if let Some(task) = self.state.tasks.lock().unwrap().get_mut(&id) {
            task.done = true;
        }
    }

    /// Pushes the status of the relay's task `relay_id` to its callback URL now, if that
    /// address passed its check; the receiver's answer lands in `callbacks`.
    pub fn call_back(&self, relay_id: &str) {
        let id = self.task_of(relay_id).expect("a task with that callback");
        let state = self.state.clone();
        tokio::spawn(async move {
            let verified = state
                .challenges
                .lock()
                .unwrap()
                .iter()
                .any(|(t, _, echoed)| *t == id && *echoed);
            let Some(task) = state.tasks.lock().unwrap().get(&id).cloned() else {
                return;
            };
            let (Some(url), true) = (task.callback_url.clone(), verified) else {
                state
                    .callbacks
                    .lock()
                    .unwrap()
                    .push((id, "unverified".into(), 0));
                return;
            };
            // Shaped as the query's answer; the status in lower case, as MiniMax pushes it.
            let mut body = task_answer(&state, &id, &task);
            let status = body["status"]
                .as_str()
                .unwrap_or_default()
                .to_ascii_lowercase();
            body["status"] = json!(status);
            let answered = post_json(&url, &body).await.map_or(0, |(s, _)| s);
            state.callbacks.lock().unwrap().push((id, status, answered));
        });
    }

    /// The ages at which the relay's task `relay_id` was queried, oldest first.
    pub fn query_ages(&self, relay_id: &str) -> Vec<Duration> {
        let Some(id) = self.task_of(relay_id) else {
            return Vec::new();
        };
        let queries = self.state.queries.lock().unwrap();
        queries
            .iter()
            .filter(|(q, _)| *q == id)
            .map(|(_, age)| *age)
            .collect()
    }

    pub fn fail_next(&self, code: i64) {
        self.state.next_errors.lock().unwrap().push_back(code);
    }
}

// The shared flows' switches; a submission "without an id" is answered
// base_resp 0 without a task id.
fake_vendor::takes_submissions!(FakeMinimax, |body| body["prompt"].clone());

/// An error as MiniMax gives it: HTTP 200, the code in `base_resp`.
fn base_error(code: i64, msg: &str) -> Response<Full<Bytes>> {
    fake_vendor::json(
        200,
        &json!({"task_id": "", "base_resp": {"status_code": code, "status_msg": msg}}),
    )
}

/// The answer to `req`; `None` to close the connection without one.
fn answer(state: &Arc<State>, base: &str, req: Request<Bytes>) -> Option<Response<Full<Bytes>>> {
    let path = req.uri().path().to_owned();
    state.calls.lock().unwrap().push(path.clone());
    // The CDN's signed download URLs need no key.
    if let Some(file) = path.strip_prefix("/cdn/") {
        return Some(download(state, file));
    }
    if header(&req, "authorization") != Some(&format!("Bearer {API_KEY}")) {
        return Some(base_error(
            1004,
            "login fail: Please carry the API secret key in the 'Authorization' field of the request header",
        ));
    }
    Some(match (req.method(), path.as_str()) {
        (&Method::POST, "/v1/video_generation") => return submit(state, &req),
        (&Method::GET, "/v1/query/video_generation") => query(state, &req),
        (&Method::GET, "/v1/files/retrieve") => retrieve(state, base, &req),
        (&Method::GET, "/v1/files/list") => list_files(&req),
        _ => fake_vendor::json(404, &json!({"error": "not found"})),
    })
}

/// `files/list`: `purpose` is required, one of the documented three.
fn list_files(req: &Request<Bytes>) -> Response<Full<Bytes>> {
    match fake_vendor::query(req, "purpose").as_deref() {
        Some("voice_clone" | "prompt_audio" | "t2a_async_input") => fake_vendor::json(
            200,
            &json!({"files": [], "base_resp": {"status_code": 0, "status_msg": "success"}}),
        ),
        _ => base_error(2013, "invalid params, purpose"),
    }
}

/// Models, the resolutions each makes, and the durations at each.
fn durations(model: &str, resolution: &str, image: bool) -> Option<&'static [u64]> {
    match (model, resolution) {
        ("MiniMax-Hailuo-2.3" | "MiniMax-Hailuo-2.3-Fast", "768P") => Some(&[6, 10]),
        ("MiniMax-Hailuo-2.3" | "MiniMax-Hailuo-2.3-Fast", "1080P") => Some(&[6]),
        ("MiniMax-Hailuo-02", "768P") => Some(&[6, 10]),
        ("MiniMax-Hailuo-02", "512P") if image => Some(&[6, 10]),
        ("MiniMax-Hailuo-02", "1080P") => Some(&[6]),
        (
            "T2V-01" | "T2V-01-Director" | "I2V-01" | "I2V-01-Director" | "I2V-01-live" | "S2V-01",
            "720P",
        ) => Some(&[6]),
        _ => None,
    }
}

fn image_ok(v: &Value) -> Result<(), String> {
    let Some(s) = v.as_str() else {
        return Err("an image must be a string".into());
    };
    if is_url(s) {
        return Ok(());
    }
    let Some(rest) = s.strip_prefix("data:") else {
        return Err("an inline image must be a data: URI".into());
    };
    let Some((mime, data)) = rest.split_once(";base64,") else {
        return Err("a data: URI must be base64".into());
    };
    if !matches!(mime, "image/jpeg" | "image/png" | "image/webp") {
        return Err(format!("image type {mime}"));
    }
    match unbase64(data) {
        Some(bytes) if is_image(&bytes) => Ok(()),
        _ => Err("the data: URI is not a jpg or png".into()),
    }
}

fn check_body(body: &Value) -> Result<(), String> {
    const FIELDS: [&str; 11] = [
        "model",
        "prompt",
        "prompt_optimizer",
        "fast_pretreatment",
        "duration",
        "resolution",
        "first_frame_image",
        "last_frame_image",
        "subject_reference",
        "callback_url",
        "aigc_watermark",
    ];
    let Some(obj) = body.as_object() else {
        return Err("the body must be a JSON object".into());
    };
    if let Some(extra) = obj.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(format!("unknown field {extra}"));
    }
    let Some(model) = obj.get("model").and_then(Value::as_str) else {
        return Err("model is required".into());
    };
    let first = obj.get("first_frame_image");
    let image = first.is_some();
    let default_resolution = match model {
        "MiniMax-Hailuo-2.3" | "MiniMax-Hailuo-2.3-Fast" | "MiniMax-Hailuo-02" => "768P",
        _ => "720P",
    };
    let resolution = match obj.get("resolution") {
        None => default_resolution,
        Some(Value::String(r)) => r.as_str(),
        Some(other) => return Err(format!("resolution must be a string, not {other}")),
    };
    let duration = match obj.get("duration") {
        None => 6,
        Some(v) => v
            .as_u64()
            .ok_or(format!("duration must be an integer, not {v}"))?,
    };
    match durations(model, resolution, image) {
        None => return Err(format!("{model} does not make {resolution}")),
        Some(allowed) if !allowed.contains(&duration) => {
            return Err(format!(
                "{model} makes {allowed:?} s at {resolution}, not {duration}"
            ));
        }
        Some(_) => {}
    }
    if model == "MiniMax-Hailuo-2.3-Fast" && !image {
        return Err("MiniMax-Hailuo-2.3-Fast needs first_frame_image".into());
    }
    if model.starts_with("I2V-") && !image {
        return Err(format!("{model} needs first_frame_image"));
    }
    if matches!(model, "T2V-01" | "T2V-01-Director" | "S2V-01") && image {
        return Err(format!("{model} takes no first_frame_image"));
    }
    if let Some(v) = first {
        image_ok(v)?;
    }
    if let Some(last) = obj.get("last_frame_image") {
        if model != "MiniMax-Hailuo-02" || !image || resolution == "512P" {
            return Err(
                "last_frame_image needs MiniMax-Hailuo-02, a first frame, and 768P or 1080P".into(),
            );
        }
        image_ok(last)?;
    }
    if let Some(subject) = obj.get("subject_reference") {
        if model != "S2V-01" {
            return Err("subject_reference needs S2V-01".into());
        }
        let ok = subject.as_array().is_some_and(|a| {
            a.len() == 1
                && a[0]["type"] == "character"
                && a[0]["image"].as_array().is_some_and(|i| i.len() == 1)
        });
        if !ok {
            return Err("subject_reference is one character with one image".into());
        }
        image_ok(&subject[0]["image"][0])?;
    } else if model == "S2V-01" {
        return Err("S2V-01 needs subject_reference".into());
    }
    for text in ["prompt", "callback_url"] {
        if obj.get(text).is_some_and(|v| !v.is_string()) {
            return Err(format!("{text} must be a string"));
        }
    }
    Ok(())
}

fn submit(state: &Arc<State>, req: &Request<Bytes>) -> Option<Response<Full<Bytes>>> {
    if header(req, "content-type") != Some("application/json") {
        return Some(base_error(
            2013,
            "invalid params: Content-Type must be application/json",
        ));
    }
    if let Some(code) = state.next_errors.lock().unwrap().pop_front() {
        return Some(base_error(code, "as the test asked"));
    }
    let Ok(body) = serde_json::from_slice::<Value>(req.body()) else {
        return Some(base_error(2013, "invalid params: the body is not JSON"));
    };
    if let Err(why) = check_body(&body) {
        return Some(base_error(2013, &format!("invalid params, {why}")));
    }
    let prompt = body["prompt"].as_str().unwrap_or_default().to_owned();
    if prompt.contains("[blocked]") {
        return Some(base_error(1026, "input new_sensitive"));
    }
    let id = format!(
        "{}",
        106_916_112_212_032 + state.next_id.fetch_add(1, Ordering::SeqCst)
    );
    let callback_url = body["callback_url"].as_str().map(str::to_owned);
    state.tasks.lock().unwrap().insert(
        id.clone(),
        Task {
            started: Instant::now(),
            prompt,
            callback_url: callback_url.clone(),
            done: false,
        },
    );
    if let Some(url) = callback_url {
        check_address(state.clone(), url, id.clone());
    }
    state.submissions.lock().unwrap().push(body);
    // Taken: how the relay hears of it is decided now.
    if take_one(&state.hang_up_submissions) {
        return None;
    }
    if take_one(&state.no_id_submissions) {
        return Some(fake_vendor::json(
            200,
            &json!({"base_resp": {"status_code": 0, "status_msg": "success"}}),
        ));
    }
    Some(fake_vendor::json(
        200,
        &json!({"task_id": id, "base_resp": {"status_code": 0, "status_msg": "success"}}),
    ))
}

fn query(state: &State, req: &Request<Bytes>) -> Response<Full<Bytes>> {
    let Some(id) = fake_vendor::query(req, "task_id") else {
        return base_error(2013, "invalid params, task_id is required");
    };
    let Some(task) = state.tasks.lock().unwrap().get(&id).cloned() else {
        return base_error(2013, "invalid params, task not found");
    };
    state
        .queries
        .lock()
        .unwrap()
        .push((id.clone(), task.started.elapsed()));
    fake_vendor::json(200, &task_answer(state, &id, &task))
}

/// The task as the query gives it (and, its status in lower case, a status push).
fn task_answer(state: &State, id: &str, task: &Task) -> Value {
    let run = Duration::from_millis(state.run_ms.load(Ordering::SeqCst));
    let elapsed = if task.done {
        run
    } else {
        task.started.elapsed()
    };
    let ok = json!({"status_code": 0, "status_msg": "success"});
    if elapsed < run / 3 {
        json!({"task_id": id, "status": "Queueing", "file_id": "", "base_resp": ok})
    } else if elapsed < run {
        json!({"task_id": id, "status": "Processing", "file_id": "", "base_resp": ok})
    } else if task.prompt.contains("[refuse]") {
        json!({"task_id": id, "status": "Fail", "file_id": "",
               "base_resp": {"status_code": 1027, "status_msg": "output new_sensitive"}})
    } else if task.prompt.contains("[fail]") {
        json!({"task_id": id, "status": "Fail", "file_id": "", "base_resp": ok})
    } else {
        json!({"task_id": id, "status": "Success", "file_id": format!("9{id}"),
               "video_width": 1366, "video_height": 768, "base_resp": ok})
    }
}

/// Checks a callback address as MiniMax does: posts a challenge, which must come back in the
/// answer's `challenge` within 3 s.
fn check_address(state: Arc<State>, url: String, id: String) {
    tokio::spawn(async move {
        let challenge = format!("fake-challenge-{id}");
        let answer = tokio::time::timeout(
            Duration::from_secs(3),
            post_json(&url, &json!({"challenge": challenge})),
        )
        .await
        .ok()
        .flatten();
        let (status, echoed) = match answer {
            Some((status, body)) => (status, status == 200 && body["challenge"] == challenge),
            None => (0, false),
        };
        state.challenges.lock().unwrap().push((id, status, echoed));
    });
}

/// POSTs `body` to `url`: the answer's status and JSON body (`null` when it is none), or
/// `None` when no answer came.
async fn post_json(url: &str, body: &Value) -> Option<(u16, Value)> {
    use http_body_util::BodyExt;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Full<Bytes>>();
    let req = Request::post(url)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .ok()?;
    let res = client.request(req).await.ok()?;
    let status = res.status().as_u16();
    let bytes = res.into_body().collect().await.ok()?.to_bytes();
    Some((
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    ))
}

fn retrieve(state: &State, base: &str, req: &Request<Bytes>) -> Response<Full<Bytes>> {
    let Some(file_id) = fake_vendor::query(req, "file_id") else {
        return base_error(2013, "invalid params, file_id is required");
    };
    let known = file_id
        .strip_prefix('9')
        .is_some_and(|id| state.tasks.lock().unwrap().contains_key(id));
    if !known {
        return base_error(2013, "invalid params, file not found");
    }
    let Ok(numeric) = file_id.parse::<u64>() else {
        return base_error(2013, "invalid params, file_id");
    };
    fake_vendor::json(
        200,
        &json!({"file": {"file_id": numeric, "bytes": playable_mp4().len(),
                "created_at": 1_700_469_398, "filename": "output_aigc.mp4",
                "purpose": "video_generation",
                "download_url": format!("{base}/cdn/{file_id}/output.mp4?Expires=1")},
                "base_resp": {"status_code": 0, "status_msg": "success"}}),
    )
}

fn download(state: &State, file: &str) -> Response<Full<Bytes>> {
    let known = file
        .split('/')
        .next()
        .and_then(|f| f.strip_prefix('9'))
        .is_some_and(|id| state.tasks.lock().unwrap().contains_key(id));
    if !known {
        return fake_vendor::bytes(404, "text/plain", Bytes::from_static(b"no such file"));
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
