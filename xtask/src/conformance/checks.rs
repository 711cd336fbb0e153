//! The suite's judgements: pure functions from an answer to `Ok` or a sentence saying what was
//! expected and what came. The unit tests below feed them deliberately wrong answers.

use serde_json::Value;

use super::client::Resp;

pub type Verdict = Result<(), String>;

fn got(resp: &Resp) -> String {
    resp.describe()
}

/// `code` of an error is its message in snake_case.
pub fn snake(message: &str) -> String {
    message.to_ascii_lowercase().replace(' ', "_")
}

pub fn status(resp: &Resp, want: u16) -> Verdict {
    if resp.status.as_u16() == want {
        Ok(())
    } else {
        Err(format!("expected status {want}, got {}", got(resp)))
    }
}

/// An error in the relay's own shape (CONTRACT §0.1) with this status and exact message.
pub fn api_error(resp: &Resp, want_status: u16, want_message: &str) -> Verdict {
    let body = resp.json();
    let err = &body["error"];
    let message = err["message"].as_str();
    if resp.status.as_u16() != want_status || message != Some(want_message) {
        return Err(format!(
            "expected {want_status} {want_message:?}, got {}",
            got(resp)
        ));
    }
    let code = err["code"].as_str();
    if code != Some(snake(want_message).as_str()) {
        return Err(format!(
            "expected error.code {:?}, got {code:?}",
            snake(want_message)
        ));
    }
    for field in ["param", "detail"] {
        if err.get(field).is_none() {
            return Err(format!("expected error.{field} (may be null), got none"));
        }
    }
    if !err["type"].is_string() {
        return Err(format!("expected error.type a string, got {}", err["type"]));
    }
    Ok(())
}

/// An error in the vendor's shape (CONTRACT §0.1, `/v1/messages`).
pub fn vendor_error(
    resp: &Resp,
    want_status: u16,
    want_type: &str,
    message: impl Fn(&str) -> bool,
    message_rule: &str,
) -> Verdict {
    let body = resp.json();
    let t = body["error"]["type"].as_str();
    let m = body["error"]["message"].as_str();
    let ok = resp.status.as_u16() == want_status
        && body["type"] == "error"
        && t == Some(want_type)
        && m.is_some_and(&message);
    if !ok {
        return Err(format!(
            "expected {want_status} {{\"type\":\"error\",\"error\":{{\"type\":{want_type:?},\"message\":{message_rule}}}}}, got {}",
            got(resp)
        ));
    }
    if !body["request_id"].is_string() {
        return Err("expected a top-level request_id, got none".into());
    }
    Ok(())
}

/// A JSON field equals a value.
pub fn field(resp: &Resp, pointer: &str, want: &Value) -> Verdict {
    let body = resp.json();
    match body.pointer(pointer) {
        Some(v) if v == want => Ok(()),
        other => Err(format!(
            "expected {pointer} = {want}, got {} (answer {})",
            other
                .map(Value::to_string)
                .unwrap_or_else(|| "nothing".into()),
            got(resp)
        )),
    }
}

/// A header has this value.
pub fn header(resp: &Resp, name: &str, want: &str) -> Verdict {
    match resp.header(name) {
        Some(v) if v == want => Ok(()),
        other => Err(format!("expected header {name}: {want}, got {other:?}")),
    }
}

/// The messages stream grammar (CONTRACT §3): every event has an `event:` line naming the same
/// type as its data; `message_start` first (with `usage.input_tokens`); blocks open, take
/// deltas and close by index; then `message_delta` (with `usage.output_tokens`) and
/// `message_stop` last; `ping` may come anywhere. Returns the text of the text deltas.
pub fn sse_grammar(body: &str) -> Result<String, String> {
    let mut events = Vec::new();
    for (n, block) in body.replace("\r\n", "\n").split("\n\n").enumerate() {
        if block.trim().is_empty() {
            continue;
        }
        let mut name = None;
        let mut data = String::new();
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("event:") {
                name = Some(v.trim().to_owned());
            } else if let Some(v) = line.strip_prefix("data:") {
                data.push_str(v.trim_start());
            }
        }
        let Some(name) = name else {
            return Err(format!(
                "expected an event: line in every event, got event #{n} without one: {block:?}"
            ));
        };
        let value: Value = serde_json::from_str(&data)
            .map_err(|_| format!("expected JSON data in event {name}, got {data:?}"))?;
        if value["type"] != name.as_str() {
            return Err(format!(
                "expected data.type {name:?} in event {name}, got {}",
                value["type"]
            ));
        }
        events.push((name, value));
    }
    let names: Vec<&str> = events
        .iter()
        .map(|(n, _)| n.as_str())
        .filter(|n| *n != "ping")
        .collect();
    let order = "message_start, (content_block_start, content_block_delta*, content_block_stop)+, message_delta, message_stop";
    let fail = || Err(format!("expected events {order}, got {}", names.join(", ")));
    if names.first() != Some(&"message_start")
        || names.last() != Some(&"message_stop")
        || names.len() < 5
        || names[names.len() - 2] != "message_delta"
    {
        return fail();
    }
    let mut open: Option<u64> = None;
    let mut blocks = 0;
    let mut text = String::new();
    for (name, value) in events.iter().filter(|(n, _)| n != "ping") {
        let index = value["index"].as_u64();
        match name.as_str() {
            "message_start" => {
                if !value["message"]["usage"]["input_tokens"].is_u64() {
                    return Err("expected message_start.message.usage.input_tokens".into());
                }
            }
            "content_block_start" => {
                if open.is_some() || index != Some(blocks) {
                    return fail();
                }
                open = index;
            }
            "content_block_delta" => {
                if open.is_none() || index != open {
                    return fail();
                }
                if let Some(t) = value["delta"]["text"].as_str() {
                    text.push_str(t);
                }
            }
            "content_block_stop" => {
                if open.is_none() || index != open {
                    return fail();
                }
                open = None;
                blocks += 1;
            }
            "message_delta" => {
                if open.is_some() || blocks == 0 {
                    return fail();
                }
                if !value["usage"]["output_tokens"].is_u64() {
                    return Err("expected message_delta.usage.output_tokens".into());
                }
            }
            "message_stop" => {}
            other => {
                return Err(format!(
                    "expected only message events, got {other} ({})",
                    names.join(", ")
                ));
            }
        }
    }
    Ok(text)
}

/// An MP4 with a video track of this size (the boxes parsed by `channels::mp4probe`).
pub fn mp4(bytes: &[u8], width: Option<u32>, height: Option<u32>) -> Verdict {
    let info = channels::mp4probe::probe_bytes(bytes)
        .map_err(|e| format!("expected an MP4, got {} bytes: {e}", bytes.len()))?;
    if width.is_some_and(|w| w != info.width) || height.is_some_and(|h| h != info.height) {
        return Err(format!(
            "expected a {}x{} video track, got {}x{}",
            width.unwrap_or(0),
            height.unwrap_or(0),
            info.width,
            info.height
        ));
    }
    if info.duration_secs <= 0.0 {
        return Err(format!(
            "expected a positive duration, got {}",
            info.duration_secs
        ));
    }
    Ok(())
}

pub fn png(bytes: &[u8]) -> Verdict {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") && bytes.ends_with(b"IEND\xaeB`\x82") {
        Ok(())
    } else {
        Err(format!(
            "expected a whole PNG, got {} bytes starting {:?}",
            bytes.len(),
            &bytes[..bytes.len().min(8)]
        ))
    }
}

/// A `206` answer to `Range` carrying exactly `whole[start..=end]`.
pub fn range(resp: &Resp, whole: &[u8], start: usize, end: usize) -> Verdict {
    status(resp, 206)?;
    let want = format!("bytes {start}-{end}/{}", whole.len());
    header(resp, "content-range", &want)?;
    if resp.body.as_ref() != &whole[start..=end] {
        return Err(format!(
            "expected bytes {start}-{end} of the file, got {} other bytes",
            resp.body.len()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http::{HeaderMap, StatusCode};

    fn resp(status: u16, body: &str) -> Resp {
        Resp {
            status: StatusCode::from_u16(status).unwrap(),
            headers: HeaderMap::new(),
            body: Bytes::from(body.to_owned()),
        }
    }

    const GOOD: &str = r#"{"error":{"code":"invalid_model","message":"invalid model","param":"model","detail":"d","type":"invalid_request_error"}}"#;

    #[test]
    fn api_error_accepts_the_right_answer() {
        assert_eq!(api_error(&resp(400, GOOD), 400, "invalid model"), Ok(()));
    }

    #[test]
    fn api_error_refuses_a_wrong_message() {
        let wrong = GOOD.replace("\"invalid model\"", "\"bad model\"");
        let e = api_error(&resp(400, &wrong), 400, "invalid model").unwrap_err();
        assert!(
            e.starts_with("expected 400 \"invalid model\", got 400 "),
            "{e}"
        );
        assert!(e.contains("bad model"), "{e}");
    }

    #[test]
    fn api_error_refuses_a_wrong_status_code_or_shape() {
        let e = api_error(&resp(422, GOOD), 400, "invalid model").unwrap_err();
        assert!(e.contains("got 422"), "{e}");
        let wrong = GOOD.replace("\"invalid_model\"", "\"InvalidModel\"");
        let e = api_error(&resp(400, &wrong), 400, "invalid model").unwrap_err();
        assert!(e.contains("error.code"), "{e}");
        let wrong = GOOD.replace("\"param\":\"model\",", "");
        let e = api_error(&resp(400, &wrong), 400, "invalid model").unwrap_err();
        assert!(e.contains("error.param"), "{e}");
        let e = api_error(&resp(400, "not json"), 400, "invalid model").unwrap_err();
        assert!(e.contains("not json"), "{e}");
    }

    #[test]
    fn vendor_error_checks_shape_and_type() {
        let good = r#"{"type":"error","error":{"type":"authentication_error","message":"unauthorized"},"request_id":"r"}"#;
        let is = |m: &str| m == "unauthorized";
        assert_eq!(
            vendor_error(&resp(401, good), 401, "authentication_error", is, "x"),
            Ok(())
        );
        let e = vendor_error(&resp(401, GOOD), 401, "authentication_error", is, "x");
        assert!(e.is_err());
        let no_id = good.replace(",\"request_id\":\"r\"", "");
        let e = vendor_error(&resp(401, &no_id), 401, "authentication_error", is, "x");
        assert!(e.unwrap_err().contains("request_id"));
    }

    const STREAM: &str = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3}}}\n\n\
event: ping\ndata: {\"type\":\"ping\"}\n\n\
event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"You said\"}}\n\n\
event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":2}}\n\n\
event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

    #[test]
    fn sse_grammar_accepts_a_good_stream() {
        assert_eq!(sse_grammar(STREAM), Ok("You said".into()));
    }

    #[test]
    fn sse_grammar_refuses_a_missing_event_line() {
        let bad = STREAM.replace("event: ping\n", "");
        let e = sse_grammar(&bad).unwrap_err();
        assert!(e.starts_with("expected an event: line"), "{e}");
    }

    #[test]
    fn sse_grammar_refuses_a_wrong_order() {
        let bad = STREAM.replace(
            "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":2}}\n\n",
            "",
        );
        let e = sse_grammar(&bad).unwrap_err();
        assert!(e.starts_with("expected events message_start"), "{e}");
        let bad = STREAM.replace(
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
            "",
        );
        assert!(sse_grammar(&bad).is_err());
        let bad = STREAM.replace("\"output_tokens\":2", "\"tokens\":2");
        assert!(sse_grammar(&bad).unwrap_err().contains("output_tokens"));
    }

    #[test]
    fn mp4_and_png_refuse_garbage() {
        let e = mp4(b"\x00\x00\x00\x08freeGARBAGE", None, None).unwrap_err();
        assert!(e.starts_with("expected an MP4"), "{e}");
        assert!(png(b"GIF89a").is_err());
        assert_eq!(png(super::super::flows::PNG_1X1), Ok(()));
    }

    #[test]
    fn range_refuses_wrong_bytes() {
        let whole = b"0123456789";
        let mut r = resp(206, "0123");
        r.headers
            .insert("content-range", "bytes 0-3/10".parse().unwrap());
        assert_eq!(range(&r, whole, 0, 3), Ok(()));
        let mut wrong = resp(206, "0124");
        wrong.headers = r.headers.clone();
        assert!(range(&wrong, whole, 0, 3).is_err());
        assert!(range(&resp(200, "0123456789"), whole, 0, 3).is_err());
    }
}
