//! Learning from an earlier task: when a task file carries no demonstration, the stand-in follows an
//! experience the agent retrieved into the prompt (`[Retrieved knowledge]`, the agent's deterministic
//! summary of a finished task: its request, subtasks and steps with each control's selector and the
//! text typed) — and nothing else. Without a retrieved experience that fits, it cannot act and says so.
//!
//! - **Which experience**: among the retrieved items of kind "an earlier task of yours" or "a
//!   demonstration" (a person's recording, `ufo record`, summarised in the same form) that are whole
//!   (not cut by the prompt's budget) and finished, the one whose request is most like the prompt's
//!   `[Request]` (shared words in order, at least [`MIN_SIMILARITY`]); an AppAgent also needs the
//!   experience to have the subtask it was given.
//! - **New texts**: the two requests are compared word by word; where they differ (the old request's
//!   "Apollo 11" where the new one says "Gemini 4"), the new words replace the old in the experience's
//!   typed texts, control names, window titles and subtask words (whole words only; an equal number of
//!   differing words are also paired one by one: "Ada Lovelace" → "Grace Hopper" turns a typed "Ada" into
//!   "Grace"). Everything else is done exactly as the earlier task did it.
//! - **The plan**: each `HostAgent: select_application_window on Window "<title>"` starts the next of the
//!   experience's subtasks in that window (a `launch_application` before it launches the program); the
//!   AppAgent's successful actions (clicks, keys, set text, reads) become the subtask's steps, each on the
//!   control its selector names (by control type and name). Failed actions are left out.
//!
//! The result is a demonstration in the shape a task file's, followed by [`super::follow`] as usual.

use crate::demo::{Action, Kind, Nth, Step, Target, escape_text};
use crate::task::Subtask;

/// How alike the experience's request and the prompt's must be (shared words in order, as a fraction
/// of both: 2·LCS / (a + b)).
pub const MIN_SIMILARITY: f64 = 0.5;

/// The header a retrieved earlier task carries (`services/agent/src/store/knowledge.rs`).
const EXPERIENCE: &str = "(an earlier task of yours)";

/// The header a retrieved demonstration carries: a person's recording (`ufo record`), summarised in the
/// same form as an earlier task (`services/agent/src/runner/demonstration.rs`).
const DEMONSTRATION: &str = "(a demonstration)";

/// One action line of an experience.
#[derive(Debug, Clone, PartialEq)]
struct Line {
    agent: String,
    function: String,
    args: Vec<(String, String)>,
    /// The control's type and name (type "" when only a name was recorded).
    target: Option<(String, String)>,
    ok: bool,
}

impl Line {
    fn arg(&self, key: &str) -> Option<&str> {
        self.args
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// An earlier task as the prompt quoted it.
#[derive(Debug, Clone, PartialEq)]
pub struct Experience {
    /// Its citation (`task:<id>`).
    pub source: String,
    /// Its request.
    pub request: String,
    finished: bool,
    /// Cut by the prompt's budget or the summary's length, or a text cut short: not followable.
    cut: bool,
    subtasks: Vec<String>,
    lines: Vec<Line>,
}

/// Reads a string in Rust's debug quoting (`"a \"b\""`) at the start of `s`; returns it and the rest,
/// and whether it was cut (`"…"…`, the summary's mark for a long text).
fn quoted(s: &str) -> Option<(String, &str, bool)> {
    let mut chars = s.strip_prefix('"')?.char_indices();
    let mut out = String::new();
    let body = &s[1..];
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => {
                let rest = &body[i + 1..];
                return Some(match rest.strip_prefix('…') {
                    Some(after) => (out, after, true),
                    None => (out, rest, false),
                });
            }
            '\\' => match chars.next()?.1 {
                'n' => out.push('\n'),
                'r' => out.push('\r'),
                't' => out.push('\t'),
                '0' => out.push('\0'),
                'u' => {
                    let (_, open) = chars.next()?;
                    if open != '{' {
                        return None;
                    }
                    let mut hex = String::new();
                    for (_, h) in chars.by_ref() {
                        if h == '}' {
                            break;
                        }
                        hex.push(h);
                    }
                    out.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
                }
                other => out.push(other),
            },
            c => out.push(c),
        }
    }
    None
}

/// `N. AGENT: FUNCTION key=value… [on TYPE "name" …] → OUTCOME`.
fn parse_line(line: &str) -> Option<(Line, bool)> {
    let (n, rest) = line.split_once(". ")?;
    if n.is_empty() || !n.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let (agent, rest) = rest.split_once(": ")?;
    let (function, mut rest) = rest.split_once(' ').unwrap_or((rest, ""));
    let mut out = Line {
        agent: agent.to_owned(),
        function: function.to_owned(),
        args: Vec::new(),
        target: None,
        ok: false,
    };
    let mut cut = false;
    loop {
        rest = rest.trim_start();
        if let Some(outcome) = rest.strip_prefix("→ ") {
            out.ok = outcome.trim() == "ok";
            return Some((out, cut));
        }
        if let Some(after) = rest.strip_prefix("on ") {
            // `on Type "name" …` or `on "name"` (a target recorded without a selector).
            let (kind, after) = if after.starts_with('"') {
                ("", after)
            } else {
                after.split_once(' ')?
            };
            let (name, after, c) = quoted(after)?;
            cut |= c;
            out.target = Some((kind.to_owned(), name));
            // The selector's process, ancestors and sibling index: words and quoted names up to `→`.
            rest = after;
            loop {
                rest = rest.trim_start();
                if rest.is_empty() || rest.starts_with("→ ") {
                    break;
                }
                if rest.starts_with('"') {
                    rest = quoted(rest)?.1;
                } else {
                    rest = rest.split_once(' ').map_or("", |(_, r)| r);
                }
            }
            continue;
        }
        let (key, after) = rest.split_once('=')?;
        if key.is_empty() || key.contains(' ') {
            return None;
        }
        let (value, after) = if after.starts_with('"') {
            let (v, a, c) = quoted(after)?;
            cut |= c;
            (v, a)
        } else {
            let (v, a) = after.split_once(' ').unwrap_or((after, ""));
            (v.to_owned(), a)
        };
        out.args.push((key.to_owned(), value));
        rest = after;
    }
}

/// The earlier tasks quoted in a prompt's knowledge section, in the order retrieved.
pub fn experiences(knowledge: &str) -> Vec<Experience> {
    let mut out = Vec::new();
    for item in knowledge.split("\n<<<[").skip(1) {
        let Some((head, body)) = item.split_once('\n') else {
            continue;
        };
        if !head.contains(EXPERIENCE) && !head.contains(DEMONSTRATION) {
            continue;
        }
        let source = head
            .split_once("source: ")
            .map_or("", |(_, s)| s.split(' ').next().unwrap_or(""))
            .to_owned();
        let (body, closed) = match body.rsplit_once("\n>>>") {
            Some((b, _)) => (b, true),
            None => (body, false),
        };
        let mut e = Experience {
            source,
            request: String::new(),
            finished: false,
            cut: !closed || body.ends_with('…') || body.contains("more lines left out)"),
            subtasks: Vec::new(),
            lines: Vec::new(),
        };
        let mut part = "";
        for line in body.lines() {
            if let Some(r) = line.strip_prefix("Request: ") {
                match quoted(r) {
                    Some((q, _, c)) => {
                        e.request = q;
                        e.cut |= c;
                    }
                    None => e.cut = true,
                }
            } else if let Some(o) = line.strip_prefix("Outcome: ") {
                e.finished = o.starts_with("finished");
            } else if line == "Subtasks:" || line == "Steps:" {
                part = line;
            } else if part == "Subtasks:" {
                let what = line
                    .split_once(". ")
                    .and_then(|(_, r)| quoted(r))
                    .map(|(q, _, c)| {
                        e.cut |= c;
                        q
                    });
                match what {
                    Some(w) => e.subtasks.push(w),
                    None => e.cut = true,
                }
            } else if part == "Steps:" && line != "(no action)" {
                match parse_line(line) {
                    Some((l, c)) => {
                        e.cut |= c;
                        e.lines.push(l);
                    }
                    None => e.cut = true,
                }
            }
        }
        out.push(e);
    }
    out
}

/// Words and punctuation of a request, for comparing two requests; each with whether a space came
/// before it (to put a run of them back together as written).
fn tokens(s: &str) -> Vec<(String, bool)> {
    const OPEN: &[char] = &['"', '\'', '(', '‘', '“'];
    const CLOSE: &[char] = &['.', ',', ';', ':', '!', '?', '"', '\'', ')', '’', '”'];
    let mut out = Vec::new();
    for word in s.split_whitespace() {
        let mut spaced = true;
        let mut push = |t: String, out: &mut Vec<(String, bool)>| {
            out.push((t, spaced));
            spaced = false;
        };
        let mut w = word;
        while let Some(c) = w.chars().next().filter(|c| OPEN.contains(c)) {
            push(c.to_string(), &mut out);
            w = &w[c.len_utf8()..];
        }
        let mut tail = Vec::new();
        while let Some(c) = w.chars().next_back().filter(|c| CLOSE.contains(c)) {
            tail.push(c.to_string());
            w = &w[..w.len() - c.len_utf8()];
        }
        if !w.is_empty() {
            push(w.to_owned(), &mut out);
        }
        for t in tail.into_iter().rev() {
            push(t, &mut out);
        }
    }
    out
}

/// A run of tokens as written.
fn join(run: &[(String, bool)]) -> String {
    let mut out = String::new();
    for (i, (t, spaced)) in run.iter().enumerate() {
        if i > 0 && *spaced {
            out.push(' ');
        }
        out.push_str(t);
    }
    out
}

/// The longest common subsequence of two token lists, as index pairs.
fn lcs(a: &[(String, bool)], b: &[(String, bool)]) -> Vec<(usize, usize)> {
    let mut t = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            t[i][j] = if a[i].0 == b[j].0 {
                t[i + 1][j + 1] + 1
            } else {
                t[i + 1][j].max(t[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < a.len() && j < b.len() {
        if a[i].0 == b[j].0 {
            out.push((i, j));
            i += 1;
            j += 1;
        } else if t[i + 1][j] >= t[i][j + 1] {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

/// How alike two requests are: 2·(shared words in order) / (words of both); 0..=1.
pub fn similarity(a: &str, b: &str) -> f64 {
    let (a, b) = (tokens(a), tokens(b));
    if a.is_empty() && b.is_empty() {
        return 1.0;
    }
    2.0 * lcs(&a, &b).len() as f64 / (a.len() + b.len()) as f64
}

/// What the new request says instead of the old one's words: old text → new text.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Substitution(Vec<(String, String)>);

impl Substitution {
    /// The differences between the `old` request (the experience's) and the `new` one (the prompt's).
    pub fn between(old: &str, new: &str) -> Self {
        let (a, b) = (tokens(old), tokens(new));
        let mut pairs = Vec::new();
        let mut hunk = |x: &[(String, bool)], y: &[(String, bool)]| {
            if x.is_empty() || y.is_empty() {
                return;
            }
            pairs.push((join(x), join(y)));
            if x.len() == y.len() && x.len() > 1 {
                pairs.extend(
                    x.iter()
                        .map(|t| t.0.clone())
                        .zip(y.iter().map(|t| t.0.clone())),
                );
            }
        };
        let (mut i, mut j) = (0, 0);
        for (k, l) in lcs(&a, &b).into_iter().chain([(a.len(), b.len())]) {
            hunk(&a[i..k], &b[j..l]);
            (i, j) = (k + 1, l + 1);
        }
        // Longest first, so "Ada Lovelace" wins over "Ada"; one pair per old text.
        pairs.sort_by(|x, y| y.0.len().cmp(&x.0.len()).then(x.0.cmp(&y.0)));
        pairs.dedup_by(|x, y| x.0 == y.0);
        Self(pairs)
    }

    /// `text` with every whole-word occurrence of an old text replaced by its new text, in one pass.
    pub fn apply(&self, text: &str) -> String {
        Self::replace(text, self.0.iter().map(|(o, n)| (o.clone(), n.clone())))
    }

    /// The same for keys in the executor's key syntax (the texts compared and put in escaped).
    pub fn apply_keys(&self, keys: &str) -> String {
        Self::replace(
            keys,
            self.0.iter().map(|(o, n)| (escape_text(o), escape_text(n))),
        )
    }

    fn replace(text: &str, pairs: impl Iterator<Item = (String, String)>) -> String {
        let pairs: Vec<(String, String)> = pairs.collect();
        let word = |c: Option<char>| c.is_some_and(char::is_alphanumeric);
        let mut out = String::with_capacity(text.len());
        let mut i = 0;
        'scan: while i < text.len() {
            let before = text[..i].chars().next_back();
            if !word(before) {
                for (old, new) in &pairs {
                    if text[i..].starts_with(old.as_str())
                        && !word(text[i + old.len()..].chars().next())
                    {
                        out.push_str(new);
                        i += old.len();
                        continue 'scan;
                    }
                }
            }
            let Some(c) = text[i..].chars().next() else {
                break;
            };
            out.push(c);
            i += c.len_utf8();
        }
        out
    }
}

/// The kind of control a selector's control type is.
fn kind_of(control_type: &str) -> Kind {
    [
        Kind::Edit,
        Kind::Button,
        Kind::MenuItem,
        Kind::Menu,
        Kind::CheckBox,
        Kind::RadioButton,
        Kind::ComboBox,
        Kind::Row,
        Kind::Tab,
        Kind::Slider,
        Kind::SpinButton,
        Kind::Text,
        Kind::Document,
        Kind::ScreenText,
    ]
    .into_iter()
    .find(|k| k.control_types().contains(&control_type))
    .unwrap_or(Kind::Any)
}

/// A recorded action the stand-in cannot follow by name.
#[derive(Debug, thiserror::Error)]
enum Unfollowable {
    /// A function it has no name-based equivalent for (coordinates, drags, the wheel...).
    #[error("its step `{0}` is not one the stand-in can follow by name")]
    Function(String),
    /// An action on a control that names none.
    #[error("its step `{0}` names no control")]
    NoControl(String),
}

/// One AppAgent action as a demonstration step.
fn step_of(line: &Line, with: &Substitution) -> Result<Step, Unfollowable> {
    let target = line.target.as_ref().map(|(kind, name)| Target {
        kind: kind_of(kind),
        name: with.apply(name),
        nth: Nth::Index(1),
    });
    let action = match line.function.as_str() {
        "click_input" if line.arg("double") == Some("true") => Action::DoubleClick,
        "click_input" => Action::Click,
        "keyboard_input" => Action::Press(with.apply_keys(line.arg("keys").unwrap_or_default())),
        "set_edit_text" => Action::SetText(with.apply(line.arg("text").unwrap_or_default())),
        "texts" => Action::Read,
        other => return Err(Unfollowable::Function(other.to_owned())),
    };
    if target.is_none() && !matches!(action, Action::Press(_)) {
        return Err(Unfollowable::NoControl(line.function.clone()));
    }
    let on = target
        .as_ref()
        .map_or_else(String::new, |t| format!(" on the {t}"));
    let what = match &action {
        Action::Press(k) => format!("press {k:?}"),
        Action::SetText(s) => format!("set the text {s:?}"),
        Action::DoubleClick => "double-click".to_owned(),
        Action::Read => "read".to_owned(),
        _ => "click".to_owned(),
    };
    Ok(Step {
        text: format!("{what}{on} (as the earlier task did)"),
        action,
        target,
    })
}

impl Experience {
    /// The experience as a demonstration for the `request` it is to help with.
    pub fn plan(&self, request: &str) -> Result<Vec<Subtask>, String> {
        let with = Substitution::between(&self.request, request);
        let mut plan: Vec<Subtask> = Vec::new();
        let mut launch = None;
        for line in self.lines.iter().filter(|l| l.ok) {
            if line.agent == "HostAgent" {
                match line.function.as_str() {
                    "launch_application" => launch = line.arg("name").map(str::to_owned),
                    "select_application_window" => {
                        let Some(what) = self.subtasks.get(plan.len()) else {
                            return Err(format!(
                                "{} selects more windows than it has subtasks",
                                self.source
                            ));
                        };
                        let title = line.target.as_ref().map_or("", |(_, n)| n.as_str());
                        if title.trim().is_empty() {
                            return Err(format!("{} selects a window with no title", self.source));
                        }
                        plan.push(Subtask {
                            app: with.apply(title),
                            launch: launch.take(),
                            launch_args: Vec::new(),
                            what: with.apply(what),
                            steps: Vec::new(),
                            result: None,
                            api: Vec::new(),
                        });
                    }
                    _ => {}
                }
                continue;
            }
            let Some(sub) = plan.last_mut() else {
                return Err(format!("{} acts before it selects a window", self.source));
            };
            sub.steps
                .push(step_of(line, &with).map_err(|e| format!("{}: {e}", self.source))?);
        }
        if let Some(empty) = plan.iter().find(|s| s.steps.is_empty()) {
            return Err(format!(
                "{}: its subtask {:?} has no successful action",
                self.source, empty.what
            ));
        }
        if plan.is_empty() {
            return Err(format!("{} selects no window", self.source));
        }
        Ok(plan)
    }
}

/// The demonstration a task without one follows: from the retrieved experience most like `request`
/// (for an AppAgent, `subtask` must be one of its subtasks). Err says why there is nothing to follow.
pub fn plan_from(
    knowledge: &str,
    request: &str,
    subtask: Option<&str>,
) -> Result<Vec<Subtask>, String> {
    if knowledge.trim().is_empty() {
        return Err(
            "the task has no demonstration and the prompt has no retrieved knowledge: \
                    no earlier task to follow"
                .to_owned(),
        );
    }
    let all = experiences(knowledge);
    if all.is_empty() {
        return Err(
            "the task has no demonstration and no earlier task of this user was \
                    retrieved into the prompt"
                .to_owned(),
        );
    }
    let mut why = Vec::new();
    let mut best: Option<(f64, Vec<Subtask>)> = None;
    for e in &all {
        let score = similarity(&e.request, request);
        let plan = if !e.finished {
            Err(format!("{} did not finish", e.source))
        } else if e.cut {
            Err(format!("{} is cut short in the prompt", e.source))
        } else if score < MIN_SIMILARITY {
            Err(format!(
                "{} asked {:?} (similarity {score:.2} < {MIN_SIMILARITY})",
                e.source, e.request
            ))
        } else {
            e.plan(request).and_then(|plan| match subtask {
                Some(s) if !plan.iter().any(|p| p.what == s) => {
                    Err(format!("{} has no subtask {s:?}", e.source))
                }
                _ => Ok(plan),
            })
        };
        match plan {
            Ok(plan) if best.as_ref().is_none_or(|(b, _)| score > *b) => best = Some((score, plan)),
            Ok(_) => {}
            Err(e) => why.push(e),
        }
    }
    best.map(|(_, plan)| plan).ok_or_else(|| {
        format!(
            "the task has no demonstration and no retrieved earlier task fits: {}",
            why.join("; ")
        )
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
