//! Consent by consequence: the operator's policy classifies every action a model proposes as `allow`
//! (runs), `confirm` (held until a person approves, whatever the task's confirm policy says) or `deny`
//! (refused before it reaches an executor, recorded as `denied` with the reason, which the model reads in
//! its next prompt so it can choose another way).
//!
//! An action's verdict is the strictest of: its tool's verdict (`tools`, else `default`), every rule
//! whose pattern matches one of its argument values, and — for `launch_application` — each argument not
//! matched by a rule: `allow` when it is an absolute path inside a launch directory, else
//! `launch_arguments_elsewhere` (`deny` unless the operator says otherwise). Without a policy file every
//! tool is allowed and launch arguments are denied (no launch directory is declared). A task's
//! `confirm_policy` can only add holds ([`hold`]): `always` holds every action, the model's CONFIRM holds
//! unless the task says `never`, and the operator's `confirm` holds in every case.
//!
//! Layout: [`file`] reads and checks the policy file; [`paths`] judges launch paths by their text.

pub mod file;
pub mod paths;

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value, json};

pub use file::PolicyError;

/// What the policy says about an action. Ordered from least to most strict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Run it.
    Allow,
    /// Hold it until a person approves.
    Confirm,
    /// Refuse it.
    Deny,
}

impl Verdict {
    /// The word the policy file uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Confirm => "confirm",
            Self::Deny => "deny",
        }
    }
}

/// A verdict for argument values matching a pattern.
#[derive(Debug, Clone)]
pub struct Rule {
    /// The tool (`*`: any).
    pub tool: String,
    /// The argument whose values are matched.
    pub argument: String,
    /// Searched in each value.
    pub pattern: regex::Regex,
    /// What a match means.
    pub verdict: Verdict,
    /// Why (may be empty).
    pub reason: String,
}

/// The operator's policy (see the module doc).
#[derive(Debug, Clone)]
pub struct Policy {
    /// Verdict for tools not in `tools`.
    pub default: Verdict,
    /// Verdict per tool.
    pub tools: BTreeMap<String, Verdict>,
    /// Directories launch arguments may name paths in.
    pub launch_directories: Vec<String>,
    /// Verdict for a launch argument outside them that no rule matches.
    pub launch_elsewhere: Verdict,
    /// Pattern rules.
    pub rules: Vec<Rule>,
}

impl Default for Policy {
    /// Every tool allowed; launch arguments denied (no launch directory).
    fn default() -> Self {
        Self {
            default: Verdict::Allow,
            tools: BTreeMap::new(),
            launch_directories: Vec::new(),
            launch_elsewhere: Verdict::Deny,
            rules: Vec::new(),
        }
    }
}

/// The verdict on an action (or a batch) and why, naming the tool and the argument concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judgement {
    /// The strictest verdict found.
    pub verdict: Verdict,
    /// Why, for that verdict only (empty for `allow`).
    pub reasons: Vec<String>,
}

impl Judgement {
    fn allow() -> Self {
        Self {
            verdict: Verdict::Allow,
            reasons: Vec::new(),
        }
    }

    /// Keeps the stricter of the two, with the reasons of that verdict.
    fn add(&mut self, verdict: Verdict, reason: String) {
        if verdict > self.verdict {
            self.verdict = verdict;
            self.reasons.clear();
        }
        if verdict == self.verdict && verdict != Verdict::Allow && !self.reasons.contains(&reason) {
            self.reasons.push(reason);
        }
    }

    /// The reasons as one sentence: `the operator's policy denies …; …`.
    pub fn reason(&self) -> String {
        self.reasons.join("; ")
    }
}

/// The string values of an argument: a string, each element of an array, a number or boolean as text.
fn values(arguments: &Map<String, Value>, name: &str) -> Vec<String> {
    let one = |v: &Value| match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(_) | Value::Bool(_) => Some(v.to_string()),
        _ => None,
    };
    match arguments.get(name) {
        Some(Value::Array(items)) => items.iter().filter_map(one).collect(),
        Some(v) => one(v).into_iter().collect(),
        None => Vec::new(),
    }
}

/// Whether a policy's tool name matches `function`: `*` (any), `PREFIX*` (names starting with PREFIX,
/// e.g. `mcp__files__*` for every tool of MCP server `files`), or the exact name.
fn tool_matches(pattern: &str, function: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => function.starts_with(prefix),
        None => pattern == function,
    }
}

/// A value for a reason text: quoted, at most 120 characters.
fn quoted(value: &str) -> String {
    Value::String(crate::agents::text::truncate(value, 120)).to_string()
}

impl Policy {
    /// The verdict on running `function` with `arguments`.
    pub fn judge(&self, function: &str, arguments: &Map<String, Value>) -> Judgement {
        let mut j = Judgement::allow();
        // An exact name wins; else the longest `PREFIX*` pattern that matches (e.g. `mcp__files__*`, every
        // tool of one MCP server); else the default.
        let tool = self.tools.get(function).copied().unwrap_or_else(|| {
            self.tools
                .iter()
                .filter(|(k, _)| tool_matches(k, function))
                .max_by_key(|(k, _)| k.len())
                .map_or(self.default, |(_, v)| *v)
        });
        let verb = |v: Verdict| match v {
            Verdict::Allow => "allows",
            Verdict::Confirm => "asks a person to confirm",
            Verdict::Deny => "denies",
        };
        j.add(
            tool,
            format!("the operator's policy {} {function}", verb(tool)),
        );
        let launch = function == "launch_application";
        let launch_args = if launch {
            values(arguments, "args")
        } else {
            Vec::new()
        };
        let mut ruled = vec![false; launch_args.len()];
        for rule in self
            .rules
            .iter()
            .filter(|r| tool_matches(&r.tool, function))
        {
            for value in values(arguments, &rule.argument) {
                if !rule.pattern.is_match(&value) {
                    continue;
                }
                if launch && rule.argument == "args" {
                    for (i, a) in launch_args.iter().enumerate() {
                        ruled[i] |= *a == value;
                    }
                }
                let why = if rule.reason.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", rule.reason)
                };
                j.add(
                    rule.verdict,
                    format!(
                        "the operator's policy {} {function} with {} {}{why}",
                        verb(rule.verdict),
                        rule.argument,
                        quoted(&value)
                    ),
                );
            }
        }
        for (i, arg) in launch_args.iter().enumerate() {
            if ruled[i]
                || self
                    .launch_directories
                    .iter()
                    .any(|d| paths::inside(arg, d))
            {
                continue;
            }
            let dirs = if self.launch_directories.is_empty() {
                "no launch directory is declared".to_owned()
            } else {
                format!("launch directories: {}", self.launch_directories.join(", "))
            };
            j.add(
                self.launch_elsewhere,
                format!(
                    "the operator's policy {} launching with argument {} {}: it is not an absolute path \
                     inside a launch directory ({dirs})",
                    verb(self.launch_elsewhere),
                    i + 1,
                    quoted(arg)
                ),
            );
        }
        j
    }

    /// The verdict on a batch: the strictest of its actions'.
    pub fn judge_batch<'a>(
        &self,
        batch: impl IntoIterator<Item = (&'a str, &'a Map<String, Value>)>,
    ) -> Judgement {
        let mut all = Judgement::allow();
        for (function, arguments) in batch {
            let j = self.judge(function, arguments);
            for reason in j.reasons {
                all.add(j.verdict, reason);
            }
        }
        all
    }

    /// The denial of `function` with `arguments`, as its recorded result, when the policy denies it.
    pub fn denial(
        &self,
        function: &str,
        arguments: &Map<String, Value>,
    ) -> Option<crate::dispatch::CommandResult> {
        let j = self.judge(function, arguments);
        (j.verdict == Verdict::Deny).then(|| {
            tracing::info!(function, reason = %j.reason(), "action denied by the policy");
            crate::agents::tools::denied(j.reason(), json!({"policy": "deny"}))
        })
    }
}

/// Why a proposed batch is held for a person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hold {
    /// The operator's policy asks for confirmation (the reason names the tool or argument).
    Policy(String),
    /// The model marked it CONFIRM (and the task does not say `never`).
    Model,
    /// The task's confirm policy is `always`.
    Task,
}

impl Hold {
    /// What the person deciding is told: the policy's reason, else the model's comment.
    pub fn reason(&self, comment: &str) -> String {
        match self {
            Self::Policy(why) if comment.is_empty() => why.clone(),
            Self::Policy(why) => format!("{why}; {comment}"),
            Self::Model | Self::Task => comment.to_owned(),
        }
    }
}

#[cfg(test)]
mod tests;
