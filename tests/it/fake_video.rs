//! Fake video upstreams: one small hyper server speaking both OpenAI-style `/v1/videos` and
//! Seedance-style `/api/v3/contents/generations/tasks`, with switches (changeable while it
//! runs) for latency, failure rates, 429 bursts, going down, hanging polls, unknown statuses,
//! expired result URLs, truncated downloads and large results generated while they are sent.
//! Its `ark` side cancels and deletes as Ark does (a queued task deleted is gone, a running one
//! refuses), and posts a task's final state to the submission's `callback_url`.
//! It counts submissions per prompt, so a test that gives every task its own prompt can prove
//! none was submitted twice, and polls, in all and per task. A submission repeating an
//! `Idempotency-Key` is answered with the task the first one created, as vendors that honour
//! the header do, and counted as a replay; every submission it took is also counted per key
//! (the relay's task id), replays included, with what became of its task ([`Taken`]).
//!
//! For the chaos of `cargo xtask crash --chaos` and the tests of ambiguous submissions it
//! misbehaves on demand or at random (its draws seeded by [`seed_chances`]): takes a
//! submission and closes the connection unanswered, reads one and closes without taking it,
//! answers one late, answers 429, 500 or an error inside a `200`, loses a task (its polls
//! answer 404), and cuts a result download off halfway; it counts what it injected
//! ([`Injected`]) and records how it answered every submission, in order, per key
//! ([`FakeVideo::received`]). Its task lists (what a channel test asks for) are empty, or
//! answered 429 on demand.
//!
//! Self-contained (no test harness), so that `cargo xtask fake-upstream` serves the same fake
//! for trying the relay by hand.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

// `cargo xtask fake-upstream` includes this file by its path, where a plain `mod` would look
// for the module beside the file, not below it: the path keeps both builds on one file.
#[path = "fake_video/generated_mp4.rs"]
mod generated_mp4;

use generated_mp4::GeneratedMp4;

/// The key the relay must send; a client of the relay must never see it.
pub const FAKE_KEY: &str = "fake-upstream-key-93";

/// How the fake behaves. Rates are 0.0..=1.0.
#[derive(Debug, Default)]
pub struct Switches {
    /// Added before every answer, in ms.
    pub latency_ms: AtomicU64,
    /// How long an accepted task runs, in ms.
    pub run_ms: AtomicU64,
    /// `ark` tasks are `queued` (cancellable) for this long first, in ms, within `run_ms`.
    pub queue_ms: AtomicU64,
    /// Share of submissions answered 500 (not accepted), in thousandths.
    pub submit_fail_permille: AtomicU32,
    /// Share of accepted tasks that end `failed`, in thousandths.
    pub task_fail_permille: AtomicU32,
    /// The next this many submissions are answered 429.
    pub burst_429: AtomicU32,
    /// The next this many task lists (a channel test's call) are answered 429.
    pub lists_429: AtomicU32,
    /// Every request is answered 503.
    pub down: AtomicBool,
    /// Polls never answer.
    pub hang_polls: AtomicBool,
    /// Polls report a status no one knows.
    pub unknown_status: AtomicBool,
    /// Result URLs answer 403 (expired).
    pub expire_results: AtomicBool,
    /// Result downloads announce more bytes than they send.
    pub truncate: AtomicBool,
    /// The next this many result downloads are answered 503.
    pub downloads_503: AtomicU32,
    /// Image results (thumbnails, last frames) are JPEGs instead of PNGs.
    pub jpeg_images: AtomicBool,
    /// Video results are an MP4 of this many MiB, generated while it is sent (never held
    /// whole in memory); 0 serves the small [`fake_mp4`].
    pub result_mb: AtomicU64,
    /// The next this many submissions are taken (a task is made) and their connection
    /// closed without an answer.
    pub close_after_submit: AtomicU32,
    /// Chaos, each in thousandths of the requests it applies to: a submission taken and its
    /// connection closed unanswered; taken and answered only after `late_ms`; answered 429;
    /// answered `200` with an error and no task; a task made but lost (its polls and
    /// downloads answer 404); a result download cut off halfway.
    pub close_permille: AtomicU32,
    pub late_permille: AtomicU32,
    pub late_ms: AtomicU64,
    pub rate_limit_permille: AtomicU32,
    pub error_200_permille: AtomicU32,
    pub lose_permille: AtomicU32,
    pub reset_download_permille: AtomicU32,
    /// A submission read whole and its connection closed unanswered, no task made.
    pub drop_permille: AtomicU32,
    /// What the switches above made happen, counted.
    pub injected: Injected,
    /// Polls received so far.
    pub polls: AtomicU64,
    /// Requests being answered now, and the most there ever were at once.
    pub active: AtomicU32,
    pub max_active: AtomicU32,
}

/// What the fake's misbehaviour came to: answers it gave instead of the real one.
#[derive(Debug, Default)]
pub struct Injected {
    pub rate_limited: AtomicU32,
    pub server_errors: AtomicU32,
    pub errors_in_200: AtomicU32,
    /// Result downloads cut off halfway.
    pub resets: AtomicU32,
}

/// Counts a request as active while it lives.
struct Active<'a>(&'a Switches);

impl<'a> Active<'a> {
    fn new(sw: &'a Switches) -> Active<'a> {
        let now = sw.active.fetch_add(1, Ordering::SeqCst) + 1;
        sw.max_active.fetch_max(now, Ordering::SeqCst);
        Active(sw)
    }
}

impl Drop for Active<'_> {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::SeqCst);
    }
}

#[derive(Debug, Clone)]
struct FakeTask {
    prompt: String,
    started: Instant,
    fails: bool,
    cancelled: bool,
    last_poll: Option<Instant>,
    /// The submission's `Idempotency-Key`.
    key: Option<String>,
    /// Lost: its polls and downloads answer 404, as if the upstream forgot it.
    lost: bool,
    /// Its whole video was served at least once.
    delivered: bool,
}

/// What became of the submissions that carried one `Idempotency-Key` (the relay's task id).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Taken {
    /// Submissions taken: a task made, or the first one's given again (a replay).
    pub times: u32,
    /// How the first was answered: `answered`, `closed` (the connection closed unanswered)
    /// or `late` (answered after `late_ms`).
    pub answer: &'static str,
    /// Its task's status now, in the `openai-videos` protocol's words, `lost`, or `gone`
    /// (deleted).
    pub status: &'static str,
    /// Its whole video was served at least once.
    pub delivered: bool,
}

impl FakeTask {
    /// The task's status now, in the protocol's words.
    fn status(&self, sw: &Switches, ark: bool) -> &'static str {
        let elapsed = self.started.elapsed().as_millis() as u64;
        if sw.unknown_status.load(Ordering::SeqCst) {
            "mystery"
        } else if self.cancelled {
            "cancelled"
        } else if ark && elapsed < sw.queue_ms.load(Ordering::Relaxed) {
            "queued"
        } else if elapsed < sw.run_ms.load(Ordering::Relaxed) {
            if ark { "running" } else { "in_progress" }
        } else if self.fails {
            "failed"
        } else if ark {
            "succeeded"
        } else {
            "completed"
        }
    }
}

#[derive(Default)]
struct State {
    tasks: HashMap<String, FakeTask>,
    /// Accepted submissions per prompt.
    accepted: HashMap<String, u32>,
    /// Submissions taken per `Idempotency-Key`, and how the first was answered.
    taken: HashMap<String, (u32, &'static str)>,
    /// Every submission received per `Idempotency-Key`, taken or not: how each was answered,
    /// in order.
    received: HashMap<String, Vec<&'static str>>,
    /// The upstream id each `Idempotency-Key` created, and how many submissions repeated a
    /// key (answered with the first task, not a new one).
    by_idempotency_key: HashMap<String, String>,
    replays: u32,
    next: u64,
    /// Bodies of accepted submissions, newest last.
    bodies: Vec<Bytes>,
    /// Result downloads that carried an authorization header, by path.
    authorized_downloads: Vec<(String, bool)>,
    /// When each request arrived, whatever it was, oldest first.
    arrivals: Vec<Instant>,
    /// Where result URLs point, when not at the fake's own address.
    file_base: Option<String>,
    /// `ark` `DELETE`s: (upstream id, status answered), oldest first.
    deletes: Vec<(String, u16)>,
    /// `ark` callbacks posted: (upstream id, status posted, the receiver's HTTP status or 0
    /// when it could not be reached), oldest first.
    callbacks: Vec<(String, String, u16)>,
}

pub struct FakeVideo {
    pub base: String,
    pub switches: Arc<Switches>,
    state: Arc<Mutex<State>>,
    _stop: oneshot::Sender<()>,
}

/// A 1x1 PNG.
const PNG_1X1: &[u8] = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x02\x00\x00\x00\x90wS\xde\x00\x00\x00\x0cIDATx\x9cc\xf8\xcf\xc0\x00\x00\x03\x01\x01\x00\xc9\xfe\x92\xef\x00\x00\x00\x00IEND\xaeB`\x82";

/// The start of a JPEG (SOI and a JFIF APP0 segment) and its end: enough to be sniffed.
pub const JPEG_HEAD: &[u8] =
    b"\xFF\xD8\xFF\xE0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00\xFF\xD9";

/// A video long enough to be streamed in pieces, starting like an MP4 (an `ftyp` box).
pub fn fake_mp4() -> Vec<u8> {
    let mut v = b"\x00\x00\x00\x18ftypisom\x00\x00\x02\x00isommp41\x00\x00\x00\x08free".to_vec();
    v.extend((0..200_000u32).map(|i| (i % 251) as u8));
    v
}

impl FakeVideo {
    pub async fn start() -> FakeVideo {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        FakeVideo::serve(listener, Arc::new(Switches::default()))
    }

    /// Serves on `listener` with `switches` (a zero `run_ms` becomes 100 ms).
    pub fn serve(listener: TcpListener, switches: Arc<Switches>) -> FakeVideo {
        let _ = switches
            .run_ms
            .compare_exchange(0, 100, Ordering::SeqCst, Ordering::SeqCst);
        let state: Arc<Mutex<State>> = Arc::default();
        let addr = listener.local_addr().expect("addr");
        let base = format!("http://{addr}");
        let (stop, mut stopped) = oneshot::channel::<()>();
        let (sw, st, b) = (switches.clone(), state.clone(), base.clone());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = &mut stopped => break,
                    accepted = listener.accept() => {
                        let Ok((stream, _)) = accepted else { continue };
                        serve_conn(stream, &sw, &st, &b);
                    }
                }
            }
        });
        FakeVideo {
            base,
            switches,
            state,
            _stop: stop,
        }
    }

    /// Serves result files on a second address too (a file host of its own, as vendors have)
    /// and points ark result URLs there; answers that address.
    pub async fn serve_files_elsewhere(&self) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        self.state.lock().expect("fake state").file_base = Some(base.clone());
        let (sw, st, b) = (self.switches.clone(), self.state.clone(), base.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                serve_conn(stream, &sw, &st, &b);
            }
        });
        base
    }

    /// `base_url` of an `openai-videos` channel.
    pub fn openai_base(&self) -> String {
        self.base.clone()
    }

    /// `base_url` of an `ark` channel.
    pub fn ark_base(&self) -> String {
        format!("{}/api/v3", self.base)
    }

    /// Accepted submissions per prompt.
    pub fn accepted(&self) -> HashMap<String, u32> {
        self.state.lock().expect("fake state").accepted.clone()
    }

    /// The `Idempotency-Key` of each submission that created a task.
    #[allow(dead_code)]
    pub fn idempotency_keys(&self) -> Vec<String> {
        let state = self.state.lock().expect("fake state");
        state.by_idempotency_key.keys().cloned().collect()
    }

    /// What became of every submission the fake took, by `Idempotency-Key`.
    #[allow(dead_code)]
    pub fn taken(&self) -> HashMap<String, Taken> {
        let st = self.state.lock().expect("fake state");
        let mut out: HashMap<String, Taken> = st
            .taken
            .iter()
            .map(|(key, (times, answer))| {
                // A task deleted at the relay's request (`ark`) is gone from the fake.
                let taken = Taken {
                    times: *times,
                    answer,
                    status: "gone",
                    delivered: false,
                };
                (key.clone(), taken)
            })
            .collect();
        for task in st.tasks.values() {
            if let Some(taken) = task.key.as_ref().and_then(|k| out.get_mut(k)) {
                taken.status = if task.lost {
                    "lost"
                } else {
                    task.status(&self.switches, false)
                };
                taken.delivered = task.delivered;
            }
        }
        out
    }

    /// How every submission was answered, in order, by `Idempotency-Key`: `429`, `500`,
    /// `error_200` (an error inside a `200`), `no_prompt`, `dropped` (read, no task made, the
    /// connection closed), or, a task made (or given again: `replay`), `answered`, `closed`
    /// (the connection closed unanswered) or `late`.
    #[allow(dead_code)]
    pub fn received(&self) -> HashMap<String, Vec<&'static str>> {
        self.state.lock().expect("fake state").received.clone()
    }

    /// Submissions that repeated an `Idempotency-Key` and were answered with the task the
    /// first one created.
    #[allow(dead_code)]
    pub fn replays(&self) -> u32 {
        self.state.lock().expect("fake state").replays
    }

    pub fn bodies(&self) -> Vec<Bytes> {
        self.state.lock().expect("fake state").bodies.clone()
    }

    /// The `content` arrays of accepted `ark` submissions, oldest first.
    pub fn ark_contents(&self) -> Vec<Value> {
        self.bodies()
            .iter()
            .filter_map(|b| serde_json::from_slice::<Value>(b).ok())
            .filter_map(|v| v.get("content").cloned())
            .collect()
    }

    /// The `content` array of the accepted `ark` submission with this prompt.
    pub fn ark_content_of(&self, prompt: &str) -> Option<Vec<Value>> {
        self.ark_contents()
            .into_iter()
            .find(|c| c[0]["text"] == prompt)
            .and_then(|c| c.as_array().cloned())
    }

    /// When each request arrived (submissions, polls, downloads, cancels), oldest first.
    pub fn arrivals(&self) -> Vec<Instant> {
        self.state.lock().expect("fake state").arrivals.clone()
    }

    /// (path, whether it carried an authorization header) of each result download.
    pub fn downloads(&self) -> Vec<(String, bool)> {
        self.state
            .lock()
            .expect("fake state")
            .authorized_downloads
            .clone()
    }

    /// (upstream id, status answered) of each `ark` `DELETE`, oldest first.
    pub fn deletes(&self) -> Vec<(String, u16)> {
        self.state.lock().expect("fake state").deletes.clone()
    }

    /// (upstream id, status posted, receiver's answer) of each `ark` callback, oldest first.
    pub fn callbacks(&self) -> Vec<(String, String, u16)> {
        self.state.lock().expect("fake state").callbacks.clone()
    }

    pub fn cancelled(&self) -> usize {
        let state = self.state.lock().expect("fake state");
        state.tasks.values().filter(|t| t.cancelled).count()
    }

    /// (tasks polled at or after `since`, tasks not cancelled); `cargo xtask bench` times the
    /// relay's poller with it.
    #[allow(dead_code)]
    pub fn polled_since(&self, since: Instant) -> (usize, usize) {
        let state = self.state.lock().expect("fake state");
        let live = state.tasks.values().filter(|t| !t.cancelled);
        live.fold((0, 0), |(polled, all), t| {
            (
                polled + usize::from(t.last_poll.is_some_and(|at| at >= since)),
                all + 1,
            )
        })
    }

    pub fn set(&self, switch: &AtomicBool, on: bool) {
        switch.store(on, Ordering::SeqCst);
    }
}

type Body = BoxBody<Bytes, Infallible>;

fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed()
}

fn answer(status: StatusCode, body: Value) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(full(body.to_string()))
        .expect("response")
}

/// The state of [`chance`]'s generator, shared by every fake of the process.
static SEED: AtomicU64 = AtomicU64::new(0x9E37_79B9_7F4A_7C15);

/// Starts [`chance`]'s draws from `seed`: the same seed gives the same sequence of draws (which
/// request meets which draw still depends on timing).
#[allow(dead_code)]
pub fn seed_chances(seed: u64) {
    // Xorshift never leaves 0.
    SEED.store(
        seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
        Ordering::SeqCst,
    );
}

/// True `permille` times in a thousand (a xorshift; no need for a good generator).
fn chance(permille: u32) -> bool {
    if permille == 0 {
        return false;
    }
    let mut x = SEED.load(Ordering::Relaxed);
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    SEED.store(x, Ordering::Relaxed);
    (x % 1000) < u64::from(permille)
}

/// The prompt of a submission, whichever protocol.
fn prompt_of(body: &[u8], ark: bool) -> Option<String> {
    if ark {
        let v: Value = serde_json::from_slice(body).ok()?;
        return v["content"][0]["text"].as_str().map(str::to_owned);
    }
    let text = String::from_utf8_lossy(body);
    let start = text.find("name=\"prompt\"\r\n\r\n")? + "name=\"prompt\"\r\n\r\n".len();
    let end = text[start..].find("\r\n--")?;
    Some(text[start..start + end].to_owned())
}

/// Why the fake closed a connection without an answer.
#[derive(Debug)]
struct HungUp;

impl std::fmt::Display for HungUp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("hung up without an answer")
    }
}

impl std::error::Error for HungUp {}

/// Takes one from `counter` if it is above 0, else draws a chance of `permille`.
fn next_or_chance(counter: &AtomicU32, permille: &AtomicU32) -> bool {
    counter
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
        || chance(permille.load(Ordering::Relaxed))
}

/// Serves one accepted connection with [`handle`], on a task of its own.
fn serve_conn(
    stream: tokio::net::TcpStream,
    sw: &Arc<Switches>,
    st: &Arc<Mutex<State>>,
    base: &str,
) {
    let (sw, st, b) = (sw.clone(), st.clone(), base.to_owned());
    tokio::spawn(async move {
        let svc = service_fn(move |req: Request<Incoming>| {
            let (sw, st, b) = (sw.clone(), st.clone(), b.clone());
            // No answer: hyper closes the connection without writing one.
            async move { handle(req, &sw, &st, &b).await.ok_or(HungUp) }
        });
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(stream), svc)
            .await;
    });
}

/// The answer to `req`; `None` to close the connection without one.
async fn handle(
    req: Request<Incoming>,
    sw: &Arc<Switches>,
    state: &Arc<Mutex<State>>,
    base: &str,
) -> Option<Response<Body>> {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let submission = method == Method::POST
        && (path == "/v1/videos" || path == "/api/v3/contents/generations/tasks");
    if submission {
        return submit(req, sw, state, base).await;
    }
    Some(answer_other(req, sw, state, base).await)
}

async fn answer_other(
    req: Request<Incoming>,
    sw: &Arc<Switches>,
    state: &Arc<Mutex<State>>,
    base: &str,
) -> Response<Body> {
    let _active = Active::new(sw);
    state
        .lock()
        .expect("fake state")
        .arrivals
        .push(Instant::now());
    let latency = sw.latency_ms.load(Ordering::Relaxed);
    if latency > 0 {
        tokio::time::sleep(Duration::from_millis(latency)).await;
    }
    if sw.down.load(Ordering::SeqCst) {
        return answer(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"error": {"message": "down"}}),
        );
    }
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let query = req.uri().query().unwrap_or_default().to_owned();
    let authorized = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        == Some(&format!("Bearer {FAKE_KEY}"));
    let has_auth = req.headers().contains_key("authorization");
    let segments: Vec<String> = path
        .trim_matches('/')
        .split('/')
        .map(str::to_owned)
        .collect();
    let segs: Vec<&str> = segments.iter().map(String::as_str).collect();
    let is_api = !matches!(segs.as_slice(), ["files", ..]);
    if is_api && !authorized {
        return answer(
            StatusCode::UNAUTHORIZED,
            json!({"error": {"message": "bad key"}}),
        );
    }
    match (&method, segs.as_slice()) {
        // A list of the key's tasks, the channel test's call: none are listed here.
        (&Method::GET, ["v1", "videos"])
        | (&Method::GET, ["api", "v3", "contents", "generations", "tasks"]) => {
            let limited = sw
                .lists_429
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
            if limited {
                let mut res = answer(
                    StatusCode::TOO_MANY_REQUESTS,
                    json!({"error": {"message": "slow down"}}),
                );
                res.headers_mut()
                    .insert("retry-after", http::HeaderValue::from_static("1"));
                return res;
            }
            if segs[0] == "api" {
                answer(StatusCode::OK, json!({"items": [], "total": 0}))
            } else {
                answer(
                    StatusCode::OK,
                    json!({"object": "list", "data": [], "has_more": false}),
                )
            }
        }
        (&Method::GET, ["v1", "videos", id])
        | (&Method::GET, ["api", "v3", "contents", "generations", "tasks", id]) => {
            let ark = segs[0] == "api";
            if sw.hang_polls.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
            sw.polls.fetch_add(1, Ordering::Relaxed);
            let task = state
                .lock()
                .expect("fake state")
                .tasks
                .get_mut(*id)
                .filter(|t| !t.lost)
                .map(|t| {
                    t.last_poll = Some(Instant::now());
                    t.clone()
                });
            let Some(task) = task else {
                return answer(
                    StatusCode::NOT_FOUND,
                    json!({"error": {"message": "no such task"}}),
                );
            };
            let run = sw.run_ms.load(Ordering::Relaxed);
            let elapsed = task.started.elapsed().as_millis() as u64;
            let status = task.status(sw, ark);
            let progress = (elapsed * 100).checked_div(run).unwrap_or(100).min(100);
            let error = (status == "failed").then(|| json!({"code": "InternalError", "message": format!("secret-host-detail for {}", task.prompt)}));
            if ark {
                answer(StatusCode::OK, ark_task(state, base, id, &task, status))
            } else {
                answer(
                    StatusCode::OK,
                    json!({
                        "id": id, "object": "video", "status": status, "progress": progress, "error": error,
                    }),
                )
            }
        }
        (&Method::GET, ["v1", "videos", id, "content"]) => {
            let thumbnail = query.contains("variant=thumbnail");
            content(sw, state, &path, has_auth, id, thumbnail)
        }
        (&Method::GET, ["files", file]) => {
            let (id, ext) = file.rsplit_once('.').unwrap_or((file, ""));
            content(sw, state, &path, has_auth, id, ext == "png")
        }
        (&Method::DELETE, ["api", "v3", "contents", "generations", "tasks", id]) => {
            let mut st = state.lock().expect("fake state");
            let status = st.tasks.get(*id).map(|t| t.status(sw, true));
            let (code, body) = match status {
                None => (
                    StatusCode::NOT_FOUND,
                    json!({"error": {"code": "ResourceNotFound", "message": "no such task"}}),
                ),
                // Ark: a running task can be neither cancelled nor deleted.
                Some("running" | "mystery") => (
                    StatusCode::BAD_REQUEST,
                    json!({"error": {"code": "InvalidAction.TaskRunning",
                        "message": "a running task cannot be cancelled or deleted"}}),
                ),
                // A queued task is cancelled, a finished one deleted: gone either way.
                Some(_) => {
                    st.tasks.remove(*id);
                    (StatusCode::OK, json!({}))
                }
            };
            st.deletes.push(((*id).to_owned(), code.as_u16()));
            answer(code, body)
        }
        (&Method::DELETE, ["v1", "videos", id]) => {
            let mut st = state.lock().expect("fake state");
            match st.tasks.get_mut(*id) {
                Some(t) => {
                    t.cancelled = true;
                    answer(StatusCode::OK, json!({"id": id, "deleted": true}))
                }
                None => answer(
                    StatusCode::NOT_FOUND,
                    json!({"error": {"message": "no such task"}}),
                ),
            }
        }
        _ => answer(
            StatusCode::NOT_FOUND,
            json!({"error": {"message": "no route"}}),
        ),
    }
}

/// A submission: read whole, then refused, taken (a task made), or taken and left
/// unanswered, as the switches say.
async fn submit(
    req: Request<Incoming>,
    sw: &Arc<Switches>,
    state: &Arc<Mutex<State>>,
    base: &str,
) -> Option<Response<Body>> {
    let _active = Active::new(sw);
    state
        .lock()
        .expect("fake state")
        .arrivals
        .push(Instant::now());
    let latency = sw.latency_ms.load(Ordering::Relaxed);
    if latency > 0 {
        tokio::time::sleep(Duration::from_millis(latency)).await;
    }
    if sw.down.load(Ordering::SeqCst) {
        return Some(answer(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"error": {"message": "down"}}),
        ));
    }
    let authorized = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        == Some(&format!("Bearer {FAKE_KEY}"));
    if !authorized {
        return Some(answer(
            StatusCode::UNAUTHORIZED,
            json!({"error": {"message": "bad key"}}),
        ));
    }
    let ark = req.uri().path().starts_with("/api/");
    let idempotency_key = req
        .headers()
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let received = |how: &'static str| {
        if let Some(key) = &idempotency_key {
            let mut st = state.lock().expect("fake state");
            st.received.entry(key.clone()).or_default().push(how);
        }
    };
    if next_or_chance(&sw.burst_429, &sw.rate_limit_permille) {
        sw.injected.rate_limited.fetch_add(1, Ordering::Relaxed);
        received("429");
        return Some(
            Response::builder()
                .status(StatusCode::TOO_MANY_REQUESTS)
                .header("retry-after-ms", "50")
                .body(full(Bytes::from_static(
                    b"{\"error\":{\"message\":\"slow down\"}}",
                )))
                .expect("response"),
        );
    }
    if chance(sw.submit_fail_permille.load(Ordering::Relaxed)) {
        sw.injected.server_errors.fetch_add(1, Ordering::Relaxed);
        received("500");
        return Some(answer(
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({"error": {"message": "injected failure"}}),
        ));
    }
    if chance(sw.error_200_permille.load(Ordering::Relaxed)) {
        // Refused inside a success, as some upstreams answer: no task made.
        sw.injected.errors_in_200.fetch_add(1, Ordering::Relaxed);
        received("error_200");
        return Some(answer(
            StatusCode::OK,
            json!({"error": {"code": "InvalidParameter", "message": "refused inside a 200"}}),
        ));
    }
    let Some(prompt) = prompt_of(&body, ark) else {
        received("no_prompt");
        return Some(answer(
            StatusCode::BAD_REQUEST,
            json!({"error": {"message": "no prompt"}}),
        ));
    };
    if chance(sw.drop_permille.load(Ordering::Relaxed)) {
        // Read whole, nothing made, no answer: the relay cannot tell it from one taken.
        received("dropped");
        return None;
    }
    // Taken from here on: how the relay hears of it is decided now.
    let how = if next_or_chance(&sw.close_after_submit, &sw.close_permille) {
        "closed"
    } else if chance(sw.late_permille.load(Ordering::Relaxed)) {
        "late"
    } else {
        "answered"
    };
    let (id, status) = {
        let mut st = state.lock().expect("fake state");
        if let Some(key) = &idempotency_key {
            let entry = st.taken.entry(key.clone()).or_insert((0, how));
            entry.0 += 1;
        }
        // A key seen before: the task it created, as vendors that honour the header do.
        let replayed = idempotency_key
            .as_ref()
            .and_then(|k| st.by_idempotency_key.get(k))
            .cloned();
        if let Some(key) = &idempotency_key {
            let answered = if replayed.is_some() { "replay" } else { how };
            st.received.entry(key.clone()).or_default().push(answered);
        }
        let (id, fresh) = match replayed {
            Some(id) => {
                st.replays += 1;
                (id, false)
            }
            None => {
                st.next += 1;
                let id = if ark {
                    format!("cgt-{}", st.next)
                } else {
                    format!("video_up_{}", st.next)
                };
                *st.accepted.entry(prompt.clone()).or_default() += 1;
                if let Some(key) = &idempotency_key {
                    st.by_idempotency_key.insert(key.clone(), id.clone());
                }
                let callback_url = ark
                    .then(|| serde_json::from_slice::<Value>(&body).ok())
                    .flatten()
                    .and_then(|v| v["callback_url"].as_str().map(str::to_owned));
                st.bodies.push(body);
                st.tasks.insert(
                    id.clone(),
                    FakeTask {
                        prompt,
                        started: Instant::now(),
                        fails: chance(sw.task_fail_permille.load(Ordering::Relaxed)),
                        cancelled: false,
                        last_poll: None,
                        key: idempotency_key.clone(),
                        lost: chance(sw.lose_permille.load(Ordering::Relaxed)),
                        delivered: false,
                    },
                );
                if let Some(url) = callback_url {
                    let (sw, state, base) = (sw.clone(), state.clone(), base.to_owned());
                    let id = id.clone();
                    tokio::spawn(async move { call_back(&sw, &state, &base, &id, &url).await });
                }
                (id, true)
            }
        };
        let status = match (ark, fresh) {
            (false, false) => st.tasks.get(&id).map_or("queued", |t| t.status(sw, false)),
            _ => "queued",
        };
        (id, status)
    };
    match how {
        "closed" => return None,
        "late" => {
            let late = sw.late_ms.load(Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(late)).await;
        }
        _ => {}
    }
    Some(if ark {
        answer(StatusCode::OK, json!({"id": id}))
    } else {
        answer(
            StatusCode::OK,
            json!({"id": id, "object": "video", "status": status, "progress": 0}),
        )
    })
}

fn content(
    sw: &Switches,
    state: &Mutex<State>,
    path: &str,
    has_auth: bool,
    id: &str,
    image: bool,
) -> Response<Body> {
    let mut st = state.lock().expect("fake state");
    st.authorized_downloads.push((path.to_owned(), has_auth));
    if st.tasks.get(id).is_none_or(|t| t.lost) {
        return answer(
            StatusCode::NOT_FOUND,
            json!({"error": {"message": "no such file"}}),
        );
    }
    drop(st);
    if sw
        .downloads_503
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
    {
        return answer(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"error": {"message": "try later"}}),
        );
    }
    if sw.expire_results.load(Ordering::SeqCst) {
        return answer(
            StatusCode::FORBIDDEN,
            json!({"error": {"message": "expired"}}),
        );
    }
    // Cut off halfway: the length announced, half the bytes sent, the connection closed.
    let reset = !image && chance(sw.reset_download_permille.load(Ordering::Relaxed));
    if reset {
        sw.injected.resets.fetch_add(1, Ordering::Relaxed);
    }
    let truncate = sw.truncate.load(Ordering::SeqCst) || reset;
    if !image
        && !truncate
        && let Some(task) = state.lock().expect("fake state").tasks.get_mut(id)
    {
        task.delivered = true;
    }
    let result_mb = sw.result_mb.load(Ordering::SeqCst);
    if result_mb > 0 && !image {
        let total = result_mb << 20;
        let sent = if truncate { total / 2 } else { total };
        return Response::builder()
            .header("content-type", "video/mp4")
            .header("content-length", total.to_string())
            .body(GeneratedMp4::new(total, sent).boxed())
            .expect("response");
    }
    let (ct, bytes) = if image && sw.jpeg_images.load(Ordering::SeqCst) {
        ("image/jpeg", JPEG_HEAD.to_vec())
    } else if image {
        ("image/png", PNG_1X1.to_vec())
    } else {
        ("video/mp4", fake_mp4())
    };
    let res = Response::builder().header("content-type", ct);
    if truncate && !image {
        return res
            .header("content-length", bytes.len().to_string())
            .body(CutShort(Some(Bytes::from(bytes[..bytes.len() / 2].to_vec()))).boxed())
            .expect("response");
    }
    res.body(full(bytes)).expect("response")
}

/// A body that ends before the `content-length` it is sent with: hyper, not told its length,
/// sends what there is and closes the connection.
struct CutShort(Option<Bytes>);

impl hyper::body::Body for CutShort {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Infallible>>> {
        std::task::Poll::Ready(
            self.get_mut()
                .0
                .take()
                .map(|b| Ok(hyper::body::Frame::data(b))),
        )
    }
}

/// An `ark` task as its `GET` (and its callback) shows it.
fn ark_task(state: &Mutex<State>, base: &str, id: &str, task: &FakeTask, status: &str) -> Value {
    let base = state
        .lock()
        .expect("fake state")
        .file_base
        .clone()
        .unwrap_or_else(|| base.to_owned());
    let error = (status == "failed").then(|| {
        json!({"code": "InternalError", "message": format!("secret-host-detail for {}", task.prompt)})
    });
    json!({
        "id": id, "model": "seedance", "status": status, "error": error,
        "content": (status == "succeeded").then(|| json!({
            "video_url": format!("{base}/files/{id}.mp4?sig=x"),
            "last_frame_url": format!("{base}/files/{id}.png"),
        })),
    })
}

/// Posts an `ark` task's state to its `callback_url` once it has finished (as Ark does on each
/// status change; the fake sends only the last), and records the receiver's answer.
async fn call_back(sw: &Switches, state: &Mutex<State>, base: &str, id: &str, url: &str) {
    let run = sw.run_ms.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(run)).await;
    let task = state.lock().expect("fake state").tasks.get(id).cloned();
    let Some(task) = task else { return };
    let status = task.status(sw, true);
    let body = ark_task(state, base, id, &task, status).to_string();
    let code = post_json(url, &body).await.unwrap_or(0);
    state
        .lock()
        .expect("fake state")
        .callbacks
        .push((id.to_owned(), status.to_owned(), code));
}

/// A bare HTTP/1.1 `POST` of a JSON body to a plain `http://` URL; the answer's status.
async fn post_json(url: &str, body: &str) -> Option<u16> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("http://")?;
    let (host, path) = match rest.find('/') {
        Some(at) => (&rest[..at], &rest[at..]),
        None => (rest, "/"),
    };
    let mut stream = tokio::net::TcpStream::connect(host).await.ok()?;
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.ok()?;
    stream.write_all(body.as_bytes()).await.ok()?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.ok()?;
    let text = String::from_utf8_lossy(&answer);
    text.split_whitespace().nth(1)?.parse().ok()
}
