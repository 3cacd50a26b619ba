//! What retrieved knowledge put into a prompt (issue 33): the rendered text and the items it holds,
//! which the step records as "knowledge used". No dependencies inside the crate (the step's recording
//! and the knowledge sources both use it).

/// One item of retrieved knowledge that reached a prompt: what the step view shows as "knowledge
/// used" (stored as `Step.extra.knowledge`) and the `knowledge_retrieved` event names.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct KnowledgeUsed {
    /// `document`, `experience`, `demonstration` or `web` (an online search result).
    pub kind: String,
    /// The citation the prompt gave it: a file name, `task:<id>`, or a URL.
    pub source: String,
    /// Its heading (a section's title, an earlier task's request, a web page's title), at most
    /// [`USED_TITLE_CHARS`] characters.
    pub title: String,
    /// The ranking's score (higher is better; web results are ranked by their provider: 0).
    pub score: f64,
    /// The knowledge item's id in the session service's store ("" for a web result).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
}

/// Longest title kept in a [`KnowledgeUsed`] (the prompt has the whole item).
pub const USED_TITLE_CHARS: usize = 200;

impl KnowledgeUsed {
    /// `title` cut to [`USED_TITLE_CHARS`].
    pub fn short_title(title: &str) -> String {
        let mut t: String = title.chars().take(USED_TITLE_CHARS).collect();
        if t.len() < title.len() {
            t.push('…');
        }
        t
    }
}

/// What a retrieval put into a prompt: the rendered text ("" when none) and the items it holds, in
/// the prompt's order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Retrieved {
    /// The prompt's knowledge section ("" when nothing was retrieved).
    pub text: String,
    /// The items in `text`, numbered as there (1-based in the prompt, in this order).
    pub used: Vec<KnowledgeUsed>,
    /// How long the retrieval took, in milliseconds.
    pub ms: u64,
}

impl Retrieved {
    /// Only text, no item (a source that cannot name its items).
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            ..Self::default()
        }
    }
}
