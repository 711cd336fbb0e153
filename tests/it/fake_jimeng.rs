//! A fake of Volcengine's visual API for Jimeng's video models, strict as the vendor. Every call
//! is `POST /?Action=<action>&Version=2022-08-31` (another path, action or version: the
//! gateway's `InvalidActionOrVersion`), `Content-Type: application/json`, and signed: the fake
//! checks the signature with its own implementation of Volcengine's HMAC-SHA256 scheme, written
//! here from the documentation and sharing nothing with the relay's: the `Authorization`
//! header's form, the access key ([`ACCESS_KEY`], else `InvalidAccessKey`, 401), the scope's
//! date, region `cn-north-1` and service `cv`, an `X-Date` within 15 minutes, the signed
//! headers (host, x-date, x-content-sha256 and content-type among them), `X-Content-Sha256`
//! the body's hash, and the signature under [`SECRET_KEY`] (else `SignatureDoesNotMatch`, 401,
//! with the gateway's `ResponseMetadata` body).
//!
//! `CVSync2AsyncSubmitTask` checks the body field by field and type by type: `req_key` one of
//! the documented video keys, `prompt` a string (non-empty without images), `seed` an integer,
//! `frames` 121 or 241, `aspect_ratio` one of six, `binary_data_base64` (base64 of a real
//! image) or `image_urls` (http URLs), never both, as many images as the key takes; no other
//! field. A wrong body is code 50400 (HTTP 400). A prompt with `[blocked]` is refused at once
//! (50412 Text Risk Not Pass). It answers `{code: 10000, data: {task_id}, message, request_id}`.
//!
//! `CVSync2AsyncGetResult` takes `{req_key, task_id}`: `in_queue`, then `generating`, after
//! `run_ms` `done` with a `video_url` on a second server (the file host, counting requests that
//! carry a key). A prompt with `[fail]` ends with code 50500 (HTTP 200), `[refuse]` with 50511
//! Post Img Risk Not Pass (HTTP 400), `[expire]` with status `expired`; a task it does not know
//! is `not_found`. `next_errors` answers the next submissions with (HTTP status, code, message);
//! `hang_up_submissions` takes the next ones and closes the connection unanswered,
//! `no_id_submissions` takes them and answers 10000 without a task id. `expire_results` makes
//! the file host answer 403 as an expired link.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use hmac::Mac as _;
use http::{Method, Request, Response};
use http_body_util::Full;
use serde_json::{Value, json};
use sha2::Digest as _;

use crate::fake_vendor::{
    self, FakeServer, header, is_image, is_url, playable_mp4, take_one, unbase64,
};

pub const ACCESS_KEY: &str = "AKLTjimengfakeaccesskey0e4b21";
pub const SECRET_KEY: &str = "WmpJNU16TmlaakZsTnpJek5EQTRNV0ZsWVRBek1EZGhNVFJt==secret";

const VERSION: &str = "2022-08-31";

/// The documented video `req_key`s and how many images each takes (at least, at most).
const REQ_KEYS: [(&str, usize, usize); 7] = [
    ("jimeng_t2v_v30", 0, 0),
    ("jimeng_i2v_first_v30", 1, 1),
    ("jimeng_i2v_first_tail_v30", 2, 2),
    ("jimeng_t2v_v30_1080p", 0, 0),
    ("jimeng_i2v_first_v30_1080", 1, 1),
    ("jimeng_i2v_first_tail_v30_1080", 2, 2),
    ("jimeng_ti2v_v30_pro", 0, 1),
];

const RATIOS: [&str; 6] = ["16:9", "4:3", "1:1", "3:4", "9:16", "21:9"];

#[derive(Default)]
pub struct State {
    pub run_ms: AtomicU64,
    pub expire_results: AtomicBool,
    /// The next submissions are answered with these (HTTP status, code, message), in order.
    pub next_errors: Mutex<VecDeque<(u16, i64, &'static str)>>,
    pub hang_up_submissions: AtomicU32,
    pub no_id_submissions: AtomicU32,
    /// Accepted submissions' bodies, oldest first.
    pub submissions: Mutex<Vec<Value>>,
    /// The `Action` of every call that passed the signature check, oldest first.
    pub actions: Mutex<Vec<String>>,
    /// Calls refused for their signature or key.
    pub refused_signatures: AtomicU32,
    pub file_requests: AtomicU32,
    pub file_requests_with_key: AtomicU32,
    tasks: Mutex<HashMap<String, Task>>,
    next_id: AtomicU64,
}

#[derive(Debug, Clone)]
struct Task {
    started: Instant,
    req_key: String,
    prompt: String,
}

pub struct FakeJimeng {
    pub base: String,
    pub files_base: String,
    pub state: Arc<State>,
    _server: FakeServer,
    _files: FakeServer,
}

impl FakeJimeng {
    pub async fn start() -> FakeJimeng {
        let state = Arc::new(State::default());
        state.run_ms.store(150, Ordering::SeqCst);
        let (server, files) = fake_vendor::serve_with_file_host(
            state.clone(),
            |st, req| file(st, req),
            |st, files, req| answer(st, files, req),
        )
        .await;
        FakeJimeng {
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

    pub fn actions(&self) -> Vec<String> {
        self.state.actions.lock().unwrap().clone()
    }

    pub fn fail_next(&self, status: u16, code: i64, message: &'static str) {
        self.state
            .next_errors
            .lock()
            .unwrap()
            .push_back((status, code, message));
    }
}

// The shared flows' switches; a submission "without an id" is answered
// without a task id.
fake_vendor::takes_submissions!(FakeJimeng, |body| body["prompt"].clone());

/// The gateway's error body.
fn gateway(
    status: u16,
    action: &str,
    code: &str,
    code_n: i64,
    message: &str,
) -> Response<Full<Bytes>> {
    fake_vendor::json(
        status,
        &json!({"ResponseMetadata": {
            "RequestId": "20261206211500F1E2D3C4B5A6978812",
            "Action": action, "Version": VERSION, "Service": "cv", "Region": "cn-north-1",
            "Error": {"CodeN": code_n, "Code": code, "Message": message}}}),
    )
}

/// The service's error body.
fn business(status: u16, code: i64, message: &str) -> Response<Full<Bytes>> {
    fake_vendor::json(
        status,
        &json!({"code": code, "data": null, "message": message,
                "request_id": "2026120621150001AB23CD45EF678901", "status": code,
                "time_elapsed": "12.3ms"}),
    )
}

fn ok(data: Value) -> Response<Full<Bytes>> {
    fake_vendor::json(
        200,
        &json!({"code": 10000, "data": data, "message": "Success",
                "request_id": "2026120621150002AB23CD45EF678902", "status": 10000,
                "time_elapsed": "30.1ms"}),
    )
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn mac(key: &[u8], data: &str) -> Vec<u8> {
    let mut m = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).expect("hmac");
    m.update(data.as_bytes());
    m.finalize().into_bytes().to_vec()
}

/// RFC 3986 encoding of a query part, as the signing documentation asks.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Percent-decoding of a query part as the request carries it.
fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(b) = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs()
}

/// Seconds since the epoch of an `X-Date` (`YYYYMMDDTHHMMSSZ`).
fn parse_x_date(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, m, d) = (num(0..4)?, num(4..6)?, num(6..8)?);
    let (hh, mm, ss) = (num(9..11)?, num(11..13)?, num(13..15)?);
    // Days from the civil date (the inverse of the usual algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    u64::try_from(days * 86_400 + hh * 3600 + mm * 60 + ss).ok()
}

/// The gateway's refusal of a signature: its `Code`, `CodeN` and `Message` (HTTP 401).
type Refusal = (&'static str, i64, &'static str);

/// Checks the request's signature as Volcengine's gateway does; the gateway's refusal if wrong.
fn check_signature(req: &Request<Bytes>) -> Result<(), Refusal> {
    let missing = || {
        (
            "MissingAuthenticationToken",
            100008,
            "The request is missing an authentication token.",
        )
    };
    let auth = header(req, "authorization").ok_or_else(missing)?;
    let rest = auth
        .strip_prefix("HMAC-SHA256 Credential=")
        .ok_or_else(missing)?;
    let mut parts = rest.split(", ");
    let (credential, signed, signature) =
        match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (Some(c), Some(h), Some(s), None) => (
                c,
                h.strip_prefix("SignedHeaders=").ok_or_else(missing)?,
                s.strip_prefix("Signature=").ok_or_else(missing)?,
            ),
            _ => return Err(missing()),
        };
    let scope: Vec<&str> = credential.split('/').collect();
    let [ak, date, region, service, "request"] = scope.as_slice() else {
        return Err(missing());
    };
    if *ak != ACCESS_KEY {
        return Err((
            "InvalidAccessKey",
            100009,
            "The AccessKey ID provided does not exist in our records.",
        ));
    }
    let bad_date = || {
        (
            "InvalidTimestamp",
            100011,
            "The X-Date is not valid or too skewed.",
        )
    };
    let x_date = header(req, "x-date").ok_or_else(bad_date)?;
    let when = parse_x_date(x_date).ok_or_else(bad_date)?;
    if now_secs().abs_diff(when) > 15 * 60 || !x_date.starts_with(date) {
        return Err(bad_date());
    }
    let mismatch = || {
        (
            "SignatureDoesNotMatch",
            100010,
            "The request signature we calculated does not match the signature you provided. Check your Secret Access Key and signing method. Consult the service documentation for details.",
        )
    };
    if *region != "cn-north-1" || *service != "cv" {
        return Err(mismatch());
    }
    let body_hash = hex(&sha2::Sha256::digest(req.body()));
    if header(req, "x-content-sha256") != Some(body_hash.as_str()) {
        return Err(mismatch());
    }
    let names: Vec<&str> = signed.split(';').collect();
    for needed in ["content-type", "host", "x-content-sha256", "x-date"] {
        if !names.contains(&needed) {
            return Err(mismatch());
        }
    }
    let mut sorted = names.clone();
    sorted.sort_unstable();
    if sorted != names {
        return Err(mismatch());
    }
    let mut canonical_headers = String::new();
    for name in &names {
        let value = header(req, name).ok_or_else(mismatch)?;
        canonical_headers.push_str(&format!("{name}:{}\n", value.trim()));
    }
    let mut query: Vec<(String, String)> = req
        .uri()
        .query()
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (encode(&decode(k)), encode(&decode(v)))
        })
        .collect();
    query.sort();
    let query = query
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&");
    let canonical = format!(
        "{}\n{}\n{query}\n{canonical_headers}\n{signed}\n{body_hash}",
        req.method(),
        req.uri().path()
    );
    let string_to_sign = format!(
        "HMAC-SHA256\n{x_date}\n{date}/{region}/{service}/request\n{}",
        hex(&sha2::Sha256::digest(canonical.as_bytes()))
    );
    let mut key = mac(SECRET_KEY.as_bytes(), date);
    for part in [*region, *service, "request"] {
        key = mac(&key, part);
    }
    if hex(&mac(&key, &string_to_sign)) != signature {
        return Err(mismatch());
    }
    Ok(())
}

/// The answer to `req`; `None` to close the connection without one.
fn answer(state: &State, files: &str, req: Request<Bytes>) -> Option<Response<Full<Bytes>>> {
    let query: HashMap<String, String> = req
        .uri()
        .query()
        .unwrap_or_default()
        .split('&')
        .filter_map(|p| p.split_once('='))
        .map(|(k, v)| (decode(k), decode(v)))
        .collect();
    let action = query.get("Action").cloned().unwrap_or_default();
    let known = ["CVSync2AsyncSubmitTask", "CVSync2AsyncGetResult"];
    if req.method() != Method::POST
        || req.uri().path() != "/"
        || query.get("Version").map(String::as_str) != Some(VERSION)
        || !known.contains(&action.as_str())
        || query.len() != 2
    {
        return Some(gateway(
            404,
            &action,
            "InvalidActionOrVersion",
            100002,
            "Could not find operation for the given Action and Version.",
        ));
    }
    if let Err((code, code_n, message)) = check_signature(&req) {
        state.refused_signatures.fetch_add(1, Ordering::SeqCst);
        return Some(gateway(401, &action, code, code_n, message));
    }
    state.actions.lock().unwrap().push(action.clone());
    if header(&req, "content-type") != Some("application/json") {
        return Some(business(
            400,
            50400,
            "Invalid Content-Type, expected application/json",
        ));
    }
    let Ok(body) = serde_json::from_slice::<Value>(req.body()) else {
        return Some(business(400, 50400, "Request body is not JSON"));
    };
    if action == "CVSync2AsyncSubmitTask" {
        submit(state, body)
    } else {
        Some(result(state, files, &body))
    }
}

fn images_ok(list: &Value, field: &str, inline: bool) -> Result<usize, String> {
    let Some(items) = list.as_array() else {
        return Err(format!("{field} must be an array of strings"));
    };
    for item in items {
        let Some(s) = item.as_str() else {
            return Err(format!("{field} must be an array of strings"));
        };
        let good = if inline {
            unbase64(s).is_some_and(|b| is_image(&b))
        } else {
            is_url(s)
        };
        if !good {
            return Err(format!("{field} holds an item that is not an image"));
        }
    }
    Ok(items.len())
}

/// Checks a submission as Jimeng would: the message of code 50400 when it is wrong.
fn check_body(body: &Value) -> Result<(String, String), String> {
    let Some(obj) = body.as_object() else {
        return Err("the body must be a JSON object".into());
    };
    let allowed = [
        "req_key",
        "prompt",
        "seed",
        "frames",
        "aspect_ratio",
        "binary_data_base64",
        "image_urls",
    ];
    if let Some(k) = obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(format!("unknown field {k}"));
    }
    let Some(req_key) = body.get("req_key").and_then(Value::as_str) else {
        return Err("req_key must be a string".into());
    };
    let Some((_, least, most)) = REQ_KEYS.iter().find(|(k, _, _)| *k == req_key) else {
        return Err(format!("req_key {req_key} is not a video req_key"));
    };
    let prompt = match body.get("prompt") {
        Some(Value::String(p)) => p.clone(),
        None => String::new(),
        Some(_) => return Err("prompt must be a string".into()),
    };
    if let Some(seed) = body.get("seed")
        && !(seed.is_i64())
    {
        return Err("seed must be an integer".into());
    }
    if let Some(frames) = body.get("frames")
        && !matches!(frames.as_u64(), Some(121 | 241))
    {
        return Err("frames must be 121 or 241".into());
    }
    if let Some(r) = body.get("aspect_ratio")
        && !r.as_str().is_some_and(|r| RATIOS.contains(&r))
    {
        return Err(format!("aspect_ratio {r} is not one of {RATIOS:?}"));
    }
    let inline = body.get("binary_data_base64");
    let urls = body.get("image_urls");
    if inline.is_some() && urls.is_some() {
        return Err("binary_data_base64 and image_urls cannot be combined".into());
    }
    let count = match (inline, urls) {
        (Some(list), None) => images_ok(list, "binary_data_base64", true)?,
        (None, Some(list)) => images_ok(list, "image_urls", false)?,
        _ => 0,
    };
    if count < *least || count > *most {
        return Err(format!(
            "{req_key} takes {least} to {most} images, not {count}"
        ));
    }
    if count == 0 && prompt.is_empty() {
        return Err("prompt is required".into());
    }
    Ok((req_key.to_owned(), prompt))
}

fn submit(state: &State, body: Value) -> Option<Response<Full<Bytes>>> {
    if let Some((status, code, message)) = state.next_errors.lock().unwrap().pop_front() {
        return Some(business(status, code, message));
    }
    let (req_key, prompt) = match check_body(&body) {
        Ok(v) => v,
        Err(message) => return Some(business(400, 50400, &message)),
    };
    if prompt.contains("[blocked]") {
        return Some(business(400, 50412, "Text Risk Not Pass"));
    }
    let id = format!(
        "76021417187591{:05}",
        state.next_id.fetch_add(1, Ordering::SeqCst)
    );
    state.tasks.lock().unwrap().insert(
        id.clone(),
        Task {
            started: Instant::now(),
            req_key,
            prompt,
        },
    );
    state.submissions.lock().unwrap().push(body);
    if take_one(&state.hang_up_submissions) {
        return None;
    }
    if take_one(&state.no_id_submissions) {
        return Some(ok(json!({})));
    }
    Some(ok(json!({"task_id": id})))
}

fn result(state: &State, files: &str, body: &Value) -> Response<Full<Bytes>> {
    let fields_ok = body.as_object().is_some_and(|o| {
        o.keys()
            .all(|k| ["req_key", "task_id", "req_json"].contains(&k.as_str()))
    });
    let (Some(req_key), Some(task_id)) = (
        body.get("req_key").and_then(Value::as_str),
        body.get("task_id").and_then(Value::as_str),
    ) else {
        return business(400, 50400, "req_key and task_id must be strings");
    };
    if !fields_ok {
        return business(400, 50400, "unknown field");
    }
    let task = state.tasks.lock().unwrap().get(task_id).cloned();
    let Some(task) = task.filter(|t| t.req_key == req_key) else {
        return ok(json!({"status": "not_found", "video_url": "", "binary_data_base64": null}));
    };
    let run = Duration::from_millis(state.run_ms.load(Ordering::SeqCst));
    let elapsed = task.started.elapsed();
    if elapsed < run / 3 {
        return ok(json!({"status": "in_queue", "video_url": ""}));
    }
    if elapsed < run {
        return ok(json!({"status": "generating", "video_url": ""}));
    }
    if task.prompt.contains("[fail]") {
        return business(200, 50500, "Internal Error");
    }
    if task.prompt.contains("[refuse]") {
        return business(400, 50511, "Post Img Risk Not Pass");
    }
    if task.prompt.contains("[expire]") {
        return ok(json!({"status": "expired", "video_url": ""}));
    }
    ok(
        json!({"status": "done", "resp_data": "", "binary_data_base64": null,
              "video_url": format!("{files}/obj/jimeng-video/{task_id}.mp4?x-expires=1765059300")}),
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
        .strip_prefix("/obj/jimeng-video/")
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
