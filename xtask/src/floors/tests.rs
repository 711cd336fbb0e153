//! The parser, the resolver, circles and floors on small crates held in strings.

use std::collections::BTreeMap;

use super::graph::{Crate, load};
use super::lex::{Tok, tokens};
use super::parse::parse;
use super::{circle_text, floors_line};

/// A crate `t` from `(path, text)` pairs, its root `src/lib.rs`.
fn krate(files: &[(&str, &str)]) -> Crate {
    let files: BTreeMap<String, String> = files
        .iter()
        .map(|(p, t)| ((*p).to_owned(), (*t).to_owned()))
        .collect();
    load("t", "src/lib.rs", &|p| files.get(p).cloned())
}

/// The arrows as `from -> to` by module name, sorted.
fn arrows(k: &Crate) -> Vec<String> {
    let mut out: Vec<String> = k
        .arrows
        .iter()
        .map(|a| format!("{} -> {}", k.files[a.from].name(), k.files[a.to].name()))
        .collect();
    out.sort();
    out
}

/// The paths a file uses, as written.
fn written(text: &str) -> Vec<String> {
    parse(text).uses.into_iter().map(|u| u.written).collect()
}

#[test]
fn use_trees_are_read_whole() {
    let uses = written(
        "pub use crate::{a::B, c::{self, D as E, f::*}};\n\
         pub(crate) use ::x::y;\n\
         use self::g::H as _;\n",
    );
    assert_eq!(
        uses,
        [
            "pub use crate::a::B",
            "pub use crate::c",
            "pub use crate::c::D",
            "pub use crate::c::f::*",
            "pub use ::x::y",
            "use self::g::H",
        ]
    );
    let parsed = parse("pub use a::{B as C, d::*};\nuse e::F;\n");
    let names: Vec<(Option<String>, Vec<String>)> = parsed.scopes[&Vec::new()]
        .reexports
        .iter()
        .map(|r| (r.name.clone(), r.path.clone()))
        .collect();
    let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
    assert_eq!(
        names,
        [
            (Some("C".to_owned()), s(&["a", "B"])),
            (None, s(&["a", "d"])),
        ]
    );
}

#[test]
fn paths_in_code_are_read_but_not_fields_methods_or_macro_variables() {
    let uses = written(
        "fn f() { crate::a::run(); super::super::b::C::new(); x.y::<u8>(); self::d::e(); }\n\
         macro_rules! m { ($p:ident) => { $crate::g::h(); $p::i() } }\n\
         pub(in crate::vis) fn v() {}\n",
    );
    assert_eq!(
        uses,
        [
            "crate::a::run",
            "super::super::b::C::new",
            "self::d::e",
            "crate::g::h"
        ]
    );
}

#[test]
fn comments_and_literals_are_skipped() {
    let uses = written(
        "// use crate::a::X;\n\
         /* crate::b::X /* nested */ crate::c::X */\n\
         /// [`crate::d::X`]\n\
         const S: &str = \"crate::e::X\";\n\
         const R: &str = r#\"crate::f::X \"quoted\" \"#;\n\
         const C: char = '\"'; const Q: char = '\\''; const B: &[u8] = b\"crate::g\";\n\
         fn f<'a>(x: &'a str) -> &'a str { crate::h::X }\n",
    );
    assert_eq!(uses, ["crate::h::X"]);
    let toks = tokens("'a' 'b '\\n' r#type");
    assert_eq!(
        toks.iter().map(|t| t.tok.clone()).collect::<Vec<_>>(),
        [
            Tok::Other,
            Tok::Other,
            Tok::Other,
            Tok::Ident("type".to_owned())
        ]
    );
}

#[test]
fn lines_are_counted_across_comments_and_strings() {
    let parsed = parse("/* a\nb */\nconst S: &str = \"x\ny\";\nuse crate::z::W;\n");
    assert_eq!(parsed.uses[0].line, 5);
}

#[test]
fn files_map_to_module_paths() {
    let k = krate(&[
        (
            "src/lib.rs",
            "mod a;\nmod b;\n#[path = \"../extra/c.rs\"]\nmod c;\n",
        ),
        ("src/a/mod.rs", "mod d;\n"),
        ("src/a/d.rs", "mod e;\n"),
        ("src/a/d/e.rs", ""),
        ("src/b.rs", "mod f { mod g; }\n"),
        ("src/b/f/g.rs", ""),
        ("extra/c.rs", ""),
    ]);
    let mut files: Vec<(String, String)> =
        k.files.iter().map(|f| (f.name(), f.path.clone())).collect();
    files.sort();
    let want = [
        ("a", "src/a/mod.rs"),
        ("a::d", "src/a/d.rs"),
        ("a::d::e", "src/a/d/e.rs"),
        ("b", "src/b.rs"),
        ("b::f::g", "src/b/f/g.rs"),
        ("c", "extra/c.rs"),
        ("crate", "src/lib.rs"),
    ];
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect();
    assert_eq!(files, want);
    assert!(k.missing.is_empty(), "{:?}", k.missing);
    assert!(k.arrows.is_empty(), "mod declarations are no arrows");
}

#[test]
fn super_chains_and_relative_child_paths_resolve() {
    let k = krate(&[
        (
            "src/lib.rs",
            "mod a;\nmod x;\nfn f() { a::run(); std::mem::drop(1); }\n",
        ),
        ("src/a/mod.rs", "mod b;\n"),
        ("src/a/b.rs", "mod c;\n"),
        (
            "src/a/b/c.rs",
            "use super::super::super::x::Y;\nuse super::Z;\n",
        ),
        ("src/x.rs", "pub struct Y;\n"),
    ]);
    assert_eq!(
        arrows(&k),
        ["a::b::c -> a::b", "a::b::c -> x", "crate -> a"]
    );
}

#[test]
fn reexports_are_followed_to_the_file_they_come_from() {
    let k = krate(&[
        (
            "src/lib.rs",
            "mod app;\nmod chat;\nmod model;\nmod user;\n\
             pub use app::{App as TheApp, Bootstrap};\npub use model::*;\npub use chat::Stream;\n\
             pub struct Own;\n",
        ),
        ("src/app.rs", "pub struct App;\npub struct Bootstrap;\n"),
        ("src/model.rs", "pub enum Task {}\n"),
        ("src/chat/mod.rs", "mod stream;\npub use stream::Stream;\n"),
        ("src/chat/stream.rs", "pub struct Stream;\n"),
        (
            "src/user.rs",
            "use crate::TheApp;\nuse crate::Task;\nfn f() { crate::Stream::new(); }\nuse crate::Own;\n",
        ),
    ]);
    assert_eq!(
        arrows(&k),
        [
            "chat -> chat::stream",
            "crate -> app",
            "crate -> chat::stream",
            "crate -> model",
            "user -> app",
            "user -> chat::stream",
            "user -> crate",
            "user -> model",
        ]
    );
    let own = k.arrows.iter().find(|a| k.files[a.to].name() == "crate");
    assert_eq!(own.map(|a| a.line), Some(4));
}

#[test]
fn test_modules_are_left_out() {
    let k = krate(&[
        (
            "src/lib.rs",
            "mod a;\nmod b;\n#[cfg(test)]\nmod tests;\n#[cfg(test)]\nmod more {\n    use crate::b::X;\n}\n\
             #[cfg(test)]\nuse crate::b::Y;\n#[cfg(test)]\npub(crate) fn helper() { crate::b::z(); }\n\
             pub fn real() { crate::a::w(); }\n",
        ),
        (
            "src/a.rs",
            "pub fn w() {}\n#[cfg(test)]\nmod tests {\n    use crate::b::X;\n}\n",
        ),
        ("src/b.rs", "pub struct X;\n"),
        ("src/tests.rs", "use crate::b::X;\n"),
    ]);
    assert!(k.files.iter().all(|f| f.path != "src/tests.rs"));
    assert_eq!(arrows(&k), ["crate -> a"]);
}

#[test]
fn a_circle_is_found_with_a_chain_that_closes_it() {
    let k = krate(&[
        (
            "src/lib.rs",
            "mod a;\nmod b;\nmod c;\nmod d;\npub use a::A;\n",
        ),
        ("src/a.rs", "use crate::b::B;\npub struct A;\n"),
        ("src/b.rs", "\nuse crate::c::C;\npub struct B;\n"),
        (
            "src/c.rs",
            "use crate::d::D;\nuse crate::A;\npub struct C;\n",
        ),
        ("src/d.rs", "pub struct D;\nfn f() { super::c::C; }\n"),
    ]);
    let circles = k.circles();
    let names: Vec<Vec<String>> = circles
        .iter()
        .map(|c| c.iter().map(|&f| k.files[f].name()).collect())
        .collect();
    assert_eq!(names, [["a", "b", "c", "d"]]);
    assert_eq!(
        circle_text(&k, &circles[0]),
        "circle in t (4 files): a, b, c, d\n\
         \x20 src/a.rs:1: use crate::b::B -> b\n\
         \x20 src/b.rs:2: use crate::c::C -> c\n\
         \x20 src/c.rs:1: use crate::d::D -> d\n\
         \x20 src/d.rs:2: super::c::C -> c\n\
         \x20 src/c.rs:2: use crate::A -> a\n"
    );
}

#[test]
fn floors_go_bottom_first_with_a_circle_as_one() {
    let k = krate(&[
        (
            "src/lib.rs",
            "mod a;\nmod b;\nmod c;\nmod d;\nmod e;\nfn f() { e::go(); }\n",
        ),
        ("src/a.rs", "pub fn a() {}\n"),
        ("src/b.rs", "use crate::a::a;\n"),
        ("src/c.rs", "use crate::b;\nuse crate::d::x;\n"),
        ("src/d.rs", "use crate::c::y;\n"),
        ("src/e.rs", "use crate::c::y;\nuse crate::a::a;\n"),
    ]);
    assert_eq!(
        floors_line(&k),
        "t: 0 [a] 1 [b] 2 [circle(c, d)] 3 [e] 4 [crate]"
    );
    assert!(krate(&[("src/lib.rs", "")]).circles().is_empty());
}
