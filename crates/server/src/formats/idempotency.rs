//! `Idempotency-Key` on submissions (`POST /v1/videos`, `POST /v1/video/generations`, asset
//! uploads, message batches): a retry of a request gets the first answer again instead of
//! running twice.
//!
//! A handler takes part in four calls, in order:
//!
//! 1. [`Idem::from_request`]: the header checked (`400 invalid request` naming it), before the
//!    body is read; without the header every call below does nothing.
//! 2. [`Idem::body`]: the request body, hashed as it is read (with the method and path, the
//!    request's fingerprint); nothing is buffered beyond what the handler reads anyway.
//! 3. [`Idem::claim`], once the body is read and before anything is written: one store step
//!    claims the key (a pending record), or finds the first answer (kept aside for
//!    [`Idem::finish`], the handler stops), another request under the key (`409`), or the
//!    same one still in flight (`409` with `retry-after: 1`). A task's, an asset's or a
//!    message batch's creation then completes the record in its own store step
//!    ([`Idem::claimed_ticket`], [`crate::formats::tasks::create`], [`crate::formats::assets::upload`],
//!    [`crate::formats::batches::create`]).
//! 4. [`Idem::finish`] with the answer: a replay gets the kept answer with
//!    `idempotent-replayed: true`; a claimed key is completed with the answer when it depends
//!    on the request alone (2xx, 400, 404, 413, 415), or released (402, 408, 409, 429, 5xx:
//!    the moment's, which a retry may not get again).

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use engine::now_ms;
use error_codes::{ApiError, ErrorCode};
use http::header::{self, HeaderValue};
use http::request::Parts;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use sha2::{Digest, Sha256};
use store::{IDEMPOTENCY_TTL_MS, IdemAnswer, IdemClaim, IdemTicket, Key};
use tokio::sync::watch;

use crate::app::App;
use crate::ground::http::{Answer, full, store_unavailable};

/// The request header.
pub const HEADER: &str = "Idempotency-Key";
/// The longest key taken.
const MAX_LEN: usize = 255;

/// One request's part in idempotency (see the module's documentation).
pub struct Idem {
    /// The claim's ticket; `None` without the header.
    ticket: Option<IdemTicket>,
    hasher: Arc<Mutex<Sha256>>,
    state: State,
}

enum State {
    /// Not claimed (yet).
    Open,
    /// The key is this request's: its answer is to be kept or the key released.
    Claimed,
    /// The key's record was completed with a task.
    Kept,
    /// The key's first answer, to give again.
    Replay(IdemAnswer),
    /// The same request is still in flight: the `409` gets `retry-after`.
    InFlight,
}

impl Idem {
    /// The request's `Idempotency-Key`, checked: 1 to 255 printable ASCII characters, given
    /// once.
    pub fn from_request(parts: &Parts, key: &Key) -> Result<Idem, ApiError> {
        let mut values = parts.headers.get_all(HEADER).iter();
        let Some(value) = values.next() else {
            return Ok(Idem::off());
        };
        let bad = |why: &str| {
            ApiError::field(
                ErrorCode::InvalidRequest,
                HEADER,
                format!(
                    "{HEADER} must be 1 to {MAX_LEN} printable ASCII characters, given once; {why}"
                ),
            )
        };
        if values.next().is_some() {
            return Err(bad("it was given more than once"));
        }
        let bytes = value.as_bytes();
        if bytes.is_empty() {
            return Err(bad("it is empty"));
        }
        if bytes.len() > MAX_LEN {
            return Err(bad(&format!("it has {} characters", bytes.len())));
        }
        if !bytes.iter().all(|b| (0x20..=0x7e).contains(b)) {
            return Err(bad("it has a character outside that range"));
        }
        let key_text = String::from_utf8_lossy(bytes).into_owned();
        let mut hasher = Sha256::new();
        for part in [parts.method.as_str(), " ", parts.uri.path(), "\n"] {
            hasher.update(part.as_bytes());
        }
        Ok(Idem {
            ticket: Some(IdemTicket {
                key_id: key.id.clone(),
                key: key_text,
                token: crate::ground::http::new_id("idem"),
            }),
            hasher: Arc::new(Mutex::new(hasher)),
            state: State::Open,
        })
    }

    /// No `Idempotency-Key`: every call does nothing.
    pub fn off() -> Idem {
        Idem {
            ticket: None,
            hasher: Arc::default(),
            state: State::Open,
        }
    }

    /// The request body, hashed into the fingerprint as it is read.
    pub fn body(&self, body: Incoming) -> Hashed {
        Hashed {
            inner: body,
            hasher: self.ticket.as_ref().map(|_| self.hasher.clone()),
        }
    }

    /// Claims the key for this request, once its body is read. An error ends the request:
    /// its answer comes from [`Idem::finish`] (the first answer, for a replay).
    pub async fn claim(&mut self, app: &App) -> Result<(), ApiError> {
        let Some(ticket) = &self.ticket else {
            return Ok(());
        };
        let fingerprint = {
            let hasher = self.hasher.lock().unwrap_or_else(|e| e.into_inner());
            let mut hex = String::with_capacity(64);
            crate::ground::auth::push_hex(&mut hex, &hasher.clone().finalize());
            hex
        };
        let found = app
            .store
            .claim_idempotency(ticket, &fingerprint, now_ms())
            .await
            .map_err(store_unavailable)?;
        match found {
            IdemClaim::Claimed => {
                self.state = State::Claimed;
                Ok(())
            }
            IdemClaim::Replay(answer) => {
                self.state = State::Replay(answer);
                Err(conflict("the request was answered before"))
            }
            IdemClaim::Mismatch => Err(conflict(
                "was used with another request (method, path or body); a new request needs a new key",
            )),
            IdemClaim::InFlight => {
                self.state = State::InFlight;
                Err(conflict(
                    "belongs to a request that is still being handled; retry in a second",
                ))
            }
        }
    }

    /// The ticket a task's, an asset's or a batch's creation completes the key's record with,
    /// when the key is claimed.
    pub fn claimed_ticket(&self) -> Option<&IdemTicket> {
        match self.state {
            State::Claimed => self.ticket.as_ref(),
            _ => None,
        }
    }

    /// The creation (of a task, an asset or a batch) completed the key's record.
    pub fn kept(&mut self) {
        self.state = State::Kept;
    }

    /// The request's answer, given the key's part in it.
    pub async fn finish(self, app: &App, answer: Answer) -> Answer {
        let Some(ticket) = &self.ticket else {
            return answer;
        };
        match self.state {
            State::Open | State::Kept => answer,
            State::Replay(kept) => {
                let mut res = replay(&kept);
                res.headers_mut()
                    .insert("idempotent-replayed", HeaderValue::from_static("true"));
                res
            }
            State::InFlight => {
                let mut res = answer;
                let headers = res.headers_mut();
                headers.insert("retry-after", HeaderValue::from_static("1"));
                headers.insert("retry-after-ms", HeaderValue::from_static("1000"));
                res
            }
            State::Claimed => {
                let (res, kept) = if keeps(answer.status().as_u16()) {
                    to_kept(answer).await
                } else {
                    (answer, None)
                };
                if let Err(e) = app.store.finish_idempotency(ticket, kept.as_ref()).await {
                    tracing::warn!(key_id = %ticket.key_id, "finishing an idempotency claim: {e}");
                }
                res
            }
        }
    }
}

/// `409 idempotency conflict` naming the header.
pub fn conflict(why: &str) -> ApiError {
    ApiError::field(
        ErrorCode::IdempotencyConflict,
        HEADER,
        format!("this {HEADER} {why}"),
    )
}

/// Whether an answer with `status` depends on the request alone, and so is kept.
fn keeps(status: u16) -> bool {
    matches!(status, 200..=299 | 400 | 404 | 413 | 415)
}

/// An answer as kept, and the answer itself again; one that is not JSON text is not kept.
async fn to_kept(answer: Answer) -> (Answer, Option<IdemAnswer>) {
    let (parts, body) = answer.into_parts();
    let bytes = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => {
            tracing::warn!("reading an answer to keep it: {e}");
            return (
                crate::ground::http::error(&ApiError::new(
                    ErrorCode::UpstreamError,
                    "internal error",
                )),
                None,
            );
        }
    };
    let content_type = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .to_owned();
    let kept = String::from_utf8(bytes.to_vec())
        .ok()
        .map(|body| IdemAnswer {
            status: parts.status.as_u16(),
            content_type,
            body,
        });
    (Answer::from_parts(parts, full(bytes)), kept)
}

/// A kept answer as an answer.
fn replay(kept: &IdemAnswer) -> Answer {
    let mut res = Answer::new(full(kept.body.clone()));
    *res.status_mut() = http::StatusCode::from_u16(kept.status).unwrap_or(http::StatusCode::OK);
    if let Ok(value) = HeaderValue::from_str(&kept.content_type) {
        res.headers_mut().insert(header::CONTENT_TYPE, value);
    }
    res
}

/// A creation's answer (`200`, the record as JSON: a task, an asset, a batch) as kept with
/// its idempotency record.
pub fn task_answer<T: serde::Serialize>(record: &T) -> Result<IdemAnswer, ApiError> {
    let body = serde_json::to_string(record).map_err(|e| {
        tracing::error!("serialising an answer: {e}");
        ApiError::new(ErrorCode::UpstreamError, "internal error")
    })?;
    Ok(IdemAnswer {
        status: 200,
        content_type: "application/json".to_owned(),
        body,
    })
}

/// A request body that feeds what it reads to a hasher.
pub struct Hashed {
    inner: Incoming,
    hasher: Option<Arc<Mutex<Sha256>>>,
}

impl Body for Hashed {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if let (Poll::Ready(Some(Ok(frame))), Some(hasher)) = (&polled, &this.hasher)
            && let Some(data) = frame.data_ref()
        {
            hasher
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .update(data);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// How often expired records are swept.
const SWEEP_EVERY: Duration = Duration::from_secs(600);
/// Records removed per store step of a sweep.
const SWEEP_BATCH: usize = 1000;

/// Removes records older than a day, every few minutes, until `stop`.
pub async fn sweep(app: Arc<App>, mut stop: watch::Receiver<bool>) {
    loop {
        if *stop.borrow() {
            return;
        }
        loop {
            let before = now_ms().saturating_sub(IDEMPOTENCY_TTL_MS);
            match app.store.sweep_idempotency(before, SWEEP_BATCH).await {
                Ok(n) if n == SWEEP_BATCH => continue,
                Ok(_) => break,
                Err(e) => {
                    tracing::warn!("sweeping idempotency records: {e}");
                    break;
                }
            }
        }
        tokio::select! {
            () = tokio::time::sleep(SWEEP_EVERY) => {}
            _ = stop.changed() => return,
        }
    }
}
