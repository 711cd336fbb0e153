//! Project automation: `cargo xtask ci` is what CI runs.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use anyhow::bail;

mod bench;
mod cluster;
mod cmd;
mod conformance;
mod console;
mod crash;
mod fake_upstream;
#[path = "../../tests/it/fake_video.rs"]
#[allow(dead_code)]
mod fake_video;
// The integration suite's strict Veo fake, the vendor behind `conformance --vendor veo`.
#[path = "../../tests/it/fake_veo.rs"]
#[allow(dead_code)]
mod fake_veo;
mod floors;
mod fuzz;
mod openapi;
mod profile;
mod relay;
mod schemathesis;
mod sdk;
mod vendor;

const USAGE: &str = "usage: cargo xtask ci [--no-sdk] [--quick] | cargo xtask sdk-messages

  ci        fmt check, floors (no circle of files), clippy -D warnings, every test (slow ones included: RUN_SLOW_TESTS=1;
            the S3 blob tests with moto's server from PyPI in target/moto-venv),
            a short fuzz pass (5 s per target), short crash runs (plain and --chaos), the official SDK checks
            and a bounded Schemathesis pass
  --no-sdk  skip the SDK checks (they install the SDKs from PyPI into target/sdk-venv*) and the
            console's browser test (chromium from apt, Playwright from npm)
  --quick   skip the slow tests, the fuzz pass, the crash run and the SDK checks
  --slow    accepted for clarity: slow tests run by default
  sdk-messages  only the Anthropic SDK check of /v1/messages and its batches (part of ci)
  sdk-vendor    only the OpenAI SDK video check with the Veo fake behind the relay (part of ci)
  fake-veo      the integration suite's strict Veo fake (Gemini API) on 127.0.0.1, for the
                vendor mode of conformance and the SDK check, or by hand (`fake-veo --help`)
  conformance   the black-box suite against a running relay (part of ci, which starts one);
                `conformance --start` builds and starts a relay and runs the suite against it;
                `conformance --vendor veo` does so with the Veo fake behind model_h3 (ci runs both)
  fake-upstream a fake video upstream (openai-videos and ark) on 127.0.0.1, for trying the
                relay by hand; `fake-upstream --help` lists its switches
  profile       instructions per request of the release relay under callgrind: a whole
                /v1/messages answer, a stream, a GET /v1/videos/{id} poll (`profile --help`)
  bench         the relay against a bare proxy and the direct path, its memory while videos
                are downloaded, its poller with 10,000 tasks in flight, reads and start-up over
                1M stored tasks; writes BENCHMARKS.md. `bench --only SECTION` runs one part
                (messages, rss, submissions, polling, downloads, poller, stored, tls,
                streams10k); its servers and load generators run as `bench-party`,
                `bench-load` and `bench-streams` from a release build
  fuzz          `fuzz [--secs N] [TARGET ...]`: build the cargo-fuzz targets in fuzz/ and run
                each for N seconds (default 60); stops at the first crash and prints its input
                and the command that replays it (installs cargo-fuzz when missing)
  crash         SIGKILL the relay at random moments under load, cycle after cycle over one
                data directory, then check that no acknowledged task was lost and the ledger
                balances (`crash --cycles 3 --debug` is part of ci); `--chaos`: the video tasks
                go to a fake vendor that misbehaves at random, and no task may be submitted
                twice nor a result the vendor made be lost unrefunded (`crash --chaos --cycles 3
                --debug` is part of ci)
  cluster       three relays on one PostgreSQL, Redis and S3-compatible store (moto) under
                mixed load, one SIGKILLed and started again; then every task final, none
                submitted upstream twice, the ledger balanced, files and the rate limit shared
                (`cluster --debug` is part of ci); `cluster --help`
  floors        the files of every crate by floor, bottom first, and every circle of files
                (`use` lines and paths in code); fails when there is a circle. `floors --help`
  console       the web console in a real browser (chromium + Playwright) against the debug
                relay; `console --screenshots` also writes docs/console/*.png (part of ci with the
                SDK checks)
  openapi       validate docs/openapi.yaml (openapi-spec-validator from PyPI; part of ci with the
                SDK checks)
  schemathesis  property-based tests of the running relay against docs/openapi.yaml
                (Schemathesis from PyPI in target/schemathesis-venv; a bounded pass is part of
                ci with the SDK checks)";

/// Seconds each fuzz target runs in `ci` (`cargo xtask fuzz` runs them longer).
const CI_FUZZ_SECS: &str = "5";
fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("ci") => ci(&args[1..]),
        // The Anthropic SDK check alone (it also runs as part of `ci`).
        Some("sdk-messages") => sdk::anthropic_sdk_check(),
        // The OpenAI SDK check with the Veo fake behind the relay alone (also part of `ci`).
        Some("sdk-vendor") => sdk::openai_sdk_vendor_alone(),
        Some("openapi") => openapi::validate(),
        Some("console") => console::run_console(&args[1..]),
        Some("fuzz") => fuzz::fuzz(&args[1..]),
        Some("fake-upstream") => fake_upstream::run(&args[1..]),
        Some("fake-veo") => vendor::run_fake_veo(&args[1..]),
        Some("profile") => profile::run(&args[1..]),
        Some("crash") => crash::run(&args[1..]),
        Some("cluster") => cluster::run(&args[1..]),
        Some("schemathesis") => schemathesis::run(&args[1..]),
        Some("bench") => bench::bench(&cmd::root(), &cmd::target_dir(), &args[1..]),
        // The bench's parties and load generator, each in a process of its own.
        Some("bench-party") => bench::party_run::run(&args[1..]),
        Some("bench-load") => bench::loadgen::run(&args[1..]),
        Some("bench-streams") => bench::open_streams::run_generator(&args[1..]),
        Some("conformance") if args[1..].iter().any(|a| a == "--start" || a == "--vendor") => {
            conformance::ci::run_args(&args[1..])
        }
        Some("conformance") => match conformance::main(&args[1..]) {
            Ok(true) => Ok(()),
            Ok(false) => return ExitCode::FAILURE,
            Err(e) => Err(e),
        },
        Some("floors") => match floors::run(&args[1..]) {
            Ok(true) => Ok(()),
            Ok(false) => return ExitCode::FAILURE,
            Err(e) => Err(e),
        },
        _ => {
            eprintln!(
                "{USAGE}\n\n{}\n\n{}\n\n{}",
                conformance::USAGE,
                crash::USAGE,
                floors::USAGE
            );
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn ci(args: &[String]) -> anyhow::Result<()> {
    let has = |flag: &str| args.iter().any(|a| a == flag);
    let quick = has("--quick");
    let sdk = !has("--no-sdk") && !quick;
    if let Some(other) = args
        .iter()
        .find(|a| !matches!(a.as_str(), "--no-sdk" | "--quick" | "--slow"))
    {
        bail!("unknown argument {other}\n{USAGE}");
    }
    cmd::run(
        "cargo fmt --check",
        cmd::cargo().args(["fmt", "--all", "--check"]),
    )?;
    if !floors::run(&["--quiet".to_owned()])? {
        bail!("a crate has a circle of files (cargo xtask floors)");
    }
    cmd::run(
        "cargo clippy",
        cmd::cargo().args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]),
    )?;
    cmd::ensure_services()?;
    // The S3 blob tests run a real S3-compatible server: moto's server mode, from PyPI.
    let moto = cmd::python_with("moto-venv", cmd::MOTO)?;
    let mut test = cmd::cargo();
    test.args(["test", "--workspace"]);
    test.env("RELAY_TEST_MOTO_PYTHON", &moto);
    if !quick {
        test.env("RUN_SLOW_TESTS", "1");
    }
    cmd::run("cargo test", &mut test)?;
    if !quick {
        fuzz::fuzz(&["--secs".to_owned(), CI_FUZZ_SECS.to_owned()])?;
        crash::run(&["--cycles", "3", "--debug"].map(String::from))?;
        crash::run(&["--chaos", "--cycles", "3", "--debug"].map(String::from))?;
        cluster::run(&["--debug", "--secs", "10"].map(String::from))?;
    }
    if sdk {
        sdk::sdk_check()?;
        console::run_console(&[])?;
    }
    if sdk {
        openapi::validate()?;
        schemathesis::run(&["--max-examples", "10", "--max-time", "120"].map(String::from))?;
    }
    if !quick {
        conformance::ci::run(None)?;
        conformance::ci::run(Some("veo"))?;
    }
    eprintln!("xtask: ci passed");
    Ok(())
}
