//! The built-in `sim-chat` channel: [`messages::sim`]'s deterministic replies, streamed word
//! by word. `x-relay-sim` steers it: `error=429|500|502|503` fails the call before anything is
//! sent, `fail` breaks the stream after its first events (a whole answer becomes
//! `500 upstream error`), `delay_ms=N` spreads a stream over about N milliseconds.

use std::time::Duration;

use bytes::Bytes;

use super::call::{ChatAnswer, ChatCall, ChatSettings, FailureKind, UpstreamFailure};
use super::stream::ChatEventStream;

/// Events a `fail` stream sends before it breaks.
const FAIL_AFTER: usize = 3;

#[derive(Debug)]
pub struct SimChat {
    pub settings: ChatSettings,
}

impl SimChat {
    pub fn new(settings: ChatSettings) -> SimChat {
        SimChat { settings }
    }

    pub(crate) fn messages(&self, call: ChatCall<'_>) -> Result<ChatAnswer, UpstreamFailure> {
        if let Some(status) = call.sim.error {
            return Err(UpstreamFailure {
                kind: if status == 429 {
                    FailureKind::RateLimited
                } else {
                    FailureKind::Error
                },
                retryable: true,
                ambiguous: false,
                retry_after: None,
                detail: format!("channel {}: simulated error {status}", self.settings.name),
            });
        }
        let req = call.typed(&self.settings.name)?;
        let req = &*req;
        if req.is_stream() {
            let events = messages::sim::stream(req, call.id);
            let pause = call
                .sim
                .delay_ms
                .map(|ms| Duration::from_millis(ms / events.len().max(1) as u64))
                .unwrap_or_default();
            let fail_after = call.sim.fail.then_some(FAIL_AFTER);
            let usage = messages::sim::reply(req, call.id).usage;
            return Ok(ChatAnswer::Stream(Box::new(ChatEventStream::prepared(
                &self.settings.name,
                &events,
                pause,
                fail_after,
                usage,
            ))));
        }
        if call.sim.fail {
            return Err(UpstreamFailure::error(
                true,
                format!("channel {}: simulated failure", self.settings.name),
            ));
        }
        let message = messages::sim::response(req, call.id);
        let usage = message.usage;
        let body = serde_json::to_vec(&message).map_err(|e| {
            UpstreamFailure::error(false, format!("serialising a simulated answer: {e}"))
        })?;
        Ok(ChatAnswer::Whole {
            body: Bytes::from(body),
            usage: Some(usage),
        })
    }
}
