//! The suite's state: the client, the arguments, and the count and lines of the checks.

use bytes::Bytes;
use http::{HeaderMap, StatusCode};

use super::Args;
use super::checks::Verdict;
use super::client::{Client, Req, Resp};

pub struct Suite {
    client: Client,
    pub(super) args: Args,
    pub(super) passed: usize,
    /// Every line printed, for the suite's own tests.
    pub(super) lines: Vec<String>,
    pub(super) failed: usize,
    /// Areas not run against this relay (their flows need the simulator).
    pub(super) skipped: usize,
}

impl Suite {
    pub(super) fn new(args: Args) -> anyhow::Result<Suite> {
        Ok(Suite {
            client: Client::new(&args.base_url)?,
            args,
            passed: 0,
            failed: 0,
            skipped: 0,
            lines: Vec::new(),
        })
    }

    /// Records one check.
    pub(super) fn check(&mut self, section: &str, name: &str, verdict: Verdict) -> bool {
        match verdict {
            Ok(()) => {
                self.passed += 1;
                self.say(format!("ok {section} {name}"));
                true
            }
            Err(why) => {
                self.failed += 1;
                self.say(format!("FAIL {section} {name}: {why}"));
                false
            }
        }
    }

    fn say(&mut self, line: String) {
        println!("{line}");
        self.lines.push(line);
    }

    pub(super) fn skip(&mut self, section: &str, name: &str, why: &str) {
        self.say(format!("skip {section} {name}: {why}"));
    }

    /// Skips a whole area, counted in the summary line.
    pub(super) fn skip_area(&mut self, area: &str, why: &str) {
        self.skipped += 1;
        self.say(format!("skip {area}: {why}"));
    }

    /// Sends, waiting out 429s; a transport failure becomes a `599` answer naming it.
    pub(super) async fn send(&self, req: Req) -> Resp {
        into_resp(self.client.send(req).await)
    }

    pub(super) async fn send_once(&self, req: Req) -> Resp {
        into_resp(self.client.send_once(req).await)
    }
}

fn into_resp(result: anyhow::Result<Resp>) -> Resp {
    result.unwrap_or_else(|e| Resp {
        status: StatusCode::from_u16(599).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        headers: HeaderMap::new(),
        body: Bytes::from(format!("(no answer: {e:#})")),
    })
}
