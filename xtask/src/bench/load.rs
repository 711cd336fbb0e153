//! The bench's own few requests (set-up calls on a fresh connection) and the process
//! statistics it reads.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// A request of the bench's own (set-up calls, not load).
#[derive(Clone)]
pub struct Call {
    pub method: &'static str,
    pub path: String,
    pub headers: Vec<(&'static str, String)>,
    pub body: Bytes,
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

/// CPU ticks of process `pid`: user + system, and system alone (its time in the kernel).
pub fn cpu_ticks(pid: u32) -> (u64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit(") ")
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    // utime and stime: the 12th and 13th fields after the command's name.
    let field = |n: usize| {
        fields
            .get(n)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let (user, system) = (field(11), field(12));
    (user + system, system)
}

/// (user+system CPU ticks, RSS KiB, peak RSS KiB) of a process.
pub fn proc_stats(pid: u32) -> (u64, u64, u64) {
    let ticks = cpu_ticks(pid).0;
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
