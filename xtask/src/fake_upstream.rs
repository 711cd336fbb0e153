//! `cargo xtask fake-upstream`: the integration tests' fake video upstream on a loopback
//! address, speaking both `openai-videos` and `ark`, with its switches as flags.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use anyhow::{Context, bail};

use crate::fake_video::{FAKE_KEY, FakeVideo, Switches};

pub const USAGE: &str = "usage: cargo xtask fake-upstream [--listen 127.0.0.1:9090] [--run-ms N]
        [--queue-ms N] [--latency-ms N] [--submit-fail PERMILLE] [--task-fail PERMILLE] [--burst-429 N]
        [--downloads-503 N] [--down] [--hang-polls] [--unknown-status] [--expire-results]
        [--truncate] [--result-mb N]

  --result-mb N  video results are an MP4 of N MiB generated while it is sent
  --queue-ms N   ark tasks stay queued (cancellable) for N ms of their run";

pub fn run(args: &[String]) -> anyhow::Result<()> {
    let switches = Arc::new(Switches::default());
    let mut listen: SocketAddr = "127.0.0.1:9090".parse().context("default address")?;
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut number = |what: &str| -> anyhow::Result<u64> {
            let value = it.next().with_context(|| format!("{what} needs a value"))?;
            value
                .parse()
                .with_context(|| format!("{what}: {value:?} is not a number"))
        };
        match flag.as_str() {
            "--listen" => {
                let value = it.next().context("--listen needs a value")?;
                listen = value
                    .parse()
                    .with_context(|| format!("--listen: {value:?} is not IP:port"))?;
            }
            "--help" | "-h" => {
                println!("{USAGE}");
                return Ok(());
            }
            "--run-ms" => switches.run_ms.store(number(flag)?, Ordering::SeqCst),
            "--queue-ms" => switches.queue_ms.store(number(flag)?, Ordering::SeqCst),
            "--latency-ms" => switches.latency_ms.store(number(flag)?, Ordering::SeqCst),
            "--submit-fail" => switches
                .submit_fail_permille
                .store(number(flag)?.min(1000) as u32, Ordering::SeqCst),
            "--task-fail" => switches
                .task_fail_permille
                .store(number(flag)?.min(1000) as u32, Ordering::SeqCst),
            "--burst-429" => switches.burst_429.store(
                number(flag)?.min(u64::from(u32::MAX)) as u32,
                Ordering::SeqCst,
            ),
            "--downloads-503" => switches.downloads_503.store(
                number(flag)?.min(u64::from(u32::MAX)) as u32,
                Ordering::SeqCst,
            ),
            "--down" => switches.down.store(true, Ordering::SeqCst),
            "--hang-polls" => switches.hang_polls.store(true, Ordering::SeqCst),
            "--unknown-status" => switches.unknown_status.store(true, Ordering::SeqCst),
            "--expire-results" => switches.expire_results.store(true, Ordering::SeqCst),
            "--truncate" => switches.truncate.store(true, Ordering::SeqCst),
            "--result-mb" => switches.result_mb.store(number(flag)?, Ordering::SeqCst),
            other => bail!("unknown flag {other}\n{USAGE}"),
        }
    }
    if !listen.ip().is_loopback() {
        bail!("--listen: the fake upstream serves loopback addresses only, not {listen}");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting tokio")?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("binding {listen}"))?;
        let run_ms = switches.run_ms.load(Ordering::SeqCst);
        let fake = FakeVideo::serve(listener, switches);
        println!("fake video upstream on {}", fake.base);
        println!("  openai-videos base_url = \"{}\"", fake.openai_base());
        println!("  ark           base_url = \"{}\"", fake.ark_base());
        println!("  api_key = \"{FAKE_KEY}\"");
        println!("  tasks finish after {} ms; Ctrl-C stops", run_ms.max(100));
        tokio::signal::ctrl_c()
            .await
            .context("waiting for Ctrl-C")?;
        drop(fake);
        Ok(())
    })
}
