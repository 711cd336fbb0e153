//! A native upstream of the same format: the client's body goes on unchanged (only `model`
//! rewritten when the channel maps it), with the upstream's key instead of the client's and
//! the client's `anthropic-version`, `anthropic-beta` and query string (`?beta=true`), all
//! untouched. Answers come back byte for byte;
//! streams are relayed as they arrive.

use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_TYPE, USER_AGENT};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Uri};
use serde_json::Value;

use super::call::{
    ChatAnswer, ChatCall, ChatSettings, MAX_ANSWER_BYTES, UpstreamFailure, check_get,
};
use super::stream::ChatEventStream;
use crate::http::client::{UpstreamHttp, UpstreamResponse};
use crate::video::job::{ChannelCheck, CheckVerdict};

#[derive(Debug)]
pub struct AnthropicChat {
    pub settings: ChatSettings,
    http: UpstreamHttp,
    /// The URLs of `/v1/messages` and `/v1/messages/count_tokens` without a query, parsed
    /// once (`None` when the base URL does not make one: then each request says why).
    urls: Box<[Option<Uri>; 2]>,
    /// The upstream's key as a header value, or why it cannot be one.
    api_key: Option<Result<HeaderValue, String>>,
    /// The headers every request carries (the key's among them, when it is a header value),
    /// made once: a request's are a copy with its own added.
    common: HeaderMap,
}

const VERSION: HeaderName = HeaderName::from_static("anthropic-version");
const BETA: HeaderName = HeaderName::from_static("anthropic-beta");
const API_KEY: HeaderName = HeaderName::from_static("x-api-key");

const PATHS: [&str; 2] = ["/v1/messages", "/v1/messages/count_tokens"];

/// The API version the channel test's call names (the relay's calls pass on the client's).
const CHECK_VERSION: &str = "2023-06-01";

impl AnthropicChat {
    pub fn new(settings: ChatSettings) -> AnthropicChat {
        let http = UpstreamHttp::reaching(settings.timeouts, None, &settings.network);
        let urls =
            Box::new(PATHS.map(|path| Uri::try_from(url(&settings.base_url, path, None)).ok()));
        let api_key = settings.api_key.as_deref().map(|key| {
            let mut value = HeaderValue::from_str(key).map_err(|e| format!("x-api-key: {e}"))?;
            value.set_sensitive(true);
            Ok(value)
        });
        let mut common = HeaderMap::with_capacity(8);
        common.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        common.insert(
            USER_AGENT,
            HeaderValue::from_static(concat!("video-relay/", env!("CARGO_PKG_VERSION"))),
        );
        if let Some(Ok(key)) = &api_key {
            common.insert(API_KEY, key.clone());
        }
        AnthropicChat {
            settings,
            http,
            urls,
            api_key,
            common,
        }
    }

    /// The upstream URL of `path`, with the client's query string as it came.
    fn uri(&self, path: &str, query: Option<&str>) -> Result<Uri, String> {
        let query = query.filter(|q| !q.is_empty());
        if query.is_none()
            && let Some(Some(uri)) = PATHS.iter().position(|p| *p == path).map(|i| &self.urls[i])
        {
            return Ok(uri.clone());
        }
        let text = url(&self.settings.base_url, path, query);
        Uri::try_from(text.as_str()).map_err(|e| format!("{text}: {e}"))
    }

    /// The body to send: the client's, with `model` mapped when the channel maps it.
    fn body(&self, call: &ChatCall<'_>) -> Result<Bytes, UpstreamFailure> {
        let model = &call.request.summary.model;
        let upstream = match self.settings.model_map.get(model) {
            Some(upstream) if upstream != model => upstream.clone(),
            _ => return Ok(call.body.clone()),
        };
        let mut value: Value = serde_json::from_slice(call.body)
            .map_err(|e| UpstreamFailure::error(false, format!("re-reading the body: {e}")))?;
        value["model"] = Value::String(upstream);
        serde_json::to_vec(&value)
            .map(Bytes::from)
            .map_err(|e| UpstreamFailure::error(false, format!("writing the body: {e}")))
    }

    async fn post(
        &self,
        path: &str,
        call: &ChatCall<'_>,
    ) -> Result<UpstreamResponse, UpstreamFailure> {
        let name = &self.settings.name;
        let uri = self
            .uri(path, call.query)
            .map_err(|e| UpstreamFailure::error(false, format!("channel {name}: request: {e}")))?;
        let header = |what: &str, value: &str| {
            HeaderValue::from_str(value).map_err(|e| {
                UpstreamFailure::error(false, format!("channel {name}: request: {what}: {e}"))
            })
        };
        if let Some(Err(e)) = &self.api_key {
            return Err(UpstreamFailure::error(
                false,
                format!("channel {name}: request: {e}"),
            ));
        }
        let mut req = Request::new(self.body(call)?);
        *req.method_mut() = Method::POST;
        *req.uri_mut() = uri;
        *req.headers_mut() = self.common.clone();
        let headers = req.headers_mut();
        headers.insert(VERSION, header("anthropic-version", call.version)?);
        if let Some(beta) = call.beta {
            headers.insert(BETA, header("anthropic-beta", beta)?);
        }
        if call.is_stream() && path == "/v1/messages" {
            headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
        }
        let res = self
            .http
            .send(req)
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
        Ok(res)
    }

    pub(crate) async fn messages(&self, call: ChatCall<'_>) -> Result<ChatAnswer, UpstreamFailure> {
        let res = self.post("/v1/messages", &call).await?;
        if call.is_stream() {
            return Ok(ChatAnswer::Stream(Box::new(ChatEventStream::native(
                &self.settings.name,
                res.body,
                self.settings.max_event(),
            ))));
        }
        let body = res
            .body
            .collect(MAX_ANSWER_BYTES)
            .await
            .map_err(|e| UpstreamFailure::after_success(&self.settings.name, e))?;
        let usage = messages::usage_in(&body);
        Ok(ChatAnswer::Whole { body, usage })
    }

    pub(crate) async fn count_tokens(&self, call: ChatCall<'_>) -> Result<u64, UpstreamFailure> {
        let res = self.post("/v1/messages/count_tokens", &call).await?;
        let name = &self.settings.name;
        let body = res
            .body
            .collect(1024 * 1024)
            .await
            .map_err(|e| UpstreamFailure::after_success(name, e))?;
        serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|v| v.get("input_tokens").and_then(Value::as_u64))
            .ok_or_else(|| {
                UpstreamFailure::error(
                    false,
                    format!("channel {name}: count_tokens answer without input_tokens"),
                )
            })
    }
}

impl AnthropicChat {
    /// The channel test: `GET /v1/models?limit=1`, authenticated, generating nothing. A
    /// `billing_error` is an empty account.
    pub(crate) async fn check(&self) -> ChannelCheck {
        let req = match &self.api_key {
            Some(Err(e)) => Err(e.clone()),
            _ => {
                let mut headers = self.common.clone();
                headers.remove(CONTENT_TYPE);
                headers.insert(VERSION, HeaderValue::from_static(CHECK_VERSION));
                let mut req = Request::builder().method(Method::GET).uri(url(
                    &self.settings.base_url,
                    "/v1/models",
                    Some("limit=1"),
                ));
                if let Some(h) = req.headers_mut() {
                    *h = headers;
                }
                req.body(Bytes::new()).map_err(|e| e.to_string())
            }
        };
        check_get(&self.settings, &self.http, req, |_, body| {
            let value = serde_json::from_slice::<Value>(body).ok()?;
            (value["error"]["type"] == "billing_error").then_some(CheckVerdict::Quota)
        })
        .await
    }
}

/// `base` (without its trailing slashes), `path` and the query as it came.
fn url(base: &str, path: &str, query: Option<&str>) -> String {
    let base = base.trim_end_matches('/');
    match query {
        Some(q) => format!("{base}{path}?{q}"),
        None => format!("{base}{path}"),
    }
}
