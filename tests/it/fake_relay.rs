//! A fake relay behind the relay: another relay or reseller speaking OpenAI-style `/v1/videos`
//! the loose way such relays do, strict about what it is sent as OpenAI's API is. Every call
//! must carry `Authorization: Bearer` [`KEY`] (else 401 with OpenAI's error body); a creation
//! must be `multipart/form-data` with an `Idempotency-Key`, a `model`, a `prompt`, `seconds` an
//! integer in a string and `size` as `WxH` (else 400, naming the field).
//!
//! What each task answers is scripted ([`Script`]): its polls answer the script's records in
//! turn (the last one repeats; `{id}` and `{files}` in them become the task's id and the file
//! host's base), optionally held at one record until the test releases it; its result is served
//! at `/v1/videos/{id}/content` as bytes, as a redirect to the file host, or not at all (404,
//! or a JSON error inside a `200`),
//! and always at the file host's `/files/{id}.mp4` (a second loopback address: a foreign host
//! to the relay). It counts the polls of each task and records every download with whether it
//! carried a key.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use http::{Method, Request, Response};
use http_body_util::Full;
use serde_json::{Value, json};

use crate::fake_vendor::{self, FakeServer, header, playable_mp4};

/// The key the relay must send; no client of the relay may ever see it.
pub const KEY: &str = "relay-behind-key-5521";

/// How a task's result is served at `/v1/videos/{id}/content`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Content {
    /// The video's bytes.
    Bytes,
    /// A 302 to the file host's `/files/{id}.mp4`.
    Redirect,
    /// 404: the relay behind serves no `/content`; its records name a URL instead.
    Missing,
    /// A `200` with a JSON error (as some relays answer), and a URL in the records.
    ErrorInOk,
}

/// What one task does.
#[derive(Debug, Clone)]
pub struct Script {
    /// The records its polls answer, in turn; the last one repeats.
    pub polls: Vec<Value>,
    pub content: Content,
    /// Polls stay at this record until [`FakeRelay::release`].
    pub hold_at: Option<usize>,
}

impl Script {
    pub fn new(polls: Vec<Value>, content: Content) -> Script {
        Script {
            polls,
            content,
            hold_at: None,
        }
    }
}

#[derive(Debug)]
struct Task {
    script: Script,
    /// Polls answered.
    polls: usize,
    /// The record the next poll answers.
    at: usize,
}

/// What the fake was sent.
#[derive(Default)]
struct State {
    /// Scripts for the next creations, in order.
    scripts: VecDeque<Script>,
    tasks: HashMap<String, Task>,
    /// Creations accepted: (id, `Idempotency-Key`), oldest first.
    created: Vec<(String, String)>,
    /// Calls refused, and why, oldest first.
    refused: Vec<String>,
    /// Downloads: (host base, path, whether it carried an authorization header).
    downloads: Vec<(String, String, bool)>,
}

pub struct FakeRelay {
    pub base: String,
    /// The file host's base (another address).
    pub files: String,
    state: Arc<Mutex<State>>,
    released: Arc<AtomicBool>,
    _api: FakeServer,
    _files: FakeServer,
}

impl FakeRelay {
    pub async fn start() -> FakeRelay {
        let state: Arc<Mutex<State>> = Arc::default();
        let released = Arc::new(AtomicBool::new(false));
        let files_base = Arc::new(OnceLock::<String>::new());
        let api_base = Arc::new(OnceLock::<String>::new());
        let serve = |own: Arc<OnceLock<String>>| {
            let (st, rel, files) = (state.clone(), released.clone(), files_base.clone());
            fake_vendor::serve(move |req| {
                let (st, rel, files, own) = (st.clone(), rel.clone(), files.clone(), own.clone());
                async move {
                    let files = files.get().cloned().unwrap_or_default();
                    let own = own.get().cloned().unwrap_or_default();
                    Some(answer(&st, &rel, &own, &files, req))
                }
            })
        };
        let api = serve(api_base.clone()).await;
        let files = serve(files_base.clone()).await;
        let _ = api_base.set(api.base.clone());
        let _ = files_base.set(files.base.clone());
        FakeRelay {
            base: api.base.clone(),
            files: files.base.clone(),
            state,
            released,
            _api: api,
            _files: files,
        }
    }

    /// The next creation runs `script`.
    pub fn script(&self, script: Script) {
        self.state.lock().unwrap().scripts.push_back(script);
    }

    /// Lets held tasks go on.
    pub fn release(&self) {
        self.released.store(true, Ordering::SeqCst);
    }

    /// The upstream id of the task the relay created as `task` (its `Idempotency-Key`).
    pub fn upstream_id(&self, task: &str) -> String {
        let st = self.state.lock().unwrap();
        st.created
            .iter()
            .find(|(_, key)| key == task)
            .map(|(id, _)| id.clone())
            .unwrap_or_else(|| panic!("no creation for task {task}: {:?}", st.created))
    }

    /// How many times the relay polled the task it created as `task`.
    pub fn polls(&self, task: &str) -> usize {
        let id = self.upstream_id(task);
        self.state.lock().unwrap().tasks[&id].polls
    }

    /// How many creations the relay sent as `task`.
    pub fn creations(&self, task: &str) -> usize {
        let st = self.state.lock().unwrap();
        st.created.iter().filter(|(_, key)| key == task).count()
    }

    /// Calls refused, and why.
    pub fn refused(&self) -> Vec<String> {
        self.state.lock().unwrap().refused.clone()
    }

    /// Downloads of the task the relay created as `task`: (host base, path, keyed).
    pub fn downloads(&self, task: &str) -> Vec<(String, String, bool)> {
        let id = self.upstream_id(task);
        let st = self.state.lock().unwrap();
        st.downloads
            .iter()
            .filter(|(_, path, _)| path.contains(&id))
            .cloned()
            .collect()
    }
}

fn error(status: u16, code: &str, message: &str) -> Response<Full<Bytes>> {
    fake_vendor::json(
        status,
        &json!({"error": {"message": message, "type": "invalid_request_error",
                          "param": null, "code": code}}),
    )
}

fn answer(
    state: &Mutex<State>,
    released: &AtomicBool,
    own: &str,
    files: &str,
    req: Request<Bytes>,
) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_owned();
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let keyed = header(&req, "authorization").is_some();
    // The file host serves files to anyone (signed URLs, as CDNs do), and nothing else.
    if own == files {
        return match (req.method(), segs.as_slice()) {
            (&Method::GET, ["files", file]) if file.ends_with(".mp4") => {
                let mut st = state.lock().unwrap();
                st.downloads.push((files.to_owned(), path.clone(), keyed));
                fake_vendor::bytes(200, "video/mp4", playable_mp4())
            }
            _ => error(404, "not_found", "no such file"),
        };
    }
    if header(&req, "authorization") != Some(format!("Bearer {KEY}").as_str()) {
        state
            .lock()
            .unwrap()
            .refused
            .push(format!("bad key on {path}"));
        return error(401, "invalid_api_key", "Incorrect API key provided");
    }
    match (req.method(), segs.as_slice()) {
        (&Method::POST, ["v1", "videos"]) => create(state, &req),
        (&Method::GET, ["v1", "videos"]) => fake_vendor::json(
            200,
            &json!({"object": "list", "data": [], "first_id": null, "last_id": null,
                    "has_more": false}),
        ),
        (&Method::GET, ["v1", "videos", id]) => {
            let mut st = state.lock().unwrap();
            let Some(task) = st.tasks.get_mut(*id) else {
                return error(404, "not_found", "no such video");
            };
            let at = task.at;
            let record = task.script.polls.get(at).cloned().unwrap_or(Value::Null);
            task.polls += 1;
            let held = task.script.hold_at == Some(at) && !released.load(Ordering::SeqCst);
            if !held && at + 1 < task.script.polls.len() {
                task.at += 1;
            }
            let text = record
                .to_string()
                .replace("{id}", id)
                .replace("{files}", files);
            let mut res = fake_vendor::bytes(200, "application/json", Bytes::from(text));
            res.headers_mut()
                .insert("x-request-id", http::HeaderValue::from_static("req_fake"));
            res
        }
        (&Method::GET, ["v1", "videos", id, "content"]) => {
            let mut st = state.lock().unwrap();
            st.downloads.push((own.to_owned(), path.clone(), keyed));
            let Some(task) = st.tasks.get(*id) else {
                return error(404, "not_found", "no such video");
            };
            match task.script.content {
                Content::Bytes => fake_vendor::bytes(200, "video/mp4", playable_mp4()),
                Content::Redirect => Response::builder()
                    .status(302)
                    .header("location", format!("{files}/files/{id}.mp4?sig=abc"))
                    .body(Full::new(Bytes::new()))
                    .unwrap(),
                Content::Missing => error(404, "not_found", "content is not served here"),
                Content::ErrorInOk => fake_vendor::json(
                    200,
                    &json!({"error": {"message": "fetch the url instead", "code": "no_content"}}),
                ),
            }
        }
        (&Method::DELETE, ["v1", "videos", id]) => fake_vendor::json(
            200,
            &json!({"id": id, "object": "video.deleted", "deleted": true}),
        ),
        _ => error(404, "not_found", "no route"),
    }
}

/// A creation, checked as OpenAI's API checks it.
fn create(state: &Mutex<State>, req: &Request<Bytes>) -> Response<Full<Bytes>> {
    let refuse = |why: String, param: &str| {
        state.lock().unwrap().refused.push(why.clone());
        fake_vendor::json(
            400,
            &json!({"error": {"message": why, "type": "invalid_request_error",
                              "param": param, "code": null}}),
        )
    };
    let Some(key) = header(req, "idempotency-key").map(str::to_owned) else {
        return refuse("an Idempotency-Key is expected".into(), "idempotency-key");
    };
    let Some(boundary) = header(req, "content-type")
        .and_then(|ct| ct.strip_prefix("multipart/form-data; boundary="))
        .map(str::to_owned)
    else {
        return refuse("multipart/form-data is expected".into(), "content-type");
    };
    let fields = match parts(req.body(), &boundary) {
        Ok(fields) => fields,
        Err(why) => return refuse(why, "body"),
    };
    for name in ["model", "prompt", "seconds", "size"] {
        if fields.get(name).is_none_or(|v| v.is_empty()) {
            return refuse(format!("missing required parameter: {name}"), name);
        }
    }
    if fields["seconds"].parse::<u32>().is_err() {
        return refuse(
            format!("seconds {:?} is no integer", fields["seconds"]),
            "seconds",
        );
    }
    let size_ok = fields["size"]
        .split_once('x')
        .is_some_and(|(w, h)| w.parse::<u32>().is_ok() && h.parse::<u32>().is_ok());
    if !size_ok {
        return refuse(format!("size {:?} is not WxH", fields["size"]), "size");
    }
    if let Some(extra) = fields
        .keys()
        .find(|k| !["model", "prompt", "seconds", "size", "input_reference"].contains(&k.as_str()))
    {
        return refuse(format!("unknown parameter: {extra}"), extra);
    }
    let mut st = state.lock().unwrap();
    let script = st.scripts.pop_front().unwrap_or_else(|| {
        Script::new(
            vec![json!({"id": "{id}", "object": "video", "status": "completed", "progress": 100})],
            Content::Bytes,
        )
    });
    let id = format!("video_behind_{}", st.created.len() + 1);
    st.created.push((id.clone(), key));
    st.tasks.insert(
        id.clone(),
        Task {
            script,
            polls: 0,
            at: 0,
        },
    );
    fake_vendor::json(
        200,
        &json!({"id": id, "object": "video", "model": fields["model"], "status": "queued",
                "progress": 0, "created_at": 1_790_000_000, "seconds": fields["seconds"],
                "size": fields["size"]}),
    )
}

/// The fields of a `multipart/form-data` body (a file part's bytes as lossy text).
fn parts(body: &[u8], boundary: &str) -> Result<HashMap<String, String>, String> {
    let text = String::from_utf8_lossy(body);
    let delimiter = format!("--{boundary}");
    let Some(rest) = text.strip_prefix(&delimiter) else {
        return Err("the body does not open with its boundary".into());
    };
    if !text.trim_end().ends_with(&format!("{delimiter}--")) {
        return Err("the body does not close with its boundary".into());
    }
    let mut fields = HashMap::new();
    for part in rest.split(&delimiter) {
        if part.starts_with("--") {
            break;
        }
        let part = part.strip_prefix("\r\n").ok_or("a part without CRLF")?;
        let (head, value) = part.split_once("\r\n\r\n").ok_or("a part without a head")?;
        let name = head
            .split("name=\"")
            .nth(1)
            .and_then(|n| n.split('"').next())
            .ok_or("a part without a name")?;
        let value = value
            .strip_suffix("\r\n")
            .ok_or("a part not ended by CRLF")?;
        fields.insert(name.to_owned(), value.to_owned());
    }
    Ok(fields)
}
