//! Running a channel test (`relay channels test NAME`, `POST /admin/channels/{name}/test`):
//! a channel's [`ChannelCheck`] bounded in time, with the HTTP status of the vendor's answer
//! and how long it all took ([`ChannelTest`]); the reading of an answer by its status that
//! the checks share; and [`NoBlobs`], the blob store of a channel built only to be tested.

use std::cell::Cell;
use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use http::StatusCode;
use store::{Blob, BlobStore};

use crate::video::job::{ChannelCheck, CheckVerdict};

tokio::task_local! {
    /// The status of the last upstream answer of the channel test running in this task.
    static LAST_STATUS: Cell<Option<u16>>;
}

/// Notes the status of an upstream answer for the channel test running in this task, if one
/// is (elsewhere it does nothing).
pub(crate) fn note_status(status: StatusCode) {
    let _ = LAST_STATUS.try_with(|last| last.set(Some(status.as_u16())));
}

/// A channel test's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelTest {
    pub verdict: CheckVerdict,
    /// A sentence for the operator: the vendor's answer (redacted) or why none came.
    pub detail: String,
    /// The status of the vendor's last answer; `None` when no answer came, or nothing was
    /// called (the built-in simulator).
    pub http_status: Option<u16>,
    /// From the start of the check to its verdict.
    pub latency: Duration,
}

impl ChannelTest {
    /// Runs `check` for at most `limit`; past it, the channel is unreachable.
    pub async fn run(limit: Duration, check: impl Future<Output = ChannelCheck>) -> ChannelTest {
        let started = Instant::now();
        let (check, http_status) = LAST_STATUS
            .scope(Cell::new(None), async {
                let check = tokio::time::timeout(limit, check).await;
                (check, LAST_STATUS.with(Cell::get))
            })
            .await;
        let latency = started.elapsed();
        let check = check.unwrap_or_else(|_| ChannelCheck {
            verdict: CheckVerdict::Unreachable,
            detail: format!("no answer within {} s", limit.as_secs_f64()),
        });
        // A status seen before the connection failed (a token fetched first) is not the
        // answer of the call that failed.
        let http_status = match check.verdict {
            CheckVerdict::Unreachable | CheckVerdict::Tls => None,
            _ => http_status,
        };
        ChannelTest {
            verdict: check.verdict,
            detail: check.detail,
            http_status,
            latency,
        }
    }

    /// The channel `name`'s test in one line: `veo: reachable, key accepted (HTTP 200 in 143
    /// ms)`, or the reason, the timing and the detail.
    pub fn line(&self, name: &str) -> String {
        let ms = self.latency.as_millis();
        let timing = match self.http_status {
            Some(status) => format!("HTTP {status} in {ms} ms"),
            None => format!("after {ms} ms"),
        };
        let words = self.verdict.words();
        match (self.verdict, self.http_status) {
            (CheckVerdict::Ok, Some(_)) => format!("{name}: {words} ({timing})"),
            (CheckVerdict::Ok, None) => format!("{name}: ok, {}", self.detail),
            _ => {
                // Some details start with the same words; they are said once.
                let detail = self
                    .detail
                    .strip_prefix(words)
                    .and_then(|rest| rest.strip_prefix(": "))
                    .unwrap_or(&self.detail);
                format!("{name}: {words} ({timing}): {detail}")
            }
        }
    }
}

/// The verdict of an answer by its status alone: a success is a good key; 401 and 403 a
/// refused one; 402 an empty account; 429 a rate limit; anything else unexpected.
pub fn verdict_of(status: StatusCode) -> CheckVerdict {
    match status.as_u16() {
        200..=299 => CheckVerdict::Ok,
        401 | 403 => CheckVerdict::KeyRefused,
        402 => CheckVerdict::Quota,
        429 => CheckVerdict::RateLimited,
        _ => CheckVerdict::Error,
    }
}

/// A check's answer with `verdict`: a good key says so; anything else gives the status and
/// the vendor's words (`text`, already redacted).
pub fn answered(verdict: CheckVerdict, status: StatusCode, text: &str) -> ChannelCheck {
    let detail = match verdict {
        CheckVerdict::Ok => CheckVerdict::Ok.words().to_owned(),
        _ => format!("the vendor answered {status}: {text}"),
    };
    ChannelCheck { verdict, detail }
}

/// A blob store that holds nothing: the store of a channel built only to be tested, which
/// reads and writes no file (and so never touches a running relay's files).
#[derive(Debug, Default)]
pub struct NoBlobs;

fn no_files() -> io::Error {
    io::Error::other("a channel built for a test keeps no files")
}

#[async_trait]
impl BlobStore for NoBlobs {
    fn temp_path(&self) -> PathBuf {
        std::env::temp_dir().join("relay-channel-test-keeps-no-files")
    }

    async fn commit(&self, _temp: &Path, _id: &str) -> io::Result<u64> {
        Err(no_files())
    }

    async fn put_bytes(&self, _id: &str, _bytes: Bytes) -> io::Result<u64> {
        Err(no_files())
    }

    async fn open(&self, _id: &str) -> io::Result<Blob> {
        Err(no_files())
    }

    async fn open_file(&self, _id: &str) -> io::Result<(std::fs::File, u64)> {
        Err(no_files())
    }

    async fn delete(&self, _id: &str) -> io::Result<()> {
        Ok(())
    }

    async fn delete_prefix(&self, _prefix: &str) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn test(verdict: CheckVerdict, detail: &str, http_status: Option<u16>) -> ChannelTest {
        ChannelTest {
            verdict,
            detail: detail.into(),
            http_status,
            latency: Duration::from_millis(143),
        }
    }

    #[test]
    fn lines() {
        let cases = [
            (
                test(CheckVerdict::Ok, "reachable, key accepted", Some(200)),
                "veo: reachable, key accepted (HTTP 200 in 143 ms)",
            ),
            (
                test(CheckVerdict::Ok, "built in", None),
                "veo: ok, built in",
            ),
            (
                test(
                    CheckVerdict::KeyRefused,
                    "the vendor answered 401 Unauthorized: bad key",
                    Some(401),
                ),
                "veo: key refused (HTTP 401 in 143 ms): the vendor answered 401 Unauthorized: bad key",
            ),
            (
                test(
                    CheckVerdict::Error,
                    "unexpected answer: 502 Bad Gateway: <html>",
                    Some(502),
                ),
                "veo: unexpected answer (HTTP 502 in 143 ms): 502 Bad Gateway: <html>",
            ),
            (
                test(CheckVerdict::Unreachable, "connecting: refused", None),
                "veo: unreachable (after 143 ms): connecting: refused",
            ),
        ];
        for (test, want) in cases {
            assert_eq!(test.line("veo"), want);
        }
    }

    #[test]
    fn verdicts_by_status() {
        for (status, want) in [
            (200, CheckVerdict::Ok),
            (204, CheckVerdict::Ok),
            (401, CheckVerdict::KeyRefused),
            (403, CheckVerdict::KeyRefused),
            (402, CheckVerdict::Quota),
            (429, CheckVerdict::RateLimited),
            (404, CheckVerdict::Error),
            (500, CheckVerdict::Error),
        ] {
            assert_eq!(
                verdict_of(StatusCode::from_u16(status).unwrap()),
                want,
                "{status}"
            );
        }
    }

    #[tokio::test]
    async fn a_test_is_bounded_and_notes_the_last_status() {
        let slow = ChannelTest::run(Duration::from_millis(20), async {
            note_status(StatusCode::OK);
            std::future::pending::<ChannelCheck>().await
        })
        .await;
        assert_eq!(slow.verdict, CheckVerdict::Unreachable);
        assert_eq!(slow.http_status, None);
        assert!(slow.detail.contains("no answer within 0.02 s"), "{slow:?}");

        let answered = ChannelTest::run(Duration::from_secs(5), async {
            note_status(StatusCode::OK);
            note_status(StatusCode::UNAUTHORIZED);
            answered(CheckVerdict::KeyRefused, StatusCode::UNAUTHORIZED, "no")
        })
        .await;
        assert_eq!(answered.http_status, Some(401));
        assert_eq!(answered.verdict, CheckVerdict::KeyRefused);
        // Outside a test, noting does nothing.
        note_status(StatusCode::OK);
    }
}
