//! `cargo xtask fuzz [--secs N] [TARGET ...]`: coverage-guided fuzzing of the parsers with
//! cargo-fuzz (libFuzzer), on the stable toolchain (no sanitizer).
//!
//! Builds every target of `fuzz/` once (optimised, debug assertions on), then runs each chosen
//! target for N seconds over its seed corpus in the repository (`fuzz/corpus/<target>`, read
//! only) and a working corpus under the target directory (`<target>/fuzz/corpus/<target>`,
//! where new inputs go). Stops at the first crash, naming the input and the command that
//! replays it; otherwise prints one line per target: runs, coverage, time.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, bail};

use crate::cmd::{cargo, root, run, target_dir};

pub const USAGE: &str = "usage: cargo xtask fuzz [--secs N] [--dev] [TARGET ...]

  Builds every fuzz target in fuzz/ (cargo fuzz build -s none) and runs each TARGET (default:
  all) for N seconds (default 60) over fuzz/corpus/TARGET plus a working corpus in
  target/fuzz/corpus/TARGET. Installs cargo-fuzz first when it is missing. Stops at the first
  crash and prints the input and the command that replays it. --dev builds without
  optimisation: a much shorter build, slower runs (for short passes such as ci's).";

/// What one target's run came to.
struct Summary {
    runs: String,
    cov: String,
    features: String,
    corpus: String,
    exec_per_sec: String,
}

pub fn fuzz(args: &[String]) -> anyhow::Result<()> {
    let mut secs: u64 = 60;
    let mut dev = false;
    let mut chosen = Vec::new();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--secs" => {
                secs = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .filter(|n| *n > 0)
                    .with_context(|| format!("--secs needs a number of seconds\n{USAGE}"))?;
            }
            "--dev" => dev = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            flag if flag.starts_with('-') => bail!("unknown argument {flag}\n{USAGE}"),
            target => chosen.push(target.to_owned()),
        }
    }
    let root = root();
    let fuzz_dir = root.join("fuzz");
    let all = targets(&fuzz_dir)?;
    if let Some(unknown) = chosen.iter().find(|t| !all.contains(t)) {
        bail!("no fuzz target {unknown}; the targets: {}", all.join(", "));
    }
    if chosen.is_empty() {
        chosen = all;
    }

    ensure_cargo_fuzz()?;
    let out = target_dir().join("fuzz");
    let mut build = cargo();
    build.args(["fuzz", "build", "-s", "none", "--fuzz-dir"]);
    build.arg(&fuzz_dir).arg("--target-dir").arg(&out);
    if dev {
        build.arg("--dev");
    }
    run("cargo fuzz build (every target)", &mut build)?;
    let profile = if dev { "debug" } else { "release" };
    let bin_dir = out.join(host_triple()?).join(profile);

    let started = Instant::now();
    for target in &chosen {
        let summary = run_target(&root, &bin_dir, &out, target, secs)?;
        println!(
            "fuzz {target}: {} runs, cov {} ft {}, corpus {}, {secs} s ({} exec/s)",
            summary.runs, summary.cov, summary.features, summary.corpus, summary.exec_per_sec
        );
    }
    eprintln!(
        "xtask: fuzzed {} targets, no crash: {:.0?}",
        chosen.len(),
        started.elapsed()
    );
    Ok(())
}

/// The fuzz targets: the files of `fuzz/fuzz_targets`, sorted.
fn targets(fuzz_dir: &Path) -> anyhow::Result<Vec<String>> {
    let dir = fuzz_dir.join("fuzz_targets");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            name.strip_suffix(".rs").map(str::to_owned)
        })
        .collect();
    names.sort();
    Ok(names)
}

/// Installs cargo-fuzz from crates.io when `cargo fuzz` is not there.
fn ensure_cargo_fuzz() -> anyhow::Result<()> {
    let present = cargo()
        .args(["fuzz", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if present {
        return Ok(());
    }
    eprintln!("xtask: cargo-fuzz is missing; installing it (cargo install cargo-fuzz --locked)");
    run(
        "cargo install cargo-fuzz",
        cargo().args(["install", "cargo-fuzz", "--locked"]),
    )
}

/// The host's target triple, where cargo fuzz puts its binaries.
fn host_triple() -> anyhow::Result<String> {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out = Command::new(rustc)
        .arg("-vV")
        .output()
        .context("running rustc -vV")?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .map(str::to_owned)
        .context("rustc -vV names no host")
}

/// Runs one target for `secs` seconds; a crash is an error naming the input and how to replay it.
fn run_target(
    root: &Path,
    bin_dir: &Path,
    out: &Path,
    target: &str,
    secs: u64,
) -> anyhow::Result<Summary> {
    let working = out.join("corpus").join(target);
    let artifacts = out.join("artifacts").join(target);
    let logs = out.join("logs");
    for dir in [&working, &artifacts, &logs] {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let log_path = logs.join(format!("{target}.log"));
    let log = std::fs::File::create(&log_path)
        .with_context(|| format!("creating {}", log_path.display()))?;
    let seeds = root.join("fuzz").join("corpus").join(target);
    let binary = bin_dir.join(target);
    let mut artifact_prefix = artifacts.into_os_string();
    artifact_prefix.push("/");
    eprintln!("xtask: fuzz {target} for {secs} s");
    let status = Command::new(&binary)
        .arg(&working)
        .arg(&seeds)
        .arg(format!("-max_total_time={secs}"))
        .arg("-timeout=30")
        .arg("-print_final_stats=1")
        .arg({
            let mut a = std::ffi::OsString::from("-artifact_prefix=");
            a.push(&artifact_prefix);
            a
        })
        .current_dir(root)
        .stdout(Stdio::null())
        .stderr(log)
        .status()
        .with_context(|| format!("starting {}", binary.display()))?;
    let text = std::fs::read_to_string(&log_path).unwrap_or_default();
    if !status.success() {
        let crash = text
            .lines()
            .find_map(|l| l.split("Test unit written to ").nth(1))
            .map(|p| root.join(p.trim()));
        let why: Vec<&str> = text
            .lines()
            .filter(|l| {
                l.contains("panicked at")
                    || l.contains("ERROR: libFuzzer")
                    || l.starts_with("assertion")
                    || l.starts_with("  left")
                    || l.starts_with(" right")
            })
            .take(6)
            .collect();
        eprintln!("{}", why.join("\n"));
        match crash {
            Some(input) => bail!(
                "fuzz target {target} crashed ({status}); the input: {}\n  replay it: cargo fuzz \
                 run -s none{} --fuzz-dir fuzz --target-dir {} {target} {}\n  the log: {}",
                input.display(),
                if profile_dev(bin_dir) { " --dev" } else { "" },
                relative(root, out).display(),
                relative(root, &input).display(),
                log_path.display()
            ),
            None => bail!(
                "fuzz target {target} failed ({status}); the log: {}",
                log_path.display()
            ),
        }
    }
    Ok(summarise(&text))
}

/// Whether the binaries are of a `--dev` build.
fn profile_dev(bin_dir: &Path) -> bool {
    bin_dir.ends_with("debug")
}

fn relative(root: &Path, path: &Path) -> PathBuf {
    path.strip_prefix(root).unwrap_or(path).to_path_buf()
}

/// Reads libFuzzer's last status line (`#N DONE cov: C ft: F corp: K/SIZE ... exec/s: E`).
fn summarise(log: &str) -> Summary {
    let last = log
        .lines()
        .rev()
        .find(|l| l.starts_with('#') && l.contains("cov:"))
        .unwrap_or_default();
    let words: Vec<&str> = last.split_whitespace().collect();
    let after = |key: &str| {
        words
            .iter()
            .position(|w| *w == key)
            .and_then(|i| words.get(i + 1))
            .map_or_else(|| "?".to_owned(), |w| (*w).to_owned())
    };
    Summary {
        runs: words
            .first()
            .map_or("?", |w| w.trim_start_matches('#'))
            .to_owned(),
        cov: after("cov:"),
        features: after("ft:"),
        corpus: after("corp:"),
        exec_per_sec: after("exec/s:"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_last_status_line() {
        let log = "INFO: Seed: 1\n#2\tINITED cov: 10 ft: 11 corp: 3/40b exec/s: 0 rss: 27Mb\n\
                   #1630567\tDONE   cov: 851 ft: 3175 corp: 1186/103Kb lim: 3280 exec/s: 181174 \
                   rss: 29Mb\nDone 1630567 runs in 9 second(s)\n";
        let s = summarise(log);
        assert_eq!(
            (
                s.runs.as_str(),
                s.cov.as_str(),
                s.features.as_str(),
                s.corpus.as_str(),
                s.exec_per_sec.as_str()
            ),
            ("1630567", "851", "3175", "1186/103Kb", "181174")
        );
    }
}
