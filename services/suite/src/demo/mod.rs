//! Demonstration steps, written by name the way a person would say them, parsed into what the model
//! stand-in does:
//!
//! - `click the menu item named 'Save As…'` (also `double-click`, and `select` for rows and tabs)
//! - `type 'hello' into the text field labelled 'Name'` (`type 'a\tb\n'` alone: where the focus is)
//! - `set the text field named 'Name' to 'Otto'`
//! - `press ctrl+s`, `press down down enter`, `press end in the slider named 'Volume'`
//! - `read the text named 'Result'` (its text becomes the subtask's result)
//! - `wait for the button named 'OK'` (look again until it is listed; no action)
//!
//! A target is `[the] [first|second|…|2nd|last] <kind> named|labelled|called '<name>'`; kinds map onto the
//! control types the agent's control list shows. Quotes are `'…'` or `"…"`; a quote inside is doubled.
//! `{result}` in typed or set text, or in a control's name, is the value the HostAgent passed with the
//! subtask.

/// Why a step is not understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StepError {
    /// The sentence does not start with a known verb.
    #[error(
        "unknown verb in {0:?}: start with click, double-click, select, type, set, press, read or wait for"
    )]
    Verb(String),
    /// Something is missing or extra.
    #[error("{message} in {step:?}")]
    Shape {
        /// What is wrong.
        message: String,
        /// The step.
        step: String,
    },
}

/// A kind of control, as a person names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Any control type.
    Any,
    /// A menu (a menu bar entry).
    Menu,
    /// A menu item.
    MenuItem,
    /// A button (push or toggle).
    Button,
    /// A check box.
    CheckBox,
    /// A radio button.
    RadioButton,
    /// A text field.
    Edit,
    /// A combo box.
    ComboBox,
    /// A row, cell or list item.
    Row,
    /// A notebook tab.
    Tab,
    /// A slider.
    Slider,
    /// A spin button.
    SpinButton,
    /// A label or static text.
    Text,
    /// A document.
    Document,
    /// Text found on the screen by visual grounding (a window without accessibility).
    ScreenText,
}

/// Words naming each kind, longest first where one is a prefix of another.
const KINDS: &[(&str, Kind)] = &[
    ("screen text", Kind::ScreenText),
    ("menu item", Kind::MenuItem),
    ("menu", Kind::Menu),
    ("toggle button", Kind::Button),
    ("radio button", Kind::RadioButton),
    ("button", Kind::Button),
    ("check box", Kind::CheckBox),
    ("checkbox", Kind::CheckBox),
    ("text field", Kind::Edit),
    ("field", Kind::Edit),
    ("entry", Kind::Edit),
    ("combo box", Kind::ComboBox),
    ("list item", Kind::Row),
    ("row", Kind::Row),
    ("cell", Kind::Row),
    ("tab", Kind::Tab),
    ("slider", Kind::Slider),
    ("spin button", Kind::SpinButton),
    ("label", Kind::Text),
    ("text", Kind::Text),
    ("document", Kind::Document),
    ("control", Kind::Any),
];

impl Kind {
    /// The control types (as in the prompt's control list) this kind matches; empty for any.
    pub fn control_types(self) -> &'static [&'static str] {
        match self {
            Self::Any => &[],
            Self::Menu => &["Menu"],
            Self::MenuItem => &["MenuItem"],
            Self::Button => &["Button"],
            Self::CheckBox => &["CheckBox"],
            Self::RadioButton => &["RadioButton"],
            Self::Edit => &["Edit"],
            Self::ComboBox => &["ComboBox"],
            Self::Row => &["ListItem", "TreeItem", "DataItem"],
            Self::Tab => &["TabItem"],
            Self::Slider => &["Slider"],
            Self::SpinButton => &["Spinner"],
            Self::Text => &["Text"],
            Self::Document => &["Document", "Edit"],
            Self::ScreenText => &["OcrText", "GroundedIcon"],
        }
    }

    /// Whether a control of type `control_type` is of this kind.
    pub fn matches(self, control_type: &str) -> bool {
        let types = self.control_types();
        types.is_empty() || types.contains(&control_type)
    }

    /// The words for it.
    pub fn word(self) -> &'static str {
        match self {
            Self::Any => "control",
            Self::Menu => "menu",
            Self::MenuItem => "menu item",
            Self::Button => "button",
            Self::CheckBox => "check box",
            Self::RadioButton => "radio button",
            Self::Edit => "text field",
            Self::ComboBox => "combo box",
            Self::Row => "row",
            Self::Tab => "tab",
            Self::Slider => "slider",
            Self::SpinButton => "spin button",
            Self::Text => "text",
            Self::Document => "document",
            Self::ScreenText => "screen text",
        }
    }
}

/// Which of several controls with the same kind and name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nth {
    /// 1-based, in the order of the control list.
    Index(usize),
    /// The last one.
    Last,
}

/// The control a step acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Its kind.
    pub kind: Kind,
    /// Its name, exactly as listed.
    pub name: String,
    /// Which one.
    pub nth: Nth,
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.nth {
            Nth::Index(1) => {}
            Nth::Index(n) => write!(f, "#{n} ")?,
            Nth::Last => f.write_str("last ")?,
        }
        write!(f, "{} {:?}", self.kind.word(), self.name)
    }
}

/// What a step does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Click it (`click`, `select`).
    Click,
    /// Double-click it.
    DoubleClick,
    /// Focus it and type this text (a person's characters, not key syntax).
    Type(String),
    /// Replace its text.
    SetText(String),
    /// Press keys, already in the executor's key syntax (pywinauto `send_keys`).
    Press(String),
    /// Read its text.
    Read,
    /// Nothing: wait until it is listed.
    WaitFor,
}

/// One demonstration step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The sentence as written.
    pub text: String,
    /// What to do.
    pub action: Action,
    /// On what (None only for `press` and `type` without a control).
    pub target: Option<Target>,
}

mod keys;

use keys::combo;
pub use keys::escape_text;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Word(String),
    Quoted(String),
}

fn tokens(s: &str) -> Result<Vec<Token>, String> {
    let mut out = Vec::new();
    let chars: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '\'' || c == '"' {
            let mut text = String::new();
            i += 1;
            loop {
                match chars.get(i) {
                    None => return Err(format!("unclosed {c} quote")),
                    Some(&q) if q == c && chars.get(i + 1) == Some(&c) => {
                        text.push(c);
                        i += 2;
                    }
                    Some(&q) if q == c => {
                        i += 1;
                        break;
                    }
                    Some(&q) => {
                        text.push(q);
                        i += 1;
                    }
                }
            }
            out.push(Token::Quoted(text));
        } else {
            let start = i;
            while i < chars.len() && !chars[i].is_whitespace() && chars[i] != '\'' {
                i += 1;
            }
            out.push(Token::Word(
                chars[start..i].iter().collect::<String>().to_lowercase(),
            ));
        }
    }
    Ok(out)
}

fn ordinal(word: &str) -> Option<Nth> {
    let n = match word {
        "first" => 1,
        "second" => 2,
        "third" => 3,
        "fourth" => 4,
        "fifth" => 5,
        "sixth" => 6,
        "last" => return Some(Nth::Last),
        w => {
            let digits = w
                .strip_suffix("st")
                .or_else(|| w.strip_suffix("nd"))
                .or_else(|| w.strip_suffix("rd"))
                .or_else(|| w.strip_suffix("th"))?;
            digits.parse().ok().filter(|n| *n > 0)?
        }
    };
    Some(Nth::Index(n))
}

struct Cursor<'a> {
    toks: &'a [Token],
    pos: usize,
    step: &'a str,
}

impl Cursor<'_> {
    fn err(&self, message: impl Into<String>) -> StepError {
        StepError::Shape {
            message: message.into(),
            step: self.step.to_owned(),
        }
    }

    fn word(&mut self, w: &str) -> bool {
        if matches!(self.toks.get(self.pos), Some(Token::Word(x)) if x == w) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn quoted(&mut self, what: &str) -> Result<String, StepError> {
        match self.toks.get(self.pos) {
            Some(Token::Quoted(q)) => {
                self.pos += 1;
                Ok(q.clone())
            }
            _ => Err(self.err(format!("expected {what} in quotes"))),
        }
    }

    fn target(&mut self) -> Result<Target, StepError> {
        self.word("the");
        let nth = match self.toks.get(self.pos) {
            Some(Token::Word(w)) => ordinal(w).inspect(|_| self.pos += 1),
            _ => None,
        }
        .unwrap_or(Nth::Index(1));
        let mut words = Vec::new();
        while let Some(Token::Word(w)) = self.toks.get(self.pos) {
            if matches!(w.as_str(), "named" | "labelled" | "labeled" | "called") {
                break;
            }
            words.push(w.as_str());
            self.pos += 1;
        }
        let phrase = words.join(" ");
        let kind = KINDS
            .iter()
            .find(|(w, _)| *w == phrase)
            .map(|(_, k)| *k)
            .ok_or_else(|| {
                self.err(format!(
                    "unknown kind of control {phrase:?} (known: {})",
                    KINDS.iter().map(|(w, _)| *w).collect::<Vec<_>>().join(", ")
                ))
            })?;
        if !(self.word("named")
            || self.word("labelled")
            || self.word("labeled")
            || self.word("called"))
        {
            return Err(self.err("expected `named '<name>'` after the kind of control"));
        }
        let name = self.quoted("the control's name")?;
        Ok(Target { kind, name, nth })
    }

    fn end(&self) -> Result<(), StepError> {
        if self.pos < self.toks.len() {
            return Err(self.err("unexpected words at the end"));
        }
        Ok(())
    }
}

/// The placeholder for the value the HostAgent passes with the subtask.
pub const VALUE: &str = "{result}";

impl Step {
    /// Parses one sentence.
    pub fn parse(text: &str) -> Result<Self, StepError> {
        let toks = tokens(text).map_err(|message| StepError::Shape {
            message,
            step: text.to_owned(),
        })?;
        let mut c = Cursor {
            toks: &toks,
            pos: 0,
            step: text,
        };
        let step = |action, target| Self {
            text: text.trim().to_owned(),
            action,
            target,
        };
        let parsed = if c.word("click") || c.word("select") {
            step(Action::Click, Some(c.target()?))
        } else if c.word("double-click") {
            step(Action::DoubleClick, Some(c.target()?))
        } else if c.word("type") {
            let typed = c.quoted("the text to type")?;
            // Without `into`: typed where the keyboard focus is (a spreadsheet's current cell).
            let target = if c.word("into") {
                Some(c.target()?)
            } else {
                None
            };
            step(Action::Type(typed), target)
        } else if c.word("set") {
            let target = c.target()?;
            if !c.word("to") {
                return Err(c.err("expected `to '<text>'`"));
            }
            step(Action::SetText(c.quoted("the text")?), Some(target))
        } else if c.word("press") {
            let mut keys = String::new();
            while let Some(t) = toks.get(c.pos) {
                let word = match t {
                    Token::Word(w) if w == "in" || w == "into" => break,
                    Token::Word(w) | Token::Quoted(w) => w.to_lowercase(),
                };
                c.pos += 1;
                for w in word.split_whitespace() {
                    keys.push_str(&combo(w).map_err(|m| c.err(m.to_string()))?);
                }
            }
            if keys.is_empty() {
                return Err(c.err("expected the keys to press"));
            }
            let target = if c.word("in") || c.word("into") {
                Some(c.target()?)
            } else {
                None
            };
            step(Action::Press(keys), target)
        } else if c.word("read") {
            step(Action::Read, Some(c.target()?))
        } else if c.word("wait") {
            if !c.word("for") {
                return Err(c.err("expected `wait for <control>`"));
            }
            step(Action::WaitFor, Some(c.target()?))
        } else {
            return Err(StepError::Verb(text.trim().to_owned()));
        };
        c.end()?;
        Ok(parsed)
    }

    /// Replaces `{dir}` in its texts.
    pub fn fill(&mut self, dir: &str) {
        self.text = crate::task::fill(&self.text, dir);
        match &mut self.action {
            Action::Type(s) | Action::SetText(s) => *s = crate::task::fill(s, dir),
            _ => {}
        }
    }

    /// Whether it names `{result}` (the value the HostAgent passes with the subtask).
    pub fn uses_value(&self) -> bool {
        let text =
            matches!(&self.action, Action::Type(s) | Action::SetText(s) if s.contains(VALUE));
        text || self.target.as_ref().is_some_and(|t| t.name.contains(VALUE))
    }

    /// The step with `{result}` replaced by `value` in its text and its control's name.
    pub fn with_value(&self, value: &str) -> Self {
        let mut step = self.clone();
        match &mut step.action {
            Action::Type(s) | Action::SetText(s) => *s = s.replace(VALUE, value),
            _ => {}
        }
        if let Some(t) = &mut step.target {
            t.name = t.name.replace(VALUE, value);
        }
        step.text = step.text.replace(VALUE, value);
        step
    }

    /// The executor tool it calls (None for `wait for`).
    pub fn function(&self) -> Option<&'static str> {
        Some(match self.action {
            Action::Click | Action::DoubleClick => "click_input",
            Action::Type(_) | Action::Press(_) => "keyboard_input",
            Action::SetText(_) => "set_edit_text",
            Action::Read => "texts",
            Action::WaitFor => return None,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
