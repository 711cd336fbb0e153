//! [`validate`]: the checks of a request body, field by field in the contract's order, and the
//! request that passed them.

use error_codes::{ApiError, ErrorCode};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::detail::{describe, kind_article};
use super::reference::{AssetRef, Role};
use crate::catalog::{ADAPTIVE, Catalog, ModelSpec};

/// Longest prompt, in characters (Unicode scalar values).
pub const MAX_PROMPT_CHARS: usize = 10_000;
/// Largest `seed`.
pub const MAX_SEED: u64 = u32::MAX as u64;

/// A request that passed every check this crate can make without I/O.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValidGeneration {
    pub model: String,
    /// The model's channel family (the key's, too).
    pub family: String,
    pub prompt: String,
    /// Seconds.
    pub duration: u32,
    pub resolution: String,
    /// As asked, or the model's default; may be [`ADAPTIVE`] (see
    /// [`resolve_ratio`](crate::resolve_ratio)).
    pub ratio: String,
    /// In request order.
    pub assets: Vec<AssetRef>,
    pub return_last_frame: bool,
    /// `None`: the relay chooses.
    pub seed: Option<u64>,
    /// Where the task's final status is announced (a signed webhook; the name the upstream
    /// format gives its own callback).
    #[serde(default)]
    pub callback_url: Option<String>,
}

impl ValidGeneration {
    /// The asset referenced as `role` (the first one, for roles that allow several).
    pub fn asset(&self, role: Role) -> Option<&AssetRef> {
        self.assets.iter().find(|a| a.role == role)
    }
}

/// Validates a generation request body against `catalog`. `key_family` is the channel family of
/// the caller's key's group (`None` when its group maps to none: every model is then a
/// `group mismatch`). Pure; returns the first failing check in the order of the
/// [`request`](crate::request) module's documentation.
pub fn validate(
    body: &Value,
    catalog: &Catalog,
    key_family: Option<&str>,
) -> Result<ValidGeneration, ApiError> {
    let Value::Object(fields) = body else {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            format!("the body must be a JSON object, got {}", kind_article(body)),
        ));
    };
    let model = check_model(fields, catalog)?;
    check_group(model, key_family)?;
    let resolution = check_resolution(fields, model)?;
    let duration = check_duration(fields, model, &resolution)?;
    let ratio = check_ratio(fields, model)?;
    let assets = check_assets_field(fields)?;
    let prompt = check_prompt(fields)?;
    let return_last_frame = check_return_last_frame(fields)?;
    let seed = check_seed(fields)?;
    let callback_url = check_callback_url(fields)?;
    Ok(ValidGeneration {
        model: model.name.clone(),
        family: model.family.clone(),
        prompt,
        duration,
        resolution,
        ratio,
        assets,
        return_last_frame,
        seed,
        callback_url,
    })
}

/// Longest `callback_url`, in bytes.
pub const MAX_CALLBACK_URL: usize = 2048;

/// `callback_url`: an absolute http(s) URL with a host, no credentials, no whitespace.
fn check_callback_url(fields: &Map<String, Value>) -> Result<Option<String>, ApiError> {
    let Some(value) = field(fields, "callback_url") else {
        return Ok(None);
    };
    match value.as_str().filter(|s| is_callback_url(s)) {
        Some(url) => Ok(Some(url.to_owned())),
        None => Err(ApiError::field(
            ErrorCode::InvalidRequest,
            "callback_url",
            format!(
                "callback_url must be an absolute http:// or https:// URL with a host, without \
                 credentials, of at most {MAX_CALLBACK_URL} bytes, got {}",
                describe(value)
            ),
        )),
    }
}

fn is_callback_url(s: &str) -> bool {
    let lower_prefix = |p: &str| s.get(..p.len()).is_some_and(|h| h.eq_ignore_ascii_case(p));
    let rest = if lower_prefix("http://") {
        &s[7..]
    } else if lower_prefix("https://") {
        &s[8..]
    } else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    // `host`, `host:port`, `[v6]` or `[v6]:port`.
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((host, "")) => (host, None),
            Some((host, rest)) => match rest.strip_prefix(':') {
                Some(port) => (host, Some(port)),
                None => return false,
            },
            None => return false,
        },
        None => match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        },
    };
    let port_ok = port.is_none_or(|p| p.parse::<u16>().is_ok());
    s.len() <= MAX_CALLBACK_URL
        && !s.chars().any(|c| c.is_whitespace() || c.is_control())
        && !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | ':' | '_'))
        && !authority.contains('@')
        && port_ok
}

/// A field's value; JSON `null` is the same as leaving it out.
fn field<'a>(fields: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    fields.get(name).filter(|v| !v.is_null())
}

fn check_model<'c>(
    fields: &Map<String, Value>,
    catalog: &'c Catalog,
) -> Result<&'c ModelSpec, ApiError> {
    let code = ErrorCode::InvalidModel;
    let names = catalog.names().collect::<Vec<_>>().join(", ");
    let value = field(fields, "model").ok_or_else(|| {
        ApiError::field(
            code,
            "model",
            format!("model is required and must be one of {names}"),
        )
    })?;
    value
        .as_str()
        .and_then(|name| catalog.model(name))
        .ok_or_else(|| {
            ApiError::field(
                code,
                "model",
                format!("model must be one of {names}, got {}", describe(value)),
            )
        })
}

fn check_group(model: &ModelSpec, key_family: Option<&str>) -> Result<(), ApiError> {
    match key_family {
        Some(family) if family == model.family => Ok(()),
        Some(family) => Err(ApiError::field(
            ErrorCode::GroupMismatch,
            "model",
            format!(
                "model {} belongs to channel family {}; this key's group uses family {family}; \
                 use a key of a group of family {}",
                model.name, model.family, model.family
            ),
        )),
        None => Err(ApiError::field(
            ErrorCode::GroupMismatch,
            "model",
            format!(
                "this key's group has no channel family; model {} needs a key of a group of \
                 family {}",
                model.name, model.family
            ),
        )),
    }
}

fn check_resolution(fields: &Map<String, Value>, model: &ModelSpec) -> Result<String, ApiError> {
    let Some(value) = field(fields, "resolution") else {
        return first(&model.resolutions, "resolution", model).cloned();
    };
    match value.as_str() {
        Some(r) if model.resolutions.iter().any(|m| m == r) => Ok(r.to_owned()),
        _ => Err(ApiError::field(
            ErrorCode::InvalidResolution,
            "resolution",
            format!(
                "resolution must be one of {} for model {}, got {}",
                model.resolutions.join(", "),
                model.name,
                describe(value)
            ),
        )),
    }
}

fn check_duration(
    fields: &Map<String, Value>,
    model: &ModelSpec,
    resolution: &str,
) -> Result<u32, ApiError> {
    let code = ErrorCode::InvalidDuration;
    let max = model.max_duration_at(resolution);
    let Some(value) = field(fields, "duration") else {
        // The first listed duration the joint rules allow at this resolution.
        return model
            .durations
            .iter()
            .copied()
            .find(|d| max.is_none_or(|m| *d <= m))
            .ok_or_else(|| {
                ApiError::field(
                    code,
                    "duration",
                    format!(
                        "model {} has no duration allowed at resolution {resolution}; give \
                         another resolution",
                        model.name
                    ),
                )
            });
    };
    let listed = whole_number(value)
        .and_then(|n| u32::try_from(n).ok())
        .filter(|n| model.durations.contains(n));
    let Some(duration) = listed else {
        return Err(ApiError::field(
            code,
            "duration",
            format!(
                "duration must be one of {} seconds for model {}, got {}",
                list_durations(&model.durations),
                model.name,
                describe(value)
            ),
        ));
    };
    if let Some(max) = max.filter(|m| duration > *m) {
        return Err(ApiError::field(
            code,
            "duration",
            format!(
                "duration must be at most {max} seconds at resolution {resolution} for model {}, \
                 got {duration}",
                model.name
            ),
        ));
    }
    Ok(duration)
}

fn check_ratio(fields: &Map<String, Value>, model: &ModelSpec) -> Result<String, ApiError> {
    let Some(value) = field(fields, "ratio") else {
        return first(&model.ratios, "ratio", model).cloned();
    };
    match value.as_str() {
        Some(r) if model.ratios.iter().any(|m| m == r) => Ok(r.to_owned()),
        _ => {
            let fixed: Vec<&str> = model.fixed_ratios().collect();
            let accepted = if model.allows_adaptive() {
                format!("one of {} or {ADAPTIVE}", fixed.join(", "))
            } else {
                format!("one of {} ({ADAPTIVE} is not available)", fixed.join(", "))
            };
            Err(ApiError::field(
                ErrorCode::InvalidRatio,
                "ratio",
                format!(
                    "ratio must be {accepted} for model {}, got {}",
                    model.name,
                    describe(value)
                ),
            ))
        }
    }
}

/// The first listed value, for a field left out. A model with an empty list cannot run; the
/// field is then at fault whatever was sent.
fn first<'a, T>(values: &'a [T], name: &str, model: &ModelSpec) -> Result<&'a T, ApiError> {
    values.first().ok_or_else(|| {
        let code = match name {
            "resolution" => ErrorCode::InvalidResolution,
            "duration" => ErrorCode::InvalidDuration,
            _ => ErrorCode::InvalidRatio,
        };
        ApiError::field(
            code,
            name,
            format!("model {} lists no {name} values", model.name),
        )
    })
}

fn check_assets_field(fields: &Map<String, Value>) -> Result<Vec<AssetRef>, ApiError> {
    let roles = Role::ALL.map(Role::as_str).join(", ");
    let Some(value) = field(fields, "assets") else {
        return Ok(Vec::new());
    };
    let Value::Array(items) = value else {
        return Err(ApiError::field(
            ErrorCode::InvalidRequest,
            "assets",
            format!(
                "assets must be an array of {{\"id\", \"role\"}} objects, got {}",
                describe(value)
            ),
        ));
    };
    let mut refs = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let Value::Object(item) = item else {
            return Err(ApiError::field(
                ErrorCode::InvalidRequest,
                format!("assets[{i}]"),
                format!(
                    "assets[{i}] must be an object {{\"id\", \"role\"}}, got {}",
                    describe(item)
                ),
            ));
        };
        let id = match field(item, "id") {
            Some(Value::String(id)) if !id.is_empty() => id.clone(),
            other => {
                return Err(ApiError::field(
                    ErrorCode::InvalidRequest,
                    format!("assets[{i}].id"),
                    format!(
                        "assets[{i}].id must be an asset id (a non-empty string), got {}",
                        other.map_or_else(|| "nothing".to_owned(), describe)
                    ),
                ));
            }
        };
        let role = match field(item, "role") {
            Some(Value::String(role)) => Role::from_wire(role),
            _ => None,
        };
        let Some(role) = role else {
            return Err(ApiError::field(
                ErrorCode::InvalidRequest,
                format!("assets[{i}].role"),
                format!(
                    "assets[{i}].role must be one of {roles}, got {}",
                    field(item, "role").map_or_else(|| "nothing".to_owned(), describe)
                ),
            ));
        };
        refs.push(AssetRef { id, role });
    }
    for role in Role::ALL {
        let count = refs.iter().filter(|r| r.role == role).count();
        if count > role.max_count() {
            return Err(ApiError::field(
                ErrorCode::ReferenceLimitExceeded,
                "assets",
                format!(
                    "at most {} asset{} may have role {}, got {count}",
                    role.max_count(),
                    if role.max_count() == 1 { "" } else { "s" },
                    role.as_str()
                ),
            ));
        }
    }
    Ok(refs)
}

fn check_prompt(fields: &Map<String, Value>) -> Result<String, ApiError> {
    let code = ErrorCode::InvalidPrompt;
    let rule = format!("a non-empty string of at most {MAX_PROMPT_CHARS} characters");
    let value = field(fields, "prompt")
        .ok_or_else(|| ApiError::field(code, "prompt", format!("prompt is required: {rule}")))?;
    let prompt = match value.as_str() {
        Some(s) if !s.trim().is_empty() => s,
        _ => {
            return Err(ApiError::field(
                code,
                "prompt",
                format!("prompt must be {rule}, got {}", describe(value)),
            ));
        }
    };
    let chars = prompt.chars().count();
    if chars > MAX_PROMPT_CHARS {
        return Err(ApiError::field(
            code,
            "prompt",
            format!("prompt must be at most {MAX_PROMPT_CHARS} characters, got {chars}"),
        ));
    }
    Ok(prompt.to_owned())
}

fn check_return_last_frame(fields: &Map<String, Value>) -> Result<bool, ApiError> {
    match field(fields, "return_last_frame") {
        None => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => Err(ApiError::field(
            ErrorCode::InvalidRequest,
            "return_last_frame",
            format!(
                "return_last_frame must be true or false, got {}",
                describe(other)
            ),
        )),
    }
}

fn check_seed(fields: &Map<String, Value>) -> Result<Option<u64>, ApiError> {
    let Some(value) = field(fields, "seed") else {
        return Ok(None);
    };
    match value.as_i64() {
        Some(-1) => Ok(None),
        Some(n) if (0..=MAX_SEED as i64).contains(&n) => Ok(Some(n as u64)),
        _ => Err(ApiError::field(
            ErrorCode::InvalidRequest,
            "seed",
            format!(
                "seed must be an integer from 0 to {MAX_SEED}, or -1 to let the relay choose, \
                 got {}",
                describe(value)
            ),
        )),
    }
}

/// A whole number from a JSON number or a numeric string; out-of-range floats saturate.
fn whole_number(value: &Value) -> Option<i64> {
    fn whole(f: f64) -> Option<i64> {
        // `as` saturates, which keeps huge values out of range.
        (f.is_finite() && f.fract() == 0.0).then_some(f as i64)
    }
    match value {
        Value::Number(n) => n
            .as_i64()
            .or_else(|| n.as_u64().map(|_| i64::MAX))
            .or_else(|| n.as_f64().and_then(whole)),
        Value::String(s) => s
            .parse::<i64>()
            .ok()
            .or_else(|| s.parse::<f64>().ok().and_then(whole)),
        _ => None,
    }
}

/// `2, 3, 4` as `2 to 4` when the list is a run of three or more; else listed.
fn list_durations(durations: &[u32]) -> String {
    let run = durations.len() >= 3 && durations.windows(2).all(|w| w[1] == w[0] + 1);
    match (run, durations.first(), durations.last()) {
        (true, Some(a), Some(b)) => format!("{a} to {b}"),
        _ => durations
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", "),
    }
}
