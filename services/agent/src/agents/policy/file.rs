//! The operator's policy file (`--policy-file`, JSON; its format is documented in docs/security.md) and
//! its checks: every verdict is one of `allow`, `confirm`, `deny`, every pattern compiles, every launch
//! directory is an absolute path. A bad file stops the agent at start, naming what is wrong.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{Policy, Rule, Verdict, paths};

/// The file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    /// Verdict for a tool not named in `tools` (default `allow`).
    #[serde(default)]
    default: Option<Verdict>,
    /// Verdict per tool name.
    #[serde(default)]
    tools: BTreeMap<String, Verdict>,
    /// Directories `launch_application` arguments may name paths in.
    #[serde(default)]
    launch_directories: Vec<String>,
    /// Verdict for a launch argument that is neither inside a launch directory nor matched by a rule
    /// (default `deny`).
    #[serde(default)]
    launch_arguments_elsewhere: Option<Verdict>,
    /// Verdicts for argument values matching a pattern.
    #[serde(default)]
    rules: Vec<RuleFile>,
}

/// One rule as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    /// The tool it applies to (`*`: every tool).
    tool: String,
    /// The argument whose value is matched (each element of an array separately).
    argument: String,
    /// A regular expression (Rust `regex` syntax) searched in the value; anchor it with `^...$` to
    /// match the whole value.
    pattern: String,
    /// What a match means.
    verdict: Verdict,
    /// Why, for the person asked to confirm and for the model when denied.
    #[serde(default)]
    reason: String,
}

/// Why the policy file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The file cannot be read.
    #[error("cannot read the policy file {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a valid policy (bad JSON, unknown field, unknown verdict).
    #[error("the policy file {path} is invalid: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong, with line and column.
        message: String,
    },
}

/// What is wrong with a policy's text.
#[derive(Debug, thiserror::Error)]
pub enum PolicyProblem {
    /// Not the policy's JSON shape.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// A launch directory that is not absolute or climbs with `..`.
    #[error("launch_directories: {0:?} is not an absolute path without '..'")]
    LaunchDirectory(String),
    /// A rule's pattern is not a regular expression.
    #[error("rules[{rule}].pattern: {source}")]
    Pattern {
        /// The rule's index.
        rule: usize,
        /// What the regex parser said.
        source: regex::Error,
    },
    /// A rule with an empty tool or argument.
    #[error("rules[{0}]: tool and argument must not be empty")]
    EmptyRule(usize),
}

impl Policy {
    /// Reads and checks the policy in `path`.
    pub fn load(path: &Path) -> Result<Self, PolicyError> {
        let text = std::fs::read_to_string(path).map_err(|source| PolicyError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text).map_err(|problem| PolicyError::Invalid {
            path: path.to_owned(),
            message: problem.to_string(),
        })
    }

    /// Checks a policy given as JSON text.
    pub fn parse(text: &str) -> Result<Self, PolicyProblem> {
        let file: PolicyFile = serde_json::from_str(text)?;
        if let Some(bad) = file
            .launch_directories
            .iter()
            .find(|d| !paths::valid_dir(d))
        {
            return Err(PolicyProblem::LaunchDirectory(bad.clone()));
        }
        let rules = file
            .rules
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                let pattern = regex::Regex::new(&r.pattern)
                    .map_err(|source| PolicyProblem::Pattern { rule: i, source })?;
                if r.tool.is_empty() || r.argument.is_empty() {
                    return Err(PolicyProblem::EmptyRule(i));
                }
                Ok(Rule {
                    tool: r.tool,
                    argument: r.argument,
                    pattern,
                    verdict: r.verdict,
                    reason: r.reason,
                })
            })
            .collect::<Result<Vec<_>, PolicyProblem>>()?;
        Ok(Self {
            default: file.default.unwrap_or(Verdict::Allow),
            tools: file.tools,
            launch_directories: file.launch_directories,
            launch_elsewhere: file.launch_arguments_elsewhere.unwrap_or(Verdict::Deny),
            rules,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_files_are_refused_naming_the_problem() {
        for (text, says) in [
            (
                r#"{"tools": {"click_input": "maybe"}}"#,
                "unknown variant `maybe`",
            ),
            (r#"{"toolz": {}}"#, "unknown field `toolz`"),
            (r#"{"launch_directories": ["docs"]}"#, "launch_directories"),
            (
                r#"{"rules": [{"tool": "x", "argument": "a", "pattern": "(", "verdict": "deny"}]}"#,
                "rules[0].pattern",
            ),
            (
                r#"{"rules": [{"tool": "", "argument": "a", "pattern": "x", "verdict": "deny"}]}"#,
                "rules[0]: tool and argument",
            ),
        ] {
            let e = Policy::parse(text).unwrap_err();
            assert!(e.to_string().contains(says), "{text}: {e}");
        }
        let e = Policy::load(Path::new("/nonexistent/policy.json")).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/policy.json"), "{e}");
    }
}
