//! One keep-alive HTTP/1.1 connection to the relay, with a timeout on every request.

use std::time::Duration;

use anyhow::{Context, bail};
use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpStream;

pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// One keep-alive HTTP/1.1 connection to the relay.
pub struct Conn {
    authority: String,
    sender: Option<SendRequest<Full<Bytes>>>,
}

impl Conn {
    pub fn new(base: &str) -> Conn {
        Conn {
            authority: base.trim_start_matches("http://").to_owned(),
            sender: None,
        }
    }

    pub async fn send(
        &mut self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&Value>,
    ) -> anyhow::Result<(StatusCode, Bytes)> {
        let result = tokio::time::timeout(
            REQUEST_TIMEOUT,
            self.send_inner(method, path, headers, body),
        )
        .await
        .with_context(|| format!("{path}: no answer within {REQUEST_TIMEOUT:?}"))
        .and_then(|r| r);
        if result.is_err() {
            self.sender = None;
        }
        result
    }

    async fn send_inner(
        &mut self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&Value>,
    ) -> anyhow::Result<(StatusCode, Bytes)> {
        if self.sender.as_ref().is_none_or(|s| s.is_closed()) {
            let stream = TcpStream::connect(&self.authority)
                .await
                .with_context(|| format!("connecting to {}", self.authority))?;
            let _ = stream.set_nodelay(true);
            let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .context("http handshake")?;
            tokio::spawn(async move {
                let _ = conn.await;
            });
            self.sender = Some(sender);
        }
        let Some(sender) = self.sender.as_mut() else {
            bail!("no connection");
        };
        sender.ready().await.context("connection")?;
        let mut builder = Request::builder()
            .method(method)
            .uri(path)
            .header("host", &self.authority);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        let bytes = match body {
            Some(v) => {
                builder = builder.header("content-type", "application/json");
                Bytes::from(v.to_string())
            }
            None => Bytes::new(),
        };
        let res = sender
            .send_request(builder.body(Full::new(bytes))?)
            .await
            .with_context(|| path.to_owned())?;
        let status = res.status();
        let body = res
            .into_body()
            .collect()
            .await
            .with_context(|| format!("{path}: body"))?
            .to_bytes();
        Ok((status, body))
    }

    pub async fn get_json(
        &mut self,
        path: &str,
        bearer: &str,
    ) -> anyhow::Result<(StatusCode, Value)> {
        let auth = format!("Bearer {bearer}");
        let (status, body) = self
            .send(Method::GET, path, &[("authorization", &auth)], None)
            .await?;
        let value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        Ok((status, value))
    }
}
