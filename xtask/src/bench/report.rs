//! The bench's report: its runs, ratios and targets as they are measured, and BENCHMARKS.md
//! made of them.

use super::generator::RERUNS;
use super::load::mib;
use super::measure::{ATTEMPTS, FOREIGN_LIMIT_PCT, Run, STOLEN_LIMIT_PCT, TURNS, WARMUP_SECS};

/// What the sections measured.
#[derive(Default)]
pub struct Report {
    /// (what was measured, the kept run).
    runs: Vec<(String, Run)>,
    /// A ratio with the figures it comes from, a line each.
    ratios: Vec<String>,
    /// (met, the target and what the run gave).
    targets: Vec<(bool, String)>,
    /// The load generators side by side on the direct path.
    generators: Vec<String>,
    /// The relay's memory under a long load.
    memory: Vec<String>,
    /// Rows of the video and stored-task sections: (measurement, result, target, met).
    checks: Vec<(String, String, String, bool)>,
    /// Sections with a heading of their own: (heading, its lines).
    sections: Vec<(String, Vec<String>)>,
    /// Sections of their own: (heading, Markdown body).
    tables: Vec<(String, String)>,
}

impl Report {
    pub fn run(&mut self, what: &str, run: &Run) {
        self.runs.push((what.to_owned(), run.clone()));
    }

    pub fn ratio(&mut self, line: String) {
        eprintln!("bench: {line}");
        self.ratios.push(line);
    }

    pub fn target(&mut self, met: bool, line: String) {
        eprintln!("bench: {} {line}", if met { "pass" } else { "FAIL" });
        self.targets.push((met, line));
    }

    pub fn generators(&mut self, line: String) {
        eprintln!("bench: {line}");
        self.generators.push(line);
    }

    pub fn memory(&mut self, line: String) {
        eprintln!("bench: {line}");
        self.memory.push(line);
    }

    /// A line under `heading`, a section of the report of its own.
    pub fn section(&mut self, heading: &str, line: String) {
        eprintln!("bench: {heading}: {line}");
        match self.sections.iter_mut().find(|(h, _)| h == heading) {
            Some((_, lines)) => lines.push(line),
            None => self.sections.push((heading.to_owned(), vec![line])),
        }
    }

    /// A Markdown body under `heading`, a section of the report of its own.
    pub fn table(&mut self, heading: &str, body: String) {
        eprintln!("bench: {heading}:\n{body}");
        self.tables.push((heading.to_owned(), body));
    }

    pub fn check(&mut self, name: &str, value: String, target: &str, met: bool) {
        eprintln!("bench: {name}: {value} (target {target})");
        self.checks
            .push((name.to_owned(), value, target.to_owned(), met));
    }
}

/// A whole number with thousands separators.
pub fn thousands(x: f64) -> String {
    let n = x.round().max(0.0) as u64;
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `n` connections, in words.
pub fn conns(n: usize) -> String {
    if n == 1 {
        "1 conn".into()
    } else {
        format!("{n} conns")
    }
}

/// The machine: (cores, CPU model, kernel).
fn machine() -> (usize, String, String) {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cores = cpuinfo
        .lines()
        .filter(|l| l.starts_with("processor"))
        .count()
        .max(1);
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, m)| m.trim().to_owned())
        .unwrap_or_else(|| "unknown CPU".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|k| k.trim().to_owned())
        .unwrap_or_default();
    (cores, model, kernel)
}

/// `secs` since the Unix epoch as `YYYY-MM-DD HH:MM UTC` (from the server's RFC 3339 form).
pub fn utc(secs: u64) -> String {
    let stamp = server::ground::limits::rfc3339(secs as i64);
    format!("{} {} UTC", &stamp[..10], &stamp[11..16])
}

/// A sentence for the header when the hypervisor took more than the limit from any kept run.
fn stolen_line(runs: &[(String, Run)]) -> Option<String> {
    let stolen: Vec<f64> = runs.iter().map(|(_, r)| r.stolen_pct).collect();
    let most = stolen.iter().copied().fold(0.0, f64::max);
    if most <= STOLEN_LIMIT_PCT {
        return None;
    }
    let mean = stolen.iter().sum::<f64>() / stolen.len() as f64;
    Some(format!(
        "The hypervisor took CPU from this machine while it had work: {mean:.1}% of a core\n\
         on average over the kept runs, {most:.1}% at the most (the runs' stolen CPU); every\n\
         party ran slower for it, those that sleep and wake most the most."
    ))
}

fn run_row(what: &str, r: &Run) -> String {
    let errors = if r.out.errors > 0 {
        format!(" ({} errors)", r.out.errors)
    } else {
        String::new()
    };
    let ttfb = r
        .out
        .ttfb_us
        .map(|(a, b)| format!(" (first byte {a:.0} / {b:.0})"))
        .unwrap_or_default();
    format!(
        "| {what} | {} | {} | {}{errors} | {:.0} / {:.0}{ttfb} | {:.1} ({:.1}) | {:.1} / {:.1} | {:.1}% ({:.1}% niced) | {:.1}%{} | {} |\n",
        r.generator.name(),
        r.conns,
        thousands(r.rps()),
        r.out.p50_us,
        r.out.p99_us,
        r.cpu_us,
        r.kernel_us,
        mib(r.rss_end_kib),
        mib(r.rss_peak_kib),
        r.foreign_pct,
        r.niced_pct,
        r.stolen_pct,
        if r.disturbed() { " **disturbed**" } else { "" },
        r.attempts,
    )
}

pub fn render(report: &Report, secs: u64) -> String {
    let (cores, model, kernel) = machine();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let mut out = String::from("# Benchmarks\n\n");
    out.push_str(&format!(
        "Measured by `cargo xtask bench` on {}: {cores} cores ({model}), Linux {kernel}. How: see\n\
         [Method](#method).",
        utc(now)
    ));
    // With autogroups, nice only ranks processes within their session: a nice 19 process
    // started from another session takes as large a share as the bench's whole session.
    if std::fs::read_to_string("/proc/sys/kernel/sched_autogroup_enabled")
        .is_ok_and(|v| v.trim() == "1")
    {
        out.push_str(
            " The scheduler's autogroups are on: a process at a lower priority (nice > 0) in\n\
             another session does not yield to the bench, it can take a share as large as the\n\
             bench's processes together.",
        );
    }
    if let Some(line) = stolen_line(&report.runs) {
        out.push(' ');
        out.push_str(&line);
    }
    out.push_str("\n\n");
    if !report.targets.is_empty() {
        out.push_str("## Targets\n\n");
        for (met, line) in &report.targets {
            out.push_str(&format!(
                "- {} {line}\n",
                if *met { "pass:" } else { "**FAIL**:" }
            ));
        }
        out.push('\n');
    }
    if !report.ratios.is_empty() {
        out.push_str("## Ratios and the figures they come from\n\n");
        for line in &report.ratios {
            out.push_str(&format!("- {line}\n"));
        }
        out.push('\n');
    }
    for (heading, body) in &report.tables {
        out.push_str(&format!("## {heading}\n\n{body}\n"));
    }
    if !report.runs.is_empty() {
        out.push_str(
            "## Runs\n\n\
             CPU and RSS are the server's under test (the relay, the floor proxy, the fake, the\n\
             hello server or a peer gateway) alone, in brackets the part of it in the kernel (its\n\
             sockets' reads and writes, the loopback's TCP under them); foreign CPU is what other\n\
             processes used\n\
             meanwhile, stolen CPU what the hypervisor took from the machine while it had work,\n\
             each in percent of one core.\n\n\
             | path | generator | conns | req/s | p50 / p99 µs | CPU µs/request (kernel) | RSS end / peak MiB | foreign CPU | stolen CPU | runs |\n\
             |---|---|---|---|---|---|---|---|---|---|\n",
        );
        for (what, run) in &report.runs {
            out.push_str(&run_row(what, run));
        }
        out.push('\n');
    }
    let split: Vec<&(String, Run)> = report
        .runs
        .iter()
        .filter(|(_, r)| r.threads.len() > 1)
        .collect();
    if !split.is_empty() {
        out.push_str(
            "## Where the relay's CPU goes\n\n\
             Per request, by thread (numbers dropped from names: `sled-io` is every `sled-io-N`):\n\
             CPU µs, and context switches in brackets.\n\n",
        );
        for (what, r) in split {
            let threads: Vec<String> = r
                .threads
                .iter()
                .filter(|t| t.1 >= 0.05 || t.2 >= 0.05)
                .map(|(name, cpu, switches)| format!("{name} {cpu:.1} ({switches:.1})"))
                .collect();
            out.push_str(&format!(
                "- {what}, {}: {}\n",
                conns(r.conns),
                threads.join(", ")
            ));
        }
        out.push('\n');
    }
    if !report.generators.is_empty() {
        out.push_str("## Load generators on the direct path\n\n");
        for line in &report.generators {
            out.push_str(&format!("- {line}\n"));
        }
        out.push('\n');
    }
    if !report.memory.is_empty() {
        out.push_str("## Relay memory under a long load\n\n");
        for line in &report.memory {
            out.push_str(&format!("- {line}\n"));
        }
        out.push('\n');
    }
    for (heading, lines) in &report.sections {
        out.push_str(&format!("## {heading}\n\n"));
        for line in lines {
            out.push_str(&format!("- {line}\n"));
        }
        out.push('\n');
    }
    if !report.checks.is_empty() {
        out.push_str(
            "## Videos and stored tasks\n\n| measurement | result | target | met |\n|---|---|---|---|\n",
        );
        for (name, value, target, met) in &report.checks {
            out.push_str(&format!(
                "| {name} | {value} | {target} | {} |\n",
                if *met { "yes" } else { "**no**" }
            ));
        }
        out.push('\n');
    }
    out.push_str(&method(secs));
    out.push('\n');
    out.push_str(NOTES);
    out
}

fn method(secs: u64) -> String {
    format!(
        "## Method\n\n\
         Every party runs in an OS process of its own, on loopback: the load generator, the fake\n\
         upstream, the floor, the hello server and the relay. The relay is the release binary,\n\
         started with a config file in a temporary directory (rate limits out of the way). The\n\
         others are `xtask bench-party fake-messages | fake-video | floor | hello` from a release\n\
         build of xtask, each on one thread: the fake native messages upstream answers at once\n\
         (a whole message, or a stream of 8 events), the floor is a bare hyper reverse proxy\n\
         (pooled client, no parsing) to the same fake, the hello server answers a fixed small JSON\n\
         (the floor of a task read), and the fake video upstream behind an `openai-videos` channel\n\
         holds its tasks for an hour (nothing rendered or downloaded; the relay polls it at most\n\
         once a minute).\n\n\
         Load comes from `wrk` (one thread, keep-alive, a Lua script for the body, headers, random\n\
         paths and the result), and from our own generator, `xtask bench-load` (release build, one\n\
         thread, fixed connections, keep-alive, HTTP/1.1, no pipelining), which also times the\n\
         first body byte. Both run on the direct path to the fake, in turns (a pair re-run when\n\
         disturbed), to show ours is not the limit;\n\
         ours is used only where it came within 10% of `wrk` there (the streams' rows at one\n\
         connection, for their time to the first byte), `wrk` everywhere else.\n\n\
         The floor and the relay of each `/v1/messages` row are measured in turns, floor then\n\
         relay, {TURNS} times (each pair re-run when disturbed, as below): the two runs of a pair\n\
         are seconds apart, so a machine whose speed drifts for a while (a host taking more of\n\
         it without it showing as stolen time) slows both alike. The turn kept for the rows and\n\
         the targets is the median one (by relay ÷ floor under load, by relay p50 − floor p50\n\
         at one connection); the ratio lines list every turn's.\n\n\
         Each measurement is {WARMUP_SECS} s of warm-up, then {secs} s measured (the memory run: 60 s, RSS\n\
         sampled every second). Requests per second count answers of the expected status; p50\n\
         and p99 are the generator's: `wrk` corrects its distribution for coordinated omission\n\
         before it reports it (each request slower than the run's mean time between two requests\n\
         of a connection adds the requests that connection would have sent meanwhile, at the\n\
         latencies they would have seen), so one stall of a connection counts many times in its\n\
         p99; ours counts the requests it sent. CPU per request is the server's user + system time from\n\
         `/proc/PID/stat` over the run, divided by the requests answered. RSS is `VmRSS` at the\n\
         end and `VmHWM` (reset before the run through `clear_refs`). Foreign CPU is the whole\n\
         machine's busy time from `/proc/stat` (user, nice, system, and interrupts unless the\n\
         kernel keeps them apart from processes) less that of the bench's own processes\n\
         (orchestrator, generator, relay, parties). Processes at a lower priority (nice > 0)\n\
         count as foreign: their part is shown. `/proc/stat` is sampled at each clock tick, the\n\
         processes' times are not: a few percent of a core either way is noise. Stolen CPU is\n\
         `/proc/stat`'s `steal` over the run: on a virtual machine, the time its CPUs had work\n\
         while the hypervisor ran another machine's; it shows in no process's time, and slows\n\
         every party of a run, the context switches and wake-ups most.\n\
         A run that saw more than {FOREIGN_LIMIT_PCT:.0}% of a core of foreign CPU or {STOLEN_LIMIT_PCT:.0}% stolen is run again, up to {ATTEMPTS}\n\
         times while the bench has re-runs left ({RERUNS} in all, so that a busy machine does not\n\
         stretch a whole run), and the least disturbed one is kept; it is marked when none was\n\
         quiet.\n\n\
         The video rows use the integration tests' fake video upstream, in the bench's own\n\
         process, on an `openai-videos` channel (default settings: at most 16 upstream calls at\n\
         once). Memory is the relay's `VmRSS` sampled every 5 ms while it downloads a result the\n\
         fake generates on the fly (an MP4: ftyp, moov, one large mdat), then while 16 clients\n\
         download a stored one. The poller row keeps 10,000 tasks running upstream, every one\n\
         always due, and times from the fake until each has been polled again. The stored-task\n\
         rows seed finished tasks of one key through the store crate (cached under\n\
         target/bench/seed-*), start the relay on a copy and read random ones with `wrk` (up to\n\
         100,000 ids, each request one at random) over 16 connections; start-up is from spawning\n\
         the process to its first answered task read, files in the page cache: first on the\n\
         seeded copy (the store's first open after the writes), then after a clean stop.\n"
    )
}

/// What the tables cannot say, kept by hand in `bench/NOTES.md` and appended to every report.
const NOTES: &str = include_str!("NOTES.md");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_with_separators() {
        assert_eq!(thousands(0.4), "0");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(33_200.2), "33,200");
        assert_eq!(thousands(1_234_567.0), "1,234,567");
    }

    fn run(stolen_pct: f64) -> Run {
        Run {
            generator: crate::bench::generator::Gen::Wrk,
            conns: 32,
            out: crate::bench::loadgen::Outcome {
                requests: 1000,
                secs: 1.0,
                ..Default::default()
            },
            cpu_us: 10.0,
            kernel_us: 0.0,
            rss_end_kib: 1024,
            rss_peak_kib: 2048,
            foreign_pct: 1.0,
            niced_pct: 0.0,
            stolen_pct,
            attempts: 1,
            threads: Vec::new(),
        }
    }

    /// A run's row shows its stolen CPU, and a run robbed past the limit is marked.
    #[test]
    fn rows_show_stolen_cpu() {
        let quiet = run_row("x", &run(2.5));
        assert!(
            quiet.ends_with("| 1.0% (0.0% niced) | 2.5% | 1 |\n"),
            "{quiet}"
        );
        let robbed = run_row("x", &run(24.0));
        assert!(robbed.contains("| 24.0% **disturbed** |"), "{robbed}");
    }

    /// The header says how much was stolen only when some kept run lost more than the limit.
    #[test]
    fn the_header_names_stolen_cpu_past_the_limit() {
        let runs = |s: &[f64]| {
            s.iter()
                .map(|&p| ("x".to_owned(), run(p)))
                .collect::<Vec<_>>()
        };
        assert_eq!(stolen_line(&runs(&[1.0, 5.0])), None);
        let line = stolen_line(&runs(&[2.0, 30.0, 4.0])).unwrap();
        assert!(line.contains("12.0% of a core"), "{line}");
        assert!(line.contains("30.0% at the most"), "{line}");
    }

    #[test]
    fn dates() {
        assert_eq!(utc(0), "1970-01-01 00:00 UTC");
        assert_eq!(utc(951_782_400 + 3_661), "2000-02-29 01:01 UTC");
        assert_eq!(utc(1_767_225_599), "2025-12-31 23:59 UTC");
    }
}
