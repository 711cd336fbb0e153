//! One crate's files and the arrows between them: the module tree walked from the crate root
//! through its `mod x;` declarations, every used path resolved to the file it comes from
//! (following re-exports), then circles (strongly connected components) and floors.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Component, Path, PathBuf};

use super::parse::{ModPath, PathUse, Reexport, parse};

/// One file of a crate.
#[derive(Debug, Clone)]
pub struct File {
    /// Its path relative to the package directory (`src/app.rs`).
    pub path: String,
    /// Its module path; `[]` for the crate root.
    pub module: ModPath,
}

impl File {
    /// Its module path as written in code; `crate` for the root.
    pub fn name(&self) -> String {
        if self.module.is_empty() {
            "crate".to_owned()
        } else {
            self.module.join("::")
        }
    }
}

/// An arrow: `from` uses something of `to` at `line` of `from`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arrow {
    pub from: usize,
    pub to: usize,
    pub line: usize,
    /// The path as written there (`use crate::app::App`, `crate::engine::run`).
    pub written: String,
}

#[derive(Debug, Default)]
struct Module {
    file: usize,
    children: BTreeSet<String>,
    items: BTreeSet<String>,
    reexports: Vec<Reexport>,
}

/// A crate read from its root file.
#[derive(Debug)]
pub struct Crate {
    pub name: String,
    pub files: Vec<File>,
    /// One arrow per (from, to), its first line.
    pub arrows: Vec<Arrow>,
    /// Declared modules whose file was not found (`src/a.rs: mod x`).
    pub missing: Vec<String>,
}

/// Reads the crate whose root is `root` (relative to the package directory: `src/lib.rs`),
/// with `read` giving a file's text by its path relative to the package directory.
pub fn load(name: &str, root: &str, read: &dyn Fn(&str) -> Option<String>) -> Crate {
    let mut files = Vec::new();
    let mut modules: BTreeMap<ModPath, Module> = BTreeMap::new();
    let mut uses: Vec<(usize, PathUse)> = Vec::new();
    let mut missing = Vec::new();
    let mut queue = VecDeque::from([(root.to_owned(), Vec::new(), true)]);
    while let Some((path, module, mod_rs)) = queue.pop_front() {
        let Some(text) = read(&path) else {
            continue;
        };
        let id = files.len();
        let parsed = parse(&text);
        let file_dir = parent(&path);
        let own_dir = if mod_rs {
            file_dir.clone()
        } else {
            format!("{file_dir}/{}", stem(&path))
        };
        for (rel, scope) in parsed.scopes {
            let mut full = module.clone();
            full.extend(rel.iter().cloned());
            for decl in &scope.mod_files {
                let mut child = full.clone();
                child.push(decl.name.clone());
                let dir = std::iter::once(own_dir.clone())
                    .chain(rel.iter().cloned())
                    .collect::<Vec<_>>()
                    .join("/");
                let found = match &decl.path_attr {
                    Some(p) => {
                        let p = normalize(&format!("{file_dir}/{p}"));
                        read(&p).map(|_| (p, true))
                    }
                    None => [
                        (format!("{dir}/{}.rs", decl.name), false),
                        (format!("{dir}/{}/mod.rs", decl.name), true),
                    ]
                    .into_iter()
                    .find(|(p, _)| read(p).is_some()),
                };
                match found {
                    Some((p, is_mod_rs)) => queue.push_back((p, child, is_mod_rs)),
                    None => missing.push(format!("{path}: mod {}", decl.name)),
                }
            }
            modules.insert(
                full,
                Module {
                    file: id,
                    children: scope.children,
                    items: scope.items,
                    reexports: scope.reexports,
                },
            );
        }
        for u in parsed.uses {
            let mut scope = module.clone();
            scope.extend(u.scope);
            uses.push((id, PathUse { scope, ..u }));
        }
        files.push(File { path, module });
    }
    let tree = Tree { modules };
    let mut arrows: Vec<Arrow> = Vec::new();
    for (from, u) in &uses {
        let Some(to) = tree.resolve(&u.scope, &u.path, 0) else {
            continue;
        };
        if to == *from {
            continue;
        }
        let arrow = Arrow {
            from: *from,
            to,
            line: u.line,
            written: u.written.clone(),
        };
        match arrows.iter_mut().find(|a| a.from == *from && a.to == to) {
            Some(a) if a.line > u.line => *a = arrow,
            Some(_) => {}
            None => arrows.push(arrow),
        }
    }
    arrows.sort_by_key(|a| (a.from, a.to));
    Crate {
        name: name.to_owned(),
        files,
        arrows,
        missing,
    }
}

fn parent(path: &str) -> String {
    path.rsplit_once('/')
        .map(|(dir, _)| dir.to_owned())
        .unwrap_or_else(|| ".".to_owned())
}

fn stem(path: &str) -> &str {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.strip_suffix(".rs").unwrap_or(name)
}

/// `a/b/../c` as `a/c`, lexically; `..` above the start is kept.
fn normalize(path: &str) -> String {
    let mut out: Vec<String> = Vec::new();
    for c in Path::new(path).components() {
        match c {
            Component::ParentDir if out.last().is_some_and(|l| l != "..") => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c.as_os_str().to_string_lossy().into_owned()),
        }
    }
    out.iter()
        .collect::<PathBuf>()
        .to_string_lossy()
        .into_owned()
}

struct Tree {
    modules: BTreeMap<ModPath, Module>,
}

/// How many re-exports a path may go through before it is taken as it stands.
const MAX_HOPS: usize = 16;

impl Tree {
    /// `path` as a path from the crate root, used in module `scope`; `None` when it leaves the
    /// crate (another crate, `::x`, or a name that is no child module).
    fn absolute(&self, scope: &[String], path: &[String]) -> Option<ModPath> {
        let (first, rest) = path.split_first()?;
        let mut base = match first.as_str() {
            "crate" => Vec::new(),
            "self" => scope.to_vec(),
            "super" => {
                let mut base = scope.to_vec();
                base.pop()?;
                base
            }
            name if self.modules.get(scope)?.children.contains(name) => {
                let mut base = scope.to_vec();
                base.push(name.to_owned());
                base
            }
            _ => return None,
        };
        let mut rest = rest;
        while first == "super" && rest.first().is_some_and(|s| s == "super") {
            base.pop()?;
            rest = &rest[1..];
        }
        base.extend(rest.iter().cloned());
        Some(base)
    }

    /// Whether module `m` has `name`: an item, a child module or a named re-export.
    fn knows(&self, m: &[String], name: &str) -> bool {
        self.modules.get(m).is_some_and(|module| {
            module.items.contains(name)
                || module.children.contains(name)
                || module
                    .reexports
                    .iter()
                    .any(|r| r.name.as_deref() == Some(name))
        })
    }

    /// The file `path` (used in `scope`) comes from: the deepest module it names, or, when its
    /// next segment is a name that module re-exports, the file the re-export comes from.
    fn resolve(&self, scope: &[String], path: &[String], hops: usize) -> Option<usize> {
        let abs = self.absolute(scope, path)?;
        let depth = (0..=abs.len())
            .rev()
            .find(|&k| self.modules.contains_key(&abs[..k]))?;
        let (m, rest) = abs.split_at(depth);
        let module = self.modules.get(m)?;
        let Some(name) = rest.first() else {
            return Some(module.file);
        };
        if hops >= MAX_HOPS || module.items.contains(name) {
            return Some(module.file);
        }
        let named = module
            .reexports
            .iter()
            .find(|r| r.name.as_deref() == Some(name.as_str()));
        if let Some(r) = named {
            let mut through = r.path.clone();
            through.extend(rest[1..].iter().cloned());
            return self.resolve(m, &through, hops + 1);
        }
        for glob in module.reexports.iter().filter(|r| r.name.is_none()) {
            if self
                .absolute(m, &glob.path)
                .is_some_and(|g| self.knows(&g, name))
            {
                let mut through = glob.path.clone();
                through.extend(rest.iter().cloned());
                return self.resolve(m, &through, hops + 1);
            }
        }
        Some(module.file)
    }
}

impl Crate {
    /// The strongly connected components of the files, sinks first (Tarjan).
    pub fn components(&self) -> Vec<Vec<usize>> {
        let n = self.files.len();
        let mut out_of = vec![Vec::new(); n];
        for a in &self.arrows {
            out_of[a.from].push(a.to);
        }
        let mut t = Tarjan {
            out_of,
            index: vec![None; n],
            low: vec![0; n],
            on_stack: vec![false; n],
            stack: Vec::new(),
            next: 0,
            components: Vec::new(),
        };
        for v in 0..n {
            if t.index[v].is_none() {
                t.visit(v);
            }
        }
        t.components
    }

    /// The circles: components of more than one file, each sorted by module path.
    pub fn circles(&self) -> Vec<Vec<usize>> {
        let mut circles: Vec<Vec<usize>> = self
            .components()
            .into_iter()
            .filter(|c| c.len() > 1)
            .map(|mut c| {
                c.sort_by_key(|&f| self.files[f].module.clone());
                c
            })
            .collect();
        circles.sort_by_key(|c| self.files[c[0]].module.clone());
        circles
    }

    /// Floors bottom first: each a list of components (a circle is one component of several
    /// files), each component sorted by module path. A component's floor is one above the
    /// highest of those it imports from; 0 when it imports no other file.
    pub fn floors(&self) -> Vec<Vec<Vec<usize>>> {
        let components = self.components();
        let mut comp_of = vec![0; self.files.len()];
        for (c, files) in components.iter().enumerate() {
            for &f in files {
                comp_of[f] = c;
            }
        }
        // Tarjan gives sinks first: every component a component imports from comes before it.
        let mut floor_of = vec![0usize; components.len()];
        for c in 0..components.len() {
            floor_of[c] = self
                .arrows
                .iter()
                .filter(|a| comp_of[a.from] == c && comp_of[a.to] != c)
                .map(|a| floor_of[comp_of[a.to]] + 1)
                .max()
                .unwrap_or(0);
        }
        let top = floor_of.iter().copied().max().unwrap_or(0);
        let mut floors = vec![Vec::new(); if components.is_empty() { 0 } else { top + 1 }];
        for (c, mut files) in components.into_iter().enumerate() {
            files.sort_by_key(|&f| self.files[f].module.clone());
            floors[floor_of[c]].push(files);
        }
        for floor in &mut floors {
            floor.sort_by_key(|c| self.files[c[0]].module.clone());
        }
        floors
    }

    /// A closed chain of arrows through every file of `circle`, from its first file: to the
    /// nearest file not yet passed, again and again, then back.
    pub fn chain(&self, circle: &[usize]) -> Vec<Arrow> {
        let inside: BTreeSet<usize> = circle.iter().copied().collect();
        let Some(&start) = circle.first() else {
            return Vec::new();
        };
        let mut left: BTreeSet<usize> = inside.clone();
        left.remove(&start);
        let mut chain = Vec::new();
        let mut at = start;
        loop {
            let done = left.is_empty();
            let steps = self.shortest(at, &inside, |f| {
                if done { f == start } else { left.contains(&f) }
            });
            let Some(steps) = steps else {
                return chain;
            };
            for a in &steps {
                left.remove(&a.to);
            }
            at = steps.last().map_or(at, |a| a.to);
            chain.extend(steps);
            if done {
                return chain;
            }
        }
    }

    /// The shortest chain of arrows inside `inside` from `from` to a file `goal` accepts.
    fn shortest(
        &self,
        from: usize,
        inside: &BTreeSet<usize>,
        goal: impl Fn(usize) -> bool,
    ) -> Option<Vec<Arrow>> {
        let mut came: BTreeMap<usize, Arrow> = BTreeMap::new();
        let mut queue = VecDeque::from([from]);
        while let Some(f) = queue.pop_front() {
            for a in self
                .arrows
                .iter()
                .filter(|a| a.from == f && inside.contains(&a.to))
            {
                if goal(a.to) {
                    let mut steps = vec![a.clone()];
                    let mut at = f;
                    while let Some(prev) = came.get(&at).filter(|_| at != from) {
                        steps.push(prev.clone());
                        at = prev.from;
                    }
                    steps.reverse();
                    return Some(steps);
                }
                if a.to != from && !came.contains_key(&a.to) {
                    came.insert(a.to, a.clone());
                    queue.push_back(a.to);
                }
            }
        }
        None
    }
}

struct Tarjan {
    out_of: Vec<Vec<usize>>,
    index: Vec<Option<usize>>,
    low: Vec<usize>,
    on_stack: Vec<bool>,
    stack: Vec<usize>,
    next: usize,
    components: Vec<Vec<usize>>,
}

impl Tarjan {
    fn visit(&mut self, v: usize) {
        self.index[v] = Some(self.next);
        self.low[v] = self.next;
        self.next += 1;
        self.stack.push(v);
        self.on_stack[v] = true;
        for w in self.out_of[v].clone() {
            match self.index[w] {
                None => {
                    self.visit(w);
                    self.low[v] = self.low[v].min(self.low[w]);
                }
                Some(i) if self.on_stack[w] => self.low[v] = self.low[v].min(i),
                Some(_) => {}
            }
        }
        if Some(self.low[v]) == self.index[v] {
            let mut component = Vec::new();
            while let Some(w) = self.stack.pop() {
                self.on_stack[w] = false;
                component.push(w);
                if w == v {
                    break;
                }
            }
            self.components.push(component);
        }
    }
}
