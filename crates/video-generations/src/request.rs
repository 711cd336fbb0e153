//! `POST /v1/video/generations`: validation of the request (CONTRACT §2.3), the checks of the
//! referenced assets, and the choice of an adaptive ratio.
//!
//! Check order (SPEC §7, CONTRACT §2.3), first failure wins:
//!
//! 1. [`validate`], pure: the body is a JSON object (`invalid request`); `model` is in the
//!    catalog (`invalid model`); the model's family is the key's (`group mismatch`);
//!    `resolution` (`invalid resolution`), `duration` (`invalid duration`), `ratio`
//!    (`invalid ratio`) each against the model, joint rules included; the `assets` list (its
//!    shape is `invalid request`, too many of one role `reference limit exceeded`); `prompt`
//!    (`invalid prompt`); `return_last_frame` and `seed` (`invalid request`).
//! 2. [`check_assets`], over facts the server looked up: every asset exists for the caller
//!    (`asset not found`), then every asset is `active` (`asset not active`), then every asset is
//!    of the model's family (`asset family mismatch`), then every asset is of the type its role
//!    takes (`invalid image` / `invalid video` / `invalid audio`).
//! 3. The body-size `413` is the server's, last.
//!
//! Rules decided here:
//! - A JSON `null` is the same as leaving the field out; unknown fields are ignored.
//! - `duration`: a JSON integer, a number with a zero fraction (`5.0`), or a string holding
//!   either (`"5"`).
//! - A field left out takes the model's first listed value; for `duration`, the first listed
//!   value the joint rules allow at the chosen resolution.
//! - `seed`: an integer from 0 to 4294967295; `-1` means "choose one" (the same as leaving it
//!   out).
//! - The same asset may be referenced under several roles.

use error_codes::{ApiError, ErrorCode};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::catalog::{ADAPTIVE, Catalog, ModelSpec};

/// Longest prompt, in characters (Unicode scalar values).
pub const MAX_PROMPT_CHARS: usize = 10_000;
/// Largest `seed`.
pub const MAX_SEED: u64 = u32::MAX as u64;

/// What a referenced asset is used as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    FirstFrame,
    LastFrame,
    ReferenceImage,
    ReferenceVideo,
    ReferenceAudio,
}

impl Role {
    /// Every role, in the order counts are checked.
    pub const ALL: [Role; 5] = [
        Role::FirstFrame,
        Role::LastFrame,
        Role::ReferenceImage,
        Role::ReferenceVideo,
        Role::ReferenceAudio,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Role::FirstFrame => "first_frame",
            Role::LastFrame => "last_frame",
            Role::ReferenceImage => "reference_image",
            Role::ReferenceVideo => "reference_video",
            Role::ReferenceAudio => "reference_audio",
        }
    }

    pub fn from_wire(s: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == s)
    }

    /// How many assets of this role one request may reference.
    pub const fn max_count(self) -> usize {
        match self {
            Role::ReferenceImage => 4,
            _ => 1,
        }
    }

    /// The type of asset the role takes.
    pub const fn media(self) -> MediaType {
        match self {
            Role::FirstFrame | Role::LastFrame | Role::ReferenceImage => MediaType::Image,
            Role::ReferenceVideo => MediaType::Video,
            Role::ReferenceAudio => MediaType::Audio,
        }
    }
}

/// An asset's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MediaType {
    Image,
    Video,
    Audio,
}

impl MediaType {
    pub const fn as_str(self) -> &'static str {
        match self {
            MediaType::Image => "image",
            MediaType::Video => "video",
            MediaType::Audio => "audio",
        }
    }

    /// The error of a reference of this type that is unusable.
    pub const fn invalid_code(self) -> ErrorCode {
        match self {
            MediaType::Image => ErrorCode::InvalidImage,
            MediaType::Video => ErrorCode::InvalidVideo,
            MediaType::Audio => ErrorCode::InvalidAudio,
        }
    }
}

/// An asset's status, as far as a generation request cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AssetState {
    Processing,
    Active,
    Failed,
    Expired,
}

impl AssetState {
    pub const fn as_str(self) -> &'static str {
        match self {
            AssetState::Processing => "processing",
            AssetState::Active => "active",
            AssetState::Failed => "failed",
            AssetState::Expired => "expired",
        }
    }
}

/// One entry of `assets`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AssetRef {
    pub id: String,
    pub role: Role,
}

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
    /// As asked, or the model's default; may be [`ADAPTIVE`] (see [`resolve_ratio`]).
    pub ratio: String,
    /// In request order.
    pub assets: Vec<AssetRef>,
    pub return_last_frame: bool,
    /// `None`: the relay chooses.
    pub seed: Option<u64>,
}

impl ValidGeneration {
    /// The asset referenced as `role` (the first one, for roles that allow several).
    pub fn asset(&self, role: Role) -> Option<&AssetRef> {
        self.assets.iter().find(|a| a.role == role)
    }
}

/// Validates a generation request body against `catalog`. `key_family` is the channel family of
/// the caller's key's group (`None` when its group maps to none: every model is then a
/// `group mismatch`). Pure; returns the first failing check in the order of this module's
/// documentation.
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
    })
}

/// What the server found about one referenced asset, for [`check_assets`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AssetFact {
    pub id: String,
    /// `false` when no asset with this id exists for the caller (another owner's asset does
    /// not exist for them).
    pub exists: bool,
    pub status: Option<AssetState>,
    pub family: Option<String>,
    /// Known once the asset was processed.
    pub media: Option<MediaType>,
}

/// The asset checks of a valid request, in order over all its assets: every one exists
/// (`asset not found`), then every one is active (`asset not active`), then every one is of the
/// request's family (`asset family mismatch`), then every one is of the type its role takes
/// (`invalid image` / `invalid video` / `invalid audio`). An asset without a fact does not
/// exist. Pure.
pub fn check_assets(request: &ValidGeneration, facts: &[AssetFact]) -> Result<(), ApiError> {
    let found: Vec<(usize, &AssetRef, Option<&AssetFact>)> = request
        .assets
        .iter()
        .enumerate()
        .map(|(i, r)| (i, r, facts.iter().find(|f| f.id == r.id && f.exists)))
        .collect();
    let param = |i: usize| format!("assets[{i}].id");
    for &(i, r, fact) in &found {
        if fact.is_none() {
            return Err(ApiError::field(
                ErrorCode::AssetNotFound,
                param(i),
                format!(
                    "asset {} does not exist; assets[{i}].id must name an asset of one of your \
                     asset libraries",
                    quote(&r.id)
                ),
            ));
        }
    }
    let facts: Vec<(usize, &AssetRef, &AssetFact)> = found
        .into_iter()
        .filter_map(|(i, r, f)| f.map(|f| (i, r, f)))
        .collect();
    for &(i, r, fact) in &facts {
        if fact.status != Some(AssetState::Active) {
            let status = fact.status.map_or("unknown", AssetState::as_str);
            let advice = match fact.status {
                Some(AssetState::Processing) => "wait until it is active",
                _ => "upload it again",
            };
            return Err(ApiError::field(
                ErrorCode::AssetNotActive,
                param(i),
                format!("asset {} is {status}, not active; {advice}", quote(&r.id)),
            ));
        }
    }
    for &(i, r, fact) in &facts {
        if fact.family.as_deref() != Some(request.family.as_str()) {
            return Err(ApiError::field(
                ErrorCode::AssetFamilyMismatch,
                param(i),
                format!(
                    "asset {} belongs to channel family {}; model {} takes assets of family {} \
                     only",
                    quote(&r.id),
                    fact.family.as_deref().unwrap_or("(none)"),
                    request.model,
                    request.family
                ),
            ));
        }
    }
    for &(i, r, fact) in &facts {
        let wanted = r.role.media();
        if fact.media != Some(wanted) {
            return Err(ApiError::field(
                wanted.invalid_code(),
                param(i),
                format!(
                    "asset {} is of type {}; role {} takes an asset of type {}",
                    quote(&r.id),
                    fact.media.map_or("unknown", MediaType::as_str),
                    r.role.as_str(),
                    wanted.as_str()
                ),
            ));
        }
    }
    Ok(())
}

/// The ratio a task runs at. A fixed `requested` ratio is kept; [`ADAPTIVE`] takes the first
/// frame's ratio (`first_frame` is its `(width, height)`) snapped to the nearest fixed ratio
/// the model allows (nearest in log scale, ties to the earlier listed), and without a first
/// frame `16:9` (or the model's first fixed ratio when it does not allow `16:9`).
pub fn resolve_ratio(
    model: &ModelSpec,
    requested: &str,
    first_frame: Option<(u32, u32)>,
) -> String {
    if requested != ADAPTIVE {
        return requested.to_owned();
    }
    let fallback = || {
        if model.fixed_ratios().any(|r| r == "16:9") || model.fixed_ratios().next().is_none() {
            "16:9".to_owned()
        } else {
            model.fixed_ratios().next().unwrap_or("16:9").to_owned()
        }
    };
    let Some((w, h)) = first_frame.filter(|&(w, h)| w > 0 && h > 0) else {
        return fallback();
    };
    let target = (f64::from(w) / f64::from(h)).ln();
    let mut best: Option<(&str, f64)> = None;
    for ratio in model.fixed_ratios() {
        let Some(value) = ratio_value(ratio) else {
            continue;
        };
        let distance = (value.ln() - target).abs();
        if best.is_none_or(|(_, d)| distance < d) {
            best = Some((ratio, distance));
        }
    }
    best.map_or_else(fallback, |(r, _)| r.to_owned())
}

/// `w / h` of a `"w:h"` ratio.
fn ratio_value(ratio: &str) -> Option<f64> {
    let (w, h) = ratio.split_once(':')?;
    let (w, h) = (w.parse::<u32>().ok()?, h.parse::<u32>().ok()?);
    (w > 0 && h > 0).then(|| f64::from(w) / f64::from(h))
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

fn quote(s: &str) -> String {
    const MAX: usize = 60;
    let cut = if s.chars().count() > MAX {
        format!("{}...", s.chars().take(MAX).collect::<String>())
    } else {
        s.to_owned()
    };
    Value::String(cut).to_string()
}

/// A short description of a value for error details: strings quoted, long ones cut.
fn describe(value: &Value) -> String {
    match value {
        Value::String(s) => quote(s),
        Value::Array(_) | Value::Object(_) => kind_article(value).to_owned(),
        other => other.to_string(),
    }
}

fn kind_article(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
