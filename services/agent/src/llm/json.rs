//! Finding the JSON object in a model's reply, tolerating code fences and prose around it.

use serde_json::{Map, Value};

/// Why no JSON object could be found.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ExtractError {
    /// The reply contains no `{`.
    #[error("the reply contains no JSON object")]
    NoObject,
    /// Candidates were found but none parsed.
    #[error("the reply's JSON object is malformed: {0}")]
    Malformed(String),
}

/// Extracts the first JSON object from `text`: a fenced block (```json … ```) first, then the first
/// balanced `{…}` that parses.
pub fn extract_object(text: &str) -> Result<Map<String, Value>, ExtractError> {
    let mut last_error = None;
    for candidate in fenced_blocks(text).into_iter().chain(std::iter::once(text)) {
        match first_object(candidate) {
            Ok(map) => return Ok(map),
            Err(ExtractError::Malformed(e)) => last_error = Some(e),
            Err(ExtractError::NoObject) => {}
        }
    }
    Err(last_error.map_or(ExtractError::NoObject, ExtractError::Malformed))
}

fn fenced_blocks(text: &str) -> Vec<&str> {
    let mut blocks = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("```") {
        let after = &rest[start + 3..];
        // Skip the info string (e.g. `json`) up to the end of the line.
        let body_start = after.find('\n').map_or(after.len(), |i| i + 1);
        let body = &after[body_start..];
        let Some(end) = body.find("```") else { break };
        blocks.push(&body[..end]);
        rest = &body[end + 3..];
    }
    blocks
}

fn first_object(text: &str) -> Result<Map<String, Value>, ExtractError> {
    let mut last_error = None;
    for (start, _) in text.match_indices('{') {
        let Some(end) = balanced_end(&text[start..]) else {
            continue;
        };
        match serde_json::from_str::<Value>(&text[start..start + end]) {
            Ok(Value::Object(map)) => return Ok(map),
            Ok(_) => {}
            Err(e) => last_error = Some(e.to_string()),
        }
    }
    Err(last_error.map_or(ExtractError::NoObject, ExtractError::Malformed))
}

/// Byte length of the balanced `{…}` at the start of `text`, honouring strings and escapes.
fn balanced_end(text: &str) -> Option<usize> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' => depth += 1,
            '}' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn plain_fenced_and_prose_wrapped() {
        assert_eq!(extract_object(r#"{"a": 1}"#).unwrap()["a"], json!(1));
        let fenced = "Here you go:\n```json\n{\"a\": \"x}\"}\n```\nthanks";
        assert_eq!(extract_object(fenced).unwrap()["a"], json!("x}"));
        let prose = "I think {this} is it: {\"Status\": \"FINISH\", \"n\": {\"k\": [1,2]}} done";
        let m = extract_object(prose).unwrap();
        assert_eq!(m["Status"], json!("FINISH"));
        assert_eq!(m["n"]["k"], json!([1, 2]));
    }

    #[test]
    fn reports_missing_and_malformed() {
        assert_eq!(extract_object("no json here"), Err(ExtractError::NoObject));
        assert!(matches!(
            extract_object("{\"a\": 1,}"),
            Err(ExtractError::Malformed(_))
        ));
    }
}
