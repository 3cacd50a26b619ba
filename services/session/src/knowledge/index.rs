//! The in-memory retrieval index: an inverted index over the `knowledge` rows, ranked with BM25F, kept as
//! a rebuildable cache of the rows (issue 33; see `docs/knowledge.md` "Ranking" for why and the figures).
//!
//! The rows stay the truth. Every write to `knowledge` bumps a generation and logs the row's id in
//! `knowledge_changes` in the same transaction (database triggers, `migrations/0039`); a search reads the
//! changes past its index's generation (one indexed query, usually empty), applies them as a delta (the
//! changed rows re-read by id) or rebuilds from all rows when too many changed or the log was pruned
//! past it. So several session-service replicas each keep their own index and each search sees every
//! committed write, as with the databases' own full-text search.
//!
//! Scoring (the same on both stores): words split at anything not a letter or digit, lowercased and
//! Porter-stemmed ([`stem`](super::stem)); for each query term `t` and row `d`
//!
//! ```text
//! K       = k1 · (1 − b + b · len(d) / avglen)                 (k1 = 1.2, b = 0.75; len over all fields)
//! w       = 2.5 · tf_title + 1 · tf_body + 0.25 · tf_code
//! score  += idf(t) · w · (k1 + 1) / (w + K)  +  idf_title(t) · tf_title · (k1 + 1) / (tf_title + K)
//! idf(t)  = ln((N − n_t + 0.5) / (n_t + 0.5))  (at least 1e-6), n_t the rows containing t anywhere;
//! idf_title uses the rows whose title contains t.
//! ```
//!
//! A search that names an application multiplies the score of that application's own rows by
//! [`APPLICATION_WEIGHT`]: help stored for any application (the whole desktop's, say) still competes,
//! but the application's own page wins a near tie.
//!
//! This is exactly what the SQLite store ranked with before (FTS5 `bm25()` with those column weights plus
//! a title-only `bm25()`), now computed in one place for both databases. Every row containing a query
//! term is scored (the posting lists of at most [`MAX_TERMS`](super::MAX_TERMS) terms, a few hundred
//! microseconds at 10,000 rows); the best are taken from a heap (no full sort) until `limit` hits
//! pass the per-source cap.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

use ufo_proto::v1::{ExperienceRating, KnowledgeHit, KnowledgeItem, KnowledgeKind};
use uuid::Uuid;

use super::KnowledgeSearch;
use super::stem::stem;

const K1: f64 = 1.2;
const B: f64 = 0.75;
/// Field weights of the combined score: title, prose, example code.
const TITLE_WEIGHT: f64 = 2.5;
const BODY_WEIGHT: f64 = 1.0;
const CODE_WEIGHT: f64 = 0.25;
/// Score factor of the searched application's own rows over rows stored for any application (measured:
/// the zenity questions among the GNOME help answer 42/46 at 1 and 1.1, 44/46 at 1.25 to 3, as many as
/// on zenity's help alone; see docs/knowledge.md "Measured").
pub const APPLICATION_WEIGHT: f64 = 1.5;

/// The searchable tokens of `text`: split at anything not a letter or digit, lowercased, stemmed.
pub fn tokens(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(|w| stem(&w.to_lowercase()))
}

/// One row's occurrences of one term, by field.
#[derive(Debug, Clone, Copy)]
struct Posting {
    slot: u32,
    title: u32,
    body: u32,
    code: u32,
}

/// One indexed row.
#[derive(Debug, Clone)]
struct Doc {
    id: Uuid,
    item: KnowledgeItem,
    kind: KnowledgeKind,
    /// Never offered: a failed task's experience or a bad-rated one.
    excluded: bool,
    /// Tokens over all fields.
    length: u32,
    /// (term id, occurrences in title, body, code), for removal and compaction.
    terms: Vec<(u32, u32, u32, u32)>,
}

/// The in-memory index of the knowledge rows at one generation.
#[derive(Debug, Default)]
pub struct KnowledgeIndex {
    /// The last change applied (`knowledge_generation.generation` when built).
    pub generation: i64,
    vocabulary: HashMap<String, u32>,
    postings: Vec<Vec<Posting>>,
    /// Live rows containing the term anywhere / in the title.
    rows_with: Vec<u32>,
    titles_with: Vec<u32>,
    /// Row slots; `None` once removed (its postings are skipped until the next compaction).
    docs: Vec<Option<Doc>>,
    slots: HashMap<Uuid, u32>,
    live: u32,
    tokens: u64,
}

impl KnowledgeIndex {
    /// An index of `items` at `generation`.
    pub fn build(generation: i64, items: Vec<KnowledgeItem>) -> Self {
        let mut index = Self {
            generation,
            ..Self::default()
        };
        for item in items {
            index.upsert(item);
        }
        index
    }

    /// Rows indexed.
    pub fn len(&self) -> usize {
        self.live as usize
    }

    /// Whether no row is indexed.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    fn term(&mut self, word: String) -> u32 {
        let next = self.postings.len() as u32;
        let id = *self.vocabulary.entry(word).or_insert(next);
        if id == next {
            self.postings.push(Vec::new());
            self.rows_with.push(0);
            self.titles_with.push(0);
        }
        id
    }

    /// Adds `item`, or replaces the row of the same id.
    pub fn upsert(&mut self, item: KnowledgeItem) {
        let Ok(id) = Uuid::parse_str(&item.id) else {
            return;
        };
        let kind = item.kind();
        let excluded = !item.succeeded || item.rating() == ExperienceRating::Bad;
        if let Some(&slot) = self.slots.get(&id)
            && let Some(Some(doc)) = self.docs.get_mut(slot as usize)
        {
            if doc.item.title == item.title
                && doc.item.body == item.body
                && doc.item.model_summary == item.model_summary
                && doc.item.code == item.code
            {
                // A rating, the sharing or another column changed: the postings stay.
                doc.kind = kind;
                doc.excluded = excluded;
                doc.item = item;
                return;
            }
            self.remove(&id);
        }
        let mut counts: HashMap<u32, (u32, u32, u32)> = HashMap::new();
        let mut length = 0u32;
        // A model-written summary is searched as prose, with the deterministic one.
        for (field, text) in [
            (0, &item.title),
            (1, &item.model_summary),
            (1, &item.body),
            (2, &item.code),
        ] {
            for token in tokens(text) {
                length += 1;
                let term = self.term(token);
                let entry = counts.entry(term).or_default();
                match field {
                    0 => entry.0 += 1,
                    1 => entry.1 += 1,
                    _ => entry.2 += 1,
                }
            }
        }
        let slot = self.docs.len() as u32;
        let mut terms: Vec<(u32, u32, u32, u32)> = counts
            .into_iter()
            .map(|(t, (ti, bo, co))| (t, ti, bo, co))
            .collect();
        terms.sort_unstable_by_key(|t| t.0);
        for &(term, title, body, code) in &terms {
            self.postings[term as usize].push(Posting {
                slot,
                title,
                body,
                code,
            });
            self.rows_with[term as usize] += 1;
            if title > 0 {
                self.titles_with[term as usize] += 1;
            }
        }
        self.docs.push(Some(Doc {
            id,
            item,
            kind,
            excluded,
            length,
            terms,
        }));
        self.slots.insert(id, slot);
        self.live += 1;
        self.tokens += u64::from(length);
    }

    /// Removes the row `id` (nothing when it is not indexed).
    pub fn remove(&mut self, id: &Uuid) {
        let Some(slot) = self.slots.remove(id) else {
            return;
        };
        let Some(doc) = self.docs.get_mut(slot as usize).and_then(Option::take) else {
            return;
        };
        for &(term, title, _, _) in &doc.terms {
            self.rows_with[term as usize] -= 1;
            if title > 0 {
                self.titles_with[term as usize] -= 1;
            }
        }
        self.live -= 1;
        self.tokens -= u64::from(doc.length);
        // Removed rows' postings are skipped; rebuild the lists once they are half the index.
        if self.docs.len() > 1024 && self.docs.len() > 2 * self.live as usize {
            self.compact();
        }
    }

    /// Renumbers the live rows and rebuilds the posting lists without the removed ones.
    fn compact(&mut self) {
        let docs: Vec<Doc> = std::mem::take(&mut self.docs)
            .into_iter()
            .flatten()
            .collect();
        for list in &mut self.postings {
            list.clear();
        }
        self.slots.clear();
        for (slot, doc) in docs.iter().enumerate() {
            let slot = slot as u32;
            for &(term, title, body, code) in &doc.terms {
                self.postings[term as usize].push(Posting {
                    slot,
                    title,
                    body,
                    code,
                });
            }
            self.slots.insert(doc.id, slot);
        }
        self.docs = docs.into_iter().map(Some).collect();
    }

    /// Whether `doc` may be offered to `search`, and whether as another owner's shared item (the same
    /// rules as the store's SQL: documents are everyone's, experiences and demonstrations their owner's
    /// and those an admin shared them with, never a failed or bad-rated one).
    fn admits(doc: &Doc, search: &KnowledgeSearch, application: &str) -> Option<bool> {
        if doc.excluded
            || !search.includes(doc.kind)
            || !(application.is_empty()
                || doc.item.application == application
                || doc.item.application.is_empty())
        {
            return None;
        }
        search.reaches(&doc.item)
    }

    /// The best `search.limit` rows for `search`, best first, at most `search.per_source` of a source.
    pub fn search(&self, search: &KnowledgeSearch) -> Vec<KnowledgeHit> {
        if search.terms.is_empty() || search.limit == 0 || self.live == 0 {
            return Vec::new();
        }
        let mut terms: Vec<u32> = search
            .terms
            .iter()
            .filter_map(|t| self.vocabulary.get(&stem(t)).copied())
            .collect();
        terms.sort_unstable();
        terms.dedup();
        let rows = f64::from(self.live);
        let average = self.tokens as f64 / rows;
        let idf = |n: u32| {
            ((rows - f64::from(n) + 0.5) / (f64::from(n) + 0.5))
                .ln()
                .max(1e-6)
        };
        let application = search.application.as_deref().unwrap_or_default();
        let mut scores = vec![0.0f64; self.docs.len()];
        let mut touched: Vec<u32> = Vec::new();
        for term in terms {
            let all = idf(self.rows_with[term as usize]);
            let titles = idf(self.titles_with[term as usize]);
            for p in &self.postings[term as usize] {
                let Some(doc) = &self.docs[p.slot as usize] else {
                    continue;
                };
                let k = K1 * (1.0 - B + B * f64::from(doc.length) / average);
                let w = TITLE_WEIGHT * f64::from(p.title)
                    + BODY_WEIGHT * f64::from(p.body)
                    + CODE_WEIGHT * f64::from(p.code);
                let mut s = all * w * (K1 + 1.0) / (w + k);
                if p.title > 0 {
                    let t = f64::from(p.title);
                    s += titles * t * (K1 + 1.0) / (t + k);
                }
                let score = &mut scores[p.slot as usize];
                if *score == 0.0 {
                    touched.push(p.slot);
                }
                *score += s;
            }
        }
        let mut candidates: BinaryHeap<Candidate<'_>> = touched
            .into_iter()
            .filter_map(|slot| {
                let doc = self.docs[slot as usize].as_ref()?;
                let own = !application.is_empty() && doc.item.application == application;
                Self::admits(doc, search, application).map(|shared| Candidate {
                    score: scores[slot as usize] * if own { APPLICATION_WEIGHT } else { 1.0 },
                    doc,
                    shared,
                })
            })
            .collect();
        let mut hits = Vec::with_capacity(search.limit as usize);
        let mut per_source: HashMap<&str, u32> = HashMap::new();
        while let Some(Candidate { score, doc, shared }) = candidates.pop() {
            if search.per_source > 0 {
                let seen = per_source.entry(doc.item.source.as_str()).or_default();
                if *seen >= search.per_source {
                    continue;
                }
                *seen += 1;
            }
            hits.push(KnowledgeHit {
                item: Some(doc.item.clone()),
                score,
                shared,
            });
            if hits.len() == search.limit as usize {
                break;
            }
        }
        hits
    }
}

/// A scored row in the selection heap: the higher score first, then the smaller id (as the SQL's
/// `ORDER BY score DESC, id`).
struct Candidate<'a> {
    score: f64,
    doc: &'a Doc,
    /// Another owner's item shared with the searching caller.
    shared: bool,
}

impl PartialEq for Candidate<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Candidate<'_> {}

impl PartialOrd for Candidate<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Candidate<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then_with(|| other.doc.id.cmp(&self.doc.id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::knowledge::terms;

    fn item(
        id: u128,
        kind: KnowledgeKind,
        owner: &str,
        app: &str,
        source: &str,
        title: &str,
        body: &str,
    ) -> KnowledgeItem {
        KnowledgeItem {
            id: Uuid::from_u128(id).to_string(),
            kind: kind.into(),
            owner: owner.into(),
            application: app.into(),
            source: source.into(),
            title: title.into(),
            body: body.into(),
            succeeded: true,
            ..KnowledgeItem::default()
        }
    }

    fn search(q: &str, owner: &str, app: Option<&str>) -> KnowledgeSearch {
        KnowledgeSearch {
            terms: terms(q),
            application: app.map(str::to_owned),
            owner: owner.into(),
            kinds: Vec::new(),
            limit: 5,
            per_source: 1,
        }
    }

    fn sources(hits: &[KnowledgeHit]) -> Vec<&str> {
        hits.iter()
            .map(|h| h.item.as_ref().map_or("", |i| i.source.as_str()))
            .collect()
    }

    #[test]
    fn ranks_filters_caps_and_follows_changes() {
        let doc = KnowledgeKind::Document;
        let mut index = KnowledgeIndex::build(
            0,
            vec![
                item(
                    1,
                    doc,
                    "",
                    "gedit",
                    "save.md",
                    "Saving files",
                    "Press Ctrl+S to save the document.",
                ),
                item(
                    2,
                    doc,
                    "",
                    "gedit",
                    "save.md",
                    "Saving as",
                    "Save a copy under another name.",
                ),
                item(
                    3,
                    doc,
                    "",
                    "gedit",
                    "print.md",
                    "Printing",
                    "Print the document on paper.",
                ),
                item(
                    4,
                    doc,
                    "",
                    "mousepad",
                    "m.md",
                    "Saving",
                    "Mousepad saves files too.",
                ),
                item(
                    5,
                    KnowledgeKind::Experience,
                    "alice",
                    "gedit",
                    "task:1",
                    "save my notes",
                    "saved",
                ),
            ],
        );
        // Stemmed: "saved", "saving" and "save" meet; one hit per source; other apps' rows left out.
        let hits = index.search(&search("how do I save a file", "", Some("gedit")));
        assert_eq!(sources(&hits), ["save.md"]);
        let hits = index.search(&search("save or print the document", "", Some("gedit")));
        assert_eq!(sources(&hits).len(), 2, "{hits:?}");
        assert!(hits[0].score >= hits[1].score);
        // Owners: alice sees her experience, bob does not.
        assert!(sources(&index.search(&search("save notes", "alice", None))).contains(&"task:1"));
        assert!(!sources(&index.search(&search("save notes", "bob", None))).contains(&"task:1"));
        // A bad rating excludes it without re-indexing; a removed row is gone; a changed text is re-indexed.
        let mut rated = item(
            5,
            KnowledgeKind::Experience,
            "alice",
            "gedit",
            "task:1",
            "save my notes",
            "saved",
        );
        rated.rating = ExperienceRating::Bad.into();
        index.upsert(rated);
        assert!(!sources(&index.search(&search("save notes", "alice", None))).contains(&"task:1"));
        index.remove(&Uuid::from_u128(3));
        assert_eq!(
            sources(&index.search(&search("print", "", None))),
            Vec::<&str>::new()
        );
        index.upsert(item(
            3,
            doc,
            "",
            "gedit",
            "print.md",
            "Printing",
            "Send it to the printer.",
        ));
        assert_eq!(
            sources(&index.search(&search("printer", "", None))),
            ["print.md"]
        );
        assert_eq!(index.len(), 5);
    }

    #[test]
    fn the_searched_applications_own_rows_win_a_near_tie() {
        let doc = KnowledgeKind::Document;
        // Other help for any application, so that the query's terms are rare (a positive idf).
        let mut rows: Vec<KnowledgeItem> = (10..20)
            .map(|i| {
                item(
                    i,
                    doc,
                    "",
                    "",
                    &format!("other-{i}.page"),
                    "Printing",
                    "Send a document to the printer.",
                )
            })
            .collect();
        rows.extend([
            // Stored for any application: a slightly better match (a shorter text).
            item(
                1,
                doc,
                "",
                "",
                "color-profile.page",
                "Color profiles",
                "Choose the color profile of a screen.",
            ),
            item(
                2,
                doc,
                "",
                "zenity",
                "color-selection.page",
                "Color selection",
                "Let the user choose a color in a dialog with a palette.",
            ),
        ]);
        let index = KnowledgeIndex::build(0, rows);
        let plain = index.search(&search("choose color", "", None));
        let zenity = index.search(&search("choose color", "", Some("zenity")));
        // Without an application neither row is favoured: the same scores as the unweighted BM25F.
        let unweighted = |source: &str, hits: &[KnowledgeHit]| {
            hits.iter()
                .find(|h| h.item.as_ref().is_some_and(|i| i.source == source))
                .map(|h| h.score)
        };
        let any = unweighted("color-profile.page", &plain).unwrap();
        let own = unweighted("color-selection.page", &plain).unwrap();
        assert!(
            own < any && own * APPLICATION_WEIGHT > any,
            "a near tie that the row for any application wins unweighted: {own} against {any}"
        );
        assert_eq!(
            sources(&plain),
            ["color-profile.page", "color-selection.page"]
        );
        assert_eq!(
            unweighted("color-selection.page", &zenity),
            Some(own * APPLICATION_WEIGHT)
        );
        assert_eq!(unweighted("color-profile.page", &zenity), Some(any));
        assert_eq!(sources(&zenity)[0], "color-selection.page");
        // Another application's search sees only the row for any application, unweighted.
        let gedit = index.search(&search("choose color", "", Some("gedit")));
        assert_eq!(sources(&gedit), ["color-profile.page"]);
        assert_eq!(gedit[0].score, any);
    }

    #[test]
    fn compaction_keeps_the_live_rows() {
        let mut index = KnowledgeIndex::default();
        for i in 0..3000u128 {
            index.upsert(item(
                i,
                KnowledgeKind::Document,
                "",
                "",
                &format!("s{i}"),
                "word",
                &format!("w{i}"),
            ));
        }
        for i in 0..2500u128 {
            index.remove(&Uuid::from_u128(i));
        }
        assert!(index.docs.len() < 3000, "compacted");
        assert_eq!(index.len(), 500);
        let hits = index.search(&search("w2999", "", None));
        assert_eq!(sources(&hits), ["s2999"]);
        assert!(index.search(&search("w10", "", None)).is_empty());
    }
}
