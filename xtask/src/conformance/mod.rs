//! `cargo xtask conformance`: a black-box check of a running relay against SPEC.md and
//! CONTRACT.md. One line per check, `ok <section> <name>` or
//! `FAIL <section> <name>: expected X, got Y`, then `N passed, N failed`.

mod args;
mod checks;
pub mod ci;
pub mod client;
mod flows;
mod suite;

pub use args::{Args, USAGE};
use suite::Suite;

/// Runs the suite; `Ok(true)` when every check passed.
pub fn main(args: &[String]) -> anyhow::Result<bool> {
    let args = Args::parse(args)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut suite = Suite::new(args)?;
        run(&mut suite).await;
        println!(
            "{} passed, {} failed, {} skipped",
            suite.passed, suite.failed, suite.skipped
        );
        Ok(suite.failed == 0)
    })
}

/// The areas that need the simulator's `x-relay-sim` directives (failures, refusals, delays,
/// timeouts on demand), skipped with a vendor behind the relay.
const SIMULATOR_AREAS: [&str; 5] = [
    "first-format flows (x-relay-sim fail, reject, stuck, delay_ms)",
    "derived videos (remix, extend, edit of simulator results)",
    "the second format (x-relay-sim directives, simulator models)",
    "messages (the simulator's chat model and its directives)",
    "billing refunds (x-relay-sim fail)",
];

/// Every area of the suite, in order.
async fn run(suite: &mut Suite) {
    if suite.args.vendor.is_some() {
        return run_vendor(suite).await;
    }
    flows::access::public(suite).await;
    flows::access::auth(suite).await;
    flows::access::routing(suite).await;
    flows::errors::first_format_errors(suite).await;
    flows::videos::first_format_flows(suite).await;
    flows::derived::derived_flows(suite).await;
    flows::discovery::discovery(suite).await;
    flows::idempotency::idempotency(suite).await;
    flows::generations::second_format(suite).await;
    flows::messages::messages(suite).await;
    flows::billing::billing(suite).await;
    flows::access::rate_limits(suite).await;
}

/// The areas that make sense with a vendor behind `model_h3`.
async fn run_vendor(suite: &mut Suite) {
    flows::access::public(suite).await;
    flows::access::auth(suite).await;
    flows::access::routing(suite).await;
    flows::vendor::vendor_flows(suite).await;
    flows::access::rate_limits(suite).await;
    for area in SIMULATOR_AREAS {
        suite.skip_area(area, "it needs the built-in simulator");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http::StatusCode;
    use http_body_util::Full;
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;

    use super::checks;
    use super::client::Req;
    use super::flows::access;

    /// A fake relay on loopback whose every answer is `status` with `body`.
    async fn fake(status: u16, body: impl Into<Bytes>) -> String {
        let body: Bytes = body.into();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let body = body.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |_req| {
                        let body = body.clone();
                        async move {
                            let mut res = http::Response::new(Full::new(body));
                            *res.status_mut() = StatusCode::from_u16(status).unwrap();
                            Ok::<_, std::convert::Infallible>(res)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        format!("http://{addr}")
    }

    fn suite(base: String) -> Suite {
        Suite::new(Args {
            base_url: base,
            key: "sk-relay-test".into(),
            key_group2: None,
            admin_token: None,
            max_body_bytes: 1024,
            task_timeout_secs: None,
            vendor: None,
            vendor_mp4: None,
        })
        .unwrap()
    }

    const UNAUTHORIZED: &str = r#"{"error":{"code":"unauthorized","message":"unauthorized","param":null,"detail":"no key","type":"authentication_error"}}"#;

    #[tokio::test]
    async fn a_wrong_message_fails_with_a_clear_line() {
        // The rule: a missing key is `401 unauthorized`. This relay says "Unauthorized".
        let wrong = UNAUTHORIZED.replace(
            "\"message\":\"unauthorized\"",
            "\"message\":\"Unauthorized\"",
        );
        let mut s = suite(fake(401, wrong).await);
        access::auth(&mut s).await;
        assert_eq!(s.passed, 0);
        assert!(s.failed > 0);
        let line = s
            .lines
            .iter()
            .find(|l| l.starts_with("FAIL SPEC§5 POST /v1/videos without a key is 401: "))
            .expect("a FAIL line for POST /v1/videos");
        assert!(
            line.contains(r#"expected 401 "unauthorized", got 401 {"#)
                && line.contains("Unauthorized"),
            "{line}"
        );
    }

    #[tokio::test]
    async fn a_wrong_status_fails_and_a_right_answer_passes() {
        let mut s = suite(fake(403, UNAUTHORIZED).await);
        access::routing(&mut s).await;
        assert_eq!((s.passed, s.failed), (0, 3), "{:?}", s.lines);
        assert!(s.lines[0].starts_with(
            "FAIL CONTRACT§0.2 unknown route is 404 not found: expected 404 \"not found\", got 403"
        ));

        let mut s = suite(fake(401, UNAUTHORIZED).await);
        let r = s.send(Req::post("/v1/videos")).await;
        let verdict = checks::api_error(&r, 401, "unauthorized");
        assert!(s.check("SPEC§5", "right answer", verdict));
        assert_eq!(s.lines, ["ok SPEC§5 right answer"]);
    }
}
