//! Asset request parsing (`crates/assets` request.rs): library creation and JSON uploads over
//! arbitrary JSON, multipart uploads over parts read from the input (a JSON array of
//! `[name, value]` pairs: a string is a text part, a number the length of a file part). Never
//! a panic; every error names its field; a parsed request written back parses the same.
#![no_main]

use assets::{Part, UploadSource, parse_create_library, parse_json_upload, parse_multipart_upload};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

fn parts(value: &Value) -> Option<Vec<(String, Part)>> {
    let mut out = Vec::new();
    for (index, pair) in value.as_array()?.iter().enumerate() {
        let [Value::String(name), value] = pair.as_array()?.as_slice() else {
            return None;
        };
        let part = match value {
            Value::String(text) => Part::Text(text.clone()),
            Value::Number(n) => Part::File {
                index,
                len: n.as_u64()?,
            },
            _ => return None,
        };
        out.push((name.clone(), part));
    }
    Some(out)
}

fuzz_target!(|data: &[u8]| {
    let Ok(body) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    match parse_create_library(&body) {
        Ok(library) => {
            let again = json!({"name": library.name});
            assert_eq!(parse_create_library(&again).ok(), Some(library));
        }
        Err(e) => assert!(
            body.is_object() == (e.param.as_deref() == Some("name")),
            "{e:?}"
        ),
    }
    match parse_json_upload(&body) {
        Ok(upload) => {
            let UploadSource::Url(url) = &upload.source else {
                panic!("a JSON upload is a URL: {upload:?}");
            };
            let mut again = json!({"url": url});
            if let Some(kind) = upload.declared {
                again["type"] = json!(kind.as_str());
            }
            assert_eq!(parse_json_upload(&again).ok(), Some(upload));
        }
        Err(e) => {
            let param = e.param.as_deref();
            assert!(
                body.is_object() == matches!(param, Some("url" | "type")),
                "{e:?}"
            );
        }
    }
    if let Some(parts) = parts(&body) {
        match parse_multipart_upload(&parts) {
            Ok(upload) => {
                let UploadSource::File { index, len } = upload.source else {
                    panic!("a multipart upload is a file: {upload:?}");
                };
                let mut again = vec![("file".to_owned(), Part::File { index, len })];
                if let Some(kind) = upload.declared {
                    again.push(("type".to_owned(), Part::Text(kind.as_str().to_owned())));
                }
                assert_eq!(parse_multipart_upload(&again).ok(), Some(upload));
            }
            Err(e) => assert!(matches!(e.param.as_deref(), Some("file" | "type")), "{e:?}"),
        }
    }
});
