//! `x-relay-sim` directives: how a request steers the built-in simulator (CONTRACT §5.3).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimDirectives {
    /// The task ends `failed` with `upstream_error`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub fail: bool,
    /// The task never finishes upstream; the relay's timeout applies.
    #[serde(default, skip_serializing_if = "is_false")]
    pub stuck: bool,
    /// Total run time, overriding the configured one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
    /// Moderation answers `rejected`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub reject: bool,
    /// The upstream call itself fails with this status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<u16>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl SimDirectives {
    /// Parses `fail; delay_ms=300`. An unknown directive is an error naming it.
    pub fn parse(header: &str) -> Result<SimDirectives, String> {
        let mut d = SimDirectives::default();
        for part in header.split([';', ',']) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let (name, value) = match part.split_once('=') {
                Some((n, v)) => (n.trim(), Some(v.trim())),
                None => (part, None),
            };
            match (name, value) {
                ("fail", None) => d.fail = true,
                ("stuck", None) => d.stuck = true,
                ("reject", None) => d.reject = true,
                ("delay_ms", Some(v)) => {
                    let ms = v
                        .parse::<u64>()
                        .ok()
                        .filter(|ms| *ms <= 3_600_000)
                        .ok_or_else(|| format!("delay_ms must be 0..=3600000, got {v:?}"))?;
                    d.delay_ms = Some(ms);
                }
                ("error", Some(v)) => {
                    let status = v
                        .parse::<u16>()
                        .ok()
                        .filter(|s| matches!(s, 429 | 500 | 502 | 503))
                        .ok_or_else(|| format!("error must be 429, 500, 502 or 503, got {v:?}"))?;
                    d.error = Some(status);
                }
                _ => {
                    return Err(format!(
                        "unknown directive {part:?}; known: fail, stuck, reject, delay_ms=N, error=500|429"
                    ));
                }
            }
        }
        Ok(d)
    }

    pub fn is_empty(&self) -> bool {
        *self == SimDirectives::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_directives() {
        let d = SimDirectives::parse("fail; delay_ms=300").unwrap();
        assert!(d.fail);
        assert_eq!(d.delay_ms, Some(300));
        let d = SimDirectives::parse("stuck,error=429").unwrap();
        assert!(d.stuck);
        assert_eq!(d.error, Some(429));
        assert!(SimDirectives::parse("").unwrap().is_empty());
        assert!(SimDirectives::parse("explode").is_err());
        assert!(SimDirectives::parse("delay_ms=abc").is_err());
        assert!(SimDirectives::parse("error=404").is_err());
    }
}
