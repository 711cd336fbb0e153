//! The `/v1/messages` validator (`crates/messages`) over arbitrary JSON, for both endpoints:
//! never a panic; an error's detail starts with the path of the field at fault; a valid request
//! written back as JSON validates to the same request; the relay's token count and the
//! conversion to a chat completions request never panic, and the conversion is JSON with the
//! upstream model and a `messages` array. Read as an upstream's answer, the same JSON gives
//! the same usage from its text (the scan) as from its parsed value, and the raw input never
//! panics the scan.
#![no_main]

use libfuzzer_sys::fuzz_target;
use messages::openai::to_chat_request;
use messages::tokens::count_request;
use messages::types::{usage_in, usage_of};
use messages::{Endpoint, validate};
use serde_json::Value;

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
                continue;
            }
        };
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
