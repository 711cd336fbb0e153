//! `relay chat "..."`: one message to `POST /v1/messages`, streamed; text printed as it comes.

use std::io::{Read, Write};

use anyhow::{Context, bail};
use http_body_util::BodyExt;
use hyper::Method;
use messages::sse::SseDecoder;
use serde_json::{Value, json};

use crate::client::{self, Api};

#[derive(clap::Args)]
pub struct ChatArgs {
    /// Your message; `-` reads it from standard input.
    prompt: String,
    /// The chat model (`sim-chat` is the built-in simulator's).
    #[arg(long, default_value = "sim-chat")]
    model: String,
    /// Most tokens of the answer.
    #[arg(long, value_name = "N", default_value_t = 1024)]
    max_tokens: u32,
    /// A system prompt.
    #[arg(long, value_name = "TEXT")]
    system: Option<String>,
}

/// The version header value sent; the relay accepts any.
const VERSION: &str = "2023-06-01";

pub async fn run(api: &Api, args: ChatArgs) -> anyhow::Result<()> {
    let prompt = if args.prompt == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("reading the message from standard input")?;
        text
    } else {
        args.prompt
    };
    let mut body = json!({
        "model": args.model,
        "max_tokens": args.max_tokens,
        "stream": true,
        "messages": [{"role": "user", "content": prompt}],
    });
    if let Some(system) = args.system {
        body["system"] = json!(system);
    }
    let res = api
        .send(
            Method::POST,
            "/v1/messages",
            &[
                ("content-type", "application/json"),
                ("accept", "text/event-stream"),
                ("anthropic-version", VERSION),
            ],
            client::full(body.to_string()),
        )
        .await?;
    if !res.status().is_success() {
        return Err(client::fail(res).await);
    }
    let mut out = Printer::default();
    let mut decoder = SseDecoder::new();
    let mut body = res.into_body();
    while let Some(frame) = body.frame().await {
        let frame = match frame {
            Ok(frame) => frame,
            Err(e) => {
                out.end();
                return Err(anyhow::Error::new(e).context("the stream broke"));
            }
        };
        let Ok(chunk) = frame.into_data() else {
            continue;
        };
        for event in decoder.feed(&chunk) {
            let data: Value = serde_json::from_str(&event.data).unwrap_or_default();
            match data["type"].as_str().or(event.event.as_deref()) {
                Some("content_block_delta") if data["delta"]["type"] == "text_delta" => {
                    out.text(data["delta"]["text"].as_str().unwrap_or_default())?;
                }
                Some("message_delta") => {
                    out.stop_reason = data["delta"]["stop_reason"].as_str().map(str::to_owned);
                }
                Some("error") => {
                    out.end();
                    bail!(
                        "stream: {}: {}",
                        data["error"]["type"].as_str().unwrap_or("error"),
                        data["error"]["message"].as_str().unwrap_or(&event.data)
                    );
                }
                Some("message_stop") => {
                    out.end();
                    if out.stop_reason.as_deref() == Some("max_tokens") {
                        eprintln!("(cut at --max-tokens {})", args.max_tokens);
                    }
                    return Ok(());
                }
                _ => {}
            }
        }
    }
    out.end();
    bail!("the stream ended before message_stop")
}

/// Standard output, flushed after every piece of text.
#[derive(Default)]
struct Printer {
    /// Something was printed since the last line end.
    open: bool,
    stop_reason: Option<String>,
}

impl Printer {
    fn text(&mut self, text: &str) -> anyhow::Result<()> {
        let mut stdout = std::io::stdout().lock();
        stdout.write_all(text.as_bytes())?;
        stdout.flush()?;
        if !text.is_empty() {
            self.open = !text.ends_with('\n');
        }
        Ok(())
    }

    /// The newline that ends the answer.
    fn end(&mut self) {
        if std::mem::take(&mut self.open) {
            println!();
        }
    }
}
