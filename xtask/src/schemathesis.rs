//! `cargo xtask schemathesis`: property-based tests of the running relay against
//! docs/openapi.yaml with Schemathesis (pinned, from PyPI, in a virtualenv under target/).
//!
//! The relay is the built debug binary on a free loopback port with a real key (and the admin
//! token for `/admin/*`: each of the document's security schemes gets its credential).
//! Schemathesis checks that no answer is a server error and that every status, content type,
//! header and body is what the document says; afterwards the relay's log must hold no panic.
//! tests/schemathesis/relay_hooks.py points every generated URL at loopback, so the relay never
//! fetches from the network.

use std::process::Command;
use std::time::Instant;

use anyhow::{Context, bail};

/// The Schemathesis version the check pins.
const SCHEMATHESIS: &str = "schemathesis==4.32.5";

pub const USAGE: &str = "cargo xtask schemathesis [--max-examples N] [--max-time SECS] [--seed S]

  --max-examples  test cases per API operation and phase (default 20)
  --max-time      the run's time budget in seconds (default 300)
  --seed          Schemathesis' seed, to repeat a run";

const ADMIN_TOKEN: &str = "schemathesis-admin-token-5f0c9e2b7a1d4386";

/// The checks: no 5xx, and every answer as documented.
const CHECKS: &str = "not_a_server_error,status_code_conformance,content_type_conformance,\
response_headers_conformance,response_schema_conformance";

/// Tasks finish in a second and render one frame per second of video (the document allows
/// sizes up to 4096x4096); no rate limit in the way.
const CONFIG: &str = "[tasks]
timeout_secs = 30
[simulator]
task_secs = 1
fps = 1
[limits]
rps = 100000
burst = 100000
poll_rps_per_task = 100000
";

struct Options {
    max_examples: u32,
    max_time: u32,
    seed: Option<u64>,
}

fn parse(args: &[String]) -> anyhow::Result<Options> {
    let mut opts = Options {
        max_examples: 20,
        max_time: 300,
        seed: None,
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .with_context(|| format!("{name} needs a value\n{USAGE}"))
                .cloned()
        };
        match arg.as_str() {
            "--max-examples" => {
                opts.max_examples = crate::cmd::count_flag(
                    &value("--max-examples")?,
                    "--max-examples",
                    1,
                    u32::MAX,
                    USAGE,
                )?;
            }
            "--max-time" => {
                opts.max_time = crate::cmd::count_flag(
                    &value("--max-time")?,
                    "--max-time",
                    1,
                    u32::MAX,
                    USAGE,
                )?;
            }
            "--seed" => {
                opts.seed = Some(
                    value("--seed")?
                        .parse()
                        .with_context(|| format!("--seed must be a whole number\n{USAGE}"))?,
                );
            }
            other => bail!("unknown argument {other}\n{USAGE}"),
        }
    }
    Ok(opts)
}

pub fn run(args: &[String]) -> anyhow::Result<()> {
    let opts = parse(args)?;
    crate::cmd::run(
        "cargo build -p relay",
        crate::cmd::cargo().args(["build", "-p", "relay"]),
    )?;
    let root = crate::cmd::root();
    let target = crate::cmd::target_dir();
    let python = crate::cmd::python_with("schemathesis-venv", SCHEMATHESIS)?;

    let work = target.join("schemathesis");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work)?;
    let config = work.join("relay.toml");
    std::fs::write(&config, CONFIG)?;
    let log = work.join("relay.log");
    let relay = crate::relay::start_relay_logged(
        &target.join("debug").join("relay"),
        &config,
        &work.join("data"),
        ADMIN_TOKEN,
        "warn",
        None,
        Some(&log),
    )?;
    // A key of its own, which the hooks keep Schemathesis from revoking or changing (it
    // finds the id in `GET /admin/keys` and would use it for `DELETE` and `PATCH`).
    let (key_id, key) = create_key(&relay.base)?;
    // Each security scheme of the document gets its credential. The messages endpoints'
    // version header is optional in the document (either of two names will do), so it is
    // fixed to a real value: generated requests reach the body checks instead of all being
    // refused for a missing header.
    let auth = work.join("schemathesis.toml");
    std::fs::write(
        &auth,
        format!(
            "[auth.openapi.apiKey]\nbearer = \"{key}\"\n\
             [auth.openapi.xApiKey]\napi_key = \"{key}\"\n\
             [auth.openapi.adminToken]\nbearer = \"{ADMIN_TOKEN}\"\n\
             [parameters]\n\"header.anthropic-version\" = \"2023-06-01\"\n",
        ),
    )?;
    let mut cmd = Command::new(python.with_file_name("schemathesis"));
    cmd.arg("--config-file")
        .arg(&auth)
        .arg("--no-color")
        .arg("run")
        .arg(root.join("docs").join("openapi.yaml"))
        .args(["--url", &relay.base])
        .args(["--checks", CHECKS])
        .args(["--max-examples", &opts.max_examples.to_string()])
        .args(["--max-time", &opts.max_time.to_string()])
        .args(["--request-timeout", "30"])
        // One worker: Python 3.11 before 3.11.8 can fail parsing source on two threads at
        // once ("AST constructor recursion depth mismatch"), which Hypothesis does.
        .args(["--workers", "1"])
        .args(["--report", "junit"])
        .arg("--report-dir")
        .arg(work.join("report"))
        .env("SCHEMATHESIS_HOOKS", "relay_hooks")
        .env("RELAY_PROTECTED_KEY_ID", &key_id)
        .env("PYTHONPATH", root.join("tests").join("schemathesis"))
        .current_dir(&work);
    if let Some(seed) = opts.seed {
        cmd.args(["--seed", &seed.to_string()]);
    }
    let started = Instant::now();
    let result = crate::cmd::run("schemathesis run docs/openapi.yaml", &mut cmd);
    drop(relay);
    eprintln!("xtask: schemathesis: {:.0?}", started.elapsed());
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let panics: Vec<&str> = text.lines().filter(|l| l.contains("panicked")).collect();
    if !panics.is_empty() {
        bail!(
            "the relay panicked during the run ({} times; its log: {}):\n{}",
            panics.len(),
            log.display(),
            panics.join("\n")
        );
    }
    result
}

/// Makes the run's key (group gen2, unlimited) through the admin API: `(id, secret)`.
fn create_key(base: &str) -> anyhow::Result<(String, String)> {
    use crate::conformance::client::{Client, Req};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let client = Client::new(base)?;
    let res = rt.block_on(
        client.send(
            Req::post("/admin/keys")
                .bearer(ADMIN_TOKEN)
                .json(&serde_json::json!({"name": "schemathesis", "group": "gen2"})),
        ),
    )?;
    let v = res.json();
    match (v["id"].as_str(), v["key"].as_str()) {
        (Some(id), Some(key)) => Ok((id.to_owned(), key.to_owned())),
        _ => bail!("creating the run's key: {}", res.describe()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_checked() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let o = parse(&args(&["--max-examples", "5", "--seed", "9"])).unwrap();
        assert_eq!((o.max_examples, o.max_time, o.seed), (5, 300, Some(9)));
        assert!(parse(&args(&["--max-examples", "0"])).is_err());
        assert!(parse(&args(&["--max-time", "x"])).is_err());
        assert!(parse(&args(&["--nope"])).is_err());
    }
}
