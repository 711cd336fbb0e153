//! The `streams10k` section: 10,000 streaming `/v1/messages` calls open at once through the
//! relay and through the floor, to the TLS fake upstream ([`super::tls`]) sending its events
//! slowly (a text delta a second, a stream lasting about 10 s), so that the streams to the
//! upstream share HTTP/2 connections.
//!
//! The streams come from `xtask bench-streams`, a generator of their own in a process of its
//! own (one thread): it opens them over a ramp of a few seconds from several source addresses
//! (127.0.0.1 to 127.0.0.16, so that no client address passes the relay's default cap of
//! connections per client), times each stream's first body byte, reads each to its end and
//! checks its events: every one there, in order, the deltas' text as the fake sent it. It
//! prints `all-open N` once every stream has had its first byte (or failed), N of them open
//! then; the bench takes the server's RSS at that moment.
//!
//! Also here: the fake upstream's slow streams ([`serve_fake`]).

use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::pin::Pin;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket};

use super::load::{TICKS_PER_SEC, cpu_ticks, mib, proc_stats};
use super::loadgen::{Parsed, parse, request_bytes};
use super::measure::MachineTicks;
use super::party::{Body, Party, TlsArgs, full};
use super::relays::Ctx;
use super::report::{Report, thousands};
use super::tls::{self, Certs, Counts};

/// Streams open at once.
const STREAMS: usize = 10_000;
/// Text deltas of each stream, one a second: with the last events a second after the last
/// delta, a stream lasts about 10 s.
const DELTAS: u32 = 9;
const EVENT_MS: u64 = 1000;
/// Seconds over which the streams are opened (all are open before the first ends).
const RAMP_SECS: f64 = 4.0;
/// Client source addresses: 127.0.0.1 up to this.
const SOURCES: usize = 16;
/// Connections the relay takes in all for this run (its default is half what the open-file
/// limit leaves after a reserve, 9,872 under a hard limit of 20,000: a client connection may
/// hold an upstream connection besides; streams over HTTP/2 share a few).
const MAX_CONNECTIONS: usize = 12_000;

// ---------------------------------------------------------------------------------------------
// The fake's slow streams.

/// The events of a slow stream before its deltas.
fn slow_head() -> Bytes {
    Bytes::from(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_bench\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"bench-chat\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":12,\"output_tokens\":1}}}\n\n\
         event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
    )
}

/// Delta `n` of a slow stream: its text is `"{n} "`.
fn slow_delta(n: u32) -> Bytes {
    Bytes::from(format!(
        "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"{n} \"}}}}\n\n"
    ))
}

/// The events of a slow stream after its deltas.
fn slow_tail() -> Bytes {
    Bytes::from(
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
         event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":7}}\n\n\
         event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    )
}

/// A stream that sends its head at once, then a delta every `every`, then its tail `every`
/// after the last delta.
struct Slow {
    /// 0: the head is next; 1..=deltas: that delta; deltas + 1: the tail; past it: done.
    step: u32,
    deltas: u32,
    every: Duration,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl hyper::body::Body for Slow {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        if this.step > this.deltas + 1 {
            return Poll::Ready(None);
        }
        if this.step > 0 {
            let every = this.every;
            let sleep = this
                .sleep
                .get_or_insert_with(|| Box::pin(tokio::time::sleep(every)));
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            this.sleep = None;
        }
        let step = this.step;
        this.step += 1;
        let bytes = match step {
            0 => slow_head(),
            n if n <= this.deltas => slow_delta(n),
            _ => slow_tail(),
        };
        Poll::Ready(Some(Ok(Frame::data(bytes))))
    }
}

/// The fake messages upstream with `args`: over TLS when it has a certificate, its streams
/// slow when `args.slow` is above 0.
pub async fn serve_fake(listener: TcpListener, args: &TlsArgs) -> anyhow::Result<()> {
    let every = Duration::from_millis(if args.event_ms == 0 {
        EVENT_MS
    } else {
        args.event_ms
    });
    let deltas = args.slow;
    let answer = Arc::new(move |req: Request<Incoming>| answer(req, deltas, every));
    match (&args.cert, &args.key) {
        (Some(cert), Some(key)) => {
            let acceptor = tls::acceptor(cert, key)?;
            let stats = Arc::new(tls::Stats::default());
            if let Some(file) = &args.stats {
                stats.clone().keep_writing(file.clone());
            }
            tls::serve_tls(listener, acceptor, stats, answer).await;
        }
        _ => super::party::serve(listener, answer).await,
    }
    Ok(())
}

async fn answer(req: Request<Incoming>, deltas: u32, every: Duration) -> Response<Body> {
    if deltas == 0 {
        return super::party::fake_messages(req).await;
    }
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    if !body.windows(13).any(|w| w == b"\"stream\":true") {
        return full(
            Bytes::from_static(super::party::MESSAGE.as_bytes()),
            "application/json",
        );
    }
    let slow = Slow {
        step: 0,
        deltas,
        every,
        sleep: None,
    };
    let mut res = Response::new(slow.map_err(|n| match n {}).boxed());
    res.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/event-stream"),
    );
    res
}

// ---------------------------------------------------------------------------------------------
// The generator.

pub const USAGE: &str = "usage: xtask bench-streams --addr IP:PORT --streams N --deltas N
        [--ramp-secs S] [--sources N] [--header 'name: value']... [--body-file FILE]

  Opens N streaming POST /v1/messages calls over S seconds (4), from 127.0.0.1 up to
  127.0.0.<sources> (16), and reads each to its end, checking its events against the bench's
  slow fake (--deltas text deltas). Prints `all-open N` once every stream has had its first
  byte or failed, then one line:
  streams-result streams=N complete=N in_order=N refused=N errors=N events=N ttfb_p50_us=N
  ttfb_p99_us=N secs=S";

struct Spec {
    addr: SocketAddr,
    streams: usize,
    deltas: u32,
    ramp: Duration,
    sources: usize,
    request: Vec<u8>,
}

fn spec(args: &[String]) -> anyhow::Result<Spec> {
    let (mut addr, mut streams, mut deltas, mut ramp, mut sources) = (None, 1, 0, 4.0, 16);
    let (mut headers, mut body) = (Vec::new(), Vec::new());
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .with_context(|| format!("{flag} needs a value\n{USAGE}"))
        };
        match flag.as_str() {
            "--addr" => addr = Some(value()?.parse().context("--addr: not IP:PORT")?),
            "--streams" => streams = value()?.parse().context("--streams: not a number")?,
            "--deltas" => deltas = value()?.parse().context("--deltas: not a number")?,
            "--ramp-secs" => ramp = value()?.parse().context("--ramp-secs: not a number")?,
            "--sources" => sources = value()?.parse().context("--sources: not a number")?,
            "--header" => headers.push(value()?.clone()),
            "--body-file" => {
                let file = value()?;
                body = std::fs::read(file).with_context(|| format!("reading {file}"))?;
            }
            "--help" | "-h" => bail!("{USAGE}"),
            other => bail!("unknown argument {other}\n{USAGE}"),
        }
    }
    if !(1..=254).contains(&sources) || streams == 0 {
        bail!("--sources must be 1 to 254 and --streams above 0\n{USAGE}");
    }
    Ok(Spec {
        addr: addr.with_context(|| format!("--addr is required\n{USAGE}"))?,
        streams,
        deltas,
        ramp: Duration::from_secs_f64(ramp),
        sources,
        request: request_bytes("POST", "/v1/messages", &headers, &body),
    })
}

/// How one stream ended.
enum Ended {
    /// Read to its end: whether its events were all there and in order, and how many.
    Complete { in_order: bool, events: u32 },
    /// Connection refused or reset before an answer, or `503`.
    Refused,
    /// Anything else.
    Error,
}

/// What the streams share while they run.
#[derive(Default)]
struct Progress {
    /// Streams that have had their first byte or failed.
    answered: AtomicU64,
    /// Streams between their first byte and their end.
    open: AtomicU64,
}

pub fn run_generator(args: &[String]) -> anyhow::Result<()> {
    let spec = Arc::new(spec(args)?);
    // Each stream holds a descriptor: 10,000 are over the usual soft limit of 1,024.
    let limit = rlimit::increase_nofile_limit(u64::MAX).unwrap_or(0);
    if (limit as usize) < spec.streams + 64 {
        bail!(
            "{} streams need as many descriptors: the open-file limit is {limit}",
            spec.streams
        );
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting tokio")?;
    let line = runtime.block_on(drive(spec));
    println!("{line}");
    Ok(())
}

async fn drive(spec: Arc<Spec>) -> String {
    let progress = Arc::new(Progress::default());
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(spec.streams);
    for i in 0..spec.streams {
        let at = started + spec.ramp.mul_f64(i as f64 / spec.streams as f64);
        tasks.push(tokio::spawn(one(spec.clone(), i, at, progress.clone())));
    }
    // Every stream answered: say so, with how many are open, for the bench to read the
    // server's memory now.
    let watch = {
        let (spec, progress) = (spec.clone(), progress.clone());
        tokio::spawn(async move {
            while progress.answered.load(Ordering::Relaxed) < spec.streams as u64 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "all-open {}", progress.open.load(Ordering::Relaxed));
            let _ = out.flush();
        })
    };
    let (mut complete, mut in_order, mut refused, mut errors, mut events) = (0, 0, 0, 0, 0u64);
    let mut ttfb = Vec::with_capacity(spec.streams);
    for task in tasks {
        match task.await {
            Ok((
                Ended::Complete {
                    in_order: o,
                    events: e,
                },
                first,
            )) => {
                complete += 1;
                in_order += u64::from(o);
                events += u64::from(e);
                ttfb.extend(first);
            }
            Ok((Ended::Refused, _)) => refused += 1,
            Ok((Ended::Error, _)) | Err(_) => errors += 1,
        }
    }
    let _ = watch.await;
    ttfb.sort_unstable();
    let pct = |p: f64| match ttfb.len() {
        0 => 0,
        n => ttfb[((n - 1) as f64 * p).round() as usize],
    };
    format!(
        "streams-result streams={} complete={complete} in_order={in_order} refused={refused} errors={errors} \
         events={events} ttfb_p50_us={} ttfb_p99_us={} secs={:.3}",
        spec.streams,
        pct(0.5),
        pct(0.99),
        started.elapsed().as_secs_f64()
    )
}

/// Stream `i`, opened at `at`: how it ended, and its time to the first body byte in µs.
async fn one(
    spec: Arc<Spec>,
    i: usize,
    at: Instant,
    progress: Arc<Progress>,
) -> (Ended, Option<u32>) {
    tokio::time::sleep_until(at.into()).await;
    let mut answered = false;
    let ended = exchange(&spec, i, &progress, &mut answered).await;
    if !answered {
        progress.answered.fetch_add(1, Ordering::Relaxed);
    }
    ended
}

async fn exchange(
    spec: &Spec,
    i: usize,
    progress: &Progress,
    answered: &mut bool,
) -> (Ended, Option<u32>) {
    let source = Ipv4Addr::new(127, 0, 0, 1 + (i % spec.sources) as u8);
    let Ok(socket) = TcpSocket::new_v4() else {
        return (Ended::Error, None);
    };
    if socket
        .bind(SocketAddr::V4(SocketAddrV4::new(source, 0)))
        .is_err()
    {
        return (Ended::Error, None);
    }
    let Ok(mut stream) = socket.connect(spec.addr).await else {
        return (Ended::Refused, None);
    };
    let _ = stream.set_nodelay(true);
    let sent = Instant::now();
    if stream.write_all(&spec.request).await.is_err() {
        return (Ended::Refused, None);
    }
    let mut buf: Vec<u8> = Vec::with_capacity(2048);
    let mut first = None;
    let (status, len) = loop {
        if buf.capacity() - buf.len() < 1024 {
            buf.reserve(buf.capacity());
        }
        match stream.read_buf(&mut buf).await {
            Ok(0) | Err(_) => {
                if first.is_some() {
                    progress.open.fetch_sub(1, Ordering::Relaxed);
                }
                return (
                    if buf.is_empty() {
                        Ended::Refused
                    } else {
                        Ended::Error
                    },
                    first,
                );
            }
            Ok(_) => {}
        }
        match parse(&buf) {
            Parsed::More { body_started } => {
                if body_started && first.is_none() {
                    first = Some(u32::try_from(sent.elapsed().as_micros()).unwrap_or(u32::MAX));
                    progress.open.fetch_add(1, Ordering::Relaxed);
                    progress.answered.fetch_add(1, Ordering::Relaxed);
                    *answered = true;
                }
            }
            Parsed::Done { status, len } => break (status, len),
            Parsed::Bad => {
                if first.is_some() {
                    progress.open.fetch_sub(1, Ordering::Relaxed);
                }
                return (Ended::Error, first);
            }
        }
    };
    if first.is_some() {
        progress.open.fetch_sub(1, Ordering::Relaxed);
    }
    match status {
        200 => {
            let (in_order, events) = check(&buf[..len], spec.deltas);
            (Ended::Complete { in_order, events }, first)
        }
        503 => (Ended::Refused, first),
        _ => (Ended::Error, first),
    }
}

/// Whether `answer` (a whole HTTP/1.1 answer) holds the slow fake's events, all and in order,
/// and how many events it holds (pings aside).
fn check(answer: &[u8], deltas: u32) -> (bool, u32) {
    let Some(head_len) = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| i + 4)
    else {
        return (false, 0);
    };
    let head = String::from_utf8_lossy(&answer[..head_len]).to_ascii_lowercase();
    let body = if head.contains("transfer-encoding: chunked") {
        match dechunk(&answer[head_len..]) {
            Some(b) => b,
            None => return (false, 0),
        }
    } else {
        answer[head_len..].to_vec()
    };
    let text = String::from_utf8_lossy(&body);
    let mut names = Vec::new();
    let mut deltas_text = String::new();
    for event in text.split("\n\n").filter(|e| !e.trim().is_empty()) {
        let mut name = "";
        let mut data = "";
        for line in event.lines() {
            if let Some(n) = line.strip_prefix("event:") {
                name = n.trim();
            } else if let Some(d) = line.strip_prefix("data:") {
                data = d.trim();
            }
        }
        if name == "ping" {
            continue;
        }
        if name == "content_block_delta" {
            let value: serde_json::Value = serde_json::from_str(data).unwrap_or_default();
            deltas_text.push_str(value["delta"]["text"].as_str().unwrap_or("?"));
        }
        names.push(name.to_owned());
    }
    let mut expected = vec!["message_start", "content_block_start"];
    expected.extend((0..deltas).map(|_| "content_block_delta"));
    expected.extend(["content_block_stop", "message_delta", "message_stop"]);
    let expected_text: String = (1..=deltas).map(|n| format!("{n} ")).collect();
    let in_order = names == expected && deltas_text == expected_text;
    (in_order, names.len() as u32)
}

/// A chunked body's bytes, or `None` when it is not whole chunked encoding.
fn dechunk(mut body: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(body.len());
    loop {
        let line = body.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&body[..line]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        body = &body[line + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(body.get(..size)?);
        body = body.get(size + 2..)?;
    }
}

/// The generator's result line.
#[derive(Debug, Default, Clone)]
struct Outcome {
    streams: u64,
    complete: u64,
    in_order: u64,
    refused: u64,
    errors: u64,
    events: u64,
    ttfb_p50_us: u64,
    ttfb_p99_us: u64,
    secs: f64,
}

fn parse_outcome(line: &str) -> Option<Outcome> {
    let rest = line.strip_prefix("streams-result ")?;
    let mut out = Outcome::default();
    for pair in rest.split_whitespace() {
        let (k, v) = pair.split_once('=')?;
        let n: f64 = v.parse().ok()?;
        match k {
            "streams" => out.streams = n as u64,
            "complete" => out.complete = n as u64,
            "in_order" => out.in_order = n as u64,
            "refused" => out.refused = n as u64,
            "errors" => out.errors = n as u64,
            "events" => out.events = n as u64,
            "ttfb_p50_us" => out.ttfb_p50_us = n as u64,
            "ttfb_p99_us" => out.ttfb_p99_us = n as u64,
            "secs" => out.secs = n,
            _ => {}
        }
    }
    Some(out)
}

// ---------------------------------------------------------------------------------------------
// The section.

/// CPU ticks of this process and the children it has waited for.
fn self_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    stat.rsplit(") ")
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(11)
        .take(4)
        .filter_map(|f| f.parse::<u64>().ok())
        .sum()
}

/// What one run of the generator against `server` gave.
struct Measured {
    out: Outcome,
    idle_kib: u64,
    open_kib: u64,
    peak_kib: u64,
    open_at: u64,
    cpu_us_per_event: f64,
    foreign_pct: f64,
}

fn measure(
    ctx: &Ctx,
    addr: SocketAddr,
    key: &str,
    server: u32,
    own: &[u32],
) -> anyhow::Result<Measured> {
    let body = ctx.gens.dir().join("streams-body.json");
    std::fs::write(
        &body,
        r#"{"model":"bench-chat","stream":true,"max_tokens":64,"messages":[{"role":"user","content":"Say hello slowly."}]}"#,
    )?;
    let (_, idle_kib, _) = proc_stats(server);
    let _ = std::fs::write(format!("/proc/{server}/clear_refs"), "5");
    let ticks = |pids: &[u32]| pids.iter().map(|p| cpu_ticks(*p).0).sum::<u64>();
    let (server0, own0, self0, machine0) = (
        cpu_ticks(server).0,
        ticks(own),
        self_ticks(),
        MachineTicks::now(),
    );
    let started = Instant::now();
    let mut child = Command::new(&ctx.xtask)
        .arg("bench-streams")
        .args(["--addr", &addr.to_string()])
        .args(["--streams", &STREAMS.to_string()])
        .args(["--deltas", &DELTAS.to_string()])
        .args(["--ramp-secs", &RAMP_SECS.to_string()])
        .args(["--sources", &SOURCES.to_string()])
        .args(["--header", &format!("x-api-key: {key}")])
        .args(["--header", "anthropic-version: 2023-06-01"])
        .args(["--header", "content-type: application/json"])
        .arg("--body-file")
        .arg(&body)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .context("starting xtask bench-streams")?;
    let stdout = child.stdout.take().context("bench-streams stdout")?;
    let (mut open_kib, mut open_at, mut out) = (0, 0, None);
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        if let Some(n) = line.strip_prefix("all-open ") {
            open_kib = proc_stats(server).1;
            open_at = n.trim().parse().unwrap_or(0);
            eprintln!(
                "bench: streams10k: {open_at} open after {:.1} s, server RSS {:.1} MiB",
                started.elapsed().as_secs_f64(),
                mib(open_kib)
            );
        } else if let Some(o) = parse_outcome(&line) {
            out = Some(o);
        }
    }
    let status = child.wait()?;
    let secs = started.elapsed().as_secs_f64();
    let (_, _, peak_kib) = proc_stats(server);
    let (server1, own1, self1, machine1) = (
        cpu_ticks(server).0,
        ticks(own),
        self_ticks(),
        MachineTicks::now(),
    );
    let Some(out) = out else {
        bail!("bench-streams ({status}) printed no result");
    };
    let ours = own1.saturating_sub(own0) + self1.saturating_sub(self0);
    let foreign = machine1
        .busy
        .saturating_sub(machine0.busy)
        .saturating_sub(ours);
    Ok(Measured {
        cpu_us_per_event: server1.saturating_sub(server0) as f64 / TICKS_PER_SEC * 1e6
            / out.events.max(1) as f64,
        foreign_pct: foreign as f64 / TICKS_PER_SEC / secs * 100.0,
        out,
        idle_kib,
        open_kib,
        peak_kib,
        open_at,
    })
}

pub fn run(ctx: &Ctx, report: &mut Report) -> anyhow::Result<()> {
    let certs = Certs::make()?;
    let stats_dir = tempfile::Builder::new()
        .prefix("relay-bench-streams-")
        .tempdir()?;
    let stats = stats_dir.path().join("fake");
    let mut args = certs.party_args(&stats);
    let (slow, every) = (DELTAS.to_string(), EVENT_MS.to_string());
    args.extend(["--slow", &slow, "--event-ms", &every]);
    let fake = Party::start(&ctx.xtask, "fake-messages", &args)?;
    let floor = Party::start(
        &ctx.xtask,
        "floor",
        &[
            "--upstream",
            &fake.addr.to_string(),
            "--ca",
            certs.ca.to_str().unwrap_or_default(),
        ],
    )?;
    let config = format!(
        "{}[server]\nmax_connections = {MAX_CONNECTIONS}\n",
        tls::relay_config(fake.addr, &certs)
    );
    let relay = super::relays::start_in_temp(&ctx.relay, &config)?;
    let own = [fake.pid(), floor.pid(), relay.pid()];
    for (name, addr, pid) in [
        ("relay", relay.addr, relay.pid()),
        ("floor", floor.addr, floor.pid()),
    ] {
        let before = Counts::read(&stats);
        let m = measure(ctx, addr, &relay.key, pid, &own)?;
        let after = Counts::settled(&stats);
        let o = &m.out;
        let per_stream = (m.open_kib as f64 - m.idle_kib as f64) / m.open_at.max(1) as f64;
        report.section(
            "Ten thousand open streams",
            format!(
                "{name}: {} streams ({} s ramp, {SOURCES} source addresses, {} deltas a second apart, TLS fake over {}, \
                 {} upstream connections): {} complete, {} in order, {} refused, {} errors; {} events; \
                 RSS idle {:.1} MiB, {:.1} MiB with {} open ({per_stream:.1} KiB per open stream above idle), peak {:.1} MiB; \
                 CPU {:.1} µs per event; first byte p50 / p99 {:.1} / {:.1} ms; {:.1} s; foreign CPU {:.0}% of a core",
                thousands(o.streams as f64),
                RAMP_SECS,
                DELTAS,
                Counts {
                    h2: after.h2.saturating_sub(before.h2),
                    h1: after.h1.saturating_sub(before.h1),
                    ..Counts::default()
                }
                .protocol(),
                after.handshakes.saturating_sub(before.handshakes),
                thousands(o.complete as f64),
                thousands(o.in_order as f64),
                o.refused,
                o.errors,
                thousands(o.events as f64),
                mib(m.idle_kib),
                mib(m.open_kib),
                thousands(m.open_at as f64),
                mib(m.peak_kib),
                m.cpu_us_per_event,
                o.ttfb_p50_us as f64 / 1000.0,
                o.ttfb_p99_us as f64 / 1000.0,
                o.secs,
                m.foreign_pct,
            ),
        );
        if name == "relay" {
            let all = o.streams as usize == STREAMS;
            report.target(
                all && o.complete == o.streams && o.in_order == o.streams,
                format!(
                    "streams10k: every one of {} streams complete and in order: {} complete, {} in order",
                    thousands(o.streams as f64),
                    thousands(o.complete as f64),
                    thousands(o.in_order as f64)
                ),
            );
            report.target(
                o.refused == 0,
                format!("streams10k: none refused: {} refused", o.refused),
            );
            report.target(
                per_stream <= 20.0 && m.open_at as usize >= STREAMS * 95 / 100,
                format!(
                    "streams10k: relay RSS <= 20 KiB per open stream above idle: {per_stream:.1} KiB ({} open)",
                    thousands(m.open_at as f64)
                ),
            );
            report.target(
                o.ttfb_p99_us <= 50_000,
                format!(
                    "streams10k: first byte p99 <= 50 ms: {:.1} ms",
                    o.ttfb_p99_us as f64 / 1000.0
                ),
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slow_stream_checks() {
        let mut body = slow_head().to_vec();
        for n in 1..=3 {
            body.extend_from_slice(&slow_delta(n));
        }
        body.extend_from_slice(&slow_tail());
        let mut chunked = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
        for part in body.chunks(100) {
            chunked.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
            chunked.extend_from_slice(part);
            chunked.extend_from_slice(b"\r\n");
        }
        chunked.extend_from_slice(b"0\r\n\r\n");
        assert_eq!(check(&chunked, 3), (true, 8));
        assert!(!check(&chunked, 4).0);
        let plain = format!(
            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{}",
            body.len(),
            String::from_utf8(body).unwrap()
        );
        assert_eq!(check(plain.as_bytes(), 3), (true, 8));
        let swapped = plain.replacen("\"1 \"", "\"2 \"", 1);
        assert_ne!(swapped, plain);
        assert!(!check(swapped.as_bytes(), 3).0);
    }
}
