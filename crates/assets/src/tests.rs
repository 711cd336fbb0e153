//! Request validation: the fixture walk (`test_data/ok`, `test_data/err`) for JSON bodies, and
//! tables for multipart uploads and list queries.
//!
//! Fixtures: `{"kind": "library" | "upload", "request": <body>, "expect": {<fields>}}` in `ok`,
//! `{"kind", "request", "code", "param"}` in `err`.

use std::fs;
use std::path::{Path, PathBuf};

use error_codes::{ApiError, ErrorCode};
use serde_json::Value;

use crate::{
    AssetStatus, AssetType, ListOrder, Part, UploadSource, ValidUpload, parse_asset_list_query,
    parse_create_library, parse_json_upload, parse_library_list_query, parse_multipart_upload,
};

fn fixtures(kind: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("test_data")
        .join(kind);
    let mut paths: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "no fixtures in {}", dir.display());
    paths
}

fn run(fixture: &Value) -> Result<Value, ApiError> {
    let request = &fixture["request"];
    match fixture["kind"].as_str() {
        Some("library") => parse_create_library(request).map(|v| serde_json::to_value(v).unwrap()),
        Some("upload") => parse_json_upload(request).map(|v| serde_json::to_value(v).unwrap()),
        other => panic!("unknown fixture kind {other:?}"),
    }
}

#[test]
fn fixtures_ok_and_err() {
    let mut failures = Vec::new();
    for path in fixtures("ok") {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let fixture: Value = serde_json::from_str(&fs::read_to_string(&path).unwrap()).unwrap();
        match run(&fixture) {
            Err(e) => failures.push(format!("{name}: expected ok, got {e}")),
            Ok(got) => {
                for (key, want) in fixture["expect"].as_object().cloned().unwrap_or_default() {
                    if got.get(&key) != Some(&want) {
                        failures.push(format!("{name}: {key}: expected {want}, got {}", got[&key]));
                    }
                }
            }
        }
    }
    for path in fixtures("err") {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let fixture: Value = serde_json::from_str(&fs::read_to_string(&path).unwrap()).unwrap();
        let (code, param) = (&fixture["code"], &fixture["param"]);
        match run(&fixture) {
            Ok(v) => failures.push(format!("{name}: expected {code}, got ok: {v}")),
            Err(e) => {
                if e.code.code() != code || e.param.as_deref() != param.as_str() {
                    failures.push(format!(
                        "{name}: expected {code} on {param}, got {} on {:?} ({})",
                        e.code.code(),
                        e.param,
                        e.detail
                    ));
                }
                if e.detail.is_empty() {
                    failures.push(format!("{name}: empty detail"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

fn text(name: &str, value: &str) -> (String, Part) {
    (name.to_owned(), Part::Text(value.to_owned()))
}

fn file(name: &str, index: usize, len: u64) -> (String, Part) {
    (name.to_owned(), Part::File { index, len })
}

#[test]
fn multipart_uploads() {
    let ok = |parts: Vec<(String, Part)>| parse_multipart_upload(&parts).unwrap();
    assert_eq!(
        ok(vec![file("file", 0, 10)]),
        ValidUpload {
            source: UploadSource::File { index: 0, len: 10 },
            declared: None
        }
    );
    assert_eq!(
        ok(vec![
            text("type", "video"),
            file("file", 3, 0),
            text("note", "x")
        ])
        .declared,
        Some(AssetType::Video)
    );
    // An empty file is accepted here; processing fails it as `empty`.
    assert_eq!(
        ok(vec![file("file", 0, 0)]).source,
        UploadSource::File { index: 0, len: 0 }
    );

    let cases: Vec<(Vec<(String, Part)>, &str)> = vec![
        (vec![], "file"),
        (vec![text("type", "image")], "file"),
        (vec![text("file", "not a file")], "file"),
        (vec![file("file", 0, 1), file("file", 1, 1)], "file"),
        (vec![file("file", 0, 1), text("type", "pdf")], "type"),
        (vec![file("file", 0, 1), text("type", "")], "type"),
        (
            vec![
                file("file", 0, 1),
                text("type", "image"),
                text("type", "video"),
            ],
            "type",
        ),
        (vec![file("file", 0, 1), file("type", 1, 1)], "type"),
        // `file` is checked before `type`.
        (vec![text("type", "pdf")], "file"),
    ];
    for (parts, param) in cases {
        let e = parse_multipart_upload(&parts).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidRequest, "{parts:?}");
        assert_eq!(e.param.as_deref(), Some(param), "{parts:?}: {}", e.detail);
        assert!(!e.detail.is_empty());
    }
}

#[test]
fn asset_list_queries() {
    use ListOrder::{Asc, Desc};
    let q = parse_asset_list_query(None).unwrap();
    assert_eq!(
        (q.status, q.asset_type, q.limit, q.after, q.order),
        (None, None, 20, None, Desc)
    );
    let q = parse_asset_list_query(Some(
        "status=active&type=image&limit=5&after=asset_x&order=asc&foo=bar",
    ))
    .unwrap();
    assert_eq!(
        (q.status, q.asset_type, q.limit, q.after.as_deref(), q.order),
        (
            Some(AssetStatus::Active),
            Some(AssetType::Image),
            5,
            Some("asset_x"),
            Asc
        )
    );
    let q = parse_asset_list_query(Some("status=&type=&after=&limit=100")).unwrap();
    assert_eq!(
        (q.status, q.asset_type, q.after, q.limit),
        (None, None, None, 100)
    );
    let q = parse_asset_list_query(Some("status=failed&status=expired&%74ype=audio")).unwrap();
    assert_eq!(
        (q.status, q.asset_type),
        (Some(AssetStatus::Expired), Some(AssetType::Audio))
    );
    for (query, param) in [
        ("status=done", "status"),
        ("status=Active", "status"),
        ("type=document", "type"),
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("limit=x", "limit"),
        ("order=newest", "order"),
        ("after=%FF", "after"),
    ] {
        let e = parse_asset_list_query(Some(query)).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidRequest, "{query}");
        assert_eq!(e.param.as_deref(), Some(param), "{query}");
    }
    let e = parse_asset_list_query(Some("status=done")).unwrap_err();
    assert_eq!(
        e.detail,
        "status must be one of processing, active, failed, expired, got \"done\""
    );
}

#[test]
fn library_list_queries() {
    let q = parse_library_list_query(Some("limit=3&after=lib_a&order=asc&status=x")).unwrap();
    assert_eq!(
        (q.limit, q.after.as_deref(), q.order),
        (3, Some("lib_a"), ListOrder::Asc)
    );
    assert_eq!(parse_library_list_query(None).unwrap().limit, 20);
    let e = parse_library_list_query(Some("limit=-1")).unwrap_err();
    assert_eq!(e.param.as_deref(), Some("limit"));
}
