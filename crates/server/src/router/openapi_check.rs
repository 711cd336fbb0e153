//! docs/openapi.yaml and the router describe the same routes: every (method, path) of
//! `router::route_table` is in the document's `paths`, and nothing else is; and the `Error`
//! schema's messages are exactly those of `error_codes::ErrorCode`.

use std::collections::BTreeSet;

use crate::router::{OPENAPI_YAML, route_table};

const METHODS: [&str; 7] = ["get", "post", "put", "patch", "delete", "head", "options"];

/// The (METHOD, path) pairs under the document's top-level `paths:`. The document keeps the
/// usual layout: a path at two spaces of indent, its operations at four.
fn document_routes(yaml: &str) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    let mut in_paths = false;
    let mut path: Option<String> = None;
    for line in yaml.lines() {
        let trimmed = line.trim_end();
        if trimmed.is_empty() || trimmed.trim_start().starts_with('#') {
            continue;
        }
        let indent = trimmed.len() - trimmed.trim_start().len();
        if indent == 0 {
            in_paths = trimmed == "paths:";
            path = None;
            continue;
        }
        if !in_paths {
            continue;
        }
        if indent == 2 {
            path = trimmed
                .trim_start()
                .strip_suffix(':')
                .map(|p| p.trim_matches(|c| c == '\'' || c == '"').to_owned());
        } else if indent == 4
            && let (Some(p), Some(word)) = (&path, trimmed.trim_start().strip_suffix(':'))
            && METHODS.contains(&word)
        {
            out.insert((word.to_ascii_uppercase(), p.clone()));
        }
    }
    out
}

#[test]
fn document_and_router_list_the_same_routes() {
    let doc = document_routes(OPENAPI_YAML);
    let router: BTreeSet<(String, String)> = route_table()
        .iter()
        .map(|(m, p)| ((*m).to_owned(), (*p).to_owned()))
        .collect();
    let missing: Vec<_> = router.difference(&doc).collect();
    let extra: Vec<_> = doc.difference(&router).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "docs/openapi.yaml and router::route_table differ\n  in the router only: {missing:?}\n  in the document only: {extra:?}"
    );
}

#[test]
fn the_document_is_openapi_3_1() {
    assert!(OPENAPI_YAML.starts_with("openapi: 3.1"));
    for scheme in ["apiKey:", "xApiKey:", "adminToken:"] {
        assert!(
            OPENAPI_YAML.contains(&format!("    {scheme}\n")),
            "security scheme {scheme} missing"
        );
    }
}

#[test]
fn the_scanner_sees_a_difference() {
    let yaml = "openapi: 3.1.0\npaths:\n  /a:\n    get:\n      x: 1\n    parameters:\n      - y\n  /b/{id}:\n    delete:\n      z: 2\ncomponents:\n  /c:\n    get:\n";
    let got = document_routes(yaml);
    let want: BTreeSet<(String, String)> = [("GET", "/a"), ("DELETE", "/b/{id}")]
        .iter()
        .map(|(m, p)| ((*m).to_owned(), (*p).to_owned()))
        .collect();
    assert_eq!(got, want);
}

/// The `enum:` under the `Error` schema's `message` property, one `- item` per line.
fn api_error_messages(yaml: &str) -> BTreeSet<String> {
    let mut lines = yaml.lines().skip_while(|l| l.trim_end() != "    Error:");
    let mut out = BTreeSet::new();
    let mut in_enum = false;
    for line in lines.by_ref().skip(1) {
        let indent = line.len() - line.trim_start().len();
        if indent <= 4 && !line.trim().is_empty() {
            break;
        }
        let item = line.trim();
        if in_enum {
            match item.strip_prefix("- ") {
                Some(message) => {
                    out.insert(message.trim_matches(|c| c == '\'' || c == '"').to_owned());
                }
                None => in_enum = false,
            }
        }
        if item == "enum:" && out.is_empty() {
            in_enum = true;
        }
    }
    out
}

#[test]
fn the_error_messages_are_every_error_code() {
    let doc = api_error_messages(OPENAPI_YAML);
    let codes: BTreeSet<String> = error_codes::ErrorCode::ALL
        .iter()
        .map(|c| c.message().to_owned())
        .collect();
    let missing: Vec<_> = codes.difference(&doc).collect();
    let extra: Vec<_> = doc.difference(&codes).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "Error.message in docs/openapi.yaml and ErrorCode differ\n  codes only: {missing:?}\n  document only: {extra:?}"
    );
}
