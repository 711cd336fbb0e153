//! A small HTTP/1.1 client for the suite: one connection per request, whole bodies.

use std::time::Duration;

use anyhow::{Context, bail};
use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// An answer, read to the end.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Resp {
    /// The body as JSON, or `Null` when it is not JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// For failure lines: the status and the start of the body.
    pub fn describe(&self) -> String {
        let text = String::from_utf8_lossy(&self.body);
        let mut short: String = text.chars().take(300).collect();
        if short.len() < text.len() {
            short.push_str("...");
        }
        format!("{} {}", self.status.as_u16(), short)
    }
}

/// The relay under test: `http://host:port` on loopback or wherever it runs.
#[derive(Clone)]
pub struct Client {
    authority: String,
}

/// One request to send.
pub struct Req {
    pub method: Method,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
}

impl Req {
    pub fn new(method: Method, path: impl Into<String>) -> Req {
        Req {
            method,
            path: path.into(),
            headers: Vec::new(),
            body: Bytes::new(),
        }
    }
    pub fn get(path: impl Into<String>) -> Req {
        Req::new(Method::GET, path)
    }
    pub fn post(path: impl Into<String>) -> Req {
        Req::new(Method::POST, path)
    }
    pub fn header(mut self, name: &str, value: &str) -> Req {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }
    pub fn bearer(self, key: &str) -> Req {
        self.header("authorization", &format!("Bearer {key}"))
    }
    pub fn json(mut self, value: &serde_json::Value) -> Req {
        self.body = Bytes::from(value.to_string());
        self.header("content-type", "application/json")
    }
    pub fn raw(mut self, content_type: &str, body: impl Into<Bytes>) -> Req {
        self.body = body.into();
        self.header("content-type", content_type)
    }
}

/// A multipart/form-data body: (name, filename, content type, bytes) per part.
pub fn multipart(parts: &[(&str, Option<&str>, &str, &[u8])]) -> (String, Vec<u8>) {
    let boundary = "conformance-boundary-7f3a9c";
    let mut body = Vec::new();
    for (name, filename, content_type, bytes) in parts {
        body.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
        match filename {
            Some(f) => body.extend_from_slice(
                format!(
                    "Content-Disposition: form-data; name=\"{name}\"; filename=\"{f}\"\r\nContent-Type: {content_type}\r\n\r\n"
                )
                .as_bytes(),
            ),
            None => body.extend_from_slice(
                format!("Content-Disposition: form-data; name=\"{name}\"\r\n\r\n").as_bytes(),
            ),
        }
        body.extend_from_slice(bytes);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

impl Client {
    pub fn new(base_url: &str) -> anyhow::Result<Client> {
        let Some(rest) = base_url.strip_prefix("http://") else {
            bail!("--base-url must be http://host:port, got {base_url}");
        };
        let authority = rest.trim_end_matches('/').to_owned();
        if authority.is_empty() || authority.contains('/') {
            bail!("--base-url must be http://host:port, got {base_url}");
        }
        Ok(Client { authority })
    }

    /// Sends once; a `429` is returned as it is.
    pub async fn send_once(&self, req: Req) -> anyhow::Result<Resp> {
        let stream = TcpStream::connect(&self.authority)
            .await
            .with_context(|| format!("connecting to {}", self.authority))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .context("http handshake")?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut builder = Request::builder()
            .method(req.method)
            .uri(&req.path)
            .header("host", &self.authority);
        for (name, value) in &req.headers {
            builder = builder.header(name.as_str(), value.as_str());
        }
        let request = builder.body(Full::new(req.body))?;
        let fut = async {
            let res = sender.send_request(request).await?;
            let (parts, body) = res.into_parts();
            let body = body.collect().await?.to_bytes();
            anyhow::Ok(Resp {
                status: parts.status,
                headers: parts.headers,
                body,
            })
        };
        tokio::time::timeout(Duration::from_secs(60), fut)
            .await
            .context("no answer within 60 s")?
    }

    /// Sends, waiting out `429`s (up to five) as `retry-after-ms` says, so that checks that do
    /// not test rate limits are not disturbed by them.
    pub async fn send(&self, req: Req) -> anyhow::Result<Resp> {
        let mut left = 5;
        loop {
            let copy = Req {
                method: req.method.clone(),
                path: req.path.clone(),
                headers: req.headers.clone(),
                body: req.body.clone(),
            };
            let res = self.send_once(copy).await?;
            if res.status != StatusCode::TOO_MANY_REQUESTS || left == 0 {
                return Ok(res);
            }
            left -= 1;
            let wait = res
                .header("retry-after-ms")
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(1000)
                .min(5000);
            tokio::time::sleep(Duration::from_millis(wait + 20)).await;
        }
    }
}
