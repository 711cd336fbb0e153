//! Signed file URLs (`crates/server` signed.rs), read back the way the router reads them: a URL
//! the signer made verifies (before it expires, and never after); any single-byte change of its
//! path, `expires` or `sig` does not verify.
#![no_main]

use http::Method;
use libfuzzer_sys::fuzz_target;
use relay_fuzz::Bytes;
use server::ground::http::query_param;
use server::router::fuzzing::route;
use server::ground::signed::Signer;

/// Verifies a `/files/...?expires=&sig=` path and query as `GET /files/...` does.
fn verifies(signer: &Signer, url: &str, now: u64) -> bool {
    let (path, query) = url.split_once('?').unwrap_or((url, ""));
    let Ok(matched) = route(&Method::GET, path) else {
        return false;
    };
    let (true, Some(blob)) = (matched.name == "File", matched.param) else {
        return false;
    };
    let expires = query_param(Some(query), "expires").and_then(|e| e.parse::<u64>().ok());
    match (expires, query_param(Some(query), "sig")) {
        (Some(expires), Some(sig)) => signer.verify(blob, expires, &sig, now),
        _ => false,
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Bytes(data);
    let secret_len = usize::from(input.byte() % 48);
    let secret: Vec<u8> = (0..secret_len).map(|_| input.byte()).collect();
    let expires = input.u64();
    let now = input.u64();
    let position = usize::from(input.byte()) | usize::from(input.byte()) << 8;
    let replacement = input.byte();
    let signer = Signer::new(secret);

    let blob: String = String::from_utf8_lossy(input.0)
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || "/._-".contains(*c))
        .collect();
    let blob = if blob.is_empty() {
        "t/video.mp4".to_owned()
    } else {
        blob
    };
    let url = signer.path(&blob, expires);
    let routable = route(&Method::GET, url.split('?').next().unwrap_or_default()).is_ok();
    if !routable {
        // Blob ids the store makes never have empty, `.` or `..` segments.
        return;
    }
    assert_eq!(
        verifies(&signer, &url, now),
        now < expires,
        "{url} at {now}"
    );
    if expires == 0 {
        return;
    }
    let now = expires - 1;
    assert!(verifies(&signer, &url, now), "{url}");

    let mut bytes = url.clone().into_bytes();
    let at = position % bytes.len();
    if bytes[at] == replacement {
        return;
    }
    bytes[at] = replacement;
    if let Ok(changed) = String::from_utf8(bytes) {
        assert!(
            !verifies(&signer, &changed, now),
            "{url} changed at {at} to {changed}"
        );
    }
});
