//! The suite's command line: the relay to check, its keys and the limits it was started with.

use anyhow::{Context, bail};

pub const USAGE: &str =
    "cargo xtask conformance --base-url URL --key KEY [--key-group2 KEY] [--admin-token T]
                        [--max-body-bytes N] [--task-timeout-secs N]
                        [--vendor veo [--vendor-mp4 PATH]]
       cargo xtask conformance --start [--vendor veo]

  --key                an API key of group gen2 (the relay's first key is one)
  --key-group2         a key of group motion: cross-family and group checks
  --admin-token        the admin token: admin paths, 429 with a rate-limited key
  --max-body-bytes     the relay's [server] max_body_bytes (default 10485760)
  --task-timeout-secs  the relay's [tasks] timeout_secs; the timeout check runs when it is <= 20
  --vendor             the relay's model_h3 is served by this vendor's channel, not the
                       simulator: the flows that need x-relay-sim directives are skipped and
                       the vendor flows run (submission, polling, content, cancel, billing)
  --vendor-mp4         the file the vendor serves as every result: content must equal it
  --start              build and start a relay (with `--vendor veo`, the Veo fake behind it:
                       `cargo xtask fake-veo`) and run the suite against it";

#[derive(Debug, Clone)]
pub struct Args {
    pub base_url: String,
    pub key: String,
    pub key_group2: Option<String>,
    pub admin_token: Option<String>,
    pub max_body_bytes: usize,
    pub task_timeout_secs: Option<u64>,
    /// The vendor behind the relay's `model_h3`; `None`: the built-in simulator.
    pub vendor: Option<String>,
    pub vendor_mp4: Option<std::path::PathBuf>,
}

impl Args {
    pub fn parse(args: &[String]) -> anyhow::Result<Args> {
        let mut out = Args {
            base_url: String::new(),
            key: String::new(),
            key_group2: None,
            admin_token: None,
            max_body_bytes: 10 << 20,
            task_timeout_secs: None,
            vendor: None,
            vendor_mp4: None,
        };
        let mut it = args.iter();
        while let Some(flag) = it.next() {
            let mut value = || {
                it.next()
                    .cloned()
                    .with_context(|| format!("{flag} needs a value\n{USAGE}"))
            };
            match flag.as_str() {
                "--base-url" => out.base_url = value()?,
                "--key" => out.key = value()?,
                "--key-group2" => out.key_group2 = Some(value()?),
                "--admin-token" => out.admin_token = Some(value()?),
                "--max-body-bytes" => out.max_body_bytes = value()?.parse()?,
                "--task-timeout-secs" => out.task_timeout_secs = Some(value()?.parse()?),
                "--vendor" => out.vendor = Some(value()?),
                "--vendor-mp4" => out.vendor_mp4 = Some(value()?.into()),
                other => bail!("unknown argument {other}\n{USAGE}"),
            }
        }
        if out.base_url.is_empty() || out.key.is_empty() {
            bail!("--base-url and --key are required\n{USAGE}");
        }
        Ok(out)
    }
}
