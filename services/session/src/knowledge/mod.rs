//! Knowledge the agents retrieve into their prompts (issue 33): help documents chunked by section,
//! experiences of finished tasks and demonstrations, stored in the session database and ranked by an
//! in-memory BM25F index kept as a rebuildable cache of the rows (see `docs/knowledge.md` "Ranking" for
//! why, and the measurements against the databases' own full-text search).
//!
//! - [`parse`]: documents → sections (Markdown, HTML, plain text, Mallard).
//! - [`index`]: the in-memory inverted index and its ranking; [`stem`]: the Porter stemmer it uses.
//! - [`terms`]: the words of a query, as both databases' full-text queries (OR of terms).
//! - the row types the [`Store`](crate::store::Store) methods take and return.

pub mod index;
pub mod parse;
pub mod stem;

use uuid::Uuid;

pub use ufo_proto::v1::{ExperienceRating, KnowledgeKind};

/// A knowledge row to store.
#[derive(Debug, Clone, PartialEq)]
pub struct NewKnowledge {
    /// Document section, experience or demonstration.
    pub kind: KnowledgeKind,
    /// "" for documents; the task's owner otherwise.
    pub owner: String,
    /// Lowercase application name, "" for any.
    pub application: String,
    /// File name or `task:<id>`.
    pub source: String,
    /// Position of a section in its document.
    pub position: u32,
    /// Heading or request.
    pub title: String,
    /// Text (prose).
    pub body: String,
    /// Example code and command lines (searched with a lower weight).
    pub code: String,
    /// The task an experience summarises.
    pub task_id: Option<Uuid>,
    /// False for a failed task (stored, never retrieved).
    pub succeeded: bool,
    /// An experience's model-written summary (beside the deterministic `body`), and what it cost.
    pub summary: Option<ModelSummary>,
}

/// A model-written summary of a task's trajectory and what writing it cost (added to the task's totals
/// when the experience is stored).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelSummary {
    /// The summary.
    pub text: String,
    /// US dollars.
    pub cost: f64,
    /// Tokens sent.
    pub input_tokens: u64,
    /// Tokens received.
    pub output_tokens: u64,
}

/// Which item an admin shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShareTarget {
    /// An experience or demonstration by its id.
    Id(Uuid),
    /// The experience of a task.
    Task(Uuid),
}

/// A share or an unshare: who is added to (or taken off) an item's sharing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnowledgeShare {
    /// The item.
    pub target: ShareTarget,
    /// Caller names (checked by the caller of the store: no NUL, not empty, deduplicated).
    pub callers: Vec<String>,
    /// Every caller.
    pub everyone: bool,
    /// Take them off instead of adding them.
    pub unshare: bool,
    /// Most names an item may be shared with (a share that would exceed it is refused).
    pub max_callers: u32,
}

/// One help document to store: its parsed sections, replacing an earlier upload of the same
/// (`application`, `source`).
#[derive(Debug, Clone, PartialEq)]
pub struct DocumentUpload {
    /// Lowercase application name, "" for any.
    pub application: String,
    /// The file name.
    pub source: String,
    /// The sections, in document order.
    pub sections: Vec<NewKnowledge>,
}

/// A full-text search.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnowledgeSearch {
    /// The query's terms (see [`terms`]); no terms, no hits.
    pub terms: Vec<String>,
    /// Only this application's items and those for any application.
    pub application: Option<String>,
    /// The caller: only their experiences and demonstrations, and those an admin shared with them.
    pub owner: String,
    /// Kinds searched (empty = all).
    pub kinds: Vec<KnowledgeKind>,
    /// Most hits returned.
    pub limit: u32,
    /// Most hits from one source (a document's sections); 0 = no limit. Keeps one long page from
    /// filling every slot of a small top-k.
    pub per_source: u32,
}

impl KnowledgeSearch {
    /// Whether `kind` is searched.
    pub fn includes(&self, kind: KnowledgeKind) -> bool {
        self.kinds.is_empty() || self.kinds.contains(&kind)
    }

    /// Whether `item` (of a kind searched, not excluded) may be offered to this search's caller, and
    /// whether it is another owner's shared with them: documents are everyone's; experiences and
    /// demonstrations their owner's and those of the callers an admin shared them with (or everyone).
    pub fn reaches(&self, item: &ufo_proto::v1::KnowledgeItem) -> Option<bool> {
        if item.kind() == KnowledgeKind::Document || item.owner == self.owner {
            return Some(false);
        }
        let shared = !self.owner.is_empty()
            && (item.shared_everyone || item.shared_with.contains(&self.owner));
        shared.then_some(true)
    }
}

/// Which stored items to list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KnowledgeFilter {
    /// Only this kind.
    pub kind: Option<KnowledgeKind>,
    /// Only this application.
    pub application: Option<String>,
    /// Only this owner.
    pub owner: Option<String>,
    /// Only this source.
    pub source: Option<String>,
    /// Most items returned.
    pub limit: u32,
}

/// Which items to delete (at least one of `id`, `source`, `task_id` is set by the caller).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KnowledgeDelete {
    /// One item.
    pub id: Option<Uuid>,
    /// Every item of a source.
    pub source: Option<String>,
    /// The items of a task.
    pub task_id: Option<Uuid>,
    /// Only this owner's.
    pub owner: Option<String>,
}

/// Most terms a query keeps (the rest are ignored).
pub const MAX_TERMS: usize = 32;

/// English function words that carry no topic: the Snowball list Postgres's `english` configuration
/// drops, applied to every query here so both databases search the same terms (SQLite's FTS5 has no stop
/// words, and an OR query would otherwise match nearly every row).
const STOP_WORDS: &[&str] = &[
    "a",
    "about",
    "above",
    "after",
    "again",
    "against",
    "all",
    "am",
    "an",
    "and",
    "any",
    "are",
    "as",
    "at",
    "be",
    "because",
    "been",
    "before",
    "being",
    "below",
    "between",
    "both",
    "but",
    "by",
    "can",
    "did",
    "do",
    "does",
    "doing",
    "don",
    "down",
    "during",
    "each",
    "few",
    "for",
    "from",
    "further",
    "had",
    "has",
    "have",
    "having",
    "he",
    "her",
    "here",
    "hers",
    "herself",
    "him",
    "himself",
    "his",
    "how",
    "i",
    "if",
    "in",
    "into",
    "is",
    "it",
    "its",
    "itself",
    "just",
    "me",
    "more",
    "most",
    "my",
    "myself",
    "no",
    "nor",
    "not",
    "now",
    "of",
    "off",
    "on",
    "once",
    "only",
    "or",
    "other",
    "our",
    "ours",
    "ourselves",
    "out",
    "over",
    "own",
    "s",
    "same",
    "she",
    "should",
    "so",
    "some",
    "such",
    "t",
    "than",
    "that",
    "the",
    "their",
    "theirs",
    "them",
    "themselves",
    "then",
    "there",
    "these",
    "they",
    "this",
    "those",
    "through",
    "to",
    "too",
    "under",
    "until",
    "up",
    "very",
    "was",
    "we",
    "were",
    "what",
    "when",
    "where",
    "which",
    "while",
    "who",
    "whom",
    "why",
    "will",
    "with",
    "you",
    "your",
    "yours",
    "yourself",
    "yourselves",
];

/// The distinct searchable words of `text` (lowercase letters and digits, stop words dropped), in order,
/// at most [`MAX_TERMS`]. Being only letters and digits they are safe inside either database's query
/// syntax.
pub fn terms(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for word in text.split(|c: char| !c.is_alphanumeric()) {
        let word = word.to_lowercase();
        if word.chars().count() < 2 || STOP_WORDS.contains(&word.as_str()) || out.contains(&word) {
            continue;
        }
        out.push(word);
        if out.len() == MAX_TERMS {
            break;
        }
    }
    out
}

/// Postgres `to_tsquery` text: the terms ORed.
pub fn postgres_query(terms: &[String]) -> String {
    terms.join(" | ")
}

/// SQLite FTS5 `MATCH` text: the terms, quoted, ORed.
pub fn sqlite_query(terms: &[String]) -> String {
    terms
        .iter()
        .map(|t| format!("\"{t}\""))
        .collect::<Vec<_>>()
        .join(" OR ")
}

/// SQLite FTS5 `MATCH` text for the titles only: the same terms, restricted to the `title` column.
pub fn sqlite_title_query(terms: &[String]) -> String {
    format!("{{title}} : ({})", sqlite_query(terms))
}

/// An application name as stored: trimmed, lowercase.
pub fn application(name: &str) -> String {
    name.trim().to_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terms_drop_stop_words_and_syntax() {
        assert_eq!(
            terms("How do I set the DATE in a \"calendar\"? -- OR (date) NEAR"),
            ["set", "date", "calendar", "near"]
        );
        assert_eq!(sqlite_query(&terms("x:y* zz")), "\"zz\"");
        assert_eq!(postgres_query(&terms("ab cd")), "ab | cd");
        assert_eq!(
            sqlite_title_query(&terms("ab cd")),
            "{title} : (\"ab\" OR \"cd\")"
        );
    }
}
