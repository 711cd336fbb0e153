//! Fake chat upstreams: a small hyper server speaking the vendor's native messages format
//! (`/v1/messages`, `/v1/messages/count_tokens`) and OpenAI-style chat completions
//! (`/v1/chat/completions`), streamed and not, and the model list a channel test reads
//! (`/v1/models`, with the upstream's key), with switches for a slow first byte, a
//! connection closed after the request was read, a mid-stream disconnect, a flood of `data:`
//! lines that never ends its event, and 429 / 500 answers. It records what it was sent.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};

/// A host name and key that must never reach a relay's client.
pub const SECRET_HOST: &str = "secret-upstream.internal";
pub const UPSTREAM_KEY: &str = "upstream-secret-key-42";

/// How the fake misbehaves.
#[derive(Debug, Clone, Default)]
pub struct Switches {
    /// Wait this long before answering at all.
    pub slow_first_byte: Option<Duration>,
    /// Read the request, then close the connection without an answer.
    pub hang_up: bool,
    /// Streams: send this many SSE events, then drop the connection.
    pub disconnect_after: Option<usize>,
    /// Answer with this status (429 or 500) and an error body naming [`SECRET_HOST`].
    pub fail_status: Option<u16>,
    /// Streams: pause between events.
    pub event_pause: Duration,
    /// Streams: cut the bytes into pieces of this size (0: one piece per event).
    pub piece: usize,
    /// Streams: after the first event, this many bytes of `data:` lines with no empty line
    /// (an event that never ends), sent as fast as they are read, then the end.
    pub flood: Option<usize>,
}

/// One request the fake received.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    /// The query string as it came, if any.
    pub query: Option<String>,
    pub headers: HeaderMap,
    pub body: Value,
}

#[derive(Default)]
struct Shared {
    switches: Mutex<Switches>,
    received: Mutex<Vec<Received>>,
    /// A streamed answer's receiver went away before its end.
    cancelled: AtomicBool,
    streams_finished: AtomicUsize,
}

/// A running fake upstream.
pub struct FakeChat {
    pub base: String,
    shared: Arc<Shared>,
    _stop: oneshot::Sender<()>,
}

impl FakeChat {
    pub async fn start(switches: Switches) -> FakeChat {
        let shared = Arc::new(Shared {
            switches: Mutex::new(switches),
            ..Shared::default()
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (stop, mut stopped) = oneshot::channel::<()>();
        let state = shared.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = &mut stopped => break,
                    accepted = listener.accept() => {
                        let Ok((stream, _)) = accepted else { continue };
                        let state = state.clone();
                        tokio::spawn(async move {
                            // No answer: hyper closes the connection without one.
                            let svc = service_fn(move |req| {
                                let state = state.clone();
                                async move { serve(state, req).await.ok_or(HungUp) }
                            });
                            let _ = hyper::server::conn::http1::Builder::new()
                                .serve_connection(TokioIo::new(stream), svc)
                                .await;
                        });
                    }
                }
            }
        });
        FakeChat {
            base: format!("http://{addr}"),
            shared,
            _stop: stop,
        }
    }

    pub fn set(&self, switches: Switches) {
        *self.shared.switches.lock().expect("switches") = switches;
    }

    pub fn received(&self) -> Vec<Received> {
        self.shared.received.lock().expect("received").clone()
    }

    pub fn last(&self) -> Received {
        self.received().pop().expect("the fake received a request")
    }

    /// Whether a streamed answer was abandoned by its reader before its end.
    pub fn cancelled(&self) -> bool {
        self.shared.cancelled.load(Ordering::SeqCst)
    }
}

type FakeBody = BoxBody<Bytes, std::io::Error>;

fn full(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<FakeBody> {
    let mut res = Response::new(
        Full::new(body.into())
            .map_err(|never: Infallible| match never {})
            .boxed(),
    );
    *res.status_mut() = status;
    res.headers_mut()
        .insert("content-type", content_type.parse().expect("content type"));
    res
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

/// The answer to `req`; `None` to close the connection without one.
async fn serve(shared: Arc<Shared>, req: Request<Incoming>) -> Option<Response<FakeBody>> {
    let (parts, body) = req.into_parts();
    let bytes = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let path = parts.uri.path().to_owned();
    shared.received.lock().expect("received").push(Received {
        path: path.clone(),
        query: parts.uri.query().map(str::to_owned),
        headers: parts.headers.clone(),
        body: body.clone(),
    });
    let switches = shared.switches.lock().expect("switches").clone();
    if switches.hang_up {
        return None;
    }
    if let Some(wait) = switches.slow_first_byte {
        tokio::time::sleep(wait).await;
    }
    if let Some(status) = switches.fail_status {
        let mut res = full(
            StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            "application/json",
            json!({"error": {"type": "x", "message": format!("failure at {SECRET_HOST} with key {UPSTREAM_KEY}")}})
                .to_string(),
        );
        if status == 429 {
            res.headers_mut()
                .insert("retry-after", "2".parse().expect("header"));
        }
        return Some(res);
    }
    let stream = body["stream"] == json!(true);
    let res = match path.as_str() {
        "/v1/messages" if stream => streamed(shared, switches, native_stream(&body)),
        "/v1/messages" => full(StatusCode::OK, "application/json", native_message(&body)),
        "/v1/messages/count_tokens" => full(
            StatusCode::OK,
            "application/json",
            json!({"input_tokens": 42}).to_string(),
        ),
        "/v1/chat/completions" if stream => streamed(shared, switches, chat_stream(&body)),
        "/v1/chat/completions" => full(
            StatusCode::OK,
            "application/json",
            chat_answer(&body).to_string(),
        ),
        // The model list, a channel test's call: the native way (`x-api-key`) or the chat
        // completions way (a bearer token), with the upstream's key or a 401.
        "/v1/models" => {
            let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok());
            let bearer = format!("Bearer {UPSTREAM_KEY}");
            if header("x-api-key") == Some(UPSTREAM_KEY) || header("authorization") == Some(&bearer)
            {
                full(
                    StatusCode::OK,
                    "application/json",
                    json!({"data": [{"type": "model", "id": "native-model"}], "has_more": false})
                        .to_string(),
                )
            } else {
                full(
                    StatusCode::UNAUTHORIZED,
                    "application/json",
                    json!({"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}})
                        .to_string(),
                )
            }
        }
        _ => full(StatusCode::NOT_FOUND, "text/plain", "no such path"),
    };
    Some(res)
}

/// A body fed by a channel; an `Err` item aborts the connection mid-body, after the bytes
/// sent before it went out.
struct ChannelBody {
    rx: mpsc::Receiver<Result<Bytes, std::io::Error>>,
    /// The error to end with, held back for one poll.
    failing: Option<std::io::Error>,
}

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        if let Some(e) = self.failing.take() {
            return Poll::Ready(Some(Err(e)));
        }
        match std::task::ready!(self.rx.poll_recv(cx)) {
            Some(Ok(bytes)) => Poll::Ready(Some(Ok(Frame::data(bytes)))),
            // hyper writes out what it holds when the body is pending, and drops it when the
            // body fails: pending once first, the events before the disconnect reach the relay
            // however far the sender ran ahead.
            Some(Err(e)) => {
                self.failing = Some(e);
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            None => Poll::Ready(None),
        }
    }
}

/// Streams `events` (whole SSE events) with the switches applied. Without a pause every
/// piece (and the disconnect) is queued before hyper reads the first: the upstream running
/// ahead of its connection, as a fast one does.
fn streamed(shared: Arc<Shared>, switches: Switches, events: Vec<String>) -> Response<FakeBody> {
    if let Some(total) = switches.flood {
        return flooded(shared, events.into_iter().next().unwrap_or_default(), total);
    }
    let sent = switches.disconnect_after.unwrap_or(events.len());
    let pieces = move |event: &String| -> Vec<Bytes> {
        let bytes = event.as_bytes();
        if switches.piece == 0 {
            vec![Bytes::copy_from_slice(bytes)]
        } else {
            bytes
                .chunks(switches.piece)
                .map(Bytes::copy_from_slice)
                .collect()
        }
    };
    let disconnect = || Err(std::io::Error::other("fake disconnect"));
    let rx = if switches.event_pause.is_zero() {
        let mut items: Vec<_> = events.iter().take(sent).flat_map(pieces).map(Ok).collect();
        if sent < events.len() {
            items.push(disconnect());
        } else {
            shared.streams_finished.fetch_add(1, Ordering::SeqCst);
        }
        let (tx, rx) = mpsc::channel(items.len().max(1));
        for item in items {
            tx.try_send(item).expect("room for every piece");
        }
        rx
    } else {
        let (tx, rx) = mpsc::channel(4);
        tokio::spawn(async move {
            for (i, event) in events.iter().enumerate() {
                if i == sent {
                    let _ = tx.send(disconnect()).await;
                    return;
                }
                if i > 0 {
                    tokio::time::sleep(switches.event_pause).await;
                }
                for piece in pieces(event) {
                    if tx.send(Ok(piece)).await.is_err() {
                        shared.cancelled.store(true, Ordering::SeqCst);
                        return;
                    }
                }
            }
            shared.streams_finished.fetch_add(1, Ordering::SeqCst);
        });
        rx
    };
    let mut res = Response::new(ChannelBody { rx, failing: None }.boxed());
    res.headers_mut()
        .insert("content-type", "text/event-stream".parse().expect("header"));
    res
}

/// `first`, then `total` bytes of 1 KiB `data:` lines in 64 KiB pieces (one piece, shared),
/// never an empty line: the fake holds one piece whatever `total`, and sends no faster than
/// its reader reads.
fn flooded(shared: Arc<Shared>, first: String, total: usize) -> Response<FakeBody> {
    let (tx, rx) = mpsc::channel(4);
    tokio::spawn(async move {
        let line = format!("data: {}\n", "x".repeat(1017));
        let piece = Bytes::from(line.repeat(64));
        let mut sent = 0;
        let mut next = Bytes::from(first);
        loop {
            if tx.send(Ok(next)).await.is_err() {
                shared.cancelled.store(true, Ordering::SeqCst);
                return;
            }
            if sent >= total {
                break;
            }
            sent += piece.len();
            next = piece.clone();
        }
        shared.streams_finished.fetch_add(1, Ordering::SeqCst);
    });
    let mut res = Response::new(ChannelBody { rx, failing: None }.boxed());
    res.headers_mut()
        .insert("content-type", "text/event-stream".parse().expect("header"));
    res
}

/// The native fake's reply: a text block, and a tool call when the request offers tools.
fn native_message(req: &Value) -> String {
    let mut content = vec![json!({"type": "text", "text": "Hello from the native upstream."})];
    let mut stop = "end_turn";
    if let Some(tool) = req["tools"].get(0) {
        content.push(json!({"type": "tool_use", "id": "toolu_native_1", "name": tool["name"], "input": {"city": "Paris"}}));
        stop = "tool_use";
    }
    json!({"id": "msg_native_1", "type": "message", "role": "assistant", "model": req["model"],
        "content": content, "stop_reason": stop, "stop_sequence": null,
        "usage": {"input_tokens": 11, "output_tokens": 7, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 2}})
    .to_string()
}

/// The native fake's stream, in the vendor's own spelling (spaces after colons, a ping).
fn native_stream(req: &Value) -> Vec<String> {
    let model = req["model"].as_str().unwrap_or("m");
    let mut events = vec![
        format!(
            "event: message_start\ndata: {{\"type\": \"message_start\", \"message\": {{\"id\": \"msg_native_1\", \"type\": \"message\", \"role\": \"assistant\", \"model\": \"{model}\", \"content\": [], \"stop_reason\": null, \"stop_sequence\": null, \"usage\": {{\"input_tokens\": 11, \"output_tokens\": 1, \"cache_creation_input_tokens\": 0, \"cache_read_input_tokens\": 2}}}}}}\n\n"
        ),
        "event: content_block_start\ndata: {\"type\": \"content_block_start\", \"index\": 0, \"content_block\": {\"type\": \"text\", \"text\": \"\"}}\n\n".to_owned(),
        "event: ping\ndata: {\"type\": \"ping\"}\n\n".to_owned(),
    ];
    for word in [
        "Hello",
        " from",
        " the",
        " native",
        " upstream",
        ", caf\u{e9}.",
    ] {
        events.push(format!(
            "event: content_block_delta\ndata: {{\"type\": \"content_block_delta\", \"index\": 0, \"delta\": {{\"type\": \"text_delta\", \"text\": \"{word}\"}}}}\n\n"
        ));
    }
    events.push(
        "event: content_block_stop\ndata: {\"type\": \"content_block_stop\", \"index\": 0}\n\n"
            .to_owned(),
    );
    let mut stop = "end_turn";
    if let Some(name) = req["tools"][0]["name"].as_str() {
        stop = "tool_use";
        events.push(format!("event: content_block_start\ndata: {{\"type\": \"content_block_start\", \"index\": 1, \"content_block\": {{\"type\": \"tool_use\", \"id\": \"toolu_native_1\", \"name\": \"{name}\", \"input\": {{}}}}}}\n\n"));
        for piece in ["{\\\"city\\\": \\\"Pa", "ris\\\"}"] {
            events.push(format!("event: content_block_delta\ndata: {{\"type\": \"content_block_delta\", \"index\": 1, \"delta\": {{\"type\": \"input_json_delta\", \"partial_json\": \"{piece}\"}}}}\n\n"));
        }
        events.push(
            "event: content_block_stop\ndata: {\"type\": \"content_block_stop\", \"index\": 1}\n\n"
                .to_owned(),
        );
    }
    events.push(format!("event: message_delta\ndata: {{\"type\": \"message_delta\", \"delta\": {{\"stop_reason\": \"{stop}\", \"stop_sequence\": null}}, \"usage\": {{\"output_tokens\": 7}}}}\n\n"));
    events.push("event: message_stop\ndata: {\"type\": \"message_stop\"}\n\n".to_owned());
    events
}

/// Words of a chat message's content (string or parts).
fn words_of(content: &Value) -> Vec<String> {
    let text = match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(" "),
        _ => String::new(),
    };
    text.split_whitespace().map(str::to_owned).collect()
}

/// What the chat fake answers: `(text, tool calls, finish_reason, matched stop, usage)`.
struct ChatReply {
    text: String,
    calls: Vec<(String, String, String)>,
    finish: &'static str,
    matched: Option<String>,
    prompt_tokens: usize,
    completion_tokens: usize,
}

fn chat_reply(req: &Value) -> ChatReply {
    let messages = req["messages"].as_array().cloned().unwrap_or_default();
    let prompt_tokens: usize = messages
        .iter()
        .map(|m| words_of(&m["content"]).len() + 3)
        .sum();
    let last = messages.last().cloned().unwrap_or(Value::Null);
    let tool_named = req["tool_choice"]["function"]["name"]
        .as_str()
        .map(str::to_owned);
    let wants_tool = tool_named.is_some() || req["tool_choice"] == json!("required");
    if wants_tool && last["role"] != "tool" {
        let name = tool_named
            .or_else(|| {
                req["tools"][0]["function"]["name"]
                    .as_str()
                    .map(str::to_owned)
            })
            .unwrap_or_default();
        let args = "{\"city\": \"Paris\"}".to_owned();
        return ChatReply {
            text: String::new(),
            calls: vec![("call_fake_1".into(), name, args)],
            finish: "tool_calls",
            matched: None,
            prompt_tokens,
            completion_tokens: 5,
        };
    }
    let said = if last["role"] == "tool" {
        format!("The tool said {}", words_of(&last["content"]).join(" "))
    } else {
        let system = messages
            .iter()
            .find(|m| m["role"] == "system")
            .map(|m| format!("[{}] ", words_of(&m["content"]).join(" ")))
            .unwrap_or_default();
        format!("{system}Echo {}", words_of(&last["content"]).join(" "))
    };
    let mut words: Vec<String> = said.split(' ').map(str::to_owned).collect();
    let mut finish = "stop";
    if let Some(max) = req["max_tokens"].as_u64()
        && words.len() > max as usize
    {
        words.truncate(max as usize);
        finish = "length";
    }
    let mut text = words.join(" ");
    let mut matched = None;
    for stop in req["stop"].as_array().into_iter().flatten() {
        if let Some(s) = stop.as_str()
            && let Some(at) = text.find(s)
        {
            text.truncate(at);
            finish = "stop";
            matched = Some(s.to_owned());
        }
    }
    let completion_tokens = text.split_whitespace().count();
    ChatReply {
        text,
        calls: Vec::new(),
        finish,
        matched,
        prompt_tokens,
        completion_tokens,
    }
}

fn chat_answer(req: &Value) -> Value {
    let r = chat_reply(req);
    let calls: Vec<Value> = r
        .calls
        .iter()
        .map(|(id, name, args)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}}))
        .collect();
    let mut message = json!({"role": "assistant", "content": if r.text.is_empty() { Value::Null } else { json!(r.text) }});
    if !calls.is_empty() {
        message["tool_calls"] = json!(calls);
    }
    json!({"id": "chatcmpl-1", "object": "chat.completion", "model": req["model"],
        "choices": [{"index": 0, "message": message, "finish_reason": r.finish, "stop_reason": r.matched}],
        "usage": {"prompt_tokens": r.prompt_tokens, "completion_tokens": r.completion_tokens, "total_tokens": r.prompt_tokens + r.completion_tokens}})
}

fn chat_stream(req: &Value) -> Vec<String> {
    let r = chat_reply(req);
    let chunk = |delta: Value, finish: Value, extra: Option<(&str, Value)>| {
        let mut choice = json!({"index": 0, "delta": delta, "finish_reason": finish});
        if let Some((k, v)) = extra {
            choice[k] = v;
        }
        format!(
            "data: {}\n\n",
            json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": req["model"], "choices": [choice]})
        )
    };
    let mut events = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
        None,
    )];
    for word in r.text.split_inclusive(' ') {
        events.push(chunk(json!({"content": word}), Value::Null, None));
    }
    for (i, (id, name, args)) in r.calls.iter().enumerate() {
        events.push(chunk(
            json!({"tool_calls": [{"index": i, "id": id, "type": "function", "function": {"name": name, "arguments": ""}}]}),
            Value::Null,
            None,
        ));
        let (a, b) = args.split_at(args.len() / 2);
        for piece in [a, b] {
            events.push(chunk(
                json!({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}),
                Value::Null,
                None,
            ));
        }
    }
    events.push(chunk(
        json!({}),
        json!(r.finish),
        Some(("stop_reason", json!(r.matched))),
    ));
    if req["stream_options"]["include_usage"] == json!(true) {
        events.push(format!(
            "data: {}\n\n",
            json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [],
                "usage": {"prompt_tokens": r.prompt_tokens, "completion_tokens": r.completion_tokens}})
        ));
    }
    events.push("data: [DONE]\n\n".to_owned());
    events
}
