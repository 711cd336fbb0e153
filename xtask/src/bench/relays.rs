//! The relays the bench starts, over a fresh data directory with a config of its own, their
//! configs, and what every section shares.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;

use super::generator::Generators;

/// The admin token of every relay the bench starts.
pub const ADMIN: &str = "bench-admin-token-5f0c9e2b7a1d4386";

/// A relay started for the bench.
pub struct RelayProc {
    pub relay: crate::relay::StartedRelay,
    pub addr: SocketAddr,
    pub key: String,
}

impl RelayProc {
    pub fn pid(&self) -> u32 {
        self.relay.child.id()
    }
}

/// Starts `binary` over a fresh `work/data` with `config` (TOML over the embedded default).
pub fn start_relay_with(binary: &Path, work: &Path, config: &str) -> anyhow::Result<RelayProc> {
    let _ = std::fs::remove_dir_all(work);
    std::fs::create_dir_all(work)?;
    let path = work.join("relay.toml");
    std::fs::write(&path, config)?;
    let relay = crate::relay::start_relay(binary, &path, &work.join("data"), ADMIN, "error")?;
    relay_proc(relay)
}

pub fn relay_proc(relay: crate::relay::StartedRelay) -> anyhow::Result<RelayProc> {
    let addr = relay
        .base
        .trim_start_matches("http://")
        .parse()
        .with_context(|| format!("relay address {}", relay.base))?;
    let key = relay.key.clone();
    Ok(RelayProc { relay, addr, key })
}

/// A relay over a temporary directory of its own (its config file and data), removed when
/// the relay has stopped.
pub struct TempRelay {
    pub relay: RelayProc,
    // Dropped after the relay: fields drop in order.
    _dir: tempfile::TempDir,
}

impl std::ops::Deref for TempRelay {
    type Target = RelayProc;
    fn deref(&self) -> &RelayProc {
        &self.relay
    }
}

/// Starts `binary` with `config` in a fresh temporary directory.
pub fn start_in_temp(binary: &Path, config: &str) -> anyhow::Result<TempRelay> {
    let dir = tempfile::Builder::new()
        .prefix("relay-bench-")
        .tempdir()
        .context("creating a temporary directory")?;
    let relay = start_relay_with(binary, dir.path(), config)?;
    Ok(TempRelay { relay, _dir: dir })
}

/// `[limits]` out of the way, and `model_h3` (every catalog names it).
const BASE_CONFIG: &str = "[limits]\nrps = 1000000\nburst = 1000000\npoll_rps_per_task = 1000000\n\
    [models.model_h3]\nkind = \"video\"\nprice_per_second = 10\n";

/// A relay whose chat model `bench-chat` runs on an `anthropic` channel to `upstream`.
pub fn messages_config(upstream: SocketAddr) -> String {
    format!(
        "{BASE_CONFIG}\
         [models.bench-chat]\nkind = \"chat\"\ninput_price_per_mtok = 1000\noutput_price_per_mtok = 3000\n\
         [[channels]]\nname = \"bench-upstream\"\nkind = \"anthropic\"\nmodels = [\"bench-chat\"]\n\
         base_url = \"http://{upstream}\"\napi_key = \"upstream-key\"\n"
    )
}

/// The body of every durable submission the bench sends.
pub(super) const SUBMISSION: &str = r#"{"model":"model_h3","prompt":"bench","size":"64x64"}"#;

/// A relay whose `model_h3` runs on an `openai-videos` channel to the fake video upstream at
/// `upstream` (tasks run there for an hour: nothing is rendered or downloaded), polled no more
/// than once a minute, so that the poller stays out of what is measured.
pub fn videos_config(upstream: SocketAddr) -> String {
    format!(
        "{BASE_CONFIG}\
         [tasks]\npoll_interval_min_ms = 60000\npoll_interval_max_ms = 60000\n\
         [[channels]]\nname = \"fake\"\nkind = \"openai-videos\"\nbase_url = \"http://{upstream}\"\n\
         api_key = \"{}\"\nmodels = [\"model_h3\"]\n",
        crate::fake_video::FAKE_KEY
    )
}

/// What every section of the bench uses: the release binaries, the load generators, how long
/// a measured run lasts, and a runtime for the bench's own few requests.
pub struct Ctx {
    pub relay: PathBuf,
    /// The release build of xtask: the parties and our load generator.
    pub xtask: PathBuf,
    pub gens: Generators,
    pub secs: u64,
    pub runtime: tokio::runtime::Runtime,
}
