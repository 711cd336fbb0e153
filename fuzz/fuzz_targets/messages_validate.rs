//! The `/v1/messages` validator (`crates/messages`) over arbitrary JSON, for both endpoints:
//! never a panic; an error's detail starts with the path of the field at fault; a valid request
//! written back as JSON validates to the same request; the relay's token count and the
//! conversion to a chat completions request never panic, and the conversion is JSON with the
//! upstream model and a `messages` array. Read as an upstream's answer, the same JSON gives
//! the same usage from its text (the scan) as from its parsed value, and the raw input never
//! panics the scan. The quick read of a body (`messages::checked::summarize`) accepts only what
//! the validator accepts, with the same summary, on the raw input and on every valid request
//! written back.
#![no_main]

use libfuzzer_sys::fuzz_target;
use messages::checked::summarize;
use messages::openai::to_chat_request;
use messages::tokens::count_request;
use messages::types::{usage_in, usage_of};
use messages::{Endpoint, MessagesRequest, Summary, validate};
use serde_json::Value;

/// A body the quick read accepts is one the validator accepts, with the same summary.
fn quick_agrees(text: &[u8], endpoint: Endpoint, slow: Option<&MessagesRequest>) {
    if let Some(summary) = summarize(text, endpoint) {
        let request = slow.unwrap_or_else(|| {
            panic!("summarized, yet invalid: {}", String::from_utf8_lossy(text))
        });
        assert_eq!(
            summary,
            Summary::of(request),
            "{}",
            String::from_utf8_lossy(text)
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let _ = usage_in(data);
    let Ok(body) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let text = serde_json::to_vec(&body).expect("a value serialises");
    assert_eq!(usage_in(&text), usage_of(&body), "{body}");
    for endpoint in [Endpoint::Messages, Endpoint::CountTokens] {
        let request = match validate(body.clone(), endpoint) {
            Ok(request) => request,
            Err(e) => {
                let param = e.param.as_deref().unwrap_or_default();
                assert!(!param.is_empty() && e.detail.starts_with(param), "{e:?}");
                quick_agrees(data, endpoint, None);
                continue;
            }
        };
        quick_agrees(data, endpoint, Some(&request));
        let written = serde_json::to_vec(&request).expect("a valid request serialises");
        quick_agrees(&written, endpoint, Some(&request));
        let again = serde_json::to_value(&request).expect("a valid request serialises");
        match validate(again.clone(), endpoint) {
            Ok(back) => assert_eq!(back, request, "{again}"),
            Err(e) => panic!("{again} does not validate again: {e:?}"),
        }
        let _ = count_request(&request);
        let chat = to_chat_request(&request, "upstream-model");
        assert_eq!(chat["model"], "upstream-model");
        assert!(chat["messages"].is_array(), "{chat}");
    }
});
