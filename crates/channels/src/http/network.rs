//! How a client reaches its upstreams ([`Network`]): the TLS roots it trusts (the built-in
//! webpki roots or the system's, and an operator's CA file beside them) and the HTTP proxy it
//! goes through, if any (a channel's own, or the environment's `HTTPS_PROXY`, `HTTP_PROXY`,
//! `ALL_PROXY` and `NO_PROXY`), which it asks for a tunnel with `CONNECT` ([`Dial`]).
//!
//! Through a proxy, the SSRF guard still applies to the upstream: a guarded client (result
//! downloads) looks the host up itself, refuses it as it would without a proxy, and asks the
//! proxy for a tunnel to the address it checked, never to the name. The proxy itself is the
//! operator's and is reached without the guard (it is often on a private network).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{HeaderValue, Uri};
use hyper_util::client::proxy::matcher::{Intercept, Matcher};
use hyper_util::rt::TokioIo;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tower_service::Service;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Connecting =
    std::pin::Pin<Box<dyn Future<Output = Result<TokioIo<TcpStream>, BoxError>> + Send + 'static>>;

/// The roots upstream certificates are checked against.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Roots {
    /// The Mozilla roots built into the relay (webpki-roots): the same everywhere.
    #[default]
    Webpki,
    /// The system's trust store (e.g. `/etc/ssl/certs`, or where `SSL_CERT_FILE` and
    /// `SSL_CERT_DIR` point).
    System,
}

/// Which proxy a client goes through.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ProxyChoice {
    /// None: every connection is direct.
    #[default]
    Direct,
    /// The environment's `HTTPS_PROXY` / `HTTP_PROXY` / `ALL_PROXY` (upper or lower case),
    /// except for the hosts `NO_PROXY` names; direct when none is set.
    Env,
    /// This proxy (`http://[user:pass@]host:port`) for every host but those `NO_PROXY` names.
    Url(String),
}

/// How a client reaches its upstreams, as configured.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkSettings {
    pub roots: Roots,
    /// PEM certificates trusted beside the roots (a private upstream's CA).
    pub ca_file: Option<PathBuf>,
    pub proxy: ProxyChoice,
}

/// Why the network settings cannot be used; the text names the setting at fault.
#[derive(Debug, thiserror::Error)]
pub enum NetworkError {
    #[error("ca_file {path}: {message}")]
    CaFile { path: String, message: String },
    #[error("roots = \"system\": {0}")]
    SystemRoots(String),
    #[error("{setting}: {message}")]
    Proxy { setting: String, message: String },
}

/// How a client reaches its upstreams, ready for use: cheap to clone. The default trusts the
/// built-in roots and uses no proxy.
#[derive(Clone)]
pub struct Network {
    pub(crate) tls: Arc<rustls::ClientConfig>,
    pub(crate) proxy: Option<Arc<Matcher>>,
}

impl std::fmt::Debug for Network {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Network")
            .field("proxy", &self.proxy)
            .finish_non_exhaustive()
    }
}

impl Default for Network {
    fn default() -> Network {
        static DEFAULT: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
        Network {
            tls: DEFAULT
                .get_or_init(|| Arc::new(fetch::tls_config()))
                .clone(),
            proxy: None,
        }
    }
}

impl Network {
    /// Reads the roots and the CA file, and the proxy from the settings or the environment.
    pub fn build(settings: &NetworkSettings) -> Result<Network, NetworkError> {
        let tls = tls_config(settings.roots, settings.ca_file.as_deref())?;
        let no_proxy = first_env(&["NO_PROXY", "no_proxy"]).map_or(String::new(), |(_, v)| v);
        let proxy = match &settings.proxy {
            ProxyChoice::Direct => None,
            ProxyChoice::Url(url) => {
                check_proxy_url(url).map_err(|message| NetworkError::Proxy {
                    setting: "proxy".into(),
                    message,
                })?;
                Some(Matcher::builder().all(url.clone()).no(no_proxy).build())
            }
            ProxyChoice::Env => {
                let mut any = false;
                for names in [
                    ["HTTPS_PROXY", "https_proxy"],
                    ["HTTP_PROXY", "http_proxy"],
                    ["ALL_PROXY", "all_proxy"],
                ] {
                    if let Some((name, url)) = first_env(&names) {
                        check_proxy_url(&url).map_err(|message| NetworkError::Proxy {
                            setting: format!("the environment's {name}"),
                            message,
                        })?;
                        any = true;
                    }
                }
                any.then(Matcher::from_env)
            }
        };
        Ok(Network {
            tls: Arc::new(tls),
            proxy: proxy.map(Arc::new),
        })
    }
}

/// The first of `names` set to something in the environment, with its value.
fn first_env(names: &[&'static str]) -> Option<(&'static str, String)> {
    names.iter().find_map(|name| {
        std::env::var(name)
            .ok()
            .filter(|v| !v.trim().is_empty())
            .map(|v| (*name, v))
    })
}

/// A proxy URL the relay can use: `http://` (the tunnel is asked for in the clear; what goes
/// through it is the upstream's TLS), a host, and nothing after the authority but `/`.
pub fn check_proxy_url(url: &str) -> Result<(), String> {
    let uri: Uri = url
        .parse()
        .map_err(|_| format!("{:?} is not a URL", redact_userinfo(url)))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some(other) => {
            return Err(format!(
                "{other}:// proxies are not supported; use an http:// proxy (it tunnels https with CONNECT)"
            ));
        }
        None => return Err("the URL must start with http://".into()),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err("the URL names no host".into());
    }
    if uri.path_and_query().is_some_and(|p| p.as_str() != "/") {
        return Err("the URL must have no path or query".into());
    }
    Ok(())
}

/// The URL without the password of its user info, for messages.
fn redact_userinfo(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}://***@{}", &url[..scheme], &url[at + 1..])
        }
        _ => url.to_owned(),
    }
}

/// Whether `path` holds PEM certificates the relay can trust: how many.
pub fn check_ca_file(path: &Path) -> Result<usize, NetworkError> {
    read_ca_file(path).map(|certs| certs.len())
}

fn read_ca_file(path: &Path) -> Result<Vec<CertificateDer<'static>>, NetworkError> {
    let fail = |message: String| NetworkError::CaFile {
        path: path.display().to_string(),
        message,
    };
    let pem = std::fs::read(path).map_err(|e| fail(e.to_string()))?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| fail(format!("not PEM certificates: {e}")))?;
    if certs.is_empty() {
        return Err(fail("no certificate in it (PEM, BEGIN CERTIFICATE)".into()));
    }
    Ok(certs)
}

/// The system's roots, read once: every certificate of the trust store that parses.
fn system_roots() -> Result<&'static [CertificateDer<'static>], NetworkError> {
    static ROOTS: OnceLock<Result<Vec<CertificateDer<'static>>, String>> = OnceLock::new();
    let roots = ROOTS.get_or_init(|| {
        let found = rustls_native_certs::load_native_certs();
        if found.certs.is_empty() {
            let why = found
                .errors
                .first()
                .map_or_else(|| "it is empty".to_owned(), ToString::to_string);
            return Err(format!(
                "no trusted certificate found in the system's store: {why}"
            ));
        }
        Ok(found.certs)
    });
    match roots {
        Ok(certs) => Ok(certs),
        Err(message) => Err(NetworkError::SystemRoots(message.clone())),
    }
}

/// Whether the system's trust store has roots the relay can use.
pub fn check_system_roots() -> Result<(), NetworkError> {
    tls_config(Roots::System, None).map(|_| ())
}

/// rustls with the ring provider, trusting `roots` and the certificates of `ca_file`.
fn tls_config(roots: Roots, ca_file: Option<&Path>) -> Result<rustls::ClientConfig, NetworkError> {
    let mut store = rustls::RootCertStore::empty();
    match roots {
        Roots::Webpki => store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        Roots::System => {
            let (added, _) = store.add_parsable_certificates(system_roots()?.iter().cloned());
            if added == 0 {
                return Err(NetworkError::SystemRoots(
                    "none of the system's certificates is usable as a root".into(),
                ));
            }
        }
    }
    if let Some(path) = ca_file {
        for cert in read_ca_file(path)? {
            store.add(cert).map_err(|e| NetworkError::CaFile {
                path: path.display().to_string(),
                message: format!("not a usable CA certificate: {e}"),
            })?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map(|b| b.with_root_certificates(store).with_no_client_auth())
        .map_err(|e| NetworkError::CaFile {
            path: String::new(),
            message: e.to_string(),
        })
}

/// How a new connection's TCP stream is had: straight to the upstream through the SSRF guard,
/// or through a tunnel a proxy opens to it. Called for new connections only; without a proxy
/// it is the guarded connector's own call.
#[derive(Clone)]
pub(crate) struct Dial {
    direct: fetch::GuardedConnector,
    proxy: Option<Arc<Matcher>>,
    /// The guard, when the client has one: then the tunnel goes to an address checked here.
    guard: Option<Arc<fetch::GuardPolicy>>,
}

impl Dial {
    pub(crate) fn new(
        guard: Option<Arc<fetch::GuardPolicy>>,
        connect_timeout: Duration,
        network: &Network,
    ) -> Dial {
        let policy = guard
            .clone()
            .unwrap_or_else(|| Arc::new(fetch::GuardPolicy::new(true)));
        Dial {
            direct: fetch::GuardedConnector::new(policy, connect_timeout),
            proxy: network.proxy.clone(),
            guard,
        }
    }
}

impl Service<Uri> for Dial {
    type Response = TokioIo<TcpStream>;
    type Error = BoxError;
    type Future = Connecting;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.direct.poll_ready(cx)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        match self.proxy.as_ref().and_then(|p| p.intercept(&uri)) {
            None => self.direct.call(uri),
            Some(proxy) => Box::pin(tunnel(proxy, uri, self.guard.clone())),
        }
    }
}

/// A proxy's failure to give a tunnel; the text names the proxy (without credentials).
#[derive(Debug, thiserror::Error)]
#[error("proxy {proxy}: {message}")]
pub struct ProxyError {
    proxy: String,
    message: String,
}

/// The largest answer head a proxy may give to `CONNECT`.
const MAX_PROXY_HEAD: usize = 8 * 1024;

/// A TCP stream to the proxy `intercept` names, tunnelled to `target`'s host and port.
async fn tunnel(
    intercept: Intercept,
    target: Uri,
    guard: Option<Arc<fetch::GuardPolicy>>,
) -> Result<TokioIo<TcpStream>, BoxError> {
    let proxy = intercept.uri();
    let name = format!(
        "{}:{}",
        proxy.host().unwrap_or_default(),
        proxy.port_u16().unwrap_or(80)
    );
    let fail = |message: String| -> BoxError {
        Box::new(ProxyError {
            proxy: name.clone(),
            message,
        })
    };
    let host = target
        .host()
        .ok_or_else(|| fail("no host to tunnel to".into()))?;
    let port = target
        .port_u16()
        .unwrap_or(if target.scheme_str() == Some("http") {
            80
        } else {
            443
        });
    let to = match &guard {
        // The address is checked here, and the proxy told that address, not the name.
        Some(policy) => {
            let bare = host.trim_start_matches('[').trim_end_matches(']');
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((bare, port))
                .await
                .map_err(|e| fail(format!("looking up {host}: {e}")))?
                .collect();
            let Some(addr) = addrs.iter().find(|a| !policy.refuses(a.ip())) else {
                return Err(Box::new(fetch::BlockedError {
                    host: host.to_owned(),
                }));
            };
            addr.to_string()
        }
        None => format!("{host}:{port}"),
    };
    let mut stream = TcpStream::connect(name.as_str())
        .await
        .map_err(|e| fail(format!("connecting: {e}")))?;
    stream
        .set_nodelay(true)
        .map_err(|e| fail(format!("connecting: {e}")))?;
    let mut ask = format!("CONNECT {to} HTTP/1.1\r\nHost: {to}\r\n").into_bytes();
    if let Some(auth) = intercept.basic_auth() {
        header(&mut ask, b"proxy-authorization", auth);
    }
    ask.extend_from_slice(b"\r\n");
    stream
        .write_all(&ask)
        .await
        .map_err(|e| fail(format!("asking for a tunnel: {e}")))?;
    let mut head = Vec::with_capacity(512);
    loop {
        let mut more = [0u8; 1024];
        let n = stream
            .read(&mut more)
            .await
            .map_err(|e| fail(format!("reading its answer to CONNECT: {e}")))?;
        if n == 0 {
            return Err(fail(
                "closed the connection instead of answering CONNECT".into(),
            ));
        }
        head.extend_from_slice(&more[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut res = httparse::Response::new(&mut headers);
        match res.parse(&head) {
            Ok(httparse::Status::Complete(len)) => {
                let code = res.code.unwrap_or(0);
                if code == 407 {
                    return Err(fail(
                        "asks for credentials (407): give user:pass@ in the proxy's URL".into(),
                    ));
                }
                if !(200..300).contains(&code) {
                    return Err(fail(format!("refused a tunnel to {to} ({code})")));
                }
                if len != head.len() {
                    return Err(fail("sent bytes past its answer to CONNECT".into()));
                }
                return Ok(TokioIo::new(stream));
            }
            Ok(httparse::Status::Partial) if head.len() < MAX_PROXY_HEAD => {}
            Ok(httparse::Status::Partial) => {
                return Err(fail("its answer to CONNECT is too long".into()));
            }
            Err(e) => return Err(fail(format!("its answer to CONNECT is not HTTP: {e}"))),
        }
    }
}

fn header(out: &mut Vec<u8>, name: &[u8], value: &HeaderValue) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value.as_bytes());
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests;
