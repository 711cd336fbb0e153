//! The public API of a running relay, as its users' commands call it: one pooled hyper client
//! (http and https), the key on every request, and the relay's error bodies turned into one line.

use std::sync::Arc;

use anyhow::{Context, anyhow};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// A request body: whole, or streamed from a file.
pub type Body = BoxBody<Bytes, std::io::Error>;

/// The flags every user command takes.
#[derive(clap::Args, Clone)]
#[command(next_help_heading = "Relay")]
pub struct ApiArgs {
    /// Base URL of the running relay.
    #[arg(
        long,
        env = "RELAY_URL",
        default_value = "http://127.0.0.1:8080",
        global = true
    )]
    pub url: String,
    /// Your API key (`sk-relay-...`).
    #[arg(
        long,
        env = "RELAY_API_KEY",
        hide_env_values = true,
        value_name = "KEY",
        global = true
    )]
    pub api_key: Option<String>,
}

/// A running relay's public API, spoken to with one key.
pub struct Api {
    base: String,
    key: String,
    client: Client<HttpsConnector<HttpConnector>, Body>,
}

impl Api {
    pub fn new(args: &ApiArgs) -> anyhow::Result<Api> {
        let key = args
            .api_key
            .clone()
            .filter(|k| !k.trim().is_empty())
            .ok_or_else(|| anyhow!("no API key: give --api-key or set RELAY_API_KEY"))?;
        let base = args.url.trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            anyhow::bail!("--url must be an http:// or https:// URL, got {base:?}");
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .context("setting up TLS")?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .build();
        let client = Client::builder(TokioExecutor::new()).build(connector);
        Ok(Api { base, key, client })
    }

    /// `METHOD {base}{path}` with the key and `headers`; the answer whatever its status.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Body,
    ) -> anyhow::Result<Response<Incoming>> {
        let url = format!("{}{path}", self.base);
        let mut req = Request::builder()
            .method(method.clone())
            .uri(&url)
            .header("authorization", format!("Bearer {}", self.key));
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        let req = req
            .body(body)
            .with_context(|| format!("building {method} {url}"))?;
        self.client
            .request(req)
            .await
            .with_context(|| format!("calling {method} {url}"))
    }

    /// A plain GET of a whole URL without the key: where a signed-URL redirect points.
    pub async fn get_unauthenticated(&self, url: &str) -> anyhow::Result<Response<Incoming>> {
        let req = Request::get(url)
            .body(empty())
            .with_context(|| format!("building GET {url}"))?;
        self.client
            .request(req)
            .await
            .with_context(|| format!("calling GET {url}"))
    }

    /// A request whose answer is JSON: the value on success, the relay's error otherwise.
    pub async fn json(
        &self,
        method: Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> anyhow::Result<serde_json::Value> {
        let res = match body {
            Some(value) => {
                self.send(
                    method,
                    path,
                    &[("content-type", "application/json")],
                    full(value.to_string()),
                )
                .await?
            }
            None => self.send(method, path, &[], empty()).await?,
        };
        read_json(res).await
    }

    pub fn base(&self) -> &str {
        &self.base
    }
}

/// A whole body.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

pub fn empty() -> Body {
    Empty::new().map_err(|never| match never {}).boxed()
}

/// The JSON of a successful answer, or the relay's error (see [`error_of`]).
pub async fn read_json(res: Response<Incoming>) -> anyhow::Result<serde_json::Value> {
    let status = res.status();
    let bytes = res
        .into_body()
        .collect()
        .await
        .context("reading the answer")?
        .to_bytes();
    if !status.is_success() {
        return Err(error_of(status, &bytes));
    }
    serde_json::from_slice(&bytes).with_context(|| {
        format!(
            "the answer is not JSON: {}",
            String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
        )
    })
}

/// Reads a failed answer's body and turns it into the relay's error.
pub async fn fail(res: Response<Incoming>) -> anyhow::Error {
    let status = res.status();
    match res.into_body().collect().await {
        Ok(body) => error_of(status, &body.to_bytes()),
        Err(e) => anyhow!("{}: reading the error body: {e}", status.as_u16()),
    }
}

/// `<status> <code>: <message> (<detail>)` from either error shape the relay answers with:
/// `{"error": {"code", "message", "detail"}}` (videos) or the vendor's
/// `{"type": "error", "error": {"type", "message"}}` (messages).
pub fn error_of(status: StatusCode, body: &[u8]) -> anyhow::Error {
    let value: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let error = &value["error"];
    let text = |v: &serde_json::Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_owned);
    let Some(message) = text(&error["message"]) else {
        let raw = String::from_utf8_lossy(&body[..body.len().min(200)]);
        return anyhow!("{} {}", status.as_u16(), raw.trim());
    };
    let code = text(&error["code"])
        .or_else(|| text(&error["type"]))
        .unwrap_or_else(|| "error".to_owned());
    match text(&error["detail"]) {
        Some(detail) => anyhow!("{} {code}: {message} ({detail})", status.as_u16()),
        None => anyhow!("{} {code}: {message}", status.as_u16()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_error_shapes_read_as_one_line() {
        let videos = br#"{"error": {"code": "invalid_model", "message": "invalid model",
            "param": "model", "detail": "model must be model_h3, got \"x\"", "type": "invalid_request_error"}}"#;
        assert_eq!(
            error_of(StatusCode::BAD_REQUEST, videos).to_string(),
            r#"400 invalid_model: invalid model (model must be model_h3, got "x")"#
        );
        let vendor = br#"{"type": "error", "error": {"type": "invalid_request_error",
            "message": "invalid model"}, "request_id": "req_1"}"#;
        assert_eq!(
            error_of(StatusCode::BAD_REQUEST, vendor).to_string(),
            "400 invalid_request_error: invalid model"
        );
        assert_eq!(
            error_of(StatusCode::BAD_GATEWAY, b"bad gateway\n").to_string(),
            "502 bad gateway"
        );
    }
}
