//! [`check_assets`]: the checks of a valid request's assets over what the server found about
//! them.

use error_codes::{ApiError, ErrorCode};

use super::detail::quote;
use super::reference::{AssetRef, AssetState, MediaType};
use super::validate::ValidGeneration;

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
