//! The load generators the bench drives, each in a process of its own: `wrk` (one thread, keep-
//! alive, a Lua script for the method, headers, body, random paths and a result line) and ours
//! (`xtask bench-load` from the release build; see `loadgen`). Both print a `bench-result`
//! line, read by [`parse_result`].

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{Context, bail};

use super::loadgen::{Outcome, parse_result};

/// Which generator drives a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gen {
    Wrk,
    Ours,
    /// `wrk` over TLS (`https://`): the direct path to a TLS upstream.
    WrkTls,
}

impl Gen {
    pub fn name(self) -> &'static str {
        match self {
            Gen::Wrk => "wrk",
            Gen::Ours => "ours",
            Gen::WrkTls => "wrk (TLS)",
        }
    }
}

/// One kind of request, sent over `conns` connections for `secs`.
#[derive(Debug, Clone)]
pub struct Load {
    pub addr: SocketAddr,
    pub conns: usize,
    pub secs: u64,
    pub method: &'static str,
    pub path: String,
    pub headers: Vec<(&'static str, String)>,
    pub body: String,
    /// One path a line; each request takes one at random instead of `path`.
    pub paths_file: Option<PathBuf>,
}

impl Load {
    pub fn at(&self, addr: SocketAddr) -> Load {
        Load {
            addr,
            ..self.clone()
        }
    }

    pub fn conns(&self, conns: usize) -> Load {
        Load {
            conns,
            ..self.clone()
        }
    }

    pub fn secs(&self, secs: u64) -> Load {
        Load {
            secs,
            ..self.clone()
        }
    }
}

/// Re-runs of disturbed runs one bench may make in all, so that a busy machine does not
/// stretch a whole run past a few minutes.
pub const RERUNS: u32 = 16;

/// The generators' programs, a directory for their scripts and bodies, and the re-runs left.
pub struct Generators {
    wrk: PathBuf,
    xtask: PathBuf,
    dir: PathBuf,
    files: AtomicU32,
    reruns: AtomicU32,
}

impl Generators {
    /// `xtask` is the release build; `dir` an empty directory the bench owns. Installs `wrk`
    /// when it is missing and `wrk` is true (else running it fails).
    pub fn new(xtask: &Path, dir: &Path, wrk: bool) -> anyhow::Result<Generators> {
        std::fs::create_dir_all(dir)?;
        Ok(Generators {
            wrk: if wrk {
                ensure_wrk()?
            } else {
                PathBuf::from("wrk")
            },
            xtask: xtask.to_owned(),
            dir: dir.to_owned(),
            files: AtomicU32::new(0),
            reruns: AtomicU32::new(RERUNS),
        })
    }

    /// Takes one re-run from the budget: false when none is left.
    /// Where the generators' files go.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn take_rerun(&self) -> bool {
        self.reruns
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok()
    }

    fn file(&self, ext: &str, text: &str) -> anyhow::Result<PathBuf> {
        let n = self.files.fetch_add(1, Ordering::Relaxed);
        let path = self.dir.join(format!("load-{n}.{ext}"));
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        Ok(path)
    }

    /// The command that runs `load` with `generator`.
    pub fn command(&self, generator: Gen, load: &Load) -> anyhow::Result<Command> {
        Ok(match generator {
            Gen::Wrk | Gen::WrkTls => {
                let scheme = if generator == Gen::WrkTls {
                    "https"
                } else {
                    "http"
                };
                let script = self.file("lua", &wrk_script(load))?;
                let mut cmd = Command::new(&self.wrk);
                cmd.arg("-t1")
                    .arg(format!("-c{}", load.conns))
                    .arg(format!("-d{}s", load.secs))
                    .args(["--timeout", "10s", "--latency", "-s"])
                    .arg(script)
                    .arg(format!("{scheme}://{}{}", load.addr, load.path));
                cmd
            }
            Gen::Ours => {
                let mut cmd = Command::new(&self.xtask);
                cmd.arg("bench-load")
                    .args(["--addr", &load.addr.to_string()])
                    .args(["--conns", &load.conns.to_string()])
                    .args(["--secs", &load.secs.to_string()])
                    .args(["--method", load.method, "--path", &load.path]);
                for (name, value) in &load.headers {
                    cmd.arg("--header").arg(format!("{name}: {value}"));
                }
                if !load.body.is_empty() {
                    cmd.arg("--body-file").arg(self.file("body", &load.body)?);
                }
                if let Some(paths) = &load.paths_file {
                    cmd.arg("--paths-file").arg(paths);
                }
                cmd
            }
        })
    }

    /// Runs `load` with `generator` to its end: what it counted.
    pub fn run(&self, generator: Gen, load: &Load) -> anyhow::Result<Outcome> {
        let out = self
            .command(generator, load)?
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .with_context(|| format!("running {}", generator.name()))?;
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            bail!("{} failed ({}): {text}", generator.name(), out.status);
        }
        parse_result(&text).with_context(|| format!("{}: {text}", generator.name()))
    }
}

/// A Lua string literal of `s`.
fn lua_string(s: &str) -> String {
    let mut out = String::from("\"");
    for b in s.bytes() {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7e => out.push(b as char),
            other => out.push_str(&format!("\\{other:03}")),
        }
    }
    out.push('"');
    out
}

/// The `wrk` script of `load`: method, headers and body, random paths from its file, and a
/// `bench-result` line when done (requests answered 2xx or 3xx; errors of every kind).
fn wrk_script(load: &Load) -> String {
    let mut s = format!("wrk.method = {}\n", lua_string(load.method));
    if !load.body.is_empty() {
        s.push_str(&format!("wrk.body = {}\n", lua_string(&load.body)));
    }
    for (name, value) in &load.headers {
        s.push_str(&format!(
            "wrk.headers[{}] = {}\n",
            lua_string(name),
            lua_string(value)
        ));
    }
    if let Some(paths) = &load.paths_file {
        s.push_str(&format!(
            "local paths = {{}}\n\
             for line in io.lines({}) do\n  if #line > 0 then paths[#paths + 1] = line end\nend\n\
             math.randomseed(1)\n\
             request = function()\n  return wrk.format(nil, paths[math.random(#paths)])\nend\n",
            lua_string(&paths.to_string_lossy())
        ));
    }
    s.push_str(
        "done = function(summary, latency, requests)\n  \
           local e = summary.errors\n  \
           io.write(string.format(\"bench-result requests=%d errors=%d secs=%.3f p50_us=%.1f p99_us=%.1f max_us=%.1f\\n\",\n    \
             summary.requests - e.status, e.status + e.connect + e.read + e.write + e.timeout,\n    \
             summary.duration / 1e6, latency:percentile(50), latency:percentile(99), latency.max))\n\
         end\n",
    );
    s
}

/// A program on `PATH`.
fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    })
}

/// `wrk`, installed with apt-get when missing (through sudo when not root).
fn ensure_wrk() -> anyhow::Result<PathBuf> {
    if let Some(wrk) = on_path("wrk") {
        return Ok(wrk);
    }
    crate::cmd::apt_install("wrk")?;
    on_path("wrk").context("wrk is still not on PATH after apt-get install")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lua_strings() {
        assert_eq!(lua_string("plain"), "\"plain\"");
        assert_eq!(lua_string(r#"{"a":"b\n"}"#), r#""{\"a\":\"b\\n\"}""#);
        assert_eq!(lua_string("é\n"), "\"\\195\\169\\010\"");
    }

    #[test]
    fn wrk_scripts() {
        let load = Load {
            addr: "127.0.0.1:1".parse().unwrap(),
            conns: 1,
            secs: 1,
            method: "POST",
            path: "/v1/messages".into(),
            headers: vec![("x-api-key", "k".into())],
            body: "{}".into(),
            paths_file: Some("/tmp/paths".into()),
        };
        let s = wrk_script(&load);
        assert!(s.contains("wrk.method = \"POST\"\n"));
        assert!(s.contains("wrk.body = \"{}\"\n"));
        assert!(s.contains("wrk.headers[\"x-api-key\"] = \"k\"\n"));
        assert!(s.contains("io.lines(\"/tmp/paths\")"));
        assert!(s.contains("bench-result requests=%d"));
    }
}
