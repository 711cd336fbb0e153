//! The suite's request flows, one file per area, and what they share: the video body, waiting
//! for a task to end, reading ids, a 1x1 PNG.

pub mod access;
pub mod assets;
pub mod billing;
pub mod derived;
pub mod discovery;
pub mod errors;
pub mod generations;
pub mod idempotency;
pub mod messages;
pub mod vendor;
pub mod videos;

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::checks::Verdict;
use super::client::{Req, Resp};
use super::suite::Suite;

/// How long a task may take to reach a final status before the suite gives up on it.
const TASK_DEADLINE: Duration = Duration::from_secs(45);

/// A 1x1 PNG.
pub const PNG_1X1: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4,
    0x89, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0xda, 0x63, 0x64, 0x60, 0xf8, 0x5f,
    0x0f, 0x00, 0x02, 0x87, 0x01, 0x80, 0xeb, 0x47, 0xba, 0x92, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45,
    0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
];

pub fn video(extra: Value) -> Value {
    let mut body = json!({"model": "model_h3", "prompt": "a conformance test", "size": "64x64"});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            if v.is_null() {
                b.remove(k);
            } else {
                b.insert(k.clone(), v.clone());
            }
        }
    }
    body
}

/// The final record of a task, after polling it; and whether every status seen was one of
/// `allowed` and progress never went down.
pub async fn wait_final(
    suite: &Suite,
    path: &str,
    finals: &[&str],
    allowed: &[&str],
) -> (Resp, Verdict) {
    let started = Instant::now();
    let mut last_progress = 0;
    let mut verdict = Ok(());
    loop {
        let r = suite.send(Req::get(path).bearer(&suite.args.key)).await;
        let body = r.json();
        let status = body["status"].as_str().unwrap_or_default().to_owned();
        if !allowed.contains(&status.as_str()) && verdict.is_ok() {
            verdict = Err(format!(
                "expected a status in {allowed:?}, got {}",
                r.describe()
            ));
        }
        if let Some(p) = body["progress"].as_u64() {
            if p < last_progress && verdict.is_ok() {
                verdict = Err(format!(
                    "expected progress never to go down, got {last_progress} then {p}"
                ));
            }
            last_progress = p;
        }
        if finals.contains(&status.as_str()) || r.status != 200 {
            return (r, verdict);
        }
        if started.elapsed() > TASK_DEADLINE {
            return (
                r,
                Err(format!(
                    "expected a final status within {TASK_DEADLINE:?}, got {status}"
                )),
            );
        }
        tokio::time::sleep(Duration::from_millis(600)).await;
    }
}

pub fn id_of(r: &Resp, field: &str) -> String {
    r.json()[field].as_str().unwrap_or("missing").to_owned()
}

/// Standard base64 with padding.
pub fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ABC[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_pads() {
        assert_eq!(super::base64(b"hello"), "aGVsbG8=");
        assert_eq!(super::base64(b"hi!"), "aGkh");
        assert_eq!(super::base64(b"h"), "aA==");
    }
}
