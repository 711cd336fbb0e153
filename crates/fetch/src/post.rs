//! Posting to client-given URLs (webhook deliveries), behind the same SSRF guard as fetches:
//! one request, no redirects followed, a timeout over the whole exchange up to the answer's
//! head; the answer's body is not read.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, USER_AGENT};
use http::{HeaderName, HeaderValue, Request};
use http_body_util::Full;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::error::FetchError;
use crate::fetch::{client_error, parse_http_url, tls_config};
use crate::guard::{GuardedConnector, Policy, literal_ip};

/// The `User-Agent` of every post.
pub const POST_USER_AGENT: &str = concat!("video-relay/", env!("CARGO_PKG_VERSION"), " (webhooks)");

type PostClient = Client<HttpsConnector<GuardedConnector>, Full<Bytes>>;

/// Posts JSON bodies to URLs it is handed. Cheap to clone: clones share one connection pool.
#[derive(Clone)]
pub struct Poster {
    client: PostClient,
    policy: Arc<Policy>,
    timeout: Duration,
}

impl std::fmt::Debug for Poster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Poster")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Poster {
    /// A poster refusing private addresses unless `allow_private`; `timeout` covers each post.
    pub fn new(allow_private: bool, timeout: Duration) -> Poster {
        let policy = Arc::new(Policy::new(allow_private));
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls_config())
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .wrap_connector(GuardedConnector::new(Arc::clone(&policy), timeout));
        let client = Client::builder(TokioExecutor::new())
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(2)
            .build(connector);
        Poster {
            client,
            policy,
            timeout,
        }
    }

    /// What can be told of `url` without a lookup: an http(s) URL with a host and no
    /// credentials, whose host is not an address the guard refuses.
    pub fn check_url(&self, url: &str) -> Result<(), FetchError> {
        let uri = parse_http_url(url)?;
        if literal_ip(&uri).is_some_and(|ip| self.policy.refuses(ip)) {
            return Err(FetchError::Blocked {
                host: uri.host().unwrap_or_default().to_owned(),
            });
        }
        Ok(())
    }

    /// POSTs `body` as `application/json` with `headers`; the answer's status. A redirect is
    /// an answer like any other (not followed).
    pub async fn post_json(
        &self,
        url: &str,
        headers: &[(HeaderName, HeaderValue)],
        body: Bytes,
    ) -> Result<u16, FetchError> {
        self.check_url(url)?;
        let uri = parse_http_url(url)?;
        let host = uri.host().unwrap_or_default().to_owned();
        let mut request = Request::post(uri)
            .header(USER_AGENT, POST_USER_AGENT)
            .header(CONTENT_TYPE, "application/json")
            .body(Full::new(body))
            .map_err(|_| FetchError::InvalidUrl("not a valid URL".to_owned()))?;
        for (name, value) in headers {
            request.headers_mut().insert(name.clone(), value.clone());
        }
        match tokio::time::timeout(self.timeout, self.client.request(request)).await {
            Ok(Ok(response)) => Ok(response.status().as_u16()),
            Ok(Err(err)) => Err(client_error(&err, &host)),
            Err(_) => Err(FetchError::Timeout),
        }
    }
}
