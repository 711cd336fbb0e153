//! The object store's HTTP transport: one pooled hyper-util client with rustls (ring, webpki
//! roots), the stack the rest of the relay uses, so no second TLS stack comes in.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use http_body_util::BodyExt;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector as TcpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use object_store::client::{
    ClientOptions, HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest,
    HttpRequestBody, HttpResponse, HttpResponseBody, HttpService,
};

/// How long a connection may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Hands the object store a [`Hyper`] client.
#[derive(Debug, Default)]
pub struct HyperConnector;

impl HttpConnector for HyperConnector {
    fn connect(&self, _options: &ClientOptions) -> object_store::Result<HttpClient> {
        let tls = tls_config().map_err(|e| object_store::Error::Generic {
            store: "S3",
            source: Box::new(e),
        })?;
        let mut tcp = TcpConnector::new();
        tcp.enforce_http(false);
        tcp.set_connect_timeout(Some(CONNECT_TIMEOUT));
        tcp.set_nodelay(true);
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .wrap_connector(tcp);
        let client = Client::builder(TokioExecutor::new())
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(60))
            .pool_max_idle_per_host(16)
            .build(connector);
        Ok(HttpClient::new(Hyper { client }))
    }
}

fn tls_config() -> Result<rustls::ClientConfig, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// The client the object store sends its requests through; answers stream back.
#[derive(Debug)]
struct Hyper {
    client: Client<HttpsConnector<TcpConnector>, HttpRequestBody>,
}

#[async_trait]
impl HttpService for Hyper {
    async fn call(&self, req: HttpRequest) -> Result<HttpResponse, HttpError> {
        let res = self.client.request(req).await.map_err(|e| {
            let kind = if e.is_connect() {
                HttpErrorKind::Connect
            } else {
                HttpErrorKind::Request
            };
            HttpError::new(kind, e)
        })?;
        Ok(res.map(|body| {
            HttpResponseBody::new(body.map_err(|e| {
                let kind = if e.is_timeout() {
                    HttpErrorKind::Timeout
                } else if e.is_incomplete_message() || e.is_canceled() {
                    HttpErrorKind::Interrupted
                } else {
                    HttpErrorKind::Decode
                };
                HttpError::new(kind, e)
            }))
        }))
    }
}
