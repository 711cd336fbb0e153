//! A stored reference (a frame, an asset's image, video or audio) as a vendor takes it: its
//! bytes inline, in the vendor's own form (raw base64, a `data:` URI), when they are under the
//! channel's inline cap; else the relay's signed URL of its copy, when the relay has a public
//! one; else an error naming the reference and the cap.

use crate::vendors::common::{ReadBlobError, Remote};

/// How a vendor writes a reference's bytes (and sniffed media type) inline.
pub type Inline = fn(&[u8], &str) -> String;

/// `blob` as the vendor takes it: inline by `inline` under the cap, else `url`.
pub async fn reference(
    remote: &Remote,
    blob: &str,
    url: Option<&str>,
    inline: Inline,
) -> Result<String, String> {
    match (remote.read_blob(blob).await, url) {
        (Ok((bytes, mime)), _) => Ok(inline(&bytes, mime)),
        (Err(ReadBlobError::OverInlineCap { .. }), Some(url)) => Ok(url.to_owned()),
        (Err(e), _) => Err(e.to_string()),
    }
}

/// Raw base64 of the bytes, no prefix (Kling).
pub fn raw_base64(bytes: &[u8], _mime: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A `data:` URI of the bytes (MiniMax, DashScope).
pub fn data_uri(bytes: &[u8], mime: &str) -> String {
    use base64::Engine as _;
    let data = base64::engine::general_purpose::STANDARD.encode(bytes);
    format!("data:{mime};base64,{data}")
}
