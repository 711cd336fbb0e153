//! The server's streaming multipart reader (`crates/server` multipart.rs), driven on a
//! current-thread runtime with the input as the body (boundary `fuzzboundary`). Never a panic;
//! the same fields, file contents and outcome whatever the chunking of the body; no temporary
//! file left behind once the uploads are dropped (refused or not); and a body written from
//! fields taken from the input reads back to exactly those fields.
#![no_main]

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use futures_util::stream;
use http_body::Frame;
use http_body_util::StreamBody;
use libfuzzer_sys::fuzz_target;
use relay_fuzz::chunkings;
use server::ground::http::Limit;
use server::ground::multipart::{Limits, PREFIX_BYTES, UploadLimit, read};
use store::{BlobStore, LocalBlobs};
use videos_v1::FieldValue;

const BOUNDARY: &str = "fuzzboundary";
const CONTENT_TYPE: &str = "multipart/form-data; boundary=fuzzboundary";
/// A body of 1 MiB (text parts together as much), with no reference field allowed long text.
const LIMITS: Limits<'static> = Limits {
    body: UploadLimit {
        body: Limit {
            bytes: 1 << 20,
            idle: std::time::Duration::from_secs(3600),
        },
        files: 4096,
    },
    text: 1 << 20,
    long_text: &[],
};

struct World {
    runtime: tokio::runtime::Runtime,
    blobs: Arc<dyn BlobStore>,
    tmp: PathBuf,
    _dir: tempfile::TempDir,
}

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let blobs = LocalBlobs::open(dir.path()).expect("a blob store");
        World {
            runtime: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime"),
            blobs: Arc::new(blobs),
            tmp: dir.path().join("tmp"),
            _dir: dir,
        }
    })
}

/// A field as read: name, and text or (file name, content type, bytes).
#[derive(Debug, PartialEq, Eq)]
enum Read {
    Text(String, String),
    File(String, Option<String>, Option<String>, Vec<u8>),
}

/// Reads `chunks` as one body; the fields, or the error's code and param.
fn read_body(chunks: &[&[u8]]) -> Result<Vec<Read>, String> {
    let world = world();
    let frames: Vec<Result<Frame<Bytes>, Infallible>> = chunks
        .iter()
        .map(|c| Ok(Frame::data(Bytes::copy_from_slice(c))))
        .collect();
    let body = StreamBody::new(stream::iter(frames));
    let result = world
        .runtime
        .block_on(read(body, CONTENT_TYPE, LIMITS, &world.blobs));
    let out = match result {
        Ok((fields, uploads)) => {
            let mut out = Vec::new();
            for (name, value) in fields {
                out.push(match value {
                    FieldValue::Text(text) => Read::Text(name, text),
                    FieldValue::File(part) => {
                        let upload = &uploads.0[part.index];
                        let bytes = std::fs::read(&upload.path).expect("an upload's file");
                        assert_eq!(bytes.len() as u64, part.len);
                        assert_eq!(upload.len, part.len);
                        let prefix = &bytes[..bytes.len().min(PREFIX_BYTES)];
                        assert_eq!(&upload.prefix[..], prefix);
                        Read::File(name, part.filename, part.content_type, bytes)
                    }
                    FieldValue::Json(v) => panic!("multipart gave JSON {v}"),
                });
            }
            drop(uploads);
            Ok(out)
        }
        Err(e) => Err(format!("{:?} {:?}", e.code, e.param)),
    };
    let left = std::fs::read_dir(&world.tmp)
        .map(Iterator::count)
        .unwrap_or(0);
    assert_eq!(left, 0, "temporary files left behind");
    out
}

/// Fields taken from the input, and the body that carries them.
fn fields_of(data: &[u8]) -> (Vec<Read>, Vec<u8>) {
    let names = ["model", "prompt", "input_reference", "file", "type", "x y"];
    let mut fields = Vec::new();
    let mut body = Vec::new();
    for (i, piece) in data.split(|b| *b == 0xFE).enumerate().take(6) {
        let name = names[(piece.len() + i) % names.len()].to_owned();
        body.extend_from_slice(format!("--{BOUNDARY}\r\n").as_bytes());
        if piece.first().is_some_and(|b| b & 1 == 1) {
            let file = format!("f{i}.bin");
            body.extend_from_slice(
                format!(
                    "Content-Disposition: form-data; name=\"{name}\"; filename=\"{file}\"\r\n\
                     Content-Type: application/octet-stream\r\n\r\n"
                )
                .as_bytes(),
            );
            body.extend_from_slice(piece);
            fields.push(Read::File(
                name,
                Some(file),
                Some("application/octet-stream".into()),
                piece.to_vec(),
            ));
        } else {
            let text = String::from_utf8_lossy(piece).into_owned();
            body.extend_from_slice(
                format!("Content-Disposition: form-data; name=\"{name}\"\r\n\r\n").as_bytes(),
            );
            body.extend_from_slice(text.as_bytes());
            fields.push(Read::Text(name, text));
        }
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    (fields, body)
}

fuzz_target!(|data: &[u8]| {
    let ways = chunkings(data, 0);
    let want = read_body(&ways[0]);
    for (n, chunks) in ways.iter().enumerate().skip(1) {
        assert_eq!(read_body(chunks), want, "chunking {n}");
    }

    let (fields, body) = fields_of(data);
    let boundaries = body
        .windows(BOUNDARY.len())
        .filter(|w| *w == BOUNDARY.as_bytes());
    if boundaries.count() != fields.len() + 1 {
        // The input itself holds the boundary: not a body written the way clients write one.
        return;
    }
    assert_eq!(read_body(&[&body]), Ok(fields));
});
