//! Vidu's callbacks: the string Vidu signs (`X-HMAC-*` headers, HMAC-SHA256 with the
//! channel's API key) and the check of a callback's signature and date (docs/channels.md: Vidu).

/// The access key Vidu signs its callbacks as: always `vidu`.
pub const CALLBACK_ACCESS_KEY: &str = "vidu";

/// The algorithm Vidu names in `X-HMAC-ALGORITHM`.
pub const CALLBACK_ALGORITHM: &str = "hmac-sha256";

/// How far a signed callback's `Date` may be from the relay's clock.
pub const CALLBACK_DATE_SKEW: std::time::Duration = std::time::Duration::from_secs(15 * 60);

/// The string Vidu signs for a callback: the method, the callback URL's path and query, the
/// access key `vidu`, the `Date` header, then each signed header as `Name:value` and a newline,
/// in the order `X-HMAC-SIGNED-HEADERS` gives them.
pub fn callback_signing_string(
    method: &str,
    path: &str,
    query: &str,
    date: &str,
    signed_headers: &[(&str, &str)],
) -> String {
    let path = if path.is_empty() { "/" } else { path };
    let mut out = format!("{method}\n{path}\n{query}\n{CALLBACK_ACCESS_KEY}\n{date}\n");
    for (name, value) in signed_headers {
        out.push_str(name);
        out.push(':');
        out.push_str(value);
        out.push('\n');
    }
    out
}

/// Checks a callback's `X-HMAC-*` headers against the callback URL the relay handed Vidu
/// (`callback_url`) and the channel's API key, `now` being the relay's clock.
pub fn verify_callback_signature(
    callback_url: &str,
    method: &http::Method,
    headers: &http::HeaderMap,
    key: &str,
    now: std::time::SystemTime,
) -> Result<(), String> {
    use base64::Engine as _;
    use hmac::Mac as _;
    let header = |name: &str| -> Result<&str, String> {
        headers
            .get(name)
            .ok_or_else(|| format!("no {name} header"))?
            .to_str()
            .map_err(|_| format!("the {name} header is not text"))
    };
    let algorithm = header("x-hmac-algorithm")?;
    if !algorithm.eq_ignore_ascii_case(CALLBACK_ALGORITHM) {
        return Err(format!(
            "X-HMAC-ALGORITHM is {algorithm:?}, not {CALLBACK_ALGORITHM}"
        ));
    }
    let access_key = header("x-hmac-access-key")?;
    if access_key != CALLBACK_ACCESS_KEY {
        return Err(format!(
            "X-HMAC-ACCESS-KEY is {access_key:?}, not {CALLBACK_ACCESS_KEY}"
        ));
    }
    let date = header("date")?;
    let sent =
        httpdate::parse_http_date(date).map_err(|_| format!("Date {date:?} is not a date"))?;
    let skew = now.duration_since(sent).unwrap_or_else(|e| e.duration());
    if skew > CALLBACK_DATE_SKEW {
        return Err(format!(
            "Date {date:?} is more than 15 minutes from the relay's clock"
        ));
    }
    let names = header("x-hmac-signed-headers")?;
    let mut signed = Vec::new();
    for name in names.split(';').map(str::trim).filter(|n| !n.is_empty()) {
        signed.push((name, header(name)?));
    }
    let signature = base64::engine::general_purpose::STANDARD
        .decode(header("x-hmac-signature")?.trim())
        .map_err(|_| "X-HMAC-SIGNATURE is not base64".to_owned())?;
    let (path, query) = url_path_and_query(callback_url);
    let text = callback_signing_string(method.as_str(), path, query, date, &signed);
    let mut mac =
        hmac::Hmac::<sha2::Sha256>::new_from_slice(key.as_bytes()).map_err(|e| e.to_string())?;
    mac.update(text.as_bytes());
    mac.verify_slice(&signature)
        .map_err(|_| "the signature does not match".to_owned())
}

/// The path (`/` when empty) and query (empty when none) of an absolute URL.
pub(super) fn url_path_and_query(url: &str) -> (&str, &str) {
    let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    let rest = after_scheme
        .find(['/', '?'])
        .map_or("", |at| &after_scheme[at..]);
    let rest = rest.split('#').next().unwrap_or_default();
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    (if path.is_empty() { "/" } else { path }, query)
}
