//! The `downloads` and `poller` sections, against the integration tests' fake video upstream
//! (an `openai-videos` channel): the relay's memory while it downloads a large result from the
//! upstream and while 16 clients download a stored video, and how fast its poller goes
//! through 10,000 tasks in flight.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpStream;

use super::load::{Call, RssSampler, TICKS_PER_SEC, call_once, mib, proc_stats};
use super::measure::MachineTicks;
use super::relays::{RelayProc, start_relay_with};
use super::report::Report;
use crate::fake_video::{FAKE_KEY, FakeVideo};

/// The relay RSS the video rows allow, in MiB.
const RSS_TARGET_MIB: u64 = 64;

/// A relay whose `model_h3` runs on an `openai-videos` channel to `fake`, with `tasks` (TOML
/// lines of the `[tasks]` section).
fn start(binary: &Path, work: &Path, fake: &FakeVideo, tasks: &str) -> anyhow::Result<RelayProc> {
    start_relay_with(
        binary,
        work,
        &format!(
            "[limits]\nrps = 1000000\nburst = 1000000\npoll_rps_per_task = 1000000\n\
             [tasks]\n{tasks}\n\
             [models.model_h3]\nkind = \"video\"\nprice_per_second = 10\n\
             [[channels]]\nname = \"fake\"\nkind = \"openai-videos\"\nbase_url = \"{}\"\n\
             api_key = \"{FAKE_KEY}\"\nmodels = [\"model_h3\"]\n",
            fake.openai_base()
        ),
    )
}

fn submit_call(key: &str, prompt: &str) -> Call {
    Call {
        method: "POST",
        path: "/v1/videos".into(),
        headers: vec![
            ("authorization", format!("Bearer {key}")),
            ("content-type", "application/json".into()),
        ],
        body: Bytes::from(
            serde_json::json!({"model": "model_h3", "prompt": prompt, "size": "64x64", "seconds": "5"})
                .to_string(),
        ),
    }
}

/// Creates one task; its id.
async fn submit(relay: &RelayProc, prompt: &str) -> anyhow::Result<String> {
    let (status, body) = call_once(relay.addr, &submit_call(&relay.key, prompt)).await?;
    let v: Value = serde_json::from_slice(&body).unwrap_or_default();
    if status != 200 {
        bail!("POST /v1/videos answered {status}: {v}");
    }
    v["id"]
        .as_str()
        .map(str::to_owned)
        .context("POST /v1/videos: no id")
}

/// Polls a task until it is final (or `within` passes): its record.
async fn wait_final(relay: &RelayProc, id: &str, within: Duration) -> anyhow::Result<Value> {
    let deadline = Instant::now() + within;
    let call = Call {
        method: "GET",
        path: format!("/v1/videos/{id}"),
        headers: vec![("authorization", format!("Bearer {}", relay.key))],
        body: Bytes::new(),
    };
    loop {
        let (status, body) = call_once(relay.addr, &call).await?;
        let v: Value = serde_json::from_slice(&body).unwrap_or_default();
        if status != 200 {
            bail!("GET /v1/videos/{id} answered {status}: {v}");
        }
        if matches!(
            v["status"].as_str(),
            Some("completed" | "failed" | "cancelled")
        ) {
            return Ok(v);
        }
        if Instant::now() > deadline {
            bail!("task {id} not final after {within:?}: {v}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Downloads `path` on a connection of its own, reading and dropping the body: its length.
async fn download(addr: SocketAddr, path: String, key: String) -> anyhow::Result<u64> {
    let stream = TcpStream::connect(addr).await?;
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let req = Request::get(path)
        .header("host", "bench")
        .header("authorization", format!("Bearer {key}"))
        .body(Full::new(Bytes::new()))?;
    let res = send.send_request(req).await?;
    if res.status() != 200 {
        bail!("download answered {}", res.status());
    }
    let mut body = res.into_body();
    let mut len = 0u64;
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            len += data.len() as u64;
        }
    }
    Ok(len)
}

/// A result of `mb` MiB from the fake, downloaded and stored by the relay: (task id, seconds
/// from submission to `completed`, peak RSS KiB meanwhile).
async fn fetch_result(
    relay: &RelayProc,
    fake: &FakeVideo,
    work: &Path,
    mb: u64,
) -> anyhow::Result<(String, f64, u64)> {
    fake.switches.result_mb.store(mb, Ordering::SeqCst);
    let sampler = RssSampler::start(relay.pid());
    let started = Instant::now();
    let id = submit(relay, &format!("download {mb} MiB")).await?;
    let record = wait_final(relay, &id, Duration::from_secs(180)).await?;
    let secs = started.elapsed().as_secs_f64();
    let (peak, _) = sampler.stop();
    if record["status"] != "completed" {
        bail!("the {mb} MiB task ended {}", record["status"]);
    }
    // The relay kept the whole file, and it is the MP4 the fake sent.
    let stored = work
        .join("data")
        .join("files")
        .join("blobs")
        .join(&id)
        .join("video.mp4");
    let len = std::fs::metadata(&stored)
        .with_context(|| format!("the stored result {}", stored.display()))?
        .len();
    if len != mb << 20 {
        bail!("the stored result has {len} bytes, not {}", mb << 20);
    }
    channels::mp4probe::probe_path(&stored)
        .with_context(|| format!("probing the stored result {}", stored.display()))?;
    Ok((id, secs, peak))
}

/// RSS while the relay downloads a 200 MiB result, then while 16 clients download a stored
/// 100 MiB video.
pub async fn downloads(report: &mut Report, binary: &Path, work: &Path) -> anyhow::Result<()> {
    let fake = FakeVideo::start().await;
    let relay = start(
        binary,
        work,
        &fake,
        "poll_interval_min_ms = 100\npoll_interval_max_ms = 100",
    )?;
    let (_, idle, _) = proc_stats(relay.pid());

    let (_, secs, peak) = fetch_result(&relay, &fake, work, 200).await?;
    report.check(
        "relay RSS while it downloads a 200 MiB result from the upstream",
        format!(
            "{:.1} MiB peak (idle {:.1}); submission to completed {secs:.1} s, {:.0} MiB/s",
            mib(peak),
            mib(idle),
            200.0 / secs
        ),
        &format!("<= {RSS_TARGET_MIB} MiB"),
        peak <= RSS_TARGET_MIB * 1024,
    );

    // A second task of 100 MiB, for the clients.
    let (id, _, _) = fetch_result(&relay, &fake, work, 100).await?;
    let (_, before, _) = proc_stats(relay.pid());
    let clients = 16;
    let sampler = RssSampler::start(relay.pid());
    let started = Instant::now();
    let mut downloads = Vec::new();
    for _ in 0..clients {
        downloads.push(tokio::spawn(download(
            relay.addr,
            format!("/v1/videos/{id}/content"),
            relay.key.clone(),
        )));
    }
    let (mut whole, mut bytes) = (0, 0u64);
    for d in downloads {
        if let Ok(Ok(len)) = d.await {
            bytes += len;
            whole += usize::from(len == 100 << 20);
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let (peak, samples) = sampler.stop();
    report.check(
        "relay RSS while 16 clients download a 100 MiB video (a second task)",
        format!(
            "{:.1} MiB peak (before {:.1}; {samples} samples); {:.0} MiB/s in all, {whole} of {clients} whole in {secs:.1} s",
            mib(peak),
            mib(before),
            bytes as f64 / f64::from(1 << 20) / secs,
        ),
        &format!("<= {RSS_TARGET_MIB} MiB"),
        peak <= RSS_TARGET_MIB * 1024 && whole == clients,
    );
    drop(relay);
    let _ = std::fs::remove_dir_all(work);
    Ok(())
}

/// Creates `n` tasks over `conns` connections: (accepted, refused or failed, seconds).
async fn submit_many(relay: &RelayProc, n: usize, conns: usize) -> (usize, usize, f64) {
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..conns {
        let (next, addr, key) = (next.clone(), relay.addr, relay.key.clone());
        workers.push(tokio::spawn(async move {
            let (mut ok, mut failed) = (0, 0);
            let Ok(stream) = TcpStream::connect(addr).await else {
                return (ok, failed);
            };
            let _ = stream.set_nodelay(true);
            let Ok((mut send, conn)) =
                hyper::client::conn::http1::handshake(TokioIo::new(stream)).await
            else {
                return (ok, failed);
            };
            tokio::spawn(conn);
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                let call = submit_call(&key, &format!("poller {i}"));
                let mut req = Request::post("/v1/videos").header("host", "bench");
                for (k, v) in &call.headers {
                    req = req.header(*k, v);
                }
                let Ok(req) = req.body(Full::new(call.body)) else {
                    failed += 1;
                    continue;
                };
                match send.send_request(req).await {
                    Ok(res) => {
                        let good = res.status() == 200;
                        if res.into_body().collect().await.is_ok() && good {
                            ok += 1;
                        } else {
                            failed += 1;
                        }
                    }
                    Err(_) => {
                        failed += 1;
                        break;
                    }
                }
            }
            (ok, failed)
        }));
    }
    let (mut ok, mut failed) = (0, 0);
    for w in workers {
        if let Ok((o, f)) = w.await {
            ok += o;
            failed += f;
        }
    }
    (ok, failed, started.elapsed().as_secs_f64())
}

/// 10,000 tasks kept running by the fake; a poll interval short enough that every task is
/// always due, so a pass is as fast as the poller goes.
pub async fn poller(report: &mut Report, binary: &Path, work: &Path) -> anyhow::Result<()> {
    const TASKS: usize = 10_000;
    const INTERVAL_MS: u64 = 1000;
    let fake = FakeVideo::start().await;
    fake.switches
        .run_ms
        .store(24 * 3600 * 1000, Ordering::SeqCst);
    let relay = start(
        binary,
        work,
        &fake,
        &format!(
            "timeout_secs = 7200\npoll_interval_min_ms = {INTERVAL_MS}\npoll_interval_max_ms = {INTERVAL_MS}"
        ),
    )?;
    let accepted_at = Instant::now();
    let (ok, failed, secs) = submit_many(&relay, TASKS, 64).await;
    if ok != TASKS {
        bail!("only {ok} of {TASKS} tasks were created ({failed} failed)");
    }
    // Every task accepted upstream, and polled at least once since.
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let accepted: u32 = fake.accepted().values().sum();
        if accepted as usize >= TASKS {
            break;
        }
        if Instant::now() > deadline {
            bail!("the fake accepted only {accepted} of {TASKS} tasks");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    report.check(
        "poller: 10,000 tasks created over 64 conns, then accepted upstream",
        format!(
            "created in {secs:.1} s ({:.0}/s); all accepted upstream {:.1} s after the first \
             submission (at most {} requests at once at the fake)",
            ok as f64 / secs,
            accepted_at.elapsed().as_secs_f64(),
            fake.switches.max_active.load(Ordering::SeqCst)
        ),
        "report",
        true,
    );

    // One full pass, measured from the fake: every task polled again after `since`.
    let pid = relay.pid();
    let since = Instant::now();
    let polls0 = fake.switches.polls.load(Ordering::SeqCst);
    let (cpu0, _, _) = proc_stats(pid);
    let machine0 = MachineTicks::now();
    let deadline = since + Duration::from_secs(60);
    let (mut polled, mut all) = (0, 0);
    // Tasks polled within the first 10 s (the goal's pass time).
    let mut within_goal = None;
    while Instant::now() < deadline {
        (polled, all) = fake.polled_since(since);
        if polled >= all {
            break;
        }
        if within_goal.is_none() && since.elapsed() >= Duration::from_secs(10) {
            within_goal = Some(polled);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let within_goal = within_goal.unwrap_or(polled);
    let pass = since.elapsed().as_secs_f64();
    let polls = fake.switches.polls.load(Ordering::SeqCst) - polls0;
    let (cpu1, rss, _) = proc_stats(pid);
    let machine1 = MachineTicks::now();
    let rate = polls as f64 / pass;
    let relay_cpu = (cpu1 - cpu0) as f64 / TICKS_PER_SEC / pass * 100.0;
    let busy = |m: &MachineTicks| m.all - m.idle;
    let machine = (busy(&machine1) - busy(&machine0)) as f64 * 100.0
        / (machine1.all - machine0.all).max(1) as f64;
    let done = polled >= all;
    let pass_text = if done {
        format!("{pass:.1} s")
    } else {
        format!("not done after {pass:.0} s ({polled} of {all} polled)")
    };
    report.check(
        "poller, 10,000 tasks in flight (poll interval 1 s, channel cap 16): one full pass",
        format!(
            "{pass_text}; {polls} polls, {rate:.0} polls/s; {within_goal} of {all} tasks polled in the first 10 s"
        ),
        "<= 10 s at >= 1000 polls/s",
        done && pass <= 10.0 && rate >= 1000.0,
    );
    report.check(
        "poller: CPU during the pass",
        format!(
            "relay {relay_cpu:.0}% of one core (RSS {:.1} MiB); machine {machine:.0}% busy",
            mib(rss)
        ),
        "not the limit: machine < 90% busy",
        machine < 90.0,
    );
    drop(relay);
    let _ = std::fs::remove_dir_all(work);
    Ok(())
}
