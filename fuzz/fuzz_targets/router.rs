//! The router of `crates/server` on arbitrary method and path: never a panic; a matched route
//! is exactly one entry of `route_table` (its template with the path parameter put in gives the
//! path back), the parameter is one clean segment (or, for `/files/`, clean segments); a known
//! path with another method lists exactly the table's methods for it, a literal segment taking
//! precedence over a parameter in the same place (`/v1/videos/edits` is not a video id);
//! anything else is no route in the table.
#![no_main]

use http::Method;
use libfuzzer_sys::fuzz_target;
use server::router::fuzzing::route;
use server::router::route_table;

const METHODS: [&str; 7] = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"];

/// Whether `path` is `template` with its one `{...}` segment (if any) replaced by `param`.
fn fills(template: &str, param: Option<&str>, path: &str) -> bool {
    match (template.split_once('{'), param) {
        (None, None) => template == path,
        (Some((head, tail)), Some(param)) => {
            let tail = tail.split_once('}').map_or("", |(_, t)| t);
            path == format!("{head}{param}{tail}")
        }
        _ => false,
    }
}

/// Whether `path` could be `template` with some (non-empty) parameter.
fn shape(template: &str, path: &str) -> bool {
    if template == "/files/{path}" {
        return path.starts_with("/files/");
    }
    let t: Vec<&str> = template.split('/').collect();
    let p: Vec<&str> = path.split('/').collect();
    t.len() == p.len()
        && t.iter()
            .zip(&p)
            .all(|(t, p)| (t.starts_with('{') && !p.is_empty()) || t == p)
}

/// Whether `template` matches `path` but yields to `other`, which matches it too and has a
/// literal segment where `template` has its parameter, at their first difference.
fn shadowed(template: &str, other: &str, path: &str) -> bool {
    if !shape(other, path) {
        return false;
    }
    template
        .split('/')
        .zip(other.split('/'))
        .find(|(t, o)| t != o)
        .is_some_and(|(t, o)| t.starts_with('{') && !o.starts_with('{'))
}

fn clean(segment: &str) -> bool {
    !segment.is_empty() && segment != "." && segment != ".." && !segment.contains('%')
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let Ok(path) = std::str::from_utf8(rest) else {
        return;
    };
    let method = match METHODS.get(usize::from(first % 8)) {
        Some(m) => Method::from_bytes(m.as_bytes()).expect("a known method"),
        None => Method::from_bytes(b"BREW").expect("a token"),
    };
    let table = route_table();
    match route(&method, path) {
        Ok(matched) => {
            let entries: Vec<_> = table
                .iter()
                .filter(|(m, t)| *m == method.as_str() && fills(t, matched.param, path))
                .collect();
            assert_eq!(
                entries.len(),
                1,
                "{method} {path} -> {matched:?}: {entries:?}"
            );
            if let Some(param) = matched.param {
                if matched.name == "File" {
                    assert!(param.split('/').all(clean), "{param:?}");
                } else {
                    assert!(clean(param) && !param.contains('/'), "{param:?}");
                }
            }
        }
        Err(Some(allow)) => {
            let mut listed: Vec<&str> = table
                .iter()
                .filter(|(_, t)| shape(t, path))
                .filter(|(_, t)| !table.iter().any(|(_, o)| shadowed(t, o, path)))
                .map(|(m, _)| *m)
                .collect();
            listed.sort_unstable();
            listed.dedup();
            let mut allowed: Vec<&str> = allow.split(", ").collect();
            allowed.sort_unstable();
            assert_eq!(allowed, listed, "{method} {path}");
            assert!(
                !allowed.contains(&method.as_str()),
                "{method} {path}: {allow}"
            );
        }
        Err(None) => {
            let segments_clean = path
                .strip_prefix('/')
                .is_some_and(|rest| rest.split('/').all(clean));
            if segments_clean {
                assert!(
                    !table.iter().any(|(_, t)| shape(t, path)),
                    "{method} {path}: no route, but the table has one"
                );
            }
        }
    }
});
