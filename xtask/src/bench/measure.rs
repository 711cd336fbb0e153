//! A measured run: one generator run with the CPU of the process under test read from
//! `/proc/PID/stat` before and after, its memory (`VmRSS`, and `VmHWM` reset before the run),
//! and the foreign CPU meanwhile: the whole machine's (`/proc/stat`) less that of the bench's
//! own processes, and the CPU stolen from the machine (`/proc/stat`'s `steal`: time its CPUs
//! had work while the hypervisor ran another machine). A run that other processes or other
//! machines disturbed is run again, a few times at most, and the least disturbed one is kept.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::generator::{Gen, Generators, Load};
use super::load::{TICKS_PER_SEC, cpu_ticks, proc_stats};
use super::loadgen::Outcome;

/// Foreign CPU above this (percent of one core) makes a run disturbed.
pub const FOREIGN_LIMIT_PCT: f64 = 5.0;
/// Stolen CPU above this (percent of one core) makes a run disturbed.
pub const STOLEN_LIMIT_PCT: f64 = 5.0;
/// Runs of one measurement at most, while they are disturbed.
pub const ATTEMPTS: u32 = 3;
/// Seconds of load before the measured runs of a measurement.
pub const WARMUP_SECS: u64 = 1;
/// Turns of two servers measured against each other ([`measured_turns`]).
pub const TURNS: usize = 3;

/// The processes of the bench while it measures.
pub struct Watch<'a> {
    /// The server under test (the relay, the floor, a fake, the hello server).
    pub server: u32,
    /// Every process of the bench but the orchestrator and the generator (whose CPU comes in
    /// `/proc/self/stat`'s children times when it is waited for): the relay and the parties,
    /// the server under test among them.
    pub own: &'a [u32],
}

/// One kept run.
#[derive(Debug, Clone)]
pub struct Run {
    pub generator: Gen,
    pub conns: usize,
    pub out: Outcome,
    /// CPU of the server under test per request answered, in µs.
    pub cpu_us: f64,
    /// The part of `cpu_us` spent in the kernel (system time: its sockets' reads and writes,
    /// the loopback's TCP under them, its waits for events).
    pub kernel_us: f64,
    /// Its RSS at the end and at its peak during the run, in KiB.
    pub rss_end_kib: u64,
    pub rss_peak_kib: u64,
    /// CPU of other processes during the run, in percent of one core, and the part of it at a
    /// lower priority (nice > 0).
    pub foreign_pct: f64,
    pub niced_pct: f64,
    /// CPU the hypervisor took from the machine during the run while it had work, in percent
    /// of one core.
    pub stolen_pct: f64,
    /// Runs made to keep this one.
    pub attempts: u32,
    /// The server's threads by name (trailing numbers dropped), most CPU first: CPU µs and
    /// context switches per request. Threads that ended during the run are left out.
    pub threads: Vec<(String, f64, f64)>,
}

impl Run {
    pub fn rps(&self) -> f64 {
        self.out.rps()
    }

    pub fn disturbed(&self) -> bool {
        self.foreign_pct > FOREIGN_LIMIT_PCT || self.stolen_pct > STOLEN_LIMIT_PCT
    }

    /// How much others took during the run: foreign and stolen CPU, percent of one core.
    pub fn disturbance(&self) -> f64 {
        self.foreign_pct + self.stolen_pct
    }
}

/// Whether the kernel keeps interrupt time apart from the processes it interrupted
/// (`CONFIG_IRQ_TIME_ACCOUNTING`). When it does not, a process's CPU time includes the softirq
/// work done in its context (loopback traffic, most of all), so interrupt time must count on
/// the machine's side too. Unknown (no `/proc/config.gz`): counted, which can only make a run
/// look more disturbed than it was.
fn irq_time_apart() -> bool {
    static APART: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *APART.get_or_init(|| {
        std::process::Command::new("zcat")
            .arg("/proc/config.gz")
            .output()
            .is_ok_and(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .any(|l| l == "CONFIG_IRQ_TIME_ACCOUNTING=y")
            })
    })
}

/// The whole machine's CPU ticks since it started, from `/proc/stat`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MachineTicks {
    /// User, nice and system time, and interrupt time unless the kernel keeps it apart from
    /// processes (see [`irq_time_apart`]).
    pub busy: u64,
    /// The part of `busy` at a lower priority (nice > 0).
    pub nice: u64,
    /// `steal`: time the machine's CPUs had work while the hypervisor ran another machine.
    pub stolen: u64,
    /// Every field summed, and the part of it idle (`idle` and `iowait`): the machine's share
    /// not idle, steal included, is how busy it looked from inside.
    pub all: u64,
    pub idle: u64,
}

impl MachineTicks {
    pub fn now() -> MachineTicks {
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        MachineTicks::parse(&stat, irq_time_apart())
    }

    /// From `/proc/stat`'s first line (`cpu  user nice system idle iowait irq softirq steal
    /// ...`); fields a kernel does not give count as 0.
    fn parse(stat: &str, irq_apart: bool) -> MachineTicks {
        let fields: Vec<u64> = stat
            .lines()
            .next()
            .unwrap_or("")
            .split_whitespace()
            .skip(1)
            .filter_map(|f| f.parse().ok())
            .collect();
        let at = |i: usize| fields.get(i).copied().unwrap_or(0);
        let irq = if irq_apart { 0 } else { at(5) + at(6) };
        MachineTicks {
            busy: at(0) + at(1) + at(2) + irq,
            nice: at(1),
            stolen: at(7),
            all: fields.iter().sum(),
            idle: at(3) + at(4),
        }
    }
}

/// CPU ticks of this process and of its children it has waited for (the generators).
fn self_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    stat.rsplit(") ")
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(11)
        .take(4)
        .filter_map(|f| f.parse::<u64>().ok())
        .sum()
}

/// Resets a process's `VmHWM` to its current RSS (`clear_refs` 5), so that the peak is the
/// run's; false when the kernel refused.
fn reset_peak(pid: u32) -> bool {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok()
}

/// (name, CPU ticks, context switches) of each thread of `pid`, by thread id.
fn threads(pid: u32) -> BTreeMap<u32, (String, u64, u64)> {
    let mut out = BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for task in tasks.flatten() {
        let Some(tid) = task.file_name().to_str().and_then(|t| t.parse().ok()) else {
            continue;
        };
        let dir = task.path();
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
        let name = read("comm").trim().to_owned();
        let stat = read("stat");
        let ticks: u64 = stat
            .rsplit(") ")
            .next()
            .unwrap_or("")
            .split_whitespace()
            .skip(11)
            .take(2)
            .filter_map(|f| f.parse::<u64>().ok())
            .sum();
        let switches: u64 = read("status")
            .lines()
            .filter(|l| l.contains("ctxt_switches:"))
            .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .sum();
        out.insert(tid, (name, ticks, switches));
    }
    out
}

/// A thread's name without its number (`sled-io-3` is one of `sled-io`).
fn thread_group(name: &str) -> &str {
    name.trim_end_matches(|c: char| c.is_ascii_digit())
        .trim_end_matches(['-', '_', '#'])
}

struct Snapshot {
    at: Instant,
    machine: MachineTicks,
    own: u64,
    server: u64,
    server_kernel: u64,
    threads: BTreeMap<u32, (String, u64, u64)>,
}

impl Snapshot {
    fn take(watch: &Watch) -> Snapshot {
        let (server, server_kernel) = cpu_ticks(watch.server);
        Snapshot {
            at: Instant::now(),
            machine: MachineTicks::now(),
            own: self_ticks() + watch.own.iter().map(|p| cpu_ticks(*p).0).sum::<u64>(),
            server,
            server_kernel,
            threads: threads(watch.server),
        }
    }
}

/// Percent of one core that `ticks` are over `secs`.
pub fn pct_of_core(ticks: u64, secs: f64) -> f64 {
    ticks as f64 / TICKS_PER_SEC / secs.max(1e-9) * 100.0
}

/// A warm-up of `load`, then runs of it until one is not disturbed (at most `attempts`, while
/// the bench has re-runs left): the least disturbed run. `label` names it in the progress lines.
pub fn measured(
    gens: &Generators,
    generator: Gen,
    load: &Load,
    watch: &Watch,
    attempts: u32,
    label: &str,
) -> anyhow::Result<Run> {
    gens.run(generator, &load.secs(WARMUP_SECS))?;
    let [run] = least_disturbed(gens, attempts, label, || {
        Ok([once(gens, generator, load, watch)?])
    })?;
    Ok(run)
}

/// [`measured`] for two generators on one load, run in turns, so that they are compared under
/// the same conditions: the least disturbed pair (a pair is as disturbed as its worse run).
pub fn measured_pair(
    gens: &Generators,
    generators: [Gen; 2],
    load: &Load,
    watch: &Watch,
    attempts: u32,
    label: &str,
) -> anyhow::Result<[Run; 2]> {
    for generator in generators {
        gens.run(generator, &load.secs(WARMUP_SECS))?;
    }
    least_disturbed(gens, attempts, label, || {
        Ok([
            once(gens, generators[0], load, watch)?,
            once(gens, generators[1], load, watch)?,
        ])
    })
}

/// A warm-up of both, then two servers' runs of one load in turns (`a`'s, then `b`'s), `turns`
/// times, each pair re-run when disturbed as [`measured_pair`]'s: every pair, in order. A
/// pair's two runs come minutes closer together than separate measurements would, so a
/// machine whose speed drifts (a host that takes more of it for a while without showing it
/// as stolen time) slows both runs of a pair alike, and the median pair is a fair comparison.
pub fn measured_turns(
    gens: &Generators,
    generator: Gen,
    [(a, a_watch), (b, b_watch)]: [(&Load, &Watch); 2],
    turns: usize,
    attempts: u32,
    label: &str,
) -> anyhow::Result<Vec<[Run; 2]>> {
    gens.run(generator, &a.secs(WARMUP_SECS))?;
    gens.run(generator, &b.secs(WARMUP_SECS))?;
    (1..=turns.max(1))
        .map(|turn| {
            least_disturbed(gens, attempts, &format!("{label}, turn {turn}"), || {
                Ok([
                    once(gens, generator, a, a_watch)?,
                    once(gens, generator, b, b_watch)?,
                ])
            })
        })
        .collect()
}

/// The pair of `pairs` whose `ratio` is the median (the lower of the middle two of an even
/// count), and the ratios of all, in order.
pub fn median_pair(
    pairs: Vec<[Run; 2]>,
    ratio: impl Fn(&[Run; 2]) -> f64,
) -> Option<([Run; 2], Vec<f64>)> {
    let ratios: Vec<f64> = pairs.iter().map(&ratio).collect();
    let mut order: Vec<usize> = (0..pairs.len()).collect();
    order.sort_by(|&i, &j| ratios[i].total_cmp(&ratios[j]));
    let middle = *order.get(order.len().saturating_sub(1) / 2)?;
    let pair = pairs.into_iter().nth(middle)?;
    Some((pair, ratios))
}

/// Runs `runs` until its runs are not disturbed (at most `attempts`, while the bench has
/// re-runs left): the least disturbed ones, each knowing how many times they were made.
fn least_disturbed<const N: usize>(
    gens: &Generators,
    attempts: u32,
    label: &str,
    mut runs: impl FnMut() -> anyhow::Result<[Run; N]>,
) -> anyhow::Result<[Run; N]> {
    let disturbance = |r: &[Run; N]| r.iter().map(Run::disturbance).fold(0.0, f64::max);
    let mut kept: Option<[Run; N]> = None;
    let mut made = 0;
    for attempt in 1..=attempts.max(1) {
        made = attempt;
        let these = runs()?;
        let quiet = these.iter().all(|r| !r.disturbed());
        let again = !quiet && attempt < attempts && gens.take_rerun();
        for run in &these {
            eprintln!(
                "bench: {label}{}: {:.0} req/s, p50 {:.0} µs, p99 {:.0} µs, {:.1} µs CPU/request ({:.1} in the kernel), foreign CPU {:.1}% of a core, stolen {:.1}%{}",
                if N > 1 {
                    format!(" ({})", run.generator.name())
                } else {
                    String::new()
                },
                run.rps(),
                run.out.p50_us,
                run.out.p99_us,
                run.cpu_us,
                run.kernel_us,
                run.foreign_pct,
                run.stolen_pct,
                match (quiet, again) {
                    (true, _) => "",
                    (false, true) => ": disturbed, again",
                    (false, false) => ": disturbed",
                }
            );
        }
        if kept
            .as_ref()
            .is_none_or(|k| disturbance(&these) < disturbance(k))
        {
            kept = Some(these);
        }
        if !again {
            break;
        }
    }
    let mut kept = kept.ok_or_else(|| anyhow::anyhow!("{label}: no run"))?;
    for run in &mut kept {
        run.attempts = made;
        if run.out.requests == 0 {
            anyhow::bail!("{label}: no request answered ({} errors)", run.out.errors);
        }
    }
    Ok(kept)
}

/// One run of `load`, measured.
fn once(gens: &Generators, generator: Gen, load: &Load, watch: &Watch) -> anyhow::Result<Run> {
    reset_peak(watch.server);
    let before = Snapshot::take(watch);
    let out = gens.run(generator, load)?;
    let after = Snapshot::take(watch);
    let (_, rss_end_kib, rss_peak_kib) = proc_stats(watch.server);
    Ok(summarize(
        generator,
        load.conns,
        out,
        &before,
        &after,
        rss_end_kib,
        rss_peak_kib,
    ))
}

fn summarize(
    generator: Gen,
    conns: usize,
    out: Outcome,
    before: &Snapshot,
    after: &Snapshot,
    rss_end_kib: u64,
    rss_peak_kib: u64,
) -> Run {
    let secs = after.at.duration_since(before.at).as_secs_f64();
    let machine = after.machine.busy.saturating_sub(before.machine.busy);
    let niced = after.machine.nice.saturating_sub(before.machine.nice);
    let stolen = after.machine.stolen.saturating_sub(before.machine.stolen);
    let own = after.own.saturating_sub(before.own);
    let foreign = machine.saturating_sub(own);
    let server = after.server.saturating_sub(before.server);
    let tick_us = 1_000_000.0 / TICKS_PER_SEC;
    let requests = out.requests.max(1) as f64;
    let mut groups: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for (tid, (name, ticks, switches)) in &after.threads {
        let (t0, s0) = before
            .threads
            .get(tid)
            .map(|(_, t, s)| (*t, *s))
            .unwrap_or((0, 0));
        let g = groups.entry(thread_group(name)).or_default();
        g.0 += ticks.saturating_sub(t0);
        g.1 += switches.saturating_sub(s0);
    }
    let mut threads: Vec<(String, f64, f64)> = groups
        .into_iter()
        .map(|(name, (ticks, switches))| {
            (
                name.to_owned(),
                ticks as f64 * tick_us / requests,
                switches as f64 / requests,
            )
        })
        .collect();
    threads.sort_by(|a, b| b.1.total_cmp(&a.1));
    Run {
        generator,
        conns,
        cpu_us: server as f64 * tick_us / requests,
        kernel_us: after.server_kernel.saturating_sub(before.server_kernel) as f64 * tick_us
            / requests,
        out,
        rss_end_kib,
        rss_peak_kib: rss_peak_kib.max(rss_end_kib),
        foreign_pct: pct_of_core(foreign, secs),
        niced_pct: pct_of_core(niced.min(foreign), secs),
        stolen_pct: pct_of_core(stolen, secs),
        attempts: 1,
        threads,
    }
}

/// Samples a process's RSS once a second on a thread of its own.
pub struct RssTrace {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<Vec<(f64, u64)>>>,
}

impl RssTrace {
    pub fn start(pid: u32) -> RssTrace {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let started = Instant::now();
            let mut samples = Vec::new();
            while !s.load(Ordering::Relaxed) {
                samples.push((started.elapsed().as_secs_f64(), proc_stats(pid).1));
                let next = Duration::from_secs(samples.len() as u64);
                while started.elapsed() < next && !s.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
            samples
        });
        RssTrace {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops sampling: (seconds since the start, RSS KiB) of every sample.
    pub fn stop(mut self) -> Vec<(f64, u64)> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn foreign_cpu_is_the_machine_less_the_bench() {
        let at = Instant::now();
        let thread = |ticks, switches| (String::from("sled-io-1"), ticks, switches);
        let before = Snapshot {
            at,
            machine: MachineTicks {
                busy: 1000,
                nice: 50,
                stolen: 40,
                ..MachineTicks::default()
            },
            own: 300,
            server: 100,
            server_kernel: 30,
            threads: BTreeMap::from([(7, thread(10, 100)), (8, thread(20, 100))]),
        };
        let after = Snapshot {
            at: at + Duration::from_secs(5),
            // 5 s on 2 cores: 900 ticks busy, 30 of them niced; 10 ticks stolen.
            machine: MachineTicks {
                busy: 1900,
                nice: 80,
                stolen: 50,
                ..MachineTicks::default()
            },
            own: 1150,
            server: 500,
            server_kernel: 270,
            threads: BTreeMap::from([(7, thread(30, 4100)), (8, thread(20, 100))]),
        };
        let out = Outcome {
            requests: 40_000,
            secs: 5.0,
            ..Outcome::default()
        };
        let run = summarize(Gen::Wrk, 32, out, &before, &after, 2048, 1024);
        // 400 ticks of the server = 4 s of CPU over 40,000 requests.
        assert!((run.cpu_us - 100.0).abs() < 1e-9);
        // 240 of them in the kernel: 60 µs a request.
        assert!((run.kernel_us - 60.0).abs() < 1e-9);
        // 900 - 850 = 50 foreign ticks over 5 s: 10% of a core, 6% of it niced.
        assert!((run.foreign_pct - 10.0).abs() < 1e-9);
        assert!((run.niced_pct - 6.0).abs() < 1e-9);
        // 10 ticks stolen over 5 s: 2% of a core.
        assert!((run.stolen_pct - 2.0).abs() < 1e-9);
        assert!(run.disturbed());
        assert!((run.disturbance() - 12.0).abs() < 1e-9);
        assert_eq!(run.rss_peak_kib, 2048);
        // 20 ticks and 4,000 switches of one thread over 40,000 requests.
        assert_eq!(run.threads.len(), 1);
        assert_eq!(run.threads[0].0, "sled-io");
        assert!((run.threads[0].1 - 5.0).abs() < 1e-9);
        assert!((run.threads[0].2 - 0.1).abs() < 1e-9);
    }

    /// A run no other process disturbed is still disturbed when the hypervisor took the
    /// machine's CPUs from it.
    #[test]
    fn stolen_cpu_disturbs_a_run() {
        let at = Instant::now();
        let snapshot = |at, busy, stolen| Snapshot {
            at,
            machine: MachineTicks {
                busy,
                stolen,
                ..MachineTicks::default()
            },
            own: busy,
            server: 0,
            server_kernel: 0,
            threads: BTreeMap::new(),
        };
        let out = Outcome {
            requests: 1,
            secs: 5.0,
            ..Outcome::default()
        };
        let run = |stolen| {
            let before = snapshot(at, 100, 0);
            let after = snapshot(at + Duration::from_secs(5), 900, stolen);
            summarize(Gen::Wrk, 32, out.clone(), &before, &after, 0, 0)
        };
        // 25 ticks over 5 s: 5% of a core, at the limit; 30: 6%, past it.
        assert_eq!(run(25).foreign_pct, 0.0);
        assert!(!run(25).disturbed());
        assert!((run(30).stolen_pct - 6.0).abs() < 1e-9);
        assert!(run(30).disturbed());
    }

    /// The median turn is kept whole (its two runs together), whatever the order of turns.
    #[test]
    fn the_median_turn_is_kept() {
        let at = Instant::now();
        let snapshot = |at| Snapshot {
            at,
            machine: MachineTicks::default(),
            own: 0,
            server: 0,
            server_kernel: 0,
            threads: BTreeMap::new(),
        };
        let run = |requests| {
            let out = Outcome {
                requests,
                secs: 1.0,
                ..Outcome::default()
            };
            let after = snapshot(at + Duration::from_secs(1));
            summarize(Gen::Wrk, 32, out, &snapshot(at), &after, 0, 0)
        };
        let ratio = |p: &[Run; 2]| p[1].rps() / p[0].rps();
        // Relay ÷ floor of 0.8, 0.9 (a slow turn for both) and 0.85.
        let pairs = vec![[run(100), run(80)], [run(50), run(45)], [run(100), run(85)]];
        let (kept, ratios) = median_pair(pairs, ratio).unwrap();
        assert_eq!((kept[0].out.requests, kept[1].out.requests), (100, 85));
        assert_eq!(ratios.len(), 3);
        assert!((ratios[1] - 0.9).abs() < 1e-9);
        // Of two, the lower.
        let pairs = vec![[run(100), run(90)], [run(100), run(80)]];
        let (kept, _) = median_pair(pairs, ratio).unwrap();
        assert_eq!(kept[1].out.requests, 80);
        assert!(median_pair(Vec::new(), ratio).is_none());
    }

    #[test]
    fn machine_ticks_from_proc_stat() {
        let stat =
            "cpu  144944 10 53332 154027 3973 7 18894 16346 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n";
        assert_eq!(
            MachineTicks::parse(stat, false),
            MachineTicks {
                busy: 144_944 + 10 + 53_332 + 7 + 18_894,
                nice: 10,
                stolen: 16_346,
                all: 144_944 + 10 + 53_332 + 154_027 + 3_973 + 7 + 18_894 + 16_346,
                idle: 154_027 + 3_973,
            }
        );
        assert_eq!(MachineTicks::parse(stat, true).busy, 144_944 + 10 + 53_332);
        // A kernel without the steal field: nothing stolen.
        assert_eq!(MachineTicks::parse("cpu  1 2 3 4 5 6 7\n", true).stolen, 0);
    }

    #[test]
    fn thread_groups() {
        assert_eq!(thread_group("sled-io-3"), "sled-io");
        assert_eq!(thread_group("tokio-rt-worker"), "tokio-rt-worker");
        assert_eq!(thread_group("log_flusher"), "log_flusher");
    }
}
