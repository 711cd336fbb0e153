//! An OpenAI-compatible chat completions upstream (`POST {base_url}/chat/completions`), with
//! the request, the answer and the stream converted by [`messages::openai`].

use bytes::Bytes;
use http::{Method, Request};
use messages::openai::{ChatStream, from_chat_response, to_chat_request};
use serde_json::Value;

use super::call::{
    ChatAnswer, ChatCall, ChatSettings, MAX_ANSWER_BYTES, UpstreamFailure, check_get,
};
use super::stream::ChatEventStream;
use crate::http::client::UpstreamHttp;
use crate::video::job::{ChannelCheck, CheckVerdict};

#[derive(Debug)]
pub struct OpenaiChat {
    pub settings: ChatSettings,
    http: UpstreamHttp,
}

impl OpenaiChat {
    pub fn new(settings: ChatSettings) -> OpenaiChat {
        let http = UpstreamHttp::reaching(settings.timeouts, None, &settings.network);
        OpenaiChat { settings, http }
    }

    pub(crate) async fn messages(&self, call: ChatCall<'_>) -> Result<ChatAnswer, UpstreamFailure> {
        let name = &self.settings.name;
        let req = call.typed(name)?;
        let req = &*req;
        let chat = to_chat_request(req, &self.settings.upstream_model(&req.model));
        let body = serde_json::to_vec(&chat)
            .map_err(|e| UpstreamFailure::error(false, format!("channel {name}: request: {e}")))?;
        let mut builder = Request::builder()
            .method(Method::POST)
            .uri(format!(
                "{}/chat/completions",
                self.settings.base_url.trim_end_matches('/')
            ))
            .header("content-type", "application/json")
            .header(
                "user-agent",
                concat!("video-relay/", env!("CARGO_PKG_VERSION")),
            );
        if let Some(key) = &self.settings.api_key {
            builder = builder.header("authorization", format!("Bearer {key}"));
        }
        if req.is_stream() {
            builder = builder.header("accept", "text/event-stream");
        }
        let upstream_req = builder
            .body(Bytes::from(body))
            .map_err(|e| UpstreamFailure::error(false, format!("channel {name}: request: {e}")))?;
        let res = self
            .http
            .send(upstream_req)
            .await
            .map_err(|e| UpstreamFailure::from_transport(name, &e))?;
        if !res.status.is_success() {
            let status = res.status.as_u16();
            let headers = res.headers();
            let body = res.body.collect(64 * 1024).await.unwrap_or_default();
            return Err(UpstreamFailure::from_status(
                &self.settings,
                status,
                &headers,
                &body,
            ));
        }
        if req.is_stream() {
            let convert = ChatStream::new(call.id, &req.model, req, call.input_estimate());
            return Ok(ChatAnswer::Stream(Box::new(ChatEventStream::converted(
                name,
                res.body,
                convert,
                self.settings.max_event(),
            ))));
        }
        let body = res
            .body
            .collect(MAX_ANSWER_BYTES)
            .await
            .map_err(|e| UpstreamFailure::after_success(name, e))?;
        // The upstream answered with a success: it did the work, so a failure to use its
        // answer is no reason to run the request again.
        let value: Value = serde_json::from_slice(&body).map_err(|e| {
            UpstreamFailure::after_success(name, format_args!("answer is not JSON: {e}"))
        })?;
        let message = from_chat_response(&value, call.id, &req.model, req, call.input_estimate())
            .map_err(|e| UpstreamFailure::after_success(name, e))?;
        let usage = message.usage;
        let out = serde_json::to_vec(&message)
            .map_err(|e| UpstreamFailure::error(false, format!("channel {name}: answer: {e}")))?;
        Ok(ChatAnswer::Whole {
            body: Bytes::from(out),
            usage: Some(usage),
        })
    }

    /// The channel test: `GET {base_url}/models`, authenticated, generating nothing. A 429
    /// saying `insufficient_quota` is an empty account, not a rate limit.
    pub(crate) async fn check(&self) -> ChannelCheck {
        let mut req = Request::builder()
            .method(Method::GET)
            .uri(format!(
                "{}/models",
                self.settings.base_url.trim_end_matches('/')
            ))
            .header(
                "user-agent",
                concat!("video-relay/", env!("CARGO_PKG_VERSION")),
            );
        if let Some(key) = &self.settings.api_key {
            req = req.header("authorization", format!("Bearer {key}"));
        }
        let req = req.body(Bytes::new()).map_err(|e| e.to_string());
        check_get(&self.settings, &self.http, req, |status, body| {
            let value = serde_json::from_slice::<Value>(body).ok()?;
            let code = &value["error"]["code"];
            (status.as_u16() == 429
                && (code == "insufficient_quota" || value["error"]["type"] == "insufficient_quota"))
                .then_some(CheckVerdict::Quota)
        })
        .await
    }
}
