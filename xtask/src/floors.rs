//! `cargo xtask floors`: the import structure of every workspace crate, read from the code's
//! own `use` lines and paths: each crate's files by floor, bottom first, and every circle of
//! files with one chain of lines that closes it.

mod graph;
mod lex;
mod parse;
#[cfg(test)]
mod tests;

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, bail};

use graph::Crate;

pub const USAGE: &str = "cargo xtask floors [--crate NAME] [--quiet]

  floors   each workspace crate's files by floor, bottom first (floor 0: files importing no
           other file of the crate; floor n: files whose imports are all on lower floors; a
           circle stands as one), read from `use` lines and paths in code, tests left out;
           then every circle of files with a chain of lines that closes it. Fails when there
           is a circle
  --crate  only the package NAME
  --quiet  print only the circles";

/// Runs the command; `Ok(false)` when there is a circle.
pub fn run(args: &[String]) -> anyhow::Result<bool> {
    let (mut only, mut quiet) = (None, false);
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--crate" => {
                only = Some(
                    it.next()
                        .with_context(|| format!("--crate needs a name\n{USAGE}"))?
                        .clone(),
                );
            }
            "--quiet" => quiet = true,
            "--help" | "-h" => {
                println!("{USAGE}");
                return Ok(true);
            }
            other => bail!("unknown argument {other}\n{USAGE}"),
        }
    }
    let root = crate::cmd::root();
    let mut crates = workspace(&root)?;
    if let Some(name) = &only {
        let names: Vec<&str> = crates.iter().map(|c| c.name.as_str()).collect();
        if !names.contains(&name.as_str()) {
            bail!(
                "no crate {name} in the workspace (there are {})",
                names.join(", ")
            );
        }
        crates.retain(|c| &c.name == name);
    }
    let mut circles = 0;
    let mut report = String::new();
    for krate in &crates {
        for m in &krate.missing {
            eprintln!("floors: {}: {m}: no file found", krate.name);
        }
        if !quiet {
            println!("{}", floors_line(krate));
        }
        for circle in krate.circles() {
            circles += 1;
            report.push_str(&circle_text(krate, &circle));
        }
    }
    print!("{report}");
    if circles > 0 {
        println!("{circles} circle(s) of files");
    }
    Ok(circles == 0)
}

/// Every member's crates: `src/lib.rs` and `src/main.rs`, whichever there are.
fn workspace(root: &Path) -> anyhow::Result<Vec<Crate>> {
    let manifest =
        std::fs::read_to_string(root.join("Cargo.toml")).context("reading Cargo.toml")?;
    let mut crates = Vec::new();
    for member in members(&manifest, root) {
        let dir = root.join(&member);
        let toml = std::fs::read_to_string(dir.join("Cargo.toml"))
            .with_context(|| format!("reading {member}/Cargo.toml"))?;
        let name = package_name(&toml).unwrap_or_else(|| member.clone());
        let read = |p: &str| std::fs::read_to_string(dir.join(p)).ok();
        let roots: Vec<&str> = ["src/lib.rs", "src/main.rs"]
            .into_iter()
            .filter(|r| dir.join(r).is_file())
            .collect();
        for r in &roots {
            let label = if roots.len() > 1 && *r == "src/main.rs" {
                format!("{name}-bin")
            } else {
                name.clone()
            };
            crates.push(graph::load(&label, r, &read));
        }
    }
    Ok(crates)
}

/// The `members` of the `[workspace]` table, `dir/*` entries expanded.
fn members(manifest: &str, root: &Path) -> Vec<String> {
    let Some(start) = manifest.find("members") else {
        return Vec::new();
    };
    let list = &manifest[start..];
    let list = &list[list.find('[').unwrap_or(0)..list.find(']').unwrap_or(list.len())];
    let mut out = Vec::new();
    for entry in list.split('"').skip(1).step_by(2) {
        match entry.strip_suffix("/*") {
            Some(dir) => {
                let mut found: Vec<String> = std::fs::read_dir(root.join(dir))
                    .into_iter()
                    .flatten()
                    .flatten()
                    .filter(|e| e.path().join("Cargo.toml").is_file())
                    .map(|e| format!("{dir}/{}", e.file_name().to_string_lossy()))
                    .collect();
                found.sort();
                out.extend(found);
            }
            None => out.push(entry.to_owned()),
        }
    }
    out
}

/// `name` of the `[package]` table.
fn package_name(manifest: &str) -> Option<String> {
    let package = &manifest[manifest.find("[package]")?..];
    package
        .lines()
        .skip(1)
        .take_while(|l| !l.starts_with('['))
        .find_map(|l| {
            let (key, value) = l.split_once('=')?;
            (key.trim() == "name").then(|| value.trim().trim_matches('"').to_owned())
        })
}

/// `server: 0 [auth, http] 1 [config] 2 [circle(app, engine)] ...`.
pub fn floors_line(krate: &Crate) -> String {
    let mut line = format!("{}:", krate.name);
    for (n, floor) in krate.floors().iter().enumerate() {
        let names: Vec<String> = floor
            .iter()
            .map(|c| {
                let files: Vec<String> = c.iter().map(|&f| krate.files[f].name()).collect();
                if files.len() > 1 {
                    format!("circle({})", files.join(", "))
                } else {
                    files.join("")
                }
            })
            .collect();
        let _ = write!(line, " {n} [{}]", names.join(", "));
    }
    line
}

/// A circle's files, then the chain of lines that closes it, one arrow a line.
pub fn circle_text(krate: &Crate, circle: &[usize]) -> String {
    let names: Vec<String> = circle.iter().map(|&f| krate.files[f].name()).collect();
    let mut out = format!(
        "circle in {} ({} files): {}\n",
        krate.name,
        circle.len(),
        names.join(", ")
    );
    for a in krate.chain(circle) {
        let _ = writeln!(
            out,
            "  {}:{}: {} -> {}",
            krate.files[a.from].path,
            a.line,
            a.written,
            krate.files[a.to].name()
        );
    }
    out
}
