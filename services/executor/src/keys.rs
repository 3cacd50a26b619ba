//! The key syntax `keyboard_input` accepts, as in pywinauto's `send_keys` (which the reference prompts
//! are written for), parsed into key-down/key-up strokes every backend replays.
//!
//! - plain characters are typed as themselves (spaces included, `\n` is Enter, `\t` is Tab);
//! - `{NAME}` presses a named key (`{ENTER}`, `{TAB}`, `{F5}`, `{VK_RETURN}`, ...), `{NAME n}` repeats it,
//!   `{NAME down}` / `{NAME up}` press or release only;
//! - `+`, `^`, `%` hold Shift, Control, Alt around the next character or `( ... )` group; `~` is Enter;
//!   `{+}`, `{^}`, `{%}`, `{~}`, `{(}`, `{)}`, `{{}`, `{}}` type those characters;
//! - a modifier named alone in braces (`{VK_CONTROL}c`) holds that modifier around the next character or
//!   group. pywinauto would tap the modifier on its own there, which is never what a prompt writing
//!   `{VK_CONTROL}c` means, so this parser does what the prompt means: Ctrl+C.

use thiserror::Error;

/// A key that is not a printable character.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum NamedKey {
    Enter,
    Tab,
    Escape,
    Backspace,
    Delete,
    Insert,
    Home,
    End,
    PageUp,
    PageDown,
    Left,
    Right,
    Up,
    Down,
    Space,
    CapsLock,
    NumLock,
    ScrollLock,
    PrintScreen,
    Pause,
    Apps,
    Shift,
    Control,
    Alt,
    Win,
    /// F1..=F24.
    F(u8),
}

impl NamedKey {
    /// True for keys that modify others (Shift, Control, Alt, Win).
    pub fn is_modifier(self) -> bool {
        matches!(self, Self::Shift | Self::Control | Self::Alt | Self::Win)
    }
}

/// A key to press: a named key or a character.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Key {
    /// A named key.
    Named(NamedKey),
    /// A character, typed as the text it produces (the backend chooses the keys and shift state).
    Char(char),
}

/// One key transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyStroke {
    /// The key.
    pub key: Key,
    /// True for press, false for release.
    pub down: bool,
}

/// Why a key string could not be parsed; the position is a character index.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum KeyParseError {
    /// `{` without its `}`.
    #[error("unclosed '{{' at position {0}")]
    UnclosedBrace(usize),
    /// An unknown name in braces.
    #[error("unknown key name '{name}' at position {pos}")]
    UnknownKey {
        /// The name as written.
        name: String,
        /// Where it starts.
        pos: usize,
    },
    /// A repeat count that is not a number in range.
    #[error("bad repeat count '{count}' at position {pos} (1..={max})")]
    BadRepeat {
        /// The count as written.
        count: String,
        /// Where the braces start.
        pos: usize,
        /// The largest count allowed.
        max: u32,
    },
    /// `(` without `)` or `)` without `(`.
    #[error("unbalanced parenthesis at position {0}")]
    UnbalancedParen(usize),
    /// A modifier at the end of the string with nothing to modify.
    #[error("modifier at position {0} has no key after it")]
    DanglingModifier(usize),
    /// More strokes than allowed.
    #[error("the key string expands to more than {0} key strokes")]
    TooLong(usize),
}

/// The largest `{KEY n}` repeat count.
pub const MAX_REPEAT: u32 = 1000;

/// Parses `input` into strokes; at most `max_strokes` strokes are produced.
pub fn parse_keys(input: &str, max_strokes: usize) -> Result<Vec<KeyStroke>, KeyParseError> {
    let chars: Vec<char> = input.chars().collect();
    let mut parser = Parser {
        chars: &chars,
        pos: 0,
        out: Vec::new(),
        max_strokes,
    };
    parser.sequence(false)?;
    Ok(parser.out)
}

struct Parser<'a> {
    chars: &'a [char],
    pos: usize,
    out: Vec<KeyStroke>,
    max_strokes: usize,
}

/// One parsed item of the key string.
enum Item {
    /// Strokes ready to emit.
    Strokes(Vec<KeyStroke>),
    /// A modifier to hold around the next unit.
    Modifier(NamedKey, usize),
    /// A `( ... )` group start.
    GroupStart,
    /// A `)`.
    GroupEnd(usize),
}

impl Parser<'_> {
    fn push(&mut self, strokes: Vec<KeyStroke>) -> Result<(), KeyParseError> {
        if self.out.len() + strokes.len() > self.max_strokes {
            return Err(KeyParseError::TooLong(self.max_strokes));
        }
        self.out.extend(strokes);
        Ok(())
    }

    /// Parses until the end (or the `)` closing a group when `in_group`); true when a `)` ended it.
    fn sequence(&mut self, in_group: bool) -> Result<bool, KeyParseError> {
        while self.pos < self.chars.len() {
            let start = self.pos;
            match self.item()? {
                Item::GroupEnd(p) => {
                    return if in_group {
                        Ok(true)
                    } else {
                        Err(KeyParseError::UnbalancedParen(p))
                    };
                }
                Item::Strokes(s) => self.push(s)?,
                Item::GroupStart => {
                    if !self.sequence(true)? {
                        return Err(KeyParseError::UnbalancedParen(start));
                    }
                }
                Item::Modifier(m, p) => self.modified(vec![m], p)?,
            }
        }
        Ok(false)
    }

    /// Emits the next unit (a key or a group) with `mods` held around it.
    fn modified(&mut self, mut mods: Vec<NamedKey>, at: usize) -> Result<(), KeyParseError> {
        loop {
            if self.pos >= self.chars.len() {
                return Err(KeyParseError::DanglingModifier(at));
            }
            let start = self.pos;
            match self.item()? {
                Item::Modifier(m, _) => mods.push(m),
                Item::GroupEnd(_) => return Err(KeyParseError::DanglingModifier(at)),
                Item::Strokes(s) => {
                    self.push(press(&mods))?;
                    self.push(s)?;
                    return self.push(release(&mods));
                }
                Item::GroupStart => {
                    self.push(press(&mods))?;
                    if !self.sequence(true)? {
                        return Err(KeyParseError::UnbalancedParen(start));
                    }
                    return self.push(release(&mods));
                }
            }
        }
    }

    fn item(&mut self) -> Result<Item, KeyParseError> {
        let start = self.pos;
        let c = self.chars[start];
        self.pos += 1;
        Ok(match c {
            '+' => Item::Modifier(NamedKey::Shift, start),
            '^' => Item::Modifier(NamedKey::Control, start),
            '%' => Item::Modifier(NamedKey::Alt, start),
            '~' | '\n' => Item::Strokes(tap(Key::Named(NamedKey::Enter), 1)),
            '\t' => Item::Strokes(tap(Key::Named(NamedKey::Tab), 1)),
            '\r' => Item::Strokes(Vec::new()),
            '(' => Item::GroupStart,
            ')' => Item::GroupEnd(start),
            '{' => self.braced(start)?,
            other => Item::Strokes(tap(Key::Char(other), 1)),
        })
    }

    /// Parses `{...}` whose `{` is at `start`.
    fn braced(&mut self, start: usize) -> Result<Item, KeyParseError> {
        // The first character after `{` belongs to the name even when it is `}` (so `{}}` works).
        let body_start = self.pos;
        if body_start >= self.chars.len() {
            return Err(KeyParseError::UnclosedBrace(start));
        }
        let close = self.chars[body_start + 1..]
            .iter()
            .position(|&c| c == '}')
            .map(|i| i + body_start + 1)
            .ok_or(KeyParseError::UnclosedBrace(start))?;
        let body: String = self.chars[body_start..close].iter().collect();
        self.pos = close + 1;
        let (name, arg) = match body.rsplit_once(' ') {
            Some((n, a)) if !n.is_empty() => (n, Some(a)),
            _ => (body.as_str(), None),
        };
        let key = key_by_name(name).ok_or_else(|| KeyParseError::UnknownKey {
            name: name.to_owned(),
            pos: start,
        })?;
        Ok(match arg.map(str::to_ascii_lowercase).as_deref() {
            Some("down") => Item::Strokes(vec![KeyStroke { key, down: true }]),
            Some("up") => Item::Strokes(vec![KeyStroke { key, down: false }]),
            Some(count) => {
                let n: u32 = count
                    .parse()
                    .ok()
                    .filter(|n| (1..=MAX_REPEAT).contains(n))
                    .ok_or_else(|| KeyParseError::BadRepeat {
                        count: count.to_owned(),
                        pos: start,
                        max: MAX_REPEAT,
                    })?;
                Item::Strokes(tap(key, n))
            }
            None => match key {
                Key::Named(m) if m.is_modifier() => Item::Modifier(m, start),
                _ => Item::Strokes(tap(key, 1)),
            },
        })
    }
}

fn tap(key: Key, times: u32) -> Vec<KeyStroke> {
    (0..times)
        .flat_map(|_| {
            [
                KeyStroke { key, down: true },
                KeyStroke { key, down: false },
            ]
        })
        .collect()
}

fn press(mods: &[NamedKey]) -> Vec<KeyStroke> {
    mods.iter()
        .map(|&m| KeyStroke {
            key: Key::Named(m),
            down: true,
        })
        .collect()
}

fn release(mods: &[NamedKey]) -> Vec<KeyStroke> {
    mods.iter()
        .rev()
        .map(|&m| KeyStroke {
            key: Key::Named(m),
            down: false,
        })
        .collect()
}

/// Looks a braced name up (case-insensitive), with pywinauto's names and its `VK_*` aliases.
fn key_by_name(name: &str) -> Option<Key> {
    let mut chars = name.chars();
    if let (Some(c), None) = (chars.next(), chars.next()) {
        return Some(Key::Char(c));
    }
    let upper = name.to_ascii_uppercase();
    let bare = upper.strip_prefix("VK_").unwrap_or(&upper);
    use NamedKey::*;
    let named = match bare {
        "ENTER" | "RETURN" => Enter,
        "TAB" => Tab,
        "ESC" | "ESCAPE" => Escape,
        "BACKSPACE" | "BS" | "BKSP" | "BACK" => Backspace,
        "DEL" | "DELETE" => Delete,
        "INS" | "INSERT" => Insert,
        "HOME" => Home,
        "END" => End,
        "PGUP" | "PRIOR" | "PAGEUP" => PageUp,
        "PGDN" | "NEXT" | "PAGEDOWN" => PageDown,
        "LEFT" => Left,
        "RIGHT" => Right,
        "UP" => Up,
        "DOWN" => Down,
        "SPACE" => Space,
        "CAPSLOCK" | "CAPITAL" => CapsLock,
        "NUMLOCK" => NumLock,
        "SCROLLLOCK" | "SCROLL" => ScrollLock,
        "PRTSC" | "SNAPSHOT" | "PRINT" => PrintScreen,
        "BREAK" | "PAUSE" => Pause,
        "APPS" => Apps,
        "SHIFT" | "LSHIFT" | "RSHIFT" => Shift,
        "CONTROL" | "CTRL" | "LCONTROL" | "RCONTROL" => Control,
        "MENU" | "ALT" | "LMENU" | "RMENU" => Alt,
        "LWIN" | "RWIN" | "WIN" => Win,
        f if f.starts_with('F') => {
            let n: u8 = f[1..].parse().ok().filter(|n| (1..=24).contains(n))?;
            F(n)
        }
        _ => return None,
    };
    Some(Key::Named(named))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(k: Key) -> KeyStroke {
        KeyStroke { key: k, down: true }
    }
    fn u(k: Key) -> KeyStroke {
        KeyStroke {
            key: k,
            down: false,
        }
    }
    const CTRL: Key = Key::Named(NamedKey::Control);
    const SHIFT: Key = Key::Named(NamedKey::Shift);
    const ENTER: Key = Key::Named(NamedKey::Enter);

    fn p(s: &str) -> Vec<KeyStroke> {
        parse_keys(s, 10_000).unwrap()
    }

    #[test]
    fn plain_text_and_named_keys() {
        let a = Key::Char('a');
        let space = Key::Char(' ');
        assert_eq!(p("a "), vec![d(a), u(a), d(space), u(space)]);
        assert_eq!(p("{ENTER}"), vec![d(ENTER), u(ENTER)]);
        assert_eq!(p("~"), p("{VK_RETURN}"));
        assert_eq!(p("{tab 2}").len(), 4);
        assert_eq!(
            p("{F5}"),
            vec![d(Key::Named(NamedKey::F(5))), u(Key::Named(NamedKey::F(5)))]
        );
    }

    #[test]
    fn modifiers_hold_around_the_next_unit() {
        let c = Key::Char('c');
        let expect = vec![d(CTRL), d(c), u(c), u(CTRL)];
        assert_eq!(p("^c"), expect);
        assert_eq!(p("{VK_CONTROL}c"), expect);
        assert_eq!(p("{VK_CONTROL down}c{VK_CONTROL up}"), expect);
        let a = Key::Char('a');
        let b = Key::Char('b');
        assert_eq!(p("+(ab)"), vec![d(SHIFT), d(a), u(a), d(b), u(b), u(SHIFT)]);
        assert_eq!(
            p("^+a"),
            vec![d(CTRL), d(SHIFT), d(a), u(a), u(SHIFT), u(CTRL)]
        );
    }

    #[test]
    fn escaped_specials() {
        assert_eq!(p("{+}"), vec![d(Key::Char('+')), u(Key::Char('+'))]);
        assert_eq!(p("{}}"), vec![d(Key::Char('}')), u(Key::Char('}'))]);
        assert_eq!(p("{{}"), vec![d(Key::Char('{')), u(Key::Char('{'))]);
        assert_eq!(p("{(}{)}").len(), 4);
    }

    #[test]
    fn errors_say_what_and_where() {
        assert_eq!(
            parse_keys("ab{ENTER", 100),
            Err(KeyParseError::UnclosedBrace(2))
        );
        assert!(matches!(
            parse_keys("{NOPE}", 100),
            Err(KeyParseError::UnknownKey { .. })
        ));
        assert!(matches!(
            parse_keys("{TAB 0}", 100),
            Err(KeyParseError::BadRepeat { .. })
        ));
        assert!(matches!(
            parse_keys("{TAB x}", 100),
            Err(KeyParseError::BadRepeat { .. })
        ));
        assert_eq!(
            parse_keys("a)", 100),
            Err(KeyParseError::UnbalancedParen(1))
        );
        assert!(matches!(
            parse_keys("+(ab", 100),
            Err(KeyParseError::UnbalancedParen(_))
        ));
        assert_eq!(
            parse_keys("^", 100),
            Err(KeyParseError::DanglingModifier(0))
        );
        assert_eq!(parse_keys("{TAB 100}", 10), Err(KeyParseError::TooLong(10)));
    }
}
