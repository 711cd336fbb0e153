//! The `tls` section, and the TLS the bench's parties speak: a certificate the bench makes
//! (a private CA and the certificate it signs for 127.0.0.1), the fake messages upstream
//! serving HTTPS with it (HTTP/2 or HTTP/1.1 by ALPN, hyper-util's auto builder), counting its
//! TLS handshakes (new and resumed) and requests into a stats file, and the floor proxy's
//! client to it, trusting the CA as the relay's channel does through `ca_file`.
//!
//! The section measures `/v1/messages`, whole answers and streams, at 32 connections and at
//! one, through the relay and the floor (both served plain HTTP by the load generator, both
//! calling the fake over TLS) and direct to the fake (`wrk` over TLS). Each path has a fake of
//! its own, so that its handshakes are its own.

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use super::generator::{Gen, Load};
use super::load::mib;
use super::measure::{ATTEMPTS, Run, TURNS, Watch, measured, measured_turns, median_pair};
use super::party::Party;
use super::relays::{Ctx, messages_config, start_in_temp};
use super::report::{Report, conns, thousands};

/// The files of the bench's certificate: the CA (what the relay and the floor trust), and the
/// upstream's certificate and key.
pub struct Certs {
    _dir: tempfile::TempDir,
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Certs {
    /// A fresh CA and a certificate it signs for `127.0.0.1` and `localhost`.
    pub fn make() -> anyhow::Result<Certs> {
        let dir = tempfile::Builder::new()
            .prefix("relay-bench-tls-")
            .tempdir()
            .context("creating a temporary directory")?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;
        let key = KeyPair::generate()?;
        let cert = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])?
            .signed_by(&key, &ca)?;
        let at = |name: &str| dir.path().join(name);
        std::fs::write(at("ca.pem"), ca.pem())?;
        std::fs::write(at("cert.pem"), cert.pem())?;
        std::fs::write(at("key.pem"), key.serialize_pem())?;
        Ok(Certs {
            ca: at("ca.pem"),
            cert: at("cert.pem"),
            key: at("key.pem"),
            _dir: dir,
        })
    }

    /// The `bench-party` arguments that make a fake serve HTTPS with this certificate, its
    /// counts written to `stats`.
    pub fn party_args<'a>(&'a self, stats: &'a Path) -> Vec<&'a str> {
        vec![
            "--cert",
            path_str(&self.cert),
            "--key",
            path_str(&self.key),
            "--stats",
            path_str(stats),
        ]
    }
}

fn path_str(p: &Path) -> &str {
    p.to_str().unwrap_or_default()
}

/// What a TLS fake counts: connections (each a full handshake or a resumed one), which
/// protocol ALPN picked, and requests.
#[derive(Default)]
pub struct Stats {
    pub handshakes: AtomicU64,
    pub resumed: AtomicU64,
    pub failed: AtomicU64,
    pub h2: AtomicU64,
    pub h1: AtomicU64,
    pub requests: AtomicU64,
}

/// [`Stats`] as read from its file.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counts {
    pub handshakes: u64,
    pub resumed: u64,
    pub failed: u64,
    pub h2: u64,
    pub h1: u64,
    pub requests: u64,
}

impl Stats {
    fn line(&self) -> String {
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        format!(
            "{} {} {} {} {} {}\n",
            n(&self.handshakes),
            n(&self.resumed),
            n(&self.failed),
            n(&self.h2),
            n(&self.h1),
            n(&self.requests)
        )
    }

    /// Writes the counts to `file` every 50 ms while they change (through a rename, so that a
    /// reader never sees half a line).
    pub fn keep_writing(self: Arc<Self>, file: PathBuf) {
        tokio::spawn(async move {
            let temp = file.with_extension("tmp");
            let mut last = String::new();
            loop {
                let line = self.line();
                if line != last
                    && std::fs::write(&temp, &line).is_ok()
                    && std::fs::rename(&temp, &file).is_ok()
                {
                    last = line;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
    }
}

impl Counts {
    /// The counts in `file`, zero when it is not written yet.
    pub fn read(file: &Path) -> Counts {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let n: Vec<u64> = text
            .split_whitespace()
            .filter_map(|f| f.parse().ok())
            .collect();
        let at = |i: usize| n.get(i).copied().unwrap_or(0);
        Counts {
            handshakes: at(0),
            resumed: at(1),
            failed: at(2),
            h2: at(3),
            h1: at(4),
            requests: at(5),
        }
    }

    /// The counts after `self`, once the fake has written them: waits until its file stops
    /// changing (its writer looks every 50 ms).
    pub fn settled(file: &Path) -> Counts {
        let mut last = Counts::read(file);
        loop {
            std::thread::sleep(Duration::from_millis(120));
            let now = Counts::read(file);
            if now.requests == last.requests && now.handshakes == last.handshakes {
                return now;
            }
            last = now;
        }
    }

    /// What ALPN gave, in words.
    pub fn protocol(&self) -> &'static str {
        match (self.h2 > 0, self.h1 > 0) {
            (true, false) => "HTTP/2",
            (false, true) => "HTTP/1.1",
            (true, true) => "HTTP/2 and HTTP/1.1",
            (false, false) => "none",
        }
    }

    /// TLS handshakes (new and resumed) per 1,000 requests.
    pub fn per_thousand(&self) -> f64 {
        self.handshakes as f64 * 1000.0 / (self.requests.max(1) as f64)
    }
}

/// A TLS acceptor with the certificate and key in `cert` and `key` (PEM), offering HTTP/2 and
/// HTTP/1.1 by ALPN, with rustls's default session cache and tickets (resumption).
pub fn acceptor(cert: &Path, key: &Path) -> anyhow::Result<TlsAcceptor> {
    let chain = CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("reading {}", cert.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("reading {}", cert.display()))?;
    let key =
        PrivateKeyDer::from_pem_file(key).with_context(|| format!("reading {}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    config.ticketer = rustls::crypto::ring::Ticketer::new()?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Serves HTTPS on `listener` with `answer` (HTTP/2 or HTTP/1.1 as ALPN picked), a task per
/// connection, counting into `stats`, until the process ends.
pub async fn serve_tls<F, Fut, B>(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    stats: Arc<Stats>,
    answer: Arc<F>,
) where
    F: Fn(Request<Incoming>) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Response<B>> + Send + 'static,
    B: hyper::body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    // Every stream of the open-streams run on as few connections as the client opens.
    builder.http2().max_concurrent_streams(100_000);
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let _ = stream.set_nodelay(true);
        let (acceptor, stats, answer, builder) = (
            acceptor.clone(),
            stats.clone(),
            answer.clone(),
            builder.clone(),
        );
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(stream).await else {
                stats.failed.fetch_add(1, Ordering::Relaxed);
                return;
            };
            {
                let (_, conn) = tls.get_ref();
                stats.handshakes.fetch_add(1, Ordering::Relaxed);
                if conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed) {
                    stats.resumed.fetch_add(1, Ordering::Relaxed);
                }
                if conn.alpn_protocol() == Some(b"h2") {
                    stats.h2.fetch_add(1, Ordering::Relaxed);
                } else {
                    stats.h1.fetch_add(1, Ordering::Relaxed);
                }
            }
            let svc = service_fn(move |req| {
                stats.requests.fetch_add(1, Ordering::Relaxed);
                let res = answer(req);
                async move { Ok::<_, Infallible>(res.await) }
            });
            let _ = builder.serve_connection(TokioIo::new(tls), svc).await;
        });
    }
}

/// The floor's client to a TLS upstream: HTTP/2 or HTTP/1.1 by ALPN, trusting the CA in `ca`.
pub fn floor_client(
    ca: &Path,
) -> anyhow::Result<Client<hyper_rustls::HttpsConnector<HttpConnector>, Incoming>> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in
        CertificateDer::pem_file_iter(ca).with_context(|| format!("reading {}", ca.display()))?
    {
        roots.add(cert.with_context(|| format!("reading {}", ca.display()))?)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    http.enforce_http(false);
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_only()
        .enable_http1()
        .enable_http2()
        .wrap_connector(http);
    Ok(Client::builder(TokioExecutor::new()).build(connector))
}

/// The relay's config for a TLS fake at `upstream`, trusting `certs`' CA through the channel's
/// `ca_file`.
pub fn relay_config(upstream: std::net::SocketAddr, certs: &Certs) -> String {
    format!(
        "{}ca_file = {:?}\n",
        messages_config(upstream).replace("base_url = \"http://", "base_url = \"https://"),
        path_str(&certs.ca)
    )
}

const REQUEST: &str =
    r#"{"model":"bench-chat","max_tokens":64,"messages":[{"role":"user","content":"Say hello."}]}"#;

/// Connections of the loaded runs.
const CONNS: usize = 32;

pub fn messages_load(key: &str, stream: bool, addr: std::net::SocketAddr, secs: u64) -> Load {
    let body = if stream {
        REQUEST.replacen('{', "{\"stream\":true,", 1)
    } else {
        REQUEST.to_owned()
    };
    Load {
        addr,
        conns: CONNS,
        secs,
        method: "POST",
        path: "/v1/messages".into(),
        headers: vec![
            ("x-api-key", key.to_owned()),
            ("anthropic-version", "2023-06-01".into()),
            ("content-type", "application/json".into()),
        ],
        body,
        paths_file: None,
    }
}

/// The `tls` section.
pub fn run(ctx: &Ctx, report: &mut Report) -> anyhow::Result<()> {
    let certs = Certs::make()?;
    let stats_dir = tempfile::Builder::new()
        .prefix("relay-bench-tls-stats-")
        .tempdir()?;
    let stats = |name: &str| stats_dir.path().join(name);
    let (direct_stats, floor_stats, relay_stats) =
        (stats("direct"), stats("floor"), stats("relay"));
    let fake_direct = Party::start(
        &ctx.xtask,
        "fake-messages",
        &certs.party_args(&direct_stats),
    )?;
    let fake_floor = Party::start(&ctx.xtask, "fake-messages", &certs.party_args(&floor_stats))?;
    let fake_relay = Party::start(&ctx.xtask, "fake-messages", &certs.party_args(&relay_stats))?;
    let floor = Party::start(
        &ctx.xtask,
        "floor",
        &[
            "--upstream",
            &fake_floor.addr.to_string(),
            "--ca",
            path_str(&certs.ca),
        ],
    )?;
    let relay = start_in_temp(&ctx.relay, &relay_config(fake_relay.addr, &certs))?;
    let own = [
        fake_direct.pid(),
        fake_floor.pid(),
        fake_relay.pid(),
        floor.pid(),
        relay.pid(),
    ];
    let start = [
        Counts::read(&direct_stats),
        Counts::read(&floor_stats),
        Counts::read(&relay_stats),
    ];

    let mut lines = Vec::new();
    for (kind, stream, target) in [("whole answers", false, 0.85), ("streams", true, 0.9)] {
        let load = messages_load(&relay.key, stream, fake_direct.addr, ctx.secs);
        for n in [CONNS, 1] {
            let load = load.conns(n);
            let label = format!("TLS {kind}: direct, {}", conns(n));
            let direct = measured(
                &ctx.gens,
                Gen::WrkTls,
                &load,
                &Watch {
                    server: fake_direct.pid(),
                    own: &own,
                },
                ATTEMPTS,
                &label,
            )?;
            // At one connection our generator, for its time to the first byte.
            let generator = if n == 1 { Gen::Ours } else { Gen::Wrk };
            let label = format!(
                "TLS {kind}: floor, relay, {}, {}",
                conns(n),
                generator.name()
            );
            let pairs = measured_turns(
                &ctx.gens,
                generator,
                [
                    (
                        &load.at(floor.addr),
                        &Watch {
                            server: floor.pid(),
                            own: &own,
                        },
                    ),
                    (
                        &load.at(relay.addr),
                        &Watch {
                            server: relay.pid(),
                            own: &own,
                        },
                    ),
                ],
                TURNS,
                ATTEMPTS,
                &label,
            )?;
            let key = |[f, r]: &[Run; 2]| {
                if n > 1 {
                    r.rps() / f.rps()
                } else {
                    r.out.p50_us - f.out.p50_us
                }
            };
            let ([f, r], each) =
                median_pair(pairs, key).ok_or_else(|| anyhow::anyhow!("{label}: no turn"))?;
            report.run(
                &format!("`/v1/messages` {kind} over TLS: direct to the fake"),
                &direct,
            );
            report.run(&format!("`/v1/messages` {kind} over TLS: floor proxy"), &f);
            report.run(&format!("`/v1/messages` {kind} over TLS: relay"), &r);
            let each: Vec<String> = each
                .iter()
                .map(|x| {
                    if n > 1 {
                        format!("{x:.2}")
                    } else {
                        format!("{x:+.0} µs")
                    }
                })
                .collect();
            if n > 1 {
                let ratio = r.rps() / f.rps();
                report.ratio(format!(
                    "TLS {kind}, {n} conns: relay ÷ floor = {ratio:.2} ({} ÷ {} req/s; direct {} req/s), in its {} turns: {}; \
                     CPU per request: relay {:.1} µs, floor {:.1} µs, fake (direct) {:.1} µs; relay RSS {:.1} MiB at the end",
                    thousands(r.rps()),
                    thousands(f.rps()),
                    thousands(direct.rps()),
                    each.len(),
                    each.join(", "),
                    r.cpu_us,
                    f.cpu_us,
                    direct.cpu_us,
                    mib(r.rss_end_kib),
                ));
                report.target(
                    ratio >= target,
                    format!(
                        "TLS {kind}: relay ÷ floor >= {target} at {n} conns: {ratio:.2} ({} ÷ {} req/s)",
                        thousands(r.rps()),
                        thousands(f.rps())
                    ),
                );
            } else {
                let ttfb = match (r.out.ttfb_us, f.out.ttfb_us) {
                    (Some(a), Some(b)) => format!(
                        "; first byte p50 / p99: relay {:.0} / {:.0} µs, floor {:.0} / {:.0} µs",
                        a.0, a.1, b.0, b.1
                    ),
                    _ => String::new(),
                };
                lines.push(format!(
                    "TLS {kind}, 1 conn: p50 / p99 relay {:.0} / {:.0} µs, floor {:.0} / {:.0} µs, direct {:.0} / {:.0} µs \
                     (relay − floor p50 in its {} turns: {}){ttfb}",
                    r.out.p50_us,
                    r.out.p99_us,
                    f.out.p50_us,
                    f.out.p99_us,
                    direct.out.p50_us,
                    direct.out.p99_us,
                    each.len(),
                    each.join(", ")
                ));
            }
        }
    }
    for line in lines {
        report.ratio(line);
    }
    let end = [
        Counts::settled(&direct_stats),
        Counts::settled(&floor_stats),
        Counts::settled(&relay_stats),
    ];
    for (name, (a, b)) in ["direct (wrk)", "floor", "relay"]
        .iter()
        .zip(start.iter().zip(end.iter()))
    {
        let d = Counts {
            handshakes: b.handshakes.saturating_sub(a.handshakes),
            resumed: b.resumed.saturating_sub(a.resumed),
            failed: b.failed.saturating_sub(a.failed),
            h2: b.h2.saturating_sub(a.h2),
            h1: b.h1.saturating_sub(a.h1),
            requests: b.requests.saturating_sub(a.requests),
        };
        report.ratio(format!(
            "TLS handshakes at the fake, {name}: {} over {} requests ({:.2} per 1,000 requests; {} resumed, {} failed), \
             protocol by ALPN: {} ({} HTTP/2, {} HTTP/1.1 connections)",
            thousands(d.handshakes as f64),
            thousands(d.requests as f64),
            d.per_thousand(),
            d.resumed,
            d.failed,
            d.protocol(),
            d.h2,
            d.h1
        ));
        if *name == "relay" {
            report.target(
                d.per_thousand() < 1.0,
                format!(
                    "TLS: the relay reuses its upstream connections: {:.2} handshakes per 1,000 requests ({}, {} connections)",
                    d.per_thousand(),
                    d.protocol(),
                    d.handshakes
                ),
            );
        }
    }
    Ok(())
}
