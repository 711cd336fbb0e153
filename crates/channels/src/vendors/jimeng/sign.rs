//! Volcengine's request signing (HMAC-SHA256), as Jimeng's visual API checks it: the canonical
//! request (method, path, sorted query, the signed headers, the body's SHA-256), the string to
//! sign over the date's scope, and the `Authorization` header naming the access key, the scope,
//! the signed headers and the signature. The secret key is only ever an HMAC key here.

/// The keys and scope a request is signed with.
#[derive(Clone)]
pub struct Credentials {
    pub access_key: String,
    pub secret_key: String,
    pub region: String,
    pub service: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("region", &self.region)
            .field("service", &self.service)
            .finish_non_exhaustive()
    }
}

/// One request as it is signed.
#[derive(Debug, Clone, Copy)]
pub struct Unsigned<'a> {
    pub method: &'a str,
    /// As the `Host` header carries it (`:80` and `:443` left out).
    pub host: &'a str,
    pub path: &'a str,
    pub query: &'a [(&'a str, &'a str)],
    pub content_type: &'a str,
    pub body: &'a [u8],
    /// `YYYYMMDDTHHMMSSZ`, UTC.
    pub x_date: &'a str,
}

/// The headers that sign a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    pub authorization: String,
    pub x_date: String,
    pub x_content_sha256: String,
}

/// The headers a request signs, in order.
pub const SIGNED_HEADERS: &str = "content-type;host;x-content-sha256;x-date";

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest as _;
    hex(&sha2::Sha256::digest(data))
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    use hmac::Mac as _;
    // An HMAC takes a key of any length: this cannot fail.
    let Ok(mut mac) = hmac::Hmac::<sha2::Sha256>::new_from_slice(key) else {
        return Vec::new();
    };
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}

/// A query part as Volcengine encodes it: unreserved characters kept, every other byte `%XX`.
fn uri_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The canonical query: each key and value encoded, sorted by key then value, joined by `&`.
pub fn canonical_query(query: &[(&str, &str)]) -> String {
    let mut pairs: Vec<(String, String)> = query
        .iter()
        .map(|(k, v)| (uri_encode(k), uri_encode(v)))
        .collect();
    pairs.sort();
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

/// The canonical request Volcengine hashes and signs.
pub fn canonical_request(req: &Unsigned<'_>, body_hash: &str) -> String {
    format!(
        "{}\n{}\n{}\ncontent-type:{}\nhost:{}\nx-content-sha256:{body_hash}\nx-date:{}\n\n{SIGNED_HEADERS}\n{body_hash}",
        req.method,
        req.path,
        canonical_query(req.query),
        req.content_type.trim(),
        req.host.trim(),
        req.x_date,
    )
}

/// Signs `req` with `creds` as Volcengine's HMAC-SHA256 scheme asks: the signing key is
/// `HMAC(HMAC(HMAC(HMAC(secret, date), region), service), "request")`, the signature the hex
/// HMAC of `HMAC-SHA256\n<x-date>\n<date>/<region>/<service>/request\n<sha256 of the
/// canonical request>` under it.
pub fn sign(creds: &Credentials, req: &Unsigned<'_>) -> Signature {
    let body_hash = sha256_hex(req.body);
    let date = req.x_date.get(..8).unwrap_or(req.x_date);
    let scope = format!("{date}/{}/{}/request", creds.region, creds.service);
    let canonical = canonical_request(req, &body_hash);
    let to_sign = format!(
        "HMAC-SHA256\n{}\n{scope}\n{}",
        req.x_date,
        sha256_hex(canonical.as_bytes())
    );
    let k_date = hmac(creds.secret_key.as_bytes(), date.as_bytes());
    let k_region = hmac(&k_date, creds.region.as_bytes());
    let k_service = hmac(&k_region, creds.service.as_bytes());
    let k_signing = hmac(&k_service, b"request");
    let signature = hex(&hmac(&k_signing, to_sign.as_bytes()));
    Signature {
        authorization: format!(
            "HMAC-SHA256 Credential={}/{scope}, SignedHeaders={SIGNED_HEADERS}, Signature={signature}",
            creds.access_key
        ),
        x_date: req.x_date.to_owned(),
        x_content_sha256: body_hash,
    }
}

/// `unix_secs` as an `X-Date` (`YYYYMMDDTHHMMSSZ`, UTC).
pub fn x_date(unix_secs: u64) -> String {
    let days = i64::try_from(unix_secs / 86_400).unwrap_or(0);
    let rest = unix_secs % 86_400;
    // Days since 1970-01-01 to a civil date (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// The `Host` a URL's request carries, as signed: its authority, without a default port.
pub fn host_of(url: &str) -> Option<String> {
    let uri = url.parse::<http::Uri>().ok()?;
    let host = uri.host()?;
    let default = match uri.scheme_str() {
        Some("https") => 443,
        _ => 80,
    };
    Some(match uri.port_u16() {
        Some(port) if port != default => format!("{host}:{port}"),
        _ => host.to_owned(),
    })
}
