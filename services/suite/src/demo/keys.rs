//! Keys and text in the executor's key syntax (pywinauto `send_keys`): a person's text with the special
//! characters braced, and key combinations as people write them (`ctrl+s`, `down`, `f5`).

/// Characters the executor's key syntax treats specially; typed literally as `{c}`.
const SPECIAL: &[char] = &['+', '^', '%', '~', '(', ')', '{', '}'];

/// A person's text in the executor's key syntax (special characters braced, newline as Enter).
pub fn escape_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            c if SPECIAL.contains(&c) => {
                out.push('{');
                out.push(c);
                out.push('}');
            }
            '\n' => out.push_str("{ENTER}"),
            '\t' => out.push_str("{TAB}"),
            c => out.push(c),
        }
    }
    out
}

/// Why a word is not a key combination.
#[derive(Debug, thiserror::Error)]
pub(super) enum KeyError {
    /// Nothing at all.
    #[error("empty key {0:?}")]
    Empty(String),
    /// A modifier that is not ctrl, shift or alt.
    #[error("unknown modifier {modifier:?} in {word:?}")]
    Modifier {
        /// The modifier.
        modifier: String,
        /// The whole combination.
        word: String,
    },
    /// Modifiers and no key.
    #[error("missing key after the modifiers in {0:?}")]
    Missing(String),
    /// A key name the suite does not know.
    #[error("unknown key {0:?}")]
    Unknown(String),
}

/// `ctrl+shift+s` → `^+s`, `enter` → `{ENTER}`, `page down` is `pagedown`.
pub(super) fn combo(word: &str) -> Result<String, KeyError> {
    let parts: Vec<&str> = word.split('+').collect();
    let Some((key, mods)) = parts.split_last() else {
        return Err(KeyError::Empty(word.to_owned()));
    };
    let mut out = String::new();
    for m in mods {
        out.push(match *m {
            "ctrl" | "control" => '^',
            "shift" => '+',
            "alt" => '%',
            other => {
                return Err(KeyError::Modifier {
                    modifier: other.to_owned(),
                    word: word.to_owned(),
                });
            }
        });
    }
    let mut chars = key.chars();
    match (chars.next(), chars.next()) {
        (Some(c), None) => out.push_str(&escape_text(&c.to_string())),
        (None, _) => return Err(KeyError::Missing(word.to_owned())),
        _ => {
            let name = match *key {
                "enter" | "return" => "ENTER",
                "tab" => "TAB",
                "esc" | "escape" => "ESC",
                "backspace" => "BACKSPACE",
                "delete" | "del" => "DELETE",
                "home" => "HOME",
                "end" => "END",
                "pageup" => "PGUP",
                "pagedown" => "PGDN",
                "up" => "UP",
                "down" => "DOWN",
                "left" => "LEFT",
                "right" => "RIGHT",
                "space" => "SPACE",
                f if f.starts_with('f')
                    && f[1..].parse::<u8>().is_ok_and(|n| (1..=12).contains(&n)) =>
                {
                    out.push('{');
                    out.push_str(&f.to_uppercase());
                    out.push('}');
                    return Ok(out);
                }
                other => return Err(KeyError::Unknown(other.to_owned())),
            };
            out.push('{');
            out.push_str(name);
            out.push('}');
        }
    }
    Ok(out)
}
