//! Characters (`POST /v1/videos/characters`, `GET /v1/videos/characters` and
//! `GET` / `DELETE /v1/videos/characters/{id}`): a name and the video it was taken from, sent
//! as multipart (`name`, `video` file part); a key's list of them, paged as `GET /v1/videos`
//! is ([`crate::parse_list_query`]).

use error_codes::{ApiError, ErrorCode};
use serde::{Deserialize, Serialize};

/// The longest `name`, in characters.
pub const MAX_CHARACTER_NAME_CHARS: usize = 200;

/// The field of the video part.
pub const CHARACTER_VIDEO_FIELD: &str = "video";

/// A character as the API shows it (the OpenAI SDK reads `id`, `created_at`, `name`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CharacterObject {
    pub id: String,
    /// Always `"video.character"`.
    pub object: String,
    pub name: String,
    /// Unix seconds.
    pub created_at: u64,
}

/// `GET /v1/videos/characters`: `{"object":"list","data":[...],"has_more","first_id","last_id"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CharacterList {
    /// Always `"list"`.
    pub object: String,
    pub data: Vec<CharacterObject>,
    pub has_more: bool,
    /// Id of the first record of `data`; `null` when empty.
    pub first_id: Option<String>,
    /// Id of the last record of `data`; `null` when empty.
    pub last_id: Option<String>,
}

impl CharacterList {
    pub fn new(data: Vec<CharacterObject>, has_more: bool) -> CharacterList {
        CharacterList {
            object: "list".to_owned(),
            first_id: data.first().map(|c| c.id.clone()),
            last_id: data.last().map(|c| c.id.clone()),
            data,
            has_more,
        }
    }
}

/// `DELETE /v1/videos/characters/{id}`: `{"id", "object": "video.character.deleted",
/// "deleted": true}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeletedCharacter {
    pub id: String,
    /// Always `"video.character.deleted"`.
    pub object: String,
    pub deleted: bool,
}

impl DeletedCharacter {
    pub fn new(id: impl Into<String>) -> DeletedCharacter {
        DeletedCharacter {
            id: id.into(),
            object: "video.character.deleted".to_owned(),
            deleted: true,
        }
    }
}

/// The character's name, checked: given once, not blank, at most
/// [`MAX_CHARACTER_NAME_CHARS`]; else `400 invalid request` naming `name`.
pub fn character_name<'a>(mut names: impl Iterator<Item = &'a str>) -> Result<&'a str, ApiError> {
    let invalid = |detail: &str| ApiError::field(ErrorCode::InvalidRequest, "name", detail);
    let Some(name) = names.next() else {
        return Err(invalid("name is required: the character's display name"));
    };
    if names.next().is_some() {
        return Err(invalid("name is given more than once"));
    }
    if name.trim().is_empty() {
        return Err(invalid("name must not be blank"));
    }
    if name.chars().count() > MAX_CHARACTER_NAME_CHARS {
        return Err(invalid(&format!(
            "name is longer than {MAX_CHARACTER_NAME_CHARS} characters"
        )));
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(names: &[&str], expected: Result<&str, &str>) {
        match (character_name(names.iter().copied()), expected) {
            (Ok(name), Ok(want)) => assert_eq!(name, want),
            (Err(e), Err(want)) => {
                assert_eq!(e.code, ErrorCode::InvalidRequest);
                assert_eq!(e.param.as_deref(), Some("name"));
                assert!(e.detail.contains(want), "{} lacks {want}", e.detail);
            }
            (got, want) => panic!("{names:?}: got {got:?}, expected {want:?}"),
        }
    }

    #[test]
    fn names() {
        check(&["Ann"], Ok("Ann"));
        check(&[&"é".repeat(200)], Ok(&"é".repeat(200)));
        check(&[], Err("required"));
        check(&["a", "b"], Err("more than once"));
        check(&["  "], Err("blank"));
        check(&[&"x".repeat(201)], Err("longer than 200"));
    }
}
