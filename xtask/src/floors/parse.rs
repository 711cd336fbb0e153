//! What one file says about imports: the modules it declares (`mod x;`, inline `mod x {..}`),
//! the items and re-exports of each of its module scopes, and every path it uses (`use` trees
//! and paths in code). Items under `#[cfg(test)]` are left out.

use std::collections::{BTreeMap, BTreeSet};

use super::lex::{Tok, Token, tokens};

/// A module path relative to the file's own module (`[]`) or absolute in a crate (`[]` is the
/// crate root).
pub type ModPath = Vec<String>;

/// One module scope of a file: the file's own module or one of its inline modules.
#[derive(Debug, Default, Clone)]
pub struct Scope {
    /// `mod x;` declarations, with their `#[path]` when given.
    pub mod_files: Vec<ModDecl>,
    /// Child modules: the ones of `mod_files` and inline ones.
    pub children: BTreeSet<String>,
    /// Names of the items declared here (fn, struct, enum, trait, type, const, static, ...).
    pub items: BTreeSet<String>,
    /// `pub use` (any visibility): by name, or globs.
    pub reexports: Vec<Reexport>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModDecl {
    pub name: String,
    pub path_attr: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reexport {
    /// The name it is known by here; `None` for a glob (`pub use x::*`).
    pub name: Option<String>,
    /// The path it names, relative to the scope holding it.
    pub path: Vec<String>,
}

/// A path the file uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathUse {
    /// The scope it stands in, relative to the file's module.
    pub scope: ModPath,
    /// Its segments as written (`crate`, `self`, `super` kept; a leading `::` is `"::"`);
    /// a glob's segments name the module, `self` in a group is dropped.
    pub path: Vec<String>,
    pub line: usize,
    /// How it is written: `use a::b`, `pub use a::*`, or `a::b` in code.
    pub written: String,
}

#[derive(Debug, Default)]
pub struct Parsed {
    pub scopes: BTreeMap<ModPath, Scope>,
    pub uses: Vec<PathUse>,
}

/// Parses one file.
pub fn parse(text: &str) -> Parsed {
    let mut p = Parser {
        t: tokens(text),
        i: 0,
        depth: 0,
        open: vec![(Vec::new(), 0)],
        out: Parsed::default(),
        cfg_test: false,
        path_attr: None,
        public: false,
    };
    p.out.scopes.insert(Vec::new(), Scope::default());
    p.run();
    p.out
}

/// Keywords that start an item a `#[cfg(test)]` can leave out.
const ITEM_STARTS: &[&str] = &[
    "fn",
    "impl",
    "struct",
    "enum",
    "trait",
    "type",
    "const",
    "static",
    "async",
    "unsafe",
    "extern",
    "macro_rules",
    "union",
];

/// Keywords whose next identifier is the name of an item.
const NAMING: &[&str] = &[
    "fn", "struct", "enum", "trait", "type", "const", "static", "union", "mod",
];

struct Parser {
    t: Vec<Token>,
    i: usize,
    /// Open `{` braces.
    depth: usize,
    /// The module scopes open here, innermost last, with the brace depth of their body.
    open: Vec<(ModPath, usize)>,
    out: Parsed,
    /// Attributes and visibility seen for the item coming next.
    cfg_test: bool,
    path_attr: Option<String>,
    public: bool,
}

impl Parser {
    fn tok(&self, i: usize) -> Option<&Tok> {
        self.t.get(i).map(|t| &t.tok)
    }

    fn is_ident(&self, i: usize, word: &str) -> bool {
        matches!(self.tok(i), Some(Tok::Ident(w)) if w == word)
    }

    fn is_punct(&self, i: usize, c: char) -> bool {
        self.tok(i) == Some(&Tok::Punct(c))
    }

    fn line(&self, i: usize) -> usize {
        self.t.get(i).or(self.t.last()).map(|t| t.line).unwrap_or(1)
    }

    fn scope_path(&self) -> ModPath {
        self.open.last().map(|(p, _)| p.clone()).unwrap_or_default()
    }

    fn scope(&mut self) -> &mut Scope {
        let path = self.scope_path();
        self.out.scopes.entry(path).or_default()
    }

    /// At module level: not inside a function, impl or other braces of the current scope.
    fn module_level(&self) -> bool {
        self.open.last().is_some_and(|(_, d)| *d == self.depth)
    }

    /// The index after the group opened at `i` (`(`, `[` or `{`), nested groups included.
    fn after_group(&self, i: usize) -> usize {
        let mut depth = 0usize;
        let mut k = i;
        while let Some(tok) = self.tok(k) {
            match tok {
                Tok::Punct('(' | '[' | '{') => depth += 1,
                Tok::Punct(')' | ']' | '}') => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        return k + 1;
                    }
                }
                _ => {}
            }
            k += 1;
        }
        k
    }

    /// The index after the item starting at `i`: its `;` or the end of its first `{..}` body;
    /// stops before a closer it did not open.
    fn after_item(&self, i: usize) -> usize {
        let mut k = i;
        while let Some(tok) = self.tok(k) {
            match tok {
                Tok::Punct(';') => return k + 1,
                Tok::Punct('{') => return self.after_group(k),
                Tok::Punct('(' | '[') => k = self.after_group(k),
                Tok::Punct(')' | ']' | '}') => return k,
                _ => k += 1,
            }
        }
        k
    }

    fn run(&mut self) {
        while let Some(tok) = self.tok(self.i).cloned() {
            match tok {
                Tok::Punct('#') => {
                    self.attribute();
                    continue;
                }
                Tok::Ident(w) if w == "pub" => {
                    self.public = true;
                    self.i += 1;
                    if self.is_punct(self.i, '(') {
                        self.i = self.after_group(self.i);
                    }
                    continue;
                }
                Tok::Ident(w) if self.cfg_test && ITEM_STARTS.contains(&w.as_str()) => {
                    self.i = self.after_item(self.i);
                }
                Tok::Ident(w) if w == "mod" => self.module(),
                Tok::Ident(w) if w == "use" && !self.is_punct(self.i + 1, '<') => {
                    self.use_item();
                }
                Tok::Ident(w) => {
                    if self.module_level() {
                        self.declared(&w);
                    }
                    self.path_in_code(&w);
                }
                Tok::Punct('{') => {
                    self.depth += 1;
                    self.i += 1;
                }
                Tok::Punct('}') => {
                    self.depth = self.depth.saturating_sub(1);
                    if self.open.len() > 1 && self.open.last().is_some_and(|(_, d)| *d > self.depth)
                    {
                        self.open.pop();
                    }
                    self.i += 1;
                }
                _ => self.i += 1,
            }
            self.cfg_test = false;
            self.path_attr = None;
            self.public = false;
        }
    }

    /// `#[...]` (noting `cfg(test)` and `path = "..."`) or `#![...]`.
    fn attribute(&mut self) {
        let mut k = self.i + 1;
        if self.is_punct(k, '!') {
            k += 1;
        }
        if !self.is_punct(k, '[') {
            self.i += 1;
            return;
        }
        let end = self.after_group(k);
        let inner: Vec<Tok> = (k + 1..end.saturating_sub(1))
            .filter_map(|j| self.tok(j).cloned())
            .collect();
        let ident = |w: &str| Tok::Ident(w.to_owned());
        if inner
            == [
                ident("cfg"),
                Tok::Punct('('),
                ident("test"),
                Tok::Punct(')'),
            ]
        {
            self.cfg_test = true;
        }
        if let [Tok::Ident(w), Tok::Punct('='), Tok::Str(p)] = inner.as_slice()
            && w == "path"
        {
            self.path_attr = Some(p.clone());
        }
        self.i = end;
    }

    /// `mod x;`, `mod x { .. }`, or either under `#[cfg(test)]` (left out).
    fn module(&mut self) {
        let Some(Tok::Ident(name)) = self.tok(self.i + 1).cloned() else {
            self.i += 1;
            return;
        };
        let body = self.i + 2;
        if self.cfg_test {
            self.i = self.after_item(self.i);
            return;
        }
        if self.is_punct(body, ';') {
            let decl = ModDecl {
                name: name.clone(),
                path_attr: self.path_attr.take(),
            };
            let scope = self.scope();
            scope.children.insert(name);
            scope.mod_files.push(decl);
            self.i = body + 1;
        } else if self.is_punct(body, '{') {
            self.scope().children.insert(name.clone());
            let mut inner = self.scope_path();
            inner.push(name);
            self.out.scopes.entry(inner.clone()).or_default();
            self.depth += 1;
            self.open.push((inner, self.depth));
            self.i = body + 1;
        } else {
            self.i += 1;
        }
    }

    /// `fn NAME`, `struct NAME`, `macro_rules! NAME`, ... at module level.
    fn declared(&mut self, word: &str) {
        let name = if word == "macro_rules" && self.is_punct(self.i + 1, '!') {
            self.tok(self.i + 2)
        } else if NAMING.contains(&word) {
            self.tok(self.i + 1)
        } else {
            None
        };
        if let Some(Tok::Ident(name)) = name.cloned()
            && !matches!(name.as_str(), "fn" | "unsafe" | "async" | "extern" | "_")
        {
            self.scope().items.insert(name);
        }
    }

    /// A path in code whose first segment is at `self.i`: recorded when it goes on with `::`,
    /// unless it is a field or method (`x.a::<T>`) or a macro variable (`$a::b`).
    fn path_in_code(&mut self, first: &str) {
        let prev = self.i.checked_sub(1).and_then(|k| self.tok(k));
        let follows = matches!(prev, Some(Tok::PathSep | Tok::Punct('.')))
            || (matches!(prev, Some(Tok::Punct('$'))) && first != "crate");
        if follows || self.tok(self.i + 1) != Some(&Tok::PathSep) {
            self.i += 1;
            return;
        }
        let mut path = vec![first.to_owned()];
        let mut k = self.i + 1;
        while self.tok(k) == Some(&Tok::PathSep) {
            match self.tok(k + 1) {
                Some(Tok::Ident(seg)) => {
                    path.push(seg.clone());
                    k += 2;
                }
                _ => break,
            }
        }
        let line = self.line(k - 1);
        let scope = self.scope_path();
        let written = path.join("::");
        self.out.uses.push(PathUse {
            scope,
            path,
            line,
            written,
        });
        self.i = k;
    }

    /// `use TREE;` (a `pub use` also records re-exports).
    fn use_item(&mut self) {
        let cfg_test = self.cfg_test;
        let public = self.public;
        self.i += 1;
        let mut leaves = Vec::new();
        self.use_tree(Vec::new(), &mut leaves);
        self.i = self.after_item(self.i);
        if cfg_test {
            return;
        }
        let scope = self.scope_path();
        for leaf in leaves {
            let written = format!(
                "{}use {}{}",
                if public { "pub " } else { "" },
                leaf.path.join("::").replacen("::::", "::", 1),
                if leaf.glob { "::*" } else { "" }
            );
            if public {
                let name = if leaf.glob {
                    None
                } else {
                    leaf.alias.clone().or_else(|| leaf.path.last().cloned())
                };
                if leaf.glob || name.as_deref().is_some_and(|n| n != "_") {
                    let path = leaf.path.clone();
                    self.scope().reexports.push(Reexport { name, path });
                }
            }
            self.out.uses.push(PathUse {
                scope: scope.clone(),
                path: leaf.path,
                line: leaf.line,
                written,
            });
        }
    }

    /// One use tree after `prefix`: `a::b`, `a::b as c`, `a::*`, `a::{..}`, `self`.
    fn use_tree(&mut self, prefix: Vec<String>, out: &mut Vec<Leaf>) {
        let mut path = prefix;
        if self.tok(self.i) == Some(&Tok::PathSep) {
            path.push("::".to_owned());
            self.i += 1;
        }
        loop {
            match self.tok(self.i).cloned() {
                Some(Tok::Ident(name)) => {
                    let line = self.line(self.i);
                    self.i += 1;
                    if self.tok(self.i) == Some(&Tok::PathSep) {
                        path.push(name);
                        self.i += 1;
                        continue;
                    }
                    if name != "self" || path.is_empty() {
                        path.push(name);
                    }
                    let mut alias = None;
                    if self.is_ident(self.i, "as") {
                        if let Some(Tok::Ident(a)) = self.tok(self.i + 1) {
                            alias = Some(a.clone());
                        }
                        self.i += 2;
                    }
                    out.push(Leaf {
                        path,
                        alias,
                        glob: false,
                        line,
                    });
                    return;
                }
                Some(Tok::Punct('*')) => {
                    let line = self.line(self.i);
                    self.i += 1;
                    out.push(Leaf {
                        path,
                        alias: None,
                        glob: true,
                        line,
                    });
                    return;
                }
                Some(Tok::Punct('{')) => {
                    self.i += 1;
                    loop {
                        match self.tok(self.i) {
                            Some(Tok::Punct('}')) => {
                                self.i += 1;
                                return;
                            }
                            Some(Tok::Punct(',')) => self.i += 1,
                            Some(Tok::Ident(_) | Tok::PathSep | Tok::Punct('*' | '{')) => {
                                self.use_tree(path.clone(), out);
                            }
                            _ => return,
                        }
                    }
                }
                _ => return,
            }
        }
    }
}

/// One path a use tree names.
struct Leaf {
    path: Vec<String>,
    alias: Option<String>,
    glob: bool,
    line: usize,
}
