//! The command line of `cargo xtask crash`.

use anyhow::{Context, bail};

pub const USAGE: &str =
    "cargo xtask crash [--chaos] [--cycles N] [--debug] [--seed S] [--workers N]

  --chaos    the relay's video tasks go to a fake vendor (two channels of kind openai-videos)
             that misbehaves at random: closes after reading a submission, answers late, 429,
             500 or an error inside a 200, loses tasks, cuts downloads off; then also checks that
             no task was submitted twice and that every result the vendor made was served or
             refunded
  --cycles   how many times the relay is SIGKILLed under load (default 100)
  --debug    run the debug binary (the one `cargo build` makes) instead of the release one
  --seed     the seed of every random choice (printed; default from the clock)
  --workers  concurrent connections driving load (default 4)";

pub struct Options {
    pub chaos: bool,
    pub cycles: u32,
    pub debug: bool,
    pub seed: u64,
    pub workers: u32,
}

pub fn parse(args: &[String]) -> anyhow::Result<Options> {
    let mut opts = Options {
        chaos: false,
        cycles: 100,
        debug: false,
        seed: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1),
        workers: 4,
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .with_context(|| format!("{name} needs a value\n{USAGE}"))
                .cloned()
        };
        match arg.as_str() {
            "--cycles" => {
                opts.cycles =
                    crate::cmd::count_flag(&value("--cycles")?, "--cycles", 1, u32::MAX, USAGE)?;
            }
            "--seed" => {
                opts.seed = value("--seed")?
                    .parse()
                    .with_context(|| format!("--seed must be a whole number\n{USAGE}"))?;
            }
            "--workers" => {
                opts.workers =
                    crate::cmd::count_flag(&value("--workers")?, "--workers", 1, 64, USAGE)?;
            }
            "--debug" => opts.debug = true,
            "--chaos" => opts.chaos = true,
            other => bail!("unknown argument {other}\n{USAGE}"),
        }
    }
    Ok(opts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_checked() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let o = parse(&args(&["--cycles", "3", "--debug", "--seed", "7"])).unwrap();
        assert_eq!((o.cycles, o.debug, o.seed, o.workers), (3, true, 7, 4));
        assert!(!o.chaos);
        assert!(parse(&args(&["--chaos"])).unwrap().chaos);
        assert!(parse(&args(&["--cycles", "0"])).is_err());
        assert!(parse(&args(&["--cycles"])).is_err());
        assert!(parse(&args(&["--frobnicate"])).is_err());
    }
}
