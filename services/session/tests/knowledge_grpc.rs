//! The KnowledgeStore gRPC service over a real socket (embedded SQLite store): documents in, ranked hits
//! out with their sources; every bad input is INVALID_ARGUMENT naming the field, and nothing of it is
//! stored; one owner's experiences never reach another's search.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::Code;
use tonic::transport::Endpoint;
use ufo_proto::v1::knowledge_store_client::KnowledgeStoreClient;
use ufo_proto::v1::*;
use ufo_session::Config;

type Client = KnowledgeStoreClient<tonic::transport::Channel>;

async fn start(dir: &tempfile::TempDir, shutdown: &CancellationToken) -> Client {
    let mut config = Config::defaults();
    config.database_url = None;
    config.sqlite_path = dir.path().join("knowledge.sqlite3");
    config.auth_token = None;
    config.knowledge.knowledge_max_document_bytes = 64 * 1024;
    config.knowledge.knowledge_max_query_chars = 200;
    config.knowledge.knowledge_max_share_callers = 4;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(ufo_session::run(config, listener, shutdown.clone()));
    let channel = Endpoint::from_shared(url).unwrap().connect().await.unwrap();
    KnowledgeStoreClient::new(channel)
}

fn assert_invalid(status: tonic::Status, field: &str) {
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(
        status.message().starts_with(&format!("{field}:")),
        "message should name {field}: {}",
        status.message()
    );
}

fn add(source: &str, content: impl Into<bytes::Bytes>) -> AddDocumentRequest {
    AddDocumentRequest {
        application: "Zenity".into(),
        source: source.into(),
        format: DocumentFormat::Unspecified.into(),
        content: content.into(),
    }
}

#[tokio::test]
async fn documents_in_ranked_hits_out_and_bad_input_stores_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let shutdown = CancellationToken::new();
    let mut c = start(&dir, &shutdown).await;

    let page = std::fs::read("/usr/share/help/C/zenity/calendar.page")
        .expect("zenity's help (Debian package zenity)");
    let added = c
        .add_document(add("calendar.page", page))
        .await
        .unwrap()
        .into_inner();
    assert!(!added.items.is_empty());
    assert_eq!(added.items[0].application, "zenity");
    c.add_document(add(
        "save.md",
        "# Saving\nPress Ctrl+S to save.\n## Formats\nPDF and ODT.",
    ))
    .await
    .unwrap();

    let hits = c
        .search_knowledge(SearchKnowledgeRequest {
            query: "how do I choose a date in a calendar".into(),
            application: "zenity".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .hits;
    assert_eq!(hits[0].item.as_ref().unwrap().source, "calendar.page");
    assert!(hits[0].score > 0.0);

    let before = c
        .list_knowledge(ListKnowledgeRequest::default())
        .await
        .unwrap()
        .into_inner()
        .items
        .len();
    // Each refused whole: binary, NUL, control characters, scripts, unknown format, too big.
    let refused = [
        add("logo.png", b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec()),
        add("nul.md", b"# Title\nbefore\0after".to_vec()),
        add("bell.txt", b"ding\x07".to_vec()),
        add(
            "evil.html",
            b"<h1>Help</h1><p>ok</p><SCRIPT>fetch('x')</SCRIPT>".to_vec(),
        ),
        add(
            "link.html",
            b"<a href=\"javascript:alert(1)\">x</a>".to_vec(),
        ),
        add("notes.exe", b"text".to_vec()),
        add("big.md", vec![b'a'; 64 * 1024 + 1]),
        add("broken.page", b"<page><title>x</page>".to_vec()),
        add("empty.md", b"   \n".to_vec()),
    ];
    for request in refused {
        let source = request.source.clone();
        let err = c.add_document(request).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{source}: {err:?}");
    }
    let err = c
        .add_document(add("nul\0name.md", b"# x\ny".to_vec()))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    let err = c
        .add_document(add("", b"# x\ny".to_vec()))
        .await
        .unwrap_err();
    assert_invalid(err, "source");
    let after = c
        .list_knowledge(ListKnowledgeRequest::default())
        .await
        .unwrap()
        .into_inner()
        .items
        .len();
    assert_eq!(before, after, "nothing of a refused document is stored");

    for (query, field) in [("", "query"), ("a\0b", "query")] {
        let err = c
            .search_knowledge(SearchKnowledgeRequest {
                query: query.into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        if query.contains('\0') {
            assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
        } else {
            assert_invalid(err, field);
        }
    }
    let err = c
        .search_knowledge(SearchKnowledgeRequest {
            query: "word ".repeat(100),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_invalid(err, "query");
    let err = c
        .search_knowledge(SearchKnowledgeRequest {
            query: "date".into(),
            kinds: vec![99],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_invalid(err, "kinds");
    shutdown.cancel();
}

#[tokio::test]
async fn a_batch_with_one_bad_document_stores_none_and_replaces_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let shutdown = CancellationToken::new();
    let mut c = start(&dir, &shutdown).await;
    c.add_document(add("save.md", "# Saving\nPress Ctrl+S to save."))
        .await
        .unwrap();
    let listed = |c: &mut Client| {
        let mut c = c.clone();
        async move {
            let mut items: Vec<(String, String)> = c
                .list_knowledge(ListKnowledgeRequest::default())
                .await
                .unwrap()
                .into_inner()
                .items
                .into_iter()
                .map(|i| (i.source, i.body))
                .collect();
            items.sort();
            items
        }
    };
    let before = listed(&mut c).await;
    let err = c
        .add_documents(AddDocumentsRequest {
            documents: vec![
                add(
                    "save.md",
                    "# Saving\nA new text that must not replace the old one.",
                ),
                add("open.md", "# Opening\nPress Ctrl+O."),
                add("logo.png", b"\x89PNG\r\n\x1a\n\0\0".to_vec()),
            ],
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(
        err.message()
            .starts_with("documents[2] (\"logo.png\"): content:"),
        "{}",
        err.message()
    );
    assert_eq!(
        listed(&mut c).await,
        before,
        "nothing of the batch is stored"
    );
    let err = c
        .add_documents(AddDocumentsRequest { documents: vec![] })
        .await
        .unwrap_err();
    assert_invalid(err, "documents");

    let done = c
        .add_documents(AddDocumentsRequest {
            documents: vec![
                add("save.md", "# Saving\nPress Ctrl+Shift+S to save as."),
                add("open.md", "# Opening\nPress Ctrl+O."),
            ],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(done.documents.len(), 2);
    assert_eq!(done.documents[0].replaced, 1);
    assert_eq!(done.documents[1].replaced, 0);
    assert_eq!(
        listed(&mut c).await,
        [
            ("open.md".to_owned(), "Press Ctrl+O.".to_owned()),
            (
                "save.md".to_owned(),
                "Press Ctrl+Shift+S to save as.".to_owned()
            ),
        ]
    );
    shutdown.cancel();
}

#[tokio::test]
async fn alices_experience_never_reaches_bob() {
    let dir = tempfile::tempdir().unwrap();
    let shutdown = CancellationToken::new();
    let mut c = start(&dir, &shutdown).await;
    let task = uuid::Uuid::new_v4().to_string();
    let stored = c
        .add_experience(AddExperienceRequest {
            kind: KnowledgeKind::Experience.into(),
            task_id: task.clone(),
            owner: "alice".into(),
            application: "mousepad".into(),
            title: "write my shopping list in mousepad".into(),
            body: "1. click 'Text View' (Edit); type 'milk, eggs'".into(),
            succeeded: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(stored.source, format!("task:{task}"));
    let search = |owner: &str| SearchKnowledgeRequest {
        query: "write the shopping list".into(),
        owner: owner.into(),
        ..Default::default()
    };
    let alice = c
        .search_knowledge(search("alice"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(alice.hits.len(), 1);
    let bob = c
        .search_knowledge(search("bob"))
        .await
        .unwrap()
        .into_inner();
    assert!(bob.hits.is_empty(), "{bob:?}");
    // Bob cannot rate it; Alice's bad rating hides it from Alice too.
    let err = c
        .rate_experience(RateExperienceRequest {
            task_id: task.clone(),
            owner: "bob".into(),
            rating: ExperienceRating::Bad.into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    c.rate_experience(RateExperienceRequest {
        task_id: task.clone(),
        owner: "alice".into(),
        rating: ExperienceRating::Bad.into(),
    })
    .await
    .unwrap();
    let alice = c
        .search_knowledge(search("alice"))
        .await
        .unwrap()
        .into_inner();
    assert!(alice.hits.is_empty());
    let err = c
        .add_experience(AddExperienceRequest {
            kind: KnowledgeKind::Document.into(),
            task_id: task,
            body: "x".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_invalid(err, "kind");
    shutdown.cancel();
}

/// Sharing over gRPC: bob's search gets alice's experience once it is shared with him, marked shared;
/// bad input is INVALID_ARGUMENT naming the field (NUL or an empty name, no one named, both or neither
/// target, more names than --knowledge-max-share-callers, a document), an unknown item NOT_FOUND, and
/// none of it changes the sharing.
#[tokio::test]
async fn sharing_reaches_the_named_caller_and_bad_input_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let shutdown = CancellationToken::new();
    let mut c = start(&dir, &shutdown).await;
    let task = uuid::Uuid::new_v4().to_string();
    let stored = c
        .add_experience(AddExperienceRequest {
            kind: KnowledgeKind::Experience.into(),
            task_id: task.clone(),
            owner: "alice".into(),
            application: "mousepad".into(),
            title: "write my shopping list in mousepad".into(),
            body: "1. click 'Text View' (Edit); type 'milk, eggs'".into(),
            succeeded: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let search = |owner: &str| SearchKnowledgeRequest {
        query: "write the shopping list".into(),
        owner: owner.into(),
        ..Default::default()
    };
    let to = |callers: &[&str]| ShareKnowledgeRequest {
        id: stored.id.clone(),
        callers: callers.iter().map(|c| (*c).to_owned()).collect(),
        ..Default::default()
    };
    assert!(
        c.search_knowledge(search("bob"))
            .await
            .unwrap()
            .into_inner()
            .hits
            .is_empty()
    );

    for (request, field) in [
        (to(&["bo\0b"]), "callers[0]"),
        (to(&["bob", ""]), "callers[1]"),
        (to(&[" bob"]), "callers[0]"),
        (to(&[]), "callers"),
        (to(&["a", "b", "c", "d", "e"]), "callers"),
        (
            ShareKnowledgeRequest {
                task_id: task.clone(),
                ..to(&["bob"])
            },
            "id",
        ),
        (
            ShareKnowledgeRequest {
                id: String::new(),
                ..to(&["bob"])
            },
            "id",
        ),
        (
            ShareKnowledgeRequest {
                id: "not-a-uuid".into(),
                ..to(&["bob"])
            },
            "id",
        ),
    ] {
        let err = c.share_knowledge(request.clone()).await.unwrap_err();
        assert_invalid(err, field);
        let err = c.unshare_knowledge(request).await.unwrap_err();
        assert_invalid(err, field);
    }
    let err = c
        .share_knowledge(ShareKnowledgeRequest {
            id: uuid::Uuid::new_v4().to_string(),
            ..to(&["bob"])
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    let doc = c
        .add_document(add("lists.md", "# Lists\n\nWrite a shopping list.\n"))
        .await
        .unwrap()
        .into_inner();
    let err = c
        .share_knowledge(ShareKnowledgeRequest {
            id: doc.items[0].id.clone(),
            ..to(&["bob"])
        })
        .await
        .unwrap_err();
    assert_invalid(err, "id");
    assert!(
        c.search_knowledge(search("bob"))
            .await
            .unwrap()
            .into_inner()
            .hits
            .iter()
            .all(|h| !h.shared)
    );

    let shared = c.share_knowledge(to(&["bob"])).await.unwrap().into_inner();
    assert_eq!(shared.shared_with, ["bob"]);
    let bob = c
        .search_knowledge(search("bob"))
        .await
        .unwrap()
        .into_inner();
    let hit = bob
        .hits
        .iter()
        .find(|h| h.item.as_ref().unwrap().id == stored.id)
        .expect("shared with bob");
    assert!(hit.shared);
    assert_eq!(hit.item.as_ref().unwrap().owner, "alice");
    let carol = c
        .search_knowledge(search("carol"))
        .await
        .unwrap()
        .into_inner();
    assert!(
        carol
            .hits
            .iter()
            .all(|h| h.item.as_ref().unwrap().id != stored.id)
    );
    let unshared = c
        .unshare_knowledge(ShareKnowledgeRequest {
            id: String::new(),
            task_id: task,
            ..to(&["bob"])
        })
        .await
        .unwrap()
        .into_inner();
    assert!(unshared.shared_with.is_empty());
    let bob = c
        .search_knowledge(search("bob"))
        .await
        .unwrap()
        .into_inner();
    assert!(
        bob.hits
            .iter()
            .all(|h| h.item.as_ref().unwrap().id != stored.id)
    );
    shutdown.cancel();
}
