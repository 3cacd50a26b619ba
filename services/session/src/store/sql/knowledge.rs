//! Knowledge rows: help document sections, experiences and demonstrations, and their search.
//!
//! Searches run on the in-memory index ([`KnowledgeIndex`]), a cache of the rows that every search
//! brings up to date first from the change log the database triggers write (`knowledge_changes`, see
//! `migrations/0039_knowledge_changes.sql`): usually one indexed query that finds nothing. The databases'
//! own full-text search (Postgres `tsv`/`ts_rank_cd`, SQLite FTS5 `bm25()`) is kept as
//! [`SqlStore::search_knowledge_sql`], which the benchmark runs side by side with the index.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use tracing::instrument;
use ufo_proto::v1::{ExperienceRating, KnowledgeHit, KnowledgeItem, KnowledgeKind};
use uuid::Uuid;

use sqlx::types::Json as SqlJson;

use super::db::{AsConn, Dialect, query};
use super::events::{Totals, append};
use super::{SqlStore, db_int, now, rows, settle};
use crate::knowledge::index::KnowledgeIndex;
use crate::knowledge::{
    DocumentUpload, KnowledgeDelete, KnowledgeFilter, KnowledgeSearch, KnowledgeShare,
    NewKnowledge, ShareTarget, postgres_query, sqlite_query, sqlite_title_query,
};
use crate::store::{DbEnum as _, StoreError, StoreResult};

/// Candidates fetched per wanted hit when hits per source are capped.
const CANDIDATES_PER_HIT: u32 = 4;

/// How the in-memory index follows the rows (`--knowledge-index-max-delta`, `--knowledge-changes-kept`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexOptions {
    /// Most changed rows applied as a delta; more and the index is rebuilt.
    pub max_delta: u32,
    /// Change-log entries kept (older ones are pruned by the writers).
    pub changes_kept: u32,
}

impl Default for IndexOptions {
    fn default() -> Self {
        Self {
            max_delta: 10_000,
            changes_kept: 100_000,
        }
    }
}

/// A store's index and what keeps it in step: searches read it under the lock's read side; one
/// refresher at a time (`refresh`) brings it up to date.
#[derive(Debug, Default)]
pub(crate) struct IndexCache {
    index: tokio::sync::RwLock<Option<KnowledgeIndex>>,
    refresh: tokio::sync::Mutex<()>,
    options: std::sync::Mutex<IndexOptions>,
}

impl IndexCache {
    fn options(&self) -> IndexOptions {
        *self
            .options
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Row ids fetched by one statement when a delta is applied.
const IDS_PER_FETCH: usize = 500;

/// The columns every knowledge read returns.
const COLUMNS: &str = "id, kind, owner, application, source, position, title, body, code, task_id, \
    rating, succeeded, created_at, shared_with, shared_everyone, model_summary";

/// Filters shared by both searches: $2 application ("" = any), $3 owner, $4–$6 kinds searched; `@SHARED@`
/// is the dialect's "shared with $3". Documents are everyone's; experiences and demonstrations their
/// owner's and those an admin shared with the caller or everyone, and never a failed or bad-rated one.
const SEARCH_FILTER: &str = "($2 = '' OR k.application = $2 OR k.application = '') \
    AND (k.kind = 'document' OR k.owner = $3 OR ($3 <> '' AND (k.shared_everyone OR @SHARED@))) \
    AND ((k.kind = 'document' AND $4) OR (k.kind = 'experience' AND $5) \
         OR (k.kind = 'demonstration' AND $6)) \
    AND k.succeeded AND k.rating <> 'bad'";

fn search_sql(dialect: Dialect) -> String {
    let columns = COLUMNS
        .split(", ")
        .map(|c| format!("k.{c}"))
        .collect::<Vec<_>>()
        .join(", ");
    let filter = SEARCH_FILTER.replace(
        "@SHARED@",
        dialect.pick(
            "k.shared_with ? $3",
            "EXISTS (SELECT 1 FROM json_each(k.shared_with) WHERE json_each.value = $3)",
        ),
    );
    let shared = "CAST(CASE WHEN k.kind <> 'document' AND k.owner <> $3 THEN 1 ELSE 0 END AS BIGINT) AS shared";
    match dialect {
        // Normalisation 1 divides by 1 + log(length): long sections do not win by size alone.
        Dialect::Postgres => format!(
            "SELECT {columns}, {shared}, \
             ts_rank_cd('{{0.1, 0.2, 0.4, 1.0}}', k.tsv, q, 1)::float8 AS score \
             FROM knowledge k, to_tsquery('english', $1) q \
             WHERE k.tsv @@ q AND {filter} ORDER BY score DESC, k.id LIMIT $7"
        ),
        // bm25() is lower for better matches; the title weighs more than the prose, examples less. A
        // second bm25 over the titles alone ($8: the same terms restricted to `title`) is added: its term
        // rarities are those among titles, so a term naming a section ("entry", "error") counts for what
        // it says about the section rather than being drowned by pages that mention every topic in
        // passing. (Measured on the zenity questions: 89.1 % → 95.7 % top-3; see docs/knowledge.md.)
        Dialect::Sqlite => format!(
            "SELECT {columns}, {shared}, \
             -bm25(knowledge_fts, 2.5, 1.0, 0.25) + COALESCE(t.title_score, 0.0) AS score \
             FROM knowledge_fts JOIN knowledge k ON k.rowid = knowledge_fts.rowid \
             LEFT JOIN (SELECT rowid, -bm25(knowledge_fts, 1.0, 0.0, 0.0) AS title_score \
                        FROM knowledge_fts WHERE knowledge_fts MATCH $8) t ON t.rowid = k.rowid \
             WHERE knowledge_fts MATCH $1 AND {filter} ORDER BY score DESC, k.id LIMIT $7"
        ),
    }
}

/// Sets an item's sharing in the caller's transaction (the change-log trigger records it for the indexes)
/// and returns the item.
async fn set_sharing(
    conn: &mut impl AsConn,
    id: &str,
    names: &serde_json::Value,
    everyone: bool,
) -> StoreResult<KnowledgeItem> {
    let id = Uuid::parse_str(id).map_err(|e| StoreError::Corrupt(format!("knowledge.id: {e}")))?;
    let sql = format!(
        "UPDATE knowledge SET shared_with = $1, shared_everyone = $2 WHERE id = $3 RETURNING {COLUMNS}"
    );
    let row = query(&sql)
        .bind(SqlJson(names))
        .bind(everyone)
        .bind(id)
        .fetch_one(conn.conn())
        .await?;
    rows::knowledge_item(&row)
}

/// Inserts one row in the caller's transaction and returns it.
async fn insert(conn: &mut impl AsConn, item: &NewKnowledge) -> StoreResult<KnowledgeItem> {
    let sql = format!(
        "INSERT INTO knowledge (id, kind, owner, application, source, position, title, body, code, \
         task_id, succeeded, created_at, model_summary) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) RETURNING {COLUMNS}"
    );
    let row = query(&sql)
        .bind(Uuid::now_v7())
        .bind(item.kind.db())
        .bind(item.owner.as_str())
        .bind(item.application.as_str())
        .bind(item.source.as_str())
        .bind(i64::from(item.position))
        .bind(item.title.as_str())
        .bind(item.body.as_str())
        .bind(item.code.as_str())
        .bind(item.task_id)
        .bind(item.succeeded)
        .bind(now())
        .bind(item.summary.as_ref().map_or("", |s| s.text.as_str()))
        .fetch_one(conn.conn())
        .await?;
    rows::knowledge_item(&row)
}

impl SqlStore {
    #[instrument(name = "store.replace_documents", skip_all, fields(documents = documents.len()))]
    pub(super) async fn replace_documents_impl(
        &self,
        documents: Vec<DocumentUpload>,
    ) -> StoreResult<Vec<(Vec<KnowledgeItem>, u32)>> {
        let mut tx = self.begin().await?;
        let outcome: StoreResult<_> = async {
            let mut done = Vec::with_capacity(documents.len());
            for document in &documents {
                let replaced = query(
                    "DELETE FROM knowledge WHERE kind = 'document' AND source = $1 AND application = $2",
                )
                .bind(document.source.as_str())
                .bind(document.application.as_str())
                .execute(tx.conn())
                .await?;
                let mut stored = Vec::with_capacity(document.sections.len());
                for section in &document.sections {
                    stored.push(insert(&mut tx, section).await?);
                }
                done.push((stored, u32::try_from(replaced).unwrap_or(u32::MAX)));
            }
            self.prune_changes(&mut tx).await?;
            Ok(done)
        }
        .await;
        settle(tx, outcome).await
    }

    #[instrument(name = "store.put_experience", skip_all, fields(kind = ?item.kind))]
    pub(super) async fn put_experience_impl(
        &self,
        item: NewKnowledge,
    ) -> StoreResult<KnowledgeItem> {
        let mut tx = self.begin().await?;
        let outcome: StoreResult<_> = async {
            // A task recorded again keeps what an admin shared of it.
            let mut sharing: Option<(SqlJson<serde_json::Value>, bool)> = None;
            if let Some(task) = item.task_id {
                let replaced = query(
                    "DELETE FROM knowledge WHERE kind = $1 AND task_id = $2 \
                     RETURNING shared_with, shared_everyone",
                )
                .bind(item.kind.db())
                .bind(task)
                .fetch_all(tx.conn())
                .await?;
                if let Some(row) = replaced.first() {
                    sharing = Some((row.try_get("shared_with")?, row.try_get("shared_everyone")?));
                }
            }
            let mut stored = insert(&mut tx, &item).await?;
            if let Some((names, everyone)) = sharing
                && (everyone || names.0.as_array().is_some_and(|a| !a.is_empty()))
            {
                stored = set_sharing(&mut tx, &stored.id, &names.0, everyone).await?;
            }
            // What the model-written summary cost counts with the task's (no event: the task has ended).
            if let (Some(task), Some(summary)) = (item.task_id, &item.summary)
                && (summary.cost > 0.0 || summary.input_tokens > 0 || summary.output_tokens > 0)
            {
                let totals = Totals {
                    steps: 0,
                    cost: summary.cost,
                    input_tokens: db_int(summary.input_tokens),
                    output_tokens: db_int(summary.output_tokens),
                };
                append(&mut tx, task, &[], totals, now()).await?;
            }
            self.prune_changes(&mut tx).await?;
            Ok(stored)
        }
        .await;
        settle(tx, outcome).await
    }

    #[instrument(name = "store.share_knowledge", skip_all,
        fields(target = ?share.target, callers = share.callers.len(), everyone = share.everyone,
               unshare = share.unshare))]
    pub(super) async fn share_knowledge_impl(
        &self,
        share: KnowledgeShare,
    ) -> StoreResult<KnowledgeItem> {
        let (id, task) = match share.target {
            ShareTarget::Id(id) => (Some(id), None),
            ShareTarget::Task(task) => (None, Some(task)),
        };
        // The row is locked (Postgres; SQLite has one writer) so concurrent shares merge, never lose one.
        let sql = format!(
            "SELECT {COLUMNS} FROM knowledge WHERE ($1 IS NULL OR id = $1) \
             AND ($2 IS NULL OR (kind = 'experience' AND task_id = $2)){}",
            self.dialect().pick(" FOR UPDATE", "")
        );
        let mut tx = self.begin().await?;
        let outcome: StoreResult<_> = async {
            let row = query(&sql)
                .bind(id)
                .bind(task)
                .fetch_optional(tx.conn())
                .await?;
            let Some(row) = row else {
                return Err(StoreError::NotFound(match share.target {
                    ShareTarget::Id(id) => format!("knowledge item {id}"),
                    ShareTarget::Task(task) => format!("experience of task {task}"),
                }));
            };
            let item = rows::knowledge_item(&row)?;
            if item.kind() == KnowledgeKind::Document {
                return Err(StoreError::InvalidArgument(format!(
                    "id: {} is a section of the help document {:?}; documents are every caller's \
                     already, only experiences and demonstrations are shared",
                    item.id, item.source
                )));
            }
            let mut names: std::collections::BTreeSet<String> =
                item.shared_with.iter().cloned().collect();
            let mut everyone = item.shared_everyone;
            for caller in share.callers.iter().filter(|c| **c != item.owner) {
                if share.unshare {
                    names.remove(caller);
                } else {
                    names.insert(caller.clone());
                }
            }
            if share.everyone {
                everyone = !share.unshare;
            }
            if names.len() > share.max_callers as usize {
                return Err(StoreError::InvalidArgument(format!(
                    "callers: the item would be shared with {} callers; at most {} \
                     (--knowledge-max-share-callers), or share it with everyone",
                    names.len(),
                    share.max_callers
                )));
            }
            if names.len() == item.shared_with.len()
                && names.iter().eq(item.shared_with.iter())
                && everyone == item.shared_everyone
            {
                // Nothing changes: no write, no change for the indexes to follow.
                return Ok(item);
            }
            let names = serde_json::Value::from(names.into_iter().collect::<Vec<_>>());
            let item = set_sharing(&mut tx, &item.id, &names, everyone).await?;
            self.prune_changes(&mut tx).await?;
            Ok(item)
        }
        .await;
        settle(tx, outcome).await
    }

    #[instrument(name = "store.rate_experience", skip_all, fields(task = %task_id))]
    pub(super) async fn rate_experience_impl(
        &self,
        task_id: Uuid,
        owner: String,
        rating: ExperienceRating,
    ) -> StoreResult<KnowledgeItem> {
        let sql = format!(
            "UPDATE knowledge SET rating = $1 WHERE kind = 'experience' AND task_id = $2 AND owner = $3 \
             RETURNING {COLUMNS}"
        );
        let mut tx = self.begin().await?;
        let outcome: StoreResult<_> = async {
            let row = query(&sql)
                .bind(rating.db())
                .bind(task_id)
                .bind(owner.as_str())
                .fetch_optional(tx.conn())
                .await?;
            let Some(row) = row else {
                return Err(StoreError::NotFound(format!(
                    "experience of task {task_id}"
                )));
            };
            self.prune_changes(&mut tx).await?;
            rows::knowledge_item(&row)
        }
        .await;
        settle(tx, outcome).await
    }

    /// Sets how the in-memory index follows the rows (before the store is shared).
    pub fn with_index_options(self, options: IndexOptions) -> Self {
        *self
            .knowledge
            .options
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = options;
        self
    }

    /// Drops change-log entries older than the newest `changes_kept`, in the writer's transaction.
    async fn prune_changes(&self, conn: &mut impl AsConn) -> StoreResult<()> {
        query(
            "DELETE FROM knowledge_changes \
             WHERE generation <= (SELECT generation FROM knowledge_generation) - $1",
        )
        .bind(i64::from(self.knowledge.options().changes_kept))
        .execute(conn.conn())
        .await?;
        Ok(())
    }

    /// The first `limit` changes past `generation`, oldest first.
    async fn changes_since(&self, generation: i64, limit: u32) -> StoreResult<Vec<(i64, Uuid)>> {
        let found = query(
            "SELECT generation, id FROM knowledge_changes WHERE generation > $1 \
             ORDER BY generation LIMIT $2",
        )
        .bind(generation)
        .bind(i64::from(limit))
        .fetch_all(self.read())
        .await?;
        found
            .iter()
            .map(|row| Ok((row.try_get("generation")?, row.try_get("id")?)))
            .collect()
    }

    /// Brings the index up to date: applies the changes past it, or rebuilds it from every row when it
    /// is missing, too far behind (more than `max_delta` changes) or the log was pruned past it.
    #[instrument(name = "store.knowledge_index_refresh", skip_all,
        fields(changes = tracing::field::Empty, rebuilt = tracing::field::Empty))]
    async fn refresh_index(&self) -> StoreResult<()> {
        let _one = self.knowledge.refresh.lock().await;
        let options = self.knowledge.options();
        let generation = self
            .knowledge
            .index
            .read()
            .await
            .as_ref()
            .map(|i| i.generation);
        let changes = match generation {
            Some(g) => {
                let changes = self
                    .changes_since(g, options.max_delta.saturating_add(1))
                    .await?;
                if changes.is_empty() {
                    return Ok(());
                }
                let contiguous = changes.first().is_some_and(|c| c.0 == g + 1);
                (contiguous && changes.len() <= options.max_delta as usize).then_some(changes)
            }
            None => None,
        };
        let span = tracing::Span::current();
        let Some(changes) = changes else {
            span.record("rebuilt", true);
            let generation: i64 = query("SELECT generation FROM knowledge_generation")
                .fetch_one(self.read())
                .await?
                .try_get("generation")?;
            let sql = format!("SELECT {COLUMNS} FROM knowledge");
            let found = query(&sql).fetch_all(self.read()).await?;
            let items = found
                .iter()
                .map(rows::knowledge_item)
                .collect::<StoreResult<Vec<_>>>()?;
            let index = KnowledgeIndex::build(generation, items);
            tracing::debug!(rows = index.len(), generation, "knowledge index rebuilt");
            *self.knowledge.index.write().await = Some(index);
            return Ok(());
        };
        span.record("changes", changes.len());
        let last = changes.last().map_or(0, |c| c.0);
        let mut ids: Vec<Uuid> = Vec::with_capacity(changes.len());
        let mut seen = HashSet::new();
        for (_, id) in changes {
            if seen.insert(id) {
                ids.push(id);
            }
        }
        let mut found: HashMap<Uuid, KnowledgeItem> = HashMap::with_capacity(ids.len());
        for chunk in ids.chunks(IDS_PER_FETCH) {
            let marks = (1..=chunk.len())
                .map(|n| format!("${n}"))
                .collect::<Vec<_>>()
                .join(", ");
            let sql = format!("SELECT {COLUMNS} FROM knowledge WHERE id IN ({marks})");
            let mut fetch = query(&sql);
            for id in chunk {
                fetch = fetch.bind(*id);
            }
            for row in fetch.fetch_all(self.read()).await? {
                let id: Uuid = row.try_get("id")?;
                found.insert(id, rows::knowledge_item(&row)?);
            }
        }
        let mut guard = self.knowledge.index.write().await;
        if let Some(index) = guard.as_mut() {
            for id in ids {
                match found.remove(&id) {
                    Some(item) => index.upsert(item),
                    None => index.remove(&id),
                }
            }
            index.generation = index.generation.max(last);
        }
        Ok(())
    }

    /// Ranks the rows for `search` on the in-memory index, brought up to date first.
    #[instrument(name = "store.search_knowledge", skip_all,
        fields(terms = search.terms.len(), hits = tracing::field::Empty, ms = tracing::field::Empty))]
    pub(super) async fn search_knowledge_impl(
        &self,
        search: KnowledgeSearch,
    ) -> StoreResult<Vec<KnowledgeHit>> {
        if search.terms.is_empty() || search.limit == 0 {
            return Ok(Vec::new());
        }
        let started = Instant::now();
        let generation = self
            .knowledge
            .index
            .read()
            .await
            .as_ref()
            .map(|i| i.generation);
        let behind = match generation {
            Some(g) => !self.changes_since(g, 1).await?.is_empty(),
            None => true,
        };
        if behind {
            self.refresh_index().await?;
        }
        let hits = self
            .knowledge
            .index
            .read()
            .await
            .as_ref()
            .map(|index| index.search(&search))
            .unwrap_or_default();
        let span = tracing::Span::current();
        span.record("hits", hits.len());
        span.record("ms", started.elapsed().as_secs_f64() * 1000.0);
        Ok(hits)
    }

    /// The databases' own full-text search (Postgres `ts_rank_cd`, SQLite FTS5 `bm25()` plus a title
    /// `bm25()`), as searches ran before the in-memory index: kept for the benchmark's side-by-side
    /// comparison (`benches/knowledge.rs`).
    #[doc(hidden)]
    #[instrument(name = "store.search_knowledge_sql", skip_all, fields(terms = search.terms.len()))]
    pub async fn search_knowledge_sql(
        &self,
        search: KnowledgeSearch,
    ) -> StoreResult<Vec<KnowledgeHit>> {
        if search.terms.is_empty() || search.limit == 0 {
            return Ok(Vec::new());
        }
        let dialect = self.dialect();
        let text = match dialect {
            Dialect::Postgres => postgres_query(&search.terms),
            Dialect::Sqlite => sqlite_query(&search.terms),
        };
        let sql = search_sql(dialect);
        // Candidates beyond `limit` when sources are capped, so capped-out sections leave room for others.
        let candidates = match search.per_source {
            0 => search.limit,
            _ => search.limit.saturating_mul(CANDIDATES_PER_HIT),
        };
        let mut found = query(&sql)
            .bind(text)
            .bind(search.application.clone().unwrap_or_default())
            .bind(search.owner.as_str())
            .bind(search.includes(KnowledgeKind::Document))
            .bind(search.includes(KnowledgeKind::Experience))
            .bind(search.includes(KnowledgeKind::Demonstration))
            .bind(i64::from(candidates));
        if dialect == Dialect::Sqlite {
            found = found.bind(sqlite_title_query(&search.terms));
        }
        let found = found.fetch_all(self.read()).await?;
        let mut hits: Vec<KnowledgeHit> = Vec::with_capacity(search.limit as usize);
        let mut per_source: HashMap<String, u32> = HashMap::new();
        for row in &found {
            let item = rows::knowledge_item(row)?;
            if search.per_source > 0 {
                let seen = per_source.entry(item.source.clone()).or_default();
                if *seen >= search.per_source {
                    continue;
                }
                *seen += 1;
            }
            hits.push(KnowledgeHit {
                item: Some(item),
                score: row.try_get("score")?,
                shared: row.try_get::<i64, _>("shared")? == 1,
            });
            if hits.len() == search.limit as usize {
                break;
            }
        }
        Ok(hits)
    }

    #[instrument(name = "store.list_knowledge", skip_all)]
    pub(super) async fn list_knowledge_impl(
        &self,
        filter: KnowledgeFilter,
    ) -> StoreResult<Vec<KnowledgeItem>> {
        let sql = format!(
            "SELECT {COLUMNS} FROM knowledge WHERE ($1 = '' OR kind = $1) \
             AND ($2 = '' OR application = $2) AND ($3 = '' OR owner = $3) AND ($4 = '' OR source = $4) \
             ORDER BY created_at DESC, source, position LIMIT $5"
        );
        let found = query(&sql)
            .bind(filter.kind.map(|k| k.db()).unwrap_or_default())
            .bind(filter.application.unwrap_or_default())
            .bind(filter.owner.unwrap_or_default())
            .bind(filter.source.unwrap_or_default())
            .bind(i64::from(filter.limit))
            .fetch_all(self.read())
            .await?;
        found.iter().map(rows::knowledge_item).collect()
    }

    #[instrument(name = "store.delete_knowledge", skip_all)]
    pub(super) async fn delete_knowledge_impl(&self, which: KnowledgeDelete) -> StoreResult<u32> {
        if which.id.is_none() && which.source.is_none() && which.task_id.is_none() {
            return Err(StoreError::FailedPrecondition(
                "say which knowledge to delete: an id, a source or a task".into(),
            ));
        }
        let mut tx = self.begin().await?;
        let outcome: StoreResult<_> = async {
            let deleted = query(
                "DELETE FROM knowledge WHERE ($1 IS NULL OR id = $1) AND ($2 IS NULL OR source = $2) \
                 AND ($3 IS NULL OR task_id = $3) AND ($4 IS NULL OR owner = $4)",
            )
            .bind(which.id)
            .bind(which.source)
            .bind(which.task_id)
            .bind(which.owner)
            .execute(tx.conn())
            .await?;
            self.prune_changes(&mut tx).await?;
            Ok(u32::try_from(deleted).unwrap_or(u32::MAX))
        }
        .await;
        settle(tx, outcome).await
    }
}
