//! The relays the bench starts: over a fresh data directory with a config of its own, and the
//! one that `messages`, `submissions` and `polling` share.

use std::net::SocketAddr;
use std::path::Path;

use anyhow::Context;

/// The admin token of every relay the bench starts.
pub const ADMIN: &str = "bench-admin-token";

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

/// The relay of `messages`, `submissions` and `polling`: the simulator holding `model_h3`
/// tasks and a native messages channel to `upstream`.
pub fn start_relay(binary: &Path, work: &Path, upstream: SocketAddr) -> anyhow::Result<RelayProc> {
    start_relay_with(
        binary,
        work,
        &format!(
            "[limits]\nrps = 1000000\nburst = 1000000\npoll_rps_per_task = 1000000\n\
             [simulator]\ntask_secs = 3600\n\
             [models.model_h3]\nkind = \"video\"\nprice_per_second = 10\n\
             [models.bench-chat]\nkind = \"chat\"\ninput_price_per_mtok = 1000\noutput_price_per_mtok = 3000\n\
             [[channels]]\nname = \"simulator\"\nkind = \"simulator\"\nmodels = [\"model_h3\"]\n\
             [[channels]]\nname = \"bench-upstream\"\nkind = \"anthropic\"\nmodels = [\"bench-chat\"]\n\
             base_url = \"http://{upstream}\"\napi_key = \"upstream-key\"\n"
        ),
    )
}
