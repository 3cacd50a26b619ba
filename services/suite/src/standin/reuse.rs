//! The reuse fill call (docs/knowledge.md "Reuse"): when a task follows an earlier task's plan, the agent
//! asks the model once to rewrite the plan's texts that come from the earlier request. The stand-in
//! answers it as it adapts an experience for a learning task ([`super::learn::Substitution`]): the two
//! requests compared word by word, the new words put in place of the old ones in each text.

use serde_json::{Value, json};

use super::learn::Substitution;

/// The marker of the fill prompt (`services/agent/src/replay/reuse.rs`, `FILL_MARKER`).
pub const FILL_MARKER: &str = "[Texts to rewrite]";

/// A fill prompt's parts: the earlier request, the new request and the texts to rewrite.
#[derive(Debug, Clone, PartialEq)]
pub struct Fill {
    /// The earlier task's request.
    pub old: String,
    /// This task's request (the tally's key).
    pub new: String,
    /// The texts, in order.
    pub texts: Vec<String>,
}

fn json_line_after<'a>(text: &'a str, header: &str) -> Option<&'a str> {
    let (_, rest) = text.split_once(&format!("{header}\n"))?;
    rest.lines().next()
}

impl Fill {
    /// The fill prompt in a user text, if it is one.
    pub fn parse(text: &str) -> Option<Self> {
        if !text.contains(FILL_MARKER) {
            return None;
        }
        let string = |h: &str| -> Option<String> {
            serde_json::from_str::<String>(json_line_after(text, h)?).ok()
        };
        let (_, listed) = text.split_once(&format!("{FILL_MARKER}\n"))?;
        let texts = listed
            .lines()
            .filter_map(|l| l.split_once(". "))
            .filter_map(|(_, t)| serde_json::from_str::<String>(t).ok())
            .collect();
        Some(Self {
            old: string("[Earlier request]")?,
            new: string("[New request]")?,
            texts,
        })
    }

    /// The stand-in's reply: each text with the new request's words in place of the old one's.
    pub fn reply(&self) -> Value {
        let swap = Substitution::between(&self.old, &self.new);
        let texts: Vec<String> = self
            .texts
            .iter()
            .map(|t| {
                let plain = swap.apply(t);
                if plain != *t {
                    plain
                } else {
                    swap.apply_keys(t)
                }
            })
            .collect();
        json!({ "texts": texts })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_fill_prompt_is_answered_with_the_new_words() {
        let text = "[Earlier request]\n\"Enter Apollo 11 and confirm it.\"\n\n[New request]\n\"Enter Gemini 4 and confirm it.\"\n\n[Texts to rewrite]\n1. \"enter Apollo 11 as the name\"\n2. \"Apollo{SPACE}11\"\n";
        let fill = Fill::parse(text).unwrap();
        assert_eq!(fill.new, "Enter Gemini 4 and confirm it.");
        assert_eq!(fill.texts.len(), 2);
        assert_eq!(
            fill.reply(),
            json!({"texts": ["enter Gemini 4 as the name", "Gemini{SPACE}4"]})
        );
        assert!(Fill::parse("[Request]\nx").is_none());
    }
}
