//! Knowledge retrieval latency with 10,000 sections, on both stores (issue 33: p50 ≤ 5 ms): the store's
//! search (the in-memory index, brought up to date from the change log first) side by side with the
//! databases' own full-text search it replaced (`search_knowledge_sql`), the two alternating question by
//! question so both see the same machine load. Also measured: the first search (the index built from
//! every row) and a search right after a write (the change applied as a delta).
//!
//! Run: `cargo bench -p ufo-session --bench knowledge`. The corpus is zenity's help pages
//! (`/usr/share/help/C/zenity`, Debian package `zenity`), the GNOME help pages of `gnome-user-docs` when
//! installed (stored for any application, as in the conformance test), plus deterministic synthetic
//! sections drawn from zenity's vocabulary up to `UFO_BENCH_KNOWLEDGE_SECTIONS` (default 10000); the
//! queries are the 46
//! questions of `tests/data/zenity-questions.tsv`, each asked `UFO_BENCH_KNOWLEDGE_ROUNDS` times (default
//! 20), top 5. SQLite runs on a temporary file; Postgres on a scratch database of `DATABASE_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`), created and dropped.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Instant;

use hdrhistogram::Histogram;
use sqlx::{Connection as _, Executor as _};
use ufo_proto::v1::{DocumentFormat, KnowledgeKind};
use ufo_session::knowledge::parse::sections;
use ufo_session::knowledge::{KnowledgeSearch, NewKnowledge, terms};
use ufo_session::store::{SqlStore, Store, postgres, sqlite};

const HELP: &str = "/usr/share/help/C/zenity";
/// `gnome-user-docs`' pages: real distractors, for any application.
const GNOME_HELP: [&str; 2] = [
    "/usr/share/help/C/gnome-help",
    "/usr/share/help/C/system-admin-guide",
];

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn section(source: &str, position: u32, title: String, body: String, code: String) -> NewKnowledge {
    NewKnowledge {
        kind: KnowledgeKind::Document,
        owner: String::new(),
        application: APP.into(),
        source: source.into(),
        position,
        title,
        body,
        code,
        task_id: None,
        succeeded: true,
        summary: None,
    }
}

/// zenity's pages' rows are for zenity; the GNOME help's for any application ("").
const APP: &str = "zenity";

/// The Mallard pages' sections of `dir`, as (source, sections) for `application`; none when `dir` is
/// missing and `required` is false.
fn help(dir: &str, application: &str, required: bool) -> Vec<(String, Vec<NewKnowledge>)> {
    let mut out = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if required => panic!("{dir}: {e} (install the Debian package)"),
        Err(_) => return out,
    };
    let mut pages: Vec<_> = entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "page"))
        .collect();
    pages.sort();
    for page in pages {
        let name = page.file_name().unwrap().to_string_lossy().into_owned();
        let Ok(parsed) = sections(
            DocumentFormat::Mallard,
            &name,
            &std::fs::read(&page).unwrap(),
            2000,
            2000,
        ) else {
            continue;
        };
        let rows = parsed
            .into_iter()
            .enumerate()
            .map(|(i, s)| NewKnowledge {
                application: application.into(),
                ..section(&name, i as u32, s.title, s.body, s.code)
            })
            .collect();
        out.push((name, rows));
    }
    out
}

/// `count` synthetic sections of 40–160 words from `vocabulary`, 100 per source (xorshift, seeded).
fn synthetic(vocabulary: &[String], count: usize) -> Vec<(String, Vec<NewKnowledge>)> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut docs = Vec::new();
    for d in 0..count.div_ceil(100) {
        let source = format!("synthetic-{d:04}.md");
        let n = (count - d * 100).min(100);
        let rows = (0..n)
            .map(|i| {
                let len = 40 + (next() as usize) % 120;
                let mut words = (0..3 + len)
                    .map(|_| vocabulary[(next() as usize) % vocabulary.len()].clone())
                    .collect::<Vec<_>>();
                let body = words.split_off(3).join(" ");
                section(&source, i as u32, words.join(" "), body, String::new())
            })
            .collect();
        docs.push((source, rows));
    }
    docs
}

/// The process's resident memory (Linux `VmRSS`), in KiB; 0 where unknown.
fn resident_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn quantiles(h: &Histogram<u64>) -> String {
    format!(
        "p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        h.value_at_quantile(0.5) as f64 / 1000.0,
        h.value_at_quantile(0.9) as f64 / 1000.0,
        h.value_at_quantile(0.99) as f64 / 1000.0,
        h.max() as f64 / 1000.0,
    )
}

async fn bench(name: &str, store: Arc<SqlStore>, total: usize, rounds: usize) {
    let zenity = help(HELP, APP, true);
    let gnome: Vec<_> = GNOME_HELP
        .iter()
        .flat_map(|dir| help(dir, "", false))
        .collect();
    let mut vocabulary: Vec<String> = zenity
        .iter()
        .flat_map(|(_, rows)| rows.iter().flat_map(|r| terms(&r.body)))
        .collect();
    vocabulary.sort();
    vocabulary.dedup();
    let real: usize = zenity.iter().map(|(_, rows)| rows.len()).sum();
    let distractors: usize = gnome.iter().map(|(_, rows)| rows.len()).sum();
    let load = Instant::now();
    for (source, rows) in zenity.into_iter().chain(synthetic(
        &vocabulary,
        total.saturating_sub(real + distractors),
    )) {
        store
            .replace_document(APP.into(), source, rows)
            .await
            .unwrap();
    }
    for (source, rows) in gnome {
        store
            .replace_document(String::new(), source, rows)
            .await
            .unwrap();
    }
    let loaded = load.elapsed();
    let questions: Vec<(String, String)> = include_str!("../tests/data/zenity-questions.tsv")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (p, q) = l.split_once('\t').unwrap();
            (p.to_owned(), q.to_owned())
        })
        .collect();
    let search = |question: &str| KnowledgeSearch {
        terms: terms(question),
        application: Some("zenity".into()),
        owner: String::new(),
        kinds: Vec::new(),
        limit: 5,
        per_source: 1,
    };
    let top3 = |hits: &[ufo_proto::v1::KnowledgeHit], page: &str| {
        hits.iter()
            .take(3)
            .any(|h| h.item.as_ref().is_some_and(|i| i.source == page))
    };
    // The first search builds the index from every row.
    let rss = resident_kib();
    let t = Instant::now();
    store.search_knowledge(search("calendar")).await.unwrap();
    let built = t.elapsed();
    let grown = resident_kib().saturating_sub(rss);
    let mut index = Histogram::<u64>::new(3).unwrap();
    let mut sql = Histogram::<u64>::new(3).unwrap();
    let (mut index_top3, mut sql_top3) = (0, 0);
    for round in 0..rounds {
        for (page, question) in &questions {
            let t = Instant::now();
            let hits = store.search_knowledge(search(question)).await.unwrap();
            index.record(t.elapsed().as_micros() as u64).unwrap();
            if round == 0 && top3(&hits, page) {
                index_top3 += 1;
            }
            let t = Instant::now();
            let hits = store.search_knowledge_sql(search(question)).await.unwrap();
            sql.record(t.elapsed().as_micros() as u64).unwrap();
            if round == 0 && top3(&hits, page) {
                sql_top3 += 1;
            }
        }
    }
    // A write, then the search that applies it as a delta (repeated to get a median).
    let mut delta = Histogram::<u64>::new(3).unwrap();
    for i in 0..20u32 {
        store
            .put_experience(NewKnowledge {
                kind: KnowledgeKind::Experience,
                owner: "bench".into(),
                source: format!("task:{i}"),
                title: format!("calendar task {i}"),
                body: "pick a date in the calendar dialog".into(),
                task_id: Some(uuid::Uuid::now_v7()),
                ..section("", 0, String::new(), String::new(), String::new())
            })
            .await
            .unwrap();
        let t = Instant::now();
        store
            .search_knowledge(search("calendar date"))
            .await
            .unwrap();
        delta.record(t.elapsed().as_micros() as u64).unwrap();
    }
    println!(
        "{name}: {total} sections ({real} from the zenity help, {distractors} from the GNOME help) loaded \
         in {:.1} s; first search (index \
         built from the rows) {:.1} ms, resident memory +{:.1} MiB; {} searches each:\n  \
         index (store.search_knowledge): {}; top-3 among the distractors {index_top3}/{}\n  \
         database full-text (search_knowledge_sql): {}; top-3 among the distractors {sql_top3}/{}\n  \
         p50 ratio database/index {:.1}x; search right after a write (delta applied): {}",
        loaded.as_secs_f64(),
        built.as_secs_f64() * 1000.0,
        grown as f64 / 1024.0,
        index.len(),
        quantiles(&index),
        questions.len(),
        quantiles(&sql),
        questions.len(),
        sql.value_at_quantile(0.5) as f64 / index.value_at_quantile(0.5).max(1) as f64,
        quantiles(&delta),
    );
}

#[tokio::main]
async fn main() {
    let total = env_usize("UFO_BENCH_KNOWLEDGE_SECTIONS", 10_000);
    let rounds = env_usize("UFO_BENCH_KNOWLEDGE_ROUNDS", 20);

    let dir = tempfile::tempdir().unwrap();
    let blobs = ufo_session::blob::dir::DirBlobStore::open(dir.path().join("blobs")).unwrap();
    let store = Arc::new(
        sqlite::open(&dir.path().join("knowledge.sqlite3"), 4, &blobs)
            .await
            .unwrap(),
    );
    bench("sqlite", store, total, rounds).await;

    let base = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let scratch = format!("ufo_knowledge_bench_{}", std::process::id());
    let mut admin = sqlx::PgConnection::connect(&base).await.unwrap();
    admin
        .execute(format!("CREATE DATABASE {scratch}").as_str())
        .await
        .unwrap();
    let url = match base.rsplit_once('/') {
        Some((server, _)) => format!("{server}/{scratch}"),
        None => panic!("DATABASE_URL has no database name"),
    };
    let store = Arc::new(
        postgres::connect(
            &url,
            postgres::PgOptions {
                max_connections: 4,
                async_commit: false,
                acquire_timeout: std::time::Duration::from_secs(30),
                batching: postgres::StepBatching::default(),
            },
            &blobs,
        )
        .await
        .unwrap(),
    );
    bench("postgres", store, total, rounds).await;
    admin
        .execute(format!("DROP DATABASE IF EXISTS {scratch} WITH (FORCE)").as_str())
        .await
        .unwrap();
}
