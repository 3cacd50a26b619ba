//! How a control's name sent by a caller (or recorded earlier) is compared with the name on screen.

/// Loose name comparison: case and surrounding whitespace do not count, and mnemonic underscores or
/// ampersands ("_Open", "&Open") are ignored. The executor checks a name sent with an id this way, and
/// replay finds a recorded target again this way.
pub fn names_match(a: &str, b: &str) -> bool {
    let norm = |s: &str| {
        s.trim()
            .chars()
            .filter(|c| *c != '_' && *c != '&')
            .flat_map(char::to_lowercase)
            .collect::<String>()
    };
    norm(a) == norm(b)
}

#[cfg(test)]
mod tests {
    use super::names_match;

    #[test]
    fn case_whitespace_and_mnemonics_do_not_count() {
        assert!(names_match("_Open", "open "));
        assert!(names_match("&Save As", "save as"));
        assert!(!names_match("Save", "Save As"));
    }
}
