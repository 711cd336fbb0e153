//! The bench's servers and load generator: a loopback hyper server for canned answers, a bare
//! "hello" server, and fixed-connection load, plus the process statistics it reads.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};

/// Serves `make(request)` on a fresh loopback port until the process ends.
pub async fn serve<F>(make: F) -> anyhow::Result<SocketAddr>
where
    F: Fn(
            Request<Incoming>,
        )
            -> std::pin::Pin<Box<dyn std::future::Future<Output = Response<Full<Bytes>>> + Send>>
        + Send
        + Sync
        + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let make = Arc::new(make);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            let make = make.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req| {
                    let make = make.clone();
                    async move { Ok::<_, Infallible>(make(req).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    Ok(addr)
}

/// A bare hyper "hello" server.
pub async fn hello() -> anyhow::Result<SocketAddr> {
    serve(|_req| {
        Box::pin(async { Response::new(Full::new(Bytes::from_static(b"{\"hello\":true}"))) })
    })
    .await
}

#[derive(Clone)]
pub struct Call {
    pub method: &'static str,
    pub path: String,
    pub headers: Vec<(&'static str, String)>,
    pub body: Bytes,
}

/// The path of request number `n` (unique per run), when it varies.
pub type Paths = Arc<dyn Fn(u64) -> String + Send + Sync>;

#[derive(Debug, Default, Clone)]
pub struct Load {
    pub ok: u64,
    pub errors: u64,
    pub secs: f64,
    pub latencies_us: Vec<u64>,
    /// Time from sending each request to its answer's first body byte.
    pub first_byte_us: Vec<u64>,
}

impl Load {
    pub fn rps(&self) -> f64 {
        self.ok as f64 / self.secs
    }
    pub fn pct(&self, p: f64) -> u64 {
        percentile(&self.latencies_us, p)
    }

    /// A percentile of the time to the first body byte.
    pub fn first_byte_pct(&self, p: f64) -> u64 {
        percentile(&self.first_byte_us, p)
    }
}

fn percentile(values: &[u64], p: f64) -> u64 {
    if values.is_empty() {
        return 0;
    }
    let mut v = values.to_vec();
    v.sort_unstable();
    v[((v.len() - 1) as f64 * p) as usize]
}

/// `conns` connections, each sending `call` back to back for `duration` (bounded).
pub async fn load(
    addr: SocketAddr,
    conns: usize,
    duration: Duration,
    call: Call,
    expect: u16,
) -> Load {
    load_paths(addr, conns, duration, call, None, expect).await
}

/// [`load`], with the path of each request from `paths` when given.
pub async fn load_paths(
    addr: SocketAddr,
    conns: usize,
    duration: Duration,
    call: Call,
    paths: Option<Paths>,
    expect: u16,
) -> Load {
    let deadline = Instant::now() + duration;
    let started = Instant::now();
    let mut workers = Vec::new();
    for worker in 0..conns {
        let call = call.clone();
        let paths = paths.clone();
        workers.push(tokio::spawn(async move {
            let mut out = Load::default();
            let Ok(stream) = TcpStream::connect(addr).await else {
                out.errors += 1;
                return out;
            };
            let _ = stream.set_nodelay(true);
            let Ok((mut send, conn)) =
                hyper::client::conn::http1::handshake(TokioIo::new(stream)).await
            else {
                out.errors += 1;
                return out;
            };
            tokio::spawn(conn);
            let mut n = (worker as u64) << 32;
            while Instant::now() < deadline {
                let mut req = Request::builder().method(call.method);
                req = match &paths {
                    Some(paths) => req.uri(paths(n)),
                    None => req.uri(&call.path),
                };
                n += 1;
                req = req.header("host", "bench");
                for (k, v) in &call.headers {
                    req = req.header(*k, v);
                }
                let Ok(req) = req.body(Full::new(call.body.clone())) else {
                    break;
                };
                let t = Instant::now();
                match send.send_request(req).await {
                    Ok(res) => {
                        let status = res.status().as_u16();
                        let mut body = res.into_body();
                        let first = body.frame().await;
                        let first_byte = t.elapsed();
                        let done =
                            matches!(first, None | Some(Ok(_))) && body.collect().await.is_ok();
                        if status == expect && done {
                            out.ok += 1;
                            out.latencies_us.push(t.elapsed().as_micros() as u64);
                            out.first_byte_us.push(first_byte.as_micros() as u64);
                        } else {
                            out.errors += 1;
                        }
                    }
                    Err(_) => {
                        out.errors += 1;
                        break;
                    }
                }
            }
            out
        }));
    }
    let mut total = Load::default();
    for w in workers {
        if let Ok(l) = w.await {
            total.ok += l.ok;
            total.errors += l.errors;
            total.latencies_us.extend(l.latencies_us);
            total.first_byte_us.extend(l.first_byte_us);
        }
    }
    total.secs = started.elapsed().as_secs_f64();
    total
}

/// One request on a fresh connection: the status and the whole body.
pub async fn call_once(addr: SocketAddr, call: &Call) -> anyhow::Result<(u16, Bytes)> {
    let stream = TcpStream::connect(addr).await?;
    let _ = stream.set_nodelay(true);
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let mut req = Request::builder()
        .method(call.method)
        .uri(&call.path)
        .header("host", "bench");
    for (k, v) in &call.headers {
        req = req.header(*k, v);
    }
    let res = send
        .send_request(req.body(Full::new(call.body.clone()))?)
        .await?;
    let status = res.status().as_u16();
    let body = res.into_body().collect().await?.to_bytes();
    Ok((status, body))
}

/// (user+system CPU ticks, RSS KiB, peak RSS KiB) of a process.
pub fn proc_stats(pid: u32) -> (u64, u64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit(") ")
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks = fields
        .get(11)
        .and_then(|u| u.parse::<u64>().ok())
        .unwrap_or(0)
        + fields
            .get(12)
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(0);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (ticks, kib("VmRSS:"), kib("VmHWM:"))
}

/// CPU ticks per second of `/proc/PID/stat` (USER_HZ; 100 on Linux).
pub const TICKS_PER_SEC: f64 = 100.0;

/// Samples a process's RSS (`VmRSS`) every few ms on a thread of its own, keeping the peak.
pub struct RssSampler {
    stop: Arc<AtomicBool>,
    peak_kib: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl RssSampler {
    pub fn start(pid: u32) -> RssSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let peak_kib = Arc::new(AtomicU64::new(0));
        let (s, p) = (stop.clone(), peak_kib.clone());
        let thread = std::thread::spawn(move || {
            let mut samples = 0u64;
            while !s.load(Ordering::Relaxed) {
                let (_, rss, _) = proc_stats(pid);
                p.fetch_max(rss, Ordering::Relaxed);
                samples += 1;
                std::thread::sleep(Duration::from_millis(5));
            }
            samples
        });
        RssSampler {
            stop,
            peak_kib,
            thread: Some(thread),
        }
    }

    /// Stops sampling: (peak RSS in KiB, samples taken).
    pub fn stop(mut self) -> (u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        let samples = self.thread.take().and_then(|t| t.join().ok()).unwrap_or(0);
        (self.peak_kib.load(Ordering::Relaxed), samples)
    }
}

impl Drop for RssSampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// KiB as MiB.
pub fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}
