//! The bench's report: its rows as they are measured, and BENCHMARKS.md made of them.

use std::time::Duration;

/// The rows of the report.
#[derive(Default)]
pub struct Report {
    rows: Vec<(String, String, String, bool)>,
}

impl Report {
    pub fn check(&mut self, name: &str, value: String, target: &str, met: bool) {
        eprintln!("bench: {name}: {value} (target {target})");
        self.rows
            .push((name.to_owned(), value, target.to_owned(), met));
    }
}

pub fn render(report: &Report, secs: Duration) -> String {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let mut out = String::new();
    out.push_str("# Benchmarks\n\n");
    out.push_str(&format!(
        "Measured by `cargo xtask bench` on a {cores}-core machine: the release relay, a fake native\n\
         messages upstream, a bare hyper reverse proxy (the floor: pooled client, no parsing) and a\n\
         bare hyper hello server, all on loopback, driven by the bench's own fixed-connection load\n\
         generator for {} s per measurement. Ratios matter more than absolute numbers: the load\n\
         generator shares the cores with what it measures.\n\n",
        secs.as_secs()
    ));
    out.push_str(
        "The video rows use the integration tests' fake video upstream on an `openai-videos`\n\
         channel (default settings: at most 16 upstream calls at once). Memory is the relay's\n\
         `VmRSS` sampled every 5 ms while it downloads a result the fake generates on the fly\n\
         (an MP4: ftyp, moov, one large mdat), then while 16 clients download a stored one. The\n\
         poller row keeps 10,000 tasks running upstream, every one always due, and times from\n\
         the fake until each has been polled again. The stored-task rows seed finished tasks of\n\
         one key through the store crate (cached under target/bench/seed-*), start the relay on\n\
         a copy and read random ones, 1 s per store in turns; start-up is from spawning the\n\
         process to its first answered task read, files in the page cache: first on the seeded\n\
         copy (the store's first open after the writes), then after a clean stop.\n\n",
    );
    out.push_str("| measurement | result | target | met |\n|---|---|---|---|\n");
    for (name, value, target, met) in &report.rows {
        out.push_str(&format!(
            "| {name} | {value} | {target} | {} |\n",
            if *met { "yes" } else { "**no**" }
        ));
    }
    out.push('\n');
    out.push_str(NOTES);
    out
}

/// What the table cannot say (the targets not met and why, profiling before and after),
/// kept by hand in `bench/NOTES.md` and appended to every report.
const NOTES: &str = include_str!("NOTES.md");
