//! `xtask bench-load`: the bench's own load generator, run in a process of its own (a release
//! build) like `wrk`: fixed connections, keep-alive, HTTP/1.1, one request at a time per
//! connection (no pipelining), one thread. Requests are written as prepared bytes and answers
//! read with a minimal parser (a head, then `content-length` bytes or chunks), so that the
//! generator costs about what `wrk` costs. Unlike `wrk` it also times each answer's first body
//! byte. It prints one `bench-result` line (see [`parse_result`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub const USAGE: &str =
    "usage: xtask bench-load --addr IP:PORT --conns N --secs S --method M --path P
        [--header 'name: value']... [--body-file FILE] [--paths-file FILE] [--expect STATUS]
        [--rate PER_SEC]

  The bench's load generator (cargo xtask bench starts it from a release build). --paths-file:
  one path a line, each request takes one of them at random (repeatably). --expect: the status
  counted as an answer (others count as errors). --rate: at most this many requests a second
  in all, each connection sending on its own schedule (a late answer delays only its own
  connection's next request); without it every connection sends back to back. Prints one line:
  bench-result requests=N errors=N secs=S p50_us=N p99_us=N max_us=N ttfb_p50_us=N ttfb_p99_us=N";

/// What to send, and for how long.
struct Spec {
    addr: SocketAddr,
    conns: usize,
    secs: f64,
    /// Every request to send, each whole (head and body); one is taken per request.
    requests: Vec<Vec<u8>>,
    expect: u16,
    /// Requests a second in all, when paced.
    rate: Option<f64>,
}

fn spec(args: &[String]) -> anyhow::Result<Spec> {
    let (mut addr, mut conns, mut secs) = (None, 1, 5.0);
    let (mut method, mut path) = ("GET".to_owned(), "/".to_owned());
    let (mut headers, mut body, mut paths_file, mut expect) = (Vec::new(), Vec::new(), None, 200);
    let mut rate = None;
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .with_context(|| format!("{flag} needs a value\n{USAGE}"))
        };
        match flag.as_str() {
            "--addr" => addr = Some(value()?.parse().context("--addr: not IP:PORT")?),
            "--conns" => conns = value()?.parse().context("--conns: not a number")?,
            "--secs" => secs = value()?.parse().context("--secs: not a number")?,
            "--method" => method = value()?.clone(),
            "--path" => path = value()?.clone(),
            "--header" => headers.push(value()?.clone()),
            "--body-file" => {
                let file = value()?;
                body = std::fs::read(file).with_context(|| format!("reading {file}"))?;
            }
            "--paths-file" => paths_file = Some(value()?.clone()),
            "--expect" => expect = value()?.parse().context("--expect: not a status")?,
            "--rate" => {
                let r: f64 = value()?.parse().context("--rate: not a number")?;
                if !(r > 0.0 && r.is_finite()) {
                    bail!("--rate must be above 0\n{USAGE}");
                }
                rate = Some(r);
            }
            "--help" | "-h" => bail!("{USAGE}"),
            other => bail!("unknown argument {other}\n{USAGE}"),
        }
    }
    let paths = match paths_file {
        Some(file) => std::fs::read_to_string(&file)
            .with_context(|| format!("reading {file}"))?
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect(),
        None => vec![path],
    };
    if paths.is_empty() || conns == 0 {
        bail!("nothing to send: no path or no connection\n{USAGE}");
    }
    let requests = paths
        .iter()
        .map(|p| request_bytes(&method, p, &headers, &body))
        .collect();
    Ok(Spec {
        addr: addr.with_context(|| format!("--addr is required\n{USAGE}"))?,
        conns,
        secs,
        requests,
        expect,
        rate,
    })
}

/// One HTTP/1.1 request as it goes on the wire.
pub(super) fn request_bytes(method: &str, path: &str, headers: &[String], body: &[u8]) -> Vec<u8> {
    let mut head = format!("{method} {path} HTTP/1.1\r\nhost: bench\r\n");
    for h in headers {
        head.push_str(h);
        head.push_str("\r\n");
    }
    if !body.is_empty() || method == "POST" {
        head.push_str(&format!("content-length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

pub fn run(args: &[String]) -> anyhow::Result<()> {
    let spec = spec(args)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting tokio")?;
    let tally = runtime.block_on(drive(Arc::new(spec)));
    println!("{}", tally.line());
    Ok(())
}

/// What one run (or one connection) counted.
#[derive(Default)]
struct Tally {
    ok: u64,
    errors: u64,
    secs: f64,
    latencies_us: Vec<u32>,
    first_byte_us: Vec<u32>,
}

impl Tally {
    fn add(&mut self, other: Tally) {
        self.ok += other.ok;
        self.errors += other.errors;
        self.latencies_us.extend(other.latencies_us);
        self.first_byte_us.extend(other.first_byte_us);
    }

    fn line(mut self) -> String {
        self.latencies_us.sort_unstable();
        self.first_byte_us.sort_unstable();
        let pct = |v: &[u32], p: f64| match v.len() {
            0 => 0,
            n => v[((n - 1) as f64 * p).round() as usize],
        };
        format!(
            "bench-result requests={} errors={} secs={:.3} p50_us={} p99_us={} max_us={} ttfb_p50_us={} ttfb_p99_us={}",
            self.ok,
            self.errors,
            self.secs,
            pct(&self.latencies_us, 0.5),
            pct(&self.latencies_us, 0.99),
            pct(&self.latencies_us, 1.0),
            pct(&self.first_byte_us, 0.5),
            pct(&self.first_byte_us, 0.99),
        )
    }
}

async fn drive(spec: Arc<Spec>) -> Tally {
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(spec.secs);
    let mut conns = Vec::new();
    for n in 0..spec.conns {
        conns.push(tokio::spawn(connection(spec.clone(), n as u64, deadline)));
    }
    let mut total = Tally::default();
    for c in conns {
        match c.await {
            Ok(t) => total.add(t),
            Err(_) => total.errors += 1,
        }
    }
    total.secs = started.elapsed().as_secs_f64();
    total
}

/// One connection sending requests back to back until `deadline`; it stops at the first
/// error of the connection itself.
async fn connection(spec: Arc<Spec>, first: u64, deadline: Instant) -> Tally {
    let mut tally = Tally::default();
    let Ok(mut stream) = TcpStream::connect(spec.addr).await else {
        tally.errors += 1;
        return tally;
    };
    let _ = stream.set_nodelay(true);
    let mut buf: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut n = first;
    let step = spec.conns as u64;
    // Paced: this connection's share of the rate, its first send offset from the others'.
    let every = spec
        .rate
        .map(|r| Duration::from_secs_f64(spec.conns as f64 / r));
    let mut next = every.map(|e| Instant::now() + e.mul_f64(first as f64 / spec.conns as f64));
    while Instant::now() < deadline {
        match (next.as_mut(), every) {
            (Some(at), Some(every)) => {
                if *at >= deadline {
                    break;
                }
                tokio::time::sleep_until((*at).into()).await;
                *at += every;
            }
            // Let the other connections read what came in with this answer before writing:
            // the server then finds requests waiting in batches, as it does under wrk (which
            // reads every ready answer of a wake-up before writing the next requests).
            _ => tokio::task::yield_now().await,
        }
        let request = &spec.requests[(mix(n) % spec.requests.len() as u64) as usize];
        n += step;
        let sent = Instant::now();
        if stream.write_all(request).await.is_err() {
            tally.errors += 1;
            break;
        }
        buf.clear();
        let mut first_byte = None;
        let answer = loop {
            if buf.capacity() - buf.len() < 4096 {
                buf.reserve(buf.capacity());
            }
            match stream.read_buf(&mut buf).await {
                Ok(0) | Err(_) => break None,
                Ok(_) => {}
            }
            match parse(&buf) {
                Parsed::More { body_started } => {
                    if body_started && first_byte.is_none() {
                        first_byte = Some(sent.elapsed());
                    }
                }
                Parsed::Done { status, len } => break Some((status, len)),
                Parsed::Bad => break None,
            }
        };
        let done = sent.elapsed();
        match answer {
            Some((status, len)) if status == spec.expect && len == buf.len() => {
                tally.ok += 1;
                tally.latencies_us.push(micros(done));
                tally.first_byte_us.push(micros(first_byte.unwrap_or(done)));
            }
            // An unexpected status on a sound connection: counted, and on we go.
            Some((_, len)) if len == buf.len() => tally.errors += 1,
            _ => {
                tally.errors += 1;
                break;
            }
        }
    }
    tally
}

fn micros(d: Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}

/// A number as a hash of itself (splitmix64), to pick paths at random but repeatably.
pub fn mix(n: u64) -> u64 {
    let mut z = n.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// How far an answer has come in.
#[derive(Debug, PartialEq)]
pub(super) enum Parsed {
    /// Not whole yet; whether any of the body is in.
    More { body_started: bool },
    /// Whole: its status and its length in bytes, head included.
    Done { status: u16, len: usize },
    /// Not an answer this parser reads (no length, or garbage).
    Bad,
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Reads `buf` as one HTTP/1.1 answer from its first byte.
pub(super) fn parse(buf: &[u8]) -> Parsed {
    let Some(head_len) = find(buf, b"\r\n\r\n").map(|i| i + 4) else {
        return Parsed::More {
            body_started: false,
        };
    };
    let head = &buf[..head_len];
    let Some(status) = head
        .get(9..12)
        .and_then(|s| std::str::from_utf8(s).ok())
        .and_then(|s| s.parse::<u16>().ok())
        .filter(|_| head.starts_with(b"HTTP/1."))
    else {
        return Parsed::Bad;
    };
    let (mut length, mut chunked) = (None, false);
    for line in head.split(|b| *b == b'\n').skip(1) {
        let Some(colon) = line.iter().position(|b| *b == b':') else {
            continue;
        };
        let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
        if name.eq_ignore_ascii_case(b"content-length") {
            length = std::str::from_utf8(value)
                .ok()
                .and_then(|v| v.parse::<usize>().ok());
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            chunked = value.eq_ignore_ascii_case(b"chunked");
        }
    }
    let body = &buf[head_len..];
    let body_started = !body.is_empty();
    if chunked {
        return match chunks_end(body) {
            Some(Some(end)) => Parsed::Done {
                status,
                len: head_len + end,
            },
            Some(None) => Parsed::More { body_started },
            None => Parsed::Bad,
        };
    }
    match length {
        Some(n) if body.len() >= n => Parsed::Done {
            status,
            len: head_len + n,
        },
        Some(_) => Parsed::More { body_started },
        None if status == 204 || status == 304 => Parsed::Done {
            status,
            len: head_len,
        },
        None => Parsed::Bad,
    }
}

/// Where a chunked body ends: `Some(None)` while incomplete, `None` when it is not chunked
/// encoding (trailers are not expected).
fn chunks_end(body: &[u8]) -> Option<Option<usize>> {
    let mut at = 0;
    loop {
        let Some(line) = find(&body[at..], b"\r\n") else {
            return Some(None);
        };
        let size_text = std::str::from_utf8(&body[at..at + line]).ok()?;
        let size_text = size_text.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16).ok()?;
        at += line + 2;
        if size == 0 {
            return Some((body.len() >= at + 2).then_some(at + 2));
        }
        at += size + 2;
        if body.len() < at {
            return Some(None);
        }
    }
}

/// A generator's result line (ours or the one the `wrk` script prints): requests answered as
/// expected, errors, seconds, and latency percentiles in µs (`ttfb_*`: to the first body
/// byte; ours only).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    pub requests: u64,
    pub errors: u64,
    pub secs: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// The slowest request's time (0 where the generator did not say).
    pub max_us: f64,
    pub ttfb_us: Option<(f64, f64)>,
}

impl Outcome {
    pub fn rps(&self) -> f64 {
        self.requests as f64 / self.secs.max(1e-9)
    }
}

/// The `bench-result k=v ...` line in a generator's output.
pub fn parse_result(output: &str) -> anyhow::Result<Outcome> {
    let line = output
        .lines()
        .find_map(|l| l.strip_prefix("bench-result "))
        .context("no bench-result line in the generator's output")?;
    let mut out = Outcome::default();
    let mut ttfb = (None, None);
    for pair in line.split_whitespace() {
        let Some((k, v)) = pair.split_once('=') else {
            continue;
        };
        let number: f64 = v
            .parse()
            .with_context(|| format!("bench-result: {k}={v} is not a number"))?;
        match k {
            "requests" => out.requests = number as u64,
            "errors" => out.errors = number as u64,
            "secs" => out.secs = number,
            "p50_us" => out.p50_us = number,
            "p99_us" => out.p99_us = number,
            "max_us" => out.max_us = number,
            "ttfb_p50_us" => ttfb.0 = Some(number),
            "ttfb_p99_us" => ttfb.1 = Some(number),
            _ => {}
        }
    }
    if let (Some(a), Some(b)) = ttfb {
        out.ttfb_us = Some((a, b));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_with_a_length() {
        let whole = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nContent-Type: x\r\n\r\nhello";
        assert_eq!(
            parse(whole),
            Parsed::Done {
                status: 200,
                len: whole.len()
            }
        );
        assert_eq!(
            parse(&whole[..whole.len() - 2]),
            Parsed::More { body_started: true }
        );
        assert_eq!(
            parse(&whole[..20]),
            Parsed::More {
                body_started: false
            }
        );
        let empty = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";
        assert_eq!(
            parse(empty),
            Parsed::Done {
                status: 404,
                len: empty.len()
            }
        );
    }

    #[test]
    fn chunked_answers() {
        let whole = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\na\r\n0123456789\r\n0\r\n\r\n";
        assert_eq!(
            parse(whole),
            Parsed::Done {
                status: 200,
                len: whole.len()
            }
        );
        for cut in [48, 55, 60, whole.len() - 1] {
            assert!(
                matches!(parse(&whole[..cut]), Parsed::More { .. }),
                "cut at {cut}"
            );
        }
        assert_eq!(
            parse(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n"),
            Parsed::Bad
        );
    }

    #[test]
    fn answers_this_parser_does_not_read() {
        assert_eq!(parse(b"HTTP/1.1 200 OK\r\n\r\nuntil close"), Parsed::Bad);
        assert_eq!(parse(b"SSH-2.0-OpenSSH\r\n\r\n"), Parsed::Bad);
    }

    #[test]
    fn result_lines() {
        let out = parse_result(
            "Running 5s test\nbench-result requests=100 errors=2 secs=2.000 p50_us=98 p99_us=310.5 max_us=1200\n",
        )
        .unwrap();
        assert_eq!(out.requests, 100);
        assert_eq!(out.errors, 2);
        assert_eq!(out.rps(), 50.0);
        assert_eq!((out.p50_us, out.p99_us, out.ttfb_us), (98.0, 310.5, None));
        assert_eq!(out.max_us, 1200.0);
        let ours = parse_result(
            "bench-result requests=1 errors=0 secs=1 p50_us=1 p99_us=2 ttfb_p50_us=3 ttfb_p99_us=4",
        )
        .unwrap();
        assert_eq!(ours.ttfb_us, Some((3.0, 4.0)));
        assert!(parse_result("nothing here").is_err());
    }

    #[test]
    fn requests_on_the_wire() {
        let r = request_bytes("POST", "/v1/messages", &["x-api-key: k".into()], b"{}");
        assert_eq!(
            r,
            b"POST /v1/messages HTTP/1.1\r\nhost: bench\r\nx-api-key: k\r\ncontent-length: 2\r\n\r\n{}"
        );
        let g = request_bytes("GET", "/v1/videos/x", &[], b"");
        assert_eq!(g, b"GET /v1/videos/x HTTP/1.1\r\nhost: bench\r\n\r\n");
    }
}
