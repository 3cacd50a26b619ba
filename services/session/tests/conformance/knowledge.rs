//! Knowledge: documents replaced whole, experiences isolated by owner, failed and bad-rated ones never
//! retrieved, and retrieval quality on a real help corpus (zenity's Mallard pages).

use std::path::Path;
use std::sync::Arc;

use ufo_proto::v1::{DocumentFormat, ExperienceRating, KnowledgeKind};
use ufo_session::knowledge::parse::{ParseError, sections};
use ufo_session::knowledge::{
    KnowledgeDelete, KnowledgeFilter, KnowledgeSearch, KnowledgeShare, NewKnowledge, ShareTarget,
    terms,
};
use ufo_session::store::{Store, StoreError};
use uuid::Uuid;

/// Where Debian's `zenity` package installs its help (the CI installs it).
pub const ZENITY_HELP: &str = "/usr/share/help/C/zenity";

/// Where Debian's `gnome-user-docs` package installs the GNOME desktop help and the system administrator
/// guide (the CI installs it): the realistic distractors of the retrieval conformance.
pub const GNOME_USER_DOCS: [&str; 2] = [
    "/usr/share/help/C/gnome-help",
    "/usr/share/help/C/system-admin-guide",
];

fn doc(app: &str, source: &str, position: u32, title: &str, body: &str) -> NewKnowledge {
    NewKnowledge {
        kind: KnowledgeKind::Document,
        owner: String::new(),
        application: app.into(),
        source: source.into(),
        position,
        title: title.into(),
        body: body.into(),
        code: String::new(),
        task_id: None,
        succeeded: true,
        summary: None,
    }
}

fn experience(owner: &str, task: Uuid, title: &str, body: &str, succeeded: bool) -> NewKnowledge {
    NewKnowledge {
        kind: KnowledgeKind::Experience,
        owner: owner.into(),
        application: "mousepad".into(),
        source: format!("task:{task}"),
        position: 0,
        title: title.into(),
        body: body.into(),
        code: String::new(),
        task_id: Some(task),
        succeeded,
        summary: None,
    }
}

pub fn search(query: &str, owner: &str, app: Option<&str>, limit: u32) -> KnowledgeSearch {
    KnowledgeSearch {
        terms: terms(query),
        application: app.map(str::to_owned),
        owner: owner.into(),
        kinds: Vec::new(),
        limit,
        per_source: 1,
    }
}

fn sources(hits: &[ufo_proto::v1::KnowledgeHit]) -> Vec<String> {
    hits.iter()
        .map(|h| h.item.as_ref().unwrap().source.clone())
        .collect()
}

pub async fn knowledge_documents_replace_and_search(store: Arc<dyn Store>) {
    let (items, replaced) = store
        .replace_document(
            "gedit".into(),
            "gedit.md".into(),
            vec![
                doc(
                    "gedit",
                    "gedit.md",
                    0,
                    "Save a file",
                    "Press Ctrl+S to save the document.",
                ),
                doc(
                    "gedit",
                    "gedit.md",
                    1,
                    "Print",
                    "Choose Print from the menu.",
                ),
            ],
        )
        .await
        .unwrap();
    assert_eq!((items.len(), replaced), (2, 0));
    assert_eq!(items[1].position, 1);
    store
        .replace_document(
            String::new(),
            "general.txt".into(),
            vec![doc(
                "",
                "general.txt",
                0,
                "Saving",
                "Every editor saves with a shortcut.",
            )],
        )
        .await
        .unwrap();
    store
        .replace_document(
            "calc".into(),
            "calc.md".into(),
            vec![doc(
                "calc",
                "calc.md",
                0,
                "Save a sheet",
                "Save the spreadsheet.",
            )],
        )
        .await
        .unwrap();

    // Best first; the application filter keeps the app's and the general documents.
    let hits = store
        .search_knowledge(search("how do I save the document", "", Some("gedit"), 5))
        .await
        .unwrap();
    assert_eq!(sources(&hits), ["gedit.md", "general.txt"]);
    assert!(hits[0].score >= hits[1].score);
    assert_eq!(hits[0].item.as_ref().unwrap().title, "Save a file");
    let everywhere = store
        .search_knowledge(search("save", "", None, 5))
        .await
        .unwrap();
    assert_eq!(everywhere.len(), 3);
    // Only stop words or no words: no hits, no error.
    let none = store
        .search_knowledge(search("how do I", "", None, 5))
        .await
        .unwrap();
    assert!(none.is_empty());

    // Re-adding a source replaces its sections in one go.
    let (items, replaced) = store
        .replace_document(
            "gedit".into(),
            "gedit.md".into(),
            vec![doc(
                "gedit",
                "gedit.md",
                0,
                "Undo",
                "Press Ctrl+Z to undo typing.",
            )],
        )
        .await
        .unwrap();
    assert_eq!((items.len(), replaced), (1, 2));
    let hits = store
        .search_knowledge(search("print", "", Some("gedit"), 5))
        .await
        .unwrap();
    assert!(hits.is_empty(), "replaced sections are gone: {hits:?}");

    let listed = store
        .list_knowledge(KnowledgeFilter {
            kind: Some(KnowledgeKind::Document),
            limit: 10,
            ..KnowledgeFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(listed.len(), 3);
    let deleted = store
        .delete_knowledge(KnowledgeDelete {
            source: Some("calc.md".into()),
            ..KnowledgeDelete::default()
        })
        .await
        .unwrap();
    assert_eq!(deleted, 1);
    assert!(matches!(
        store.delete_knowledge(KnowledgeDelete::default()).await,
        Err(StoreError::FailedPrecondition(_))
    ));
}

pub async fn knowledge_experiences_are_the_owners_and_never_failed_or_bad(store: Arc<dyn Store>) {
    let alice_task = Uuid::new_v4();
    let failed_task = Uuid::new_v4();
    let bob_task = Uuid::new_v4();
    store
        .put_experience(experience(
            "alice",
            alice_task,
            "write the shopping list in mousepad",
            "1. click Text View; type 'milk'",
            true,
        ))
        .await
        .unwrap();
    store
        .put_experience(experience(
            "alice",
            failed_task,
            "write the packing list in mousepad",
            "1. click Text View; type 'socks' — failed",
            false,
        ))
        .await
        .unwrap();
    store
        .put_experience(experience(
            "bob",
            bob_task,
            "write the todo list in mousepad",
            "1. click Text View; type 'call'",
            true,
        ))
        .await
        .unwrap();

    let for_alice = store
        .search_knowledge(search("write a list in mousepad", "alice", None, 10))
        .await
        .unwrap();
    assert_eq!(sources(&for_alice), [format!("task:{alice_task}")]);
    let for_bob = store
        .search_knowledge(search("write a list in mousepad", "bob", None, 10))
        .await
        .unwrap();
    assert_eq!(sources(&for_bob), [format!("task:{bob_task}")]);
    let for_nobody = store
        .search_knowledge(search("write a list in mousepad", "", None, 10))
        .await
        .unwrap();
    assert!(for_nobody.is_empty());

    // Only the owner may rate; a bad rating hides it; a good one brings it back.
    assert!(matches!(
        store
            .rate_experience(alice_task, "bob".into(), ExperienceRating::Bad)
            .await,
        Err(StoreError::NotFound(_))
    ));
    let rated = store
        .rate_experience(alice_task, "alice".into(), ExperienceRating::Bad)
        .await
        .unwrap();
    assert_eq!(rated.rating, ExperienceRating::Bad as i32);
    assert!(
        store
            .search_knowledge(search("shopping list", "alice", None, 10))
            .await
            .unwrap()
            .is_empty()
    );
    store
        .rate_experience(alice_task, "alice".into(), ExperienceRating::Good)
        .await
        .unwrap();
    assert_eq!(
        store
            .search_knowledge(search("shopping list", "alice", None, 10))
            .await
            .unwrap()
            .len(),
        1
    );

    // Recording a task again replaces its experience.
    store
        .put_experience(experience(
            "alice",
            alice_task,
            "write the shopping list in mousepad",
            "1. click Text View; type 'bread'",
            true,
        ))
        .await
        .unwrap();
    let listed = store
        .list_knowledge(KnowledgeFilter {
            owner: Some("alice".into()),
            kind: Some(KnowledgeKind::Experience),
            limit: 10,
            ..KnowledgeFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(listed.len(), 2);
    assert!(listed.iter().any(|i| i.body.contains("bread")));
    assert!(!listed.iter().any(|i| i.body.contains("milk")));

    // Kinds filter: documents only never returns experiences.
    let mut docs_only = search("shopping list mousepad", "alice", None, 10);
    docs_only.kinds = vec![KnowledgeKind::Document];
    assert!(store.search_knowledge(docs_only).await.unwrap().is_empty());
}

fn share(target: ShareTarget, callers: &[&str], everyone: bool, unshare: bool) -> KnowledgeShare {
    KnowledgeShare {
        target,
        callers: callers.iter().map(|c| (*c).to_owned()).collect(),
        everyone,
        unshare,
        max_callers: 3,
    }
}

/// An admin's sharing (docs/knowledge.md "Isolation and sharing"): alice's experience reaches bob only once
/// shared with him (marked shared, her name on it), never carol until shared with everyone; unsharing takes
/// it back; a failed or bad-rated one stays out even when shared; a document, an unknown id and more names
/// than the limit are refused; the sharing survives the task being recorded again.
pub async fn knowledge_sharing_reaches_only_the_named_callers(store: Arc<dyn Store>) {
    let task = Uuid::new_v4();
    let failed = Uuid::new_v4();
    let mine = store
        .put_experience(experience(
            "alice",
            task,
            "write the shopping list in mousepad",
            "1. click Text View; type 'milk'",
            true,
        ))
        .await
        .unwrap();
    store
        .put_experience(experience(
            "alice",
            failed,
            "write the packing list in mousepad",
            "1. click Text View; type 'socks' — failed",
            false,
        ))
        .await
        .unwrap();
    let hits = |owner: &'static str| {
        let store = store.clone();
        async move {
            store
                .search_knowledge(search("write a list in mousepad", owner, None, 10))
                .await
                .unwrap()
        }
    };
    assert!(hits("bob").await.is_empty());
    let id = ShareTarget::Id(Uuid::parse_str(&mine.id).unwrap());
    let shared = store
        .share_knowledge(share(id, &["bob", "alice", "bob"], false, false))
        .await
        .unwrap();
    // The owner's own name is not stored; names are kept once, sorted.
    assert_eq!(shared.shared_with, ["bob"]);
    assert!(!shared.shared_everyone);
    let for_bob = hits("bob").await;
    assert_eq!(sources(&for_bob), [format!("task:{task}")]);
    assert!(for_bob[0].shared);
    assert_eq!(for_bob[0].item.as_ref().unwrap().owner, "alice");
    assert!(hits("carol").await.is_empty());
    let for_alice = hits("alice").await;
    assert_eq!(sources(&for_alice), [format!("task:{task}")]);
    assert!(!for_alice[0].shared, "her own item is not shared with her");
    // A failed task's experience stays out even when shared with everyone.
    store
        .share_knowledge(share(ShareTarget::Task(failed), &[], true, false))
        .await
        .unwrap();
    assert_eq!(sources(&hits("carol").await), Vec::<String>::new());

    // Everyone: carol too; recording the task again keeps the sharing.
    store
        .share_knowledge(share(ShareTarget::Task(task), &["carol"], true, false))
        .await
        .unwrap();
    store
        .put_experience(experience(
            "alice",
            task,
            "write the shopping list in mousepad",
            "1. click Text View; type 'bread'",
            true,
        ))
        .await
        .unwrap();
    let for_dave = hits("dave").await;
    assert_eq!(sources(&for_dave), [format!("task:{task}")]);
    let again = for_dave[0].item.clone().unwrap();
    assert!(again.body.contains("bread"));
    assert_eq!(again.shared_with, ["bob", "carol"]);
    assert!(again.shared_everyone);
    // A bad rating (the owner's) hides it from everyone it is shared with.
    store
        .rate_experience(task, "alice".into(), ExperienceRating::Bad)
        .await
        .unwrap();
    assert!(hits("bob").await.is_empty());
    assert!(hits("dave").await.is_empty());
    store
        .rate_experience(task, "alice".into(), ExperienceRating::Good)
        .await
        .unwrap();

    // Unsharing: everyone off, then bob off; carol keeps it until taken off too.
    let again_id = ShareTarget::Id(Uuid::parse_str(&again.id).unwrap());
    store
        .share_knowledge(share(again_id, &[], true, true))
        .await
        .unwrap();
    assert!(hits("dave").await.is_empty());
    assert_eq!(hits("bob").await.len(), 1);
    let left = store
        .share_knowledge(share(again_id, &["bob", "nobody"], false, true))
        .await
        .unwrap();
    assert_eq!(left.shared_with, ["carol"]);
    assert!(hits("bob").await.is_empty());
    assert_eq!(hits("carol").await.len(), 1);

    // Refusals: more names than the limit in all, a document, an unknown item.
    assert!(matches!(
        store
            .share_knowledge(share(again_id, &["d", "e", "f"], false, false))
            .await,
        Err(StoreError::InvalidArgument(m)) if m.contains("at most 3")
    ));
    assert_eq!(hits("d").await.len(), 0, "a refused share stores nothing");
    let (sections, _) = store
        .replace_document(
            "mousepad".into(),
            "lists.md".into(),
            vec![doc("mousepad", "lists.md", 0, "Lists", "Write a list.")],
        )
        .await
        .unwrap();
    let section = ShareTarget::Id(Uuid::parse_str(&sections[0].id).unwrap());
    assert!(matches!(
        store.share_knowledge(share(section, &["bob"], false, false)).await,
        Err(StoreError::InvalidArgument(m)) if m.contains("document")
    ));
    assert!(matches!(
        store
            .share_knowledge(share(
                ShareTarget::Id(Uuid::new_v4()),
                &["bob"],
                false,
                false
            ))
            .await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        store
            .share_knowledge(share(
                ShareTarget::Task(Uuid::new_v4()),
                &["bob"],
                false,
                false
            ))
            .await,
        Err(StoreError::NotFound(_))
    ));
}

/// The databases' own full-text search (`search_knowledge_sql`, the benchmark's comparison) filters by
/// sharing as the index does: alice's experience reaches bob only once shared with him, marked shared.
pub async fn knowledge_sql_search_follows_sharing(store: &ufo_session::store::SqlStore) {
    let task = Uuid::new_v4();
    store
        .put_experience(experience(
            "alice",
            task,
            "write the shopping list in mousepad",
            "1. click Text View; type 'milk'",
            true,
        ))
        .await
        .unwrap();
    let found = |owner: &'static str| async move {
        store
            .search_knowledge_sql(search("shopping list mousepad", owner, None, 10))
            .await
            .unwrap()
    };
    assert!(found("bob").await.is_empty());
    assert!(!found("alice").await[0].shared);
    store
        .share_knowledge(share(ShareTarget::Task(task), &["bob"], false, false))
        .await
        .unwrap();
    let for_bob = found("bob").await;
    assert_eq!(sources(&for_bob), [format!("task:{task}")]);
    assert!(for_bob[0].shared);
    assert!(found("carol").await.is_empty());
    store
        .share_knowledge(share(ShareTarget::Task(task), &[], true, false))
        .await
        .unwrap();
    assert_eq!(found("carol").await.len(), 1);
    assert!(found("").await.is_empty(), "no caller, no shared item");
}

/// Every store keeps its own in-memory index of the rows (docs/knowledge.md "Ranking"): what one replica
/// writes, another's next search sees — new, replaced, re-rated and deleted rows — whether it applies the
/// changes (`b`) or has to rebuild because more changed than it applies at once or the change log was
/// pruned past it (`c`, configured with a delta of 2 and a log of 3 entries, which its own writes prune
/// the log to).
pub async fn knowledge_replicas_see_each_others_writes(
    a: Arc<dyn Store>,
    b: Arc<dyn Store>,
    c: Arc<dyn Store>,
) {
    let found = |store: Arc<dyn Store>, query: &'static str, owner: &'static str| async move {
        sources(
            &store
                .search_knowledge(search(query, owner, None, 10))
                .await
                .unwrap(),
        )
    };
    // Both build their (empty) index first.
    assert!(found(b.clone(), "save", "").await.is_empty());
    assert!(found(c.clone(), "save", "").await.is_empty());
    let section = |i: u32, title: &str| doc("gedit", "save.md", i, title, "Press Ctrl+S to save.");
    a.replace_document(
        "gedit".into(),
        "save.md".into(),
        vec![
            section(0, "Saving"),
            section(1, "Saving as"),
            section(2, "Autosave"),
        ],
    )
    .await
    .unwrap();
    for replica in [&b, &c] {
        assert_eq!(found(replica.clone(), "save", "").await, ["save.md"]);
    }
    // Replaced: the old sections' words are gone, the new ones found.
    a.replace_document(
        "gedit".into(),
        "save.md".into(),
        vec![doc(
            "gedit",
            "save.md",
            0,
            "Printing",
            "Choose Print in the menu.",
        )],
    )
    .await
    .unwrap();
    for replica in [&b, &c] {
        assert!(found(replica.clone(), "save", "").await.is_empty());
        assert_eq!(found(replica.clone(), "print menu", "").await, ["save.md"]);
    }
    // An experience appears for its owner, and goes when rated bad (a change of a column only).
    let task = Uuid::now_v7();
    a.put_experience(experience(
        "alice",
        task,
        "write a shopping list",
        "typed milk",
        true,
    ))
    .await
    .unwrap();
    for replica in [&b, &c] {
        assert_eq!(
            found(replica.clone(), "shopping list", "alice").await,
            [format!("task:{task}")]
        );
        assert!(
            found(replica.clone(), "shopping list", "bob")
                .await
                .is_empty()
        );
    }
    // Shared with bob on one replica, unshared on another: every replica follows both.
    a.share_knowledge(share(ShareTarget::Task(task), &["bob"], false, false))
        .await
        .unwrap();
    for replica in [&a, &b, &c] {
        assert_eq!(
            found(replica.clone(), "shopping list", "bob").await,
            [format!("task:{task}")]
        );
    }
    b.share_knowledge(share(ShareTarget::Task(task), &["bob"], false, true))
        .await
        .unwrap();
    for replica in [&a, &b, &c] {
        assert!(
            found(replica.clone(), "shopping list", "bob")
                .await
                .is_empty()
        );
    }
    a.rate_experience(task, "alice".into(), ExperienceRating::Bad)
        .await
        .unwrap();
    for replica in [&b, &c] {
        assert!(
            found(replica.clone(), "shopping list", "alice")
                .await
                .is_empty()
        );
    }
    // `c` writes five rows and prunes the log to its last three: `b` finds its next change gone from the
    // log and rebuilds.
    let undo = |i: u32| {
        doc(
            "gedit",
            "undo.md",
            i,
            "Undo",
            "Press Ctrl+Z to undo typing.",
        )
    };
    c.replace_document("gedit".into(), "undo.md".into(), (0..5).map(undo).collect())
        .await
        .unwrap();
    for replica in [&a, &b, &c] {
        assert_eq!(found(replica.clone(), "undo typing", "").await, ["undo.md"]);
    }
    // Deleted on another replica: gone everywhere, also for the writer itself.
    a.delete_knowledge(KnowledgeDelete {
        source: Some("save.md".into()),
        ..KnowledgeDelete::default()
    })
    .await
    .unwrap();
    for replica in [&a, &b, &c] {
        assert!(found(replica.clone(), "print menu", "").await.is_empty());
    }
}

/// Loads every Mallard page of `dir` as one document each (application `app`); returns the section count.
pub async fn load_help(store: &dyn Store, dir: &Path, app: &str) -> usize {
    let mut pages: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e} (install the Debian package)", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "page"))
        .collect();
    pages.sort();
    assert!(pages.len() >= 15, "too few help pages in {}", dir.display());
    let mut count = 0;
    for page in pages {
        let name = page.file_name().unwrap().to_string_lossy().into_owned();
        let content = std::fs::read(&page).unwrap();
        let parsed = match sections(DocumentFormat::Mallard, &name, &content, 2000, 2000) {
            Ok(parsed) => parsed,
            // A guide page of links only (index.page).
            Err(ParseError::Empty) => continue,
            Err(e) => panic!("{name}: {e}"),
        };
        let rows = parsed
            .into_iter()
            .enumerate()
            .map(|(i, s)| NewKnowledge {
                code: s.code,
                ..doc(app, &name, i as u32, &s.title, &s.body)
            })
            .collect();
        let (stored, _) = store
            .replace_document(app.into(), name, rows)
            .await
            .unwrap();
        count += stored.len();
    }
    count
}

/// The questions of `tests/data/zenity-questions.tsv`: (answering page, question).
pub fn zenity_questions() -> Vec<(String, String)> {
    let text = include_str!("../data/zenity-questions.tsv");
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (page, question) = l.split_once('\t').unwrap();
            (page.to_owned(), question.to_owned())
        })
        .collect()
}

/// Top-3 hit rate of the zenity questions on zenity's help alone, at least `min_rate`.
pub async fn knowledge_retrieval_on_the_zenity_help(store: Arc<dyn Store>, min_rate: f64) {
    let sections = load_help(store.as_ref(), Path::new(ZENITY_HELP), "zenity").await;
    assert!(sections >= 20, "{sections} sections");
    zenity_questions_top3(store.as_ref(), "zenity help", min_rate).await;
}

/// Top-3 hit rate of the zenity questions, at least `min_rate`, with the GNOME desktop help and the
/// system administrator guide (`gnome-user-docs`) stored beside zenity's pages as documents for any
/// application: every GNOME page competes with zenity's for each question, as when an operator adds the
/// desktop's help for all applications.
pub async fn knowledge_retrieval_among_the_gnome_help(store: Arc<dyn Store>, min_rate: f64) {
    let zenity = load_help(store.as_ref(), Path::new(ZENITY_HELP), "zenity").await;
    let mut distractors = 0;
    for dir in GNOME_USER_DOCS {
        distractors += load_help(store.as_ref(), Path::new(dir), "").await;
    }
    assert!(
        distractors >= 10 * zenity,
        "{distractors} GNOME help sections against {zenity} of zenity's"
    );
    let label = format!("zenity help ({zenity} sections) among {distractors} GNOME help sections");
    zenity_questions_top3(store.as_ref(), &label, min_rate).await;
}

/// Asks every zenity question (application zenity, top 3) and asserts the answering page's hit rate.
async fn zenity_questions_top3(store: &dyn Store, corpus: &str, min_rate: f64) {
    let questions = zenity_questions();
    assert!(questions.len() >= 40);
    let mut misses = Vec::new();
    for (page, question) in &questions {
        let hits = store
            .search_knowledge(search(question, "", Some("zenity"), 3))
            .await
            .unwrap();
        if !sources(&hits).contains(page) {
            misses.push(format!(
                "{question:?} wanted {page}, got {:?}",
                sources(&hits)
            ));
        }
    }
    let rate = 1.0 - misses.len() as f64 / questions.len() as f64;
    eprintln!(
        "{corpus}: top-3 hit rate {:.1} % ({}/{}); misses: {misses:#?}",
        rate * 100.0,
        questions.len() - misses.len(),
        questions.len()
    );
    assert!(
        rate >= min_rate,
        "{corpus}: top-3 hit rate {rate:.3} < {min_rate}: {misses:#?}"
    );
}
