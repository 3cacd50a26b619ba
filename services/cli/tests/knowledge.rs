//! `ufo knowledge add`, `ufo knowledge search` and `ufo rate` against the real agent and session
//! services (separate processes, SQLite store): help files in, ranked hits out with their sources; a
//! binary file refused with nothing stored; a rating of a task without an experience explained.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;
use support::{out, ufo};

use ufo_testkit::Cluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn help_files_are_added_searched_and_bad_ones_refused() {
    // The cluster's key is named "test": an admin here.
    let mut cluster = Cluster::builder()
        .agent_args(["--runner-slots", "0", "--api-admins", "test"])
        .start()
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let calendar = dir.path().join("calendar.page");
    std::fs::copy("/usr/share/help/C/zenity/calendar.page", &calendar)
        .expect("zenity's help (Debian package zenity)");
    let notes = dir.path().join("notes.md");
    std::fs::write(
        &notes,
        "# Saving a dialog's answer\nRedirect the output to a file.\n",
    )
    .unwrap();
    // Binary content under a text file's name: refused for what it is, not for its name.
    let logo = dir.path().join("logo.txt");
    std::fs::write(&logo, b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR").unwrap();
    let path = |p: &std::path::Path| p.to_str().unwrap().to_owned();

    let added = ufo(
        &cluster,
        &[
            "knowledge",
            "add",
            "--app",
            "zenity",
            &path(&calendar),
            &path(&notes),
        ],
    )
    .await;
    assert!(added.status.success(), "{}", out(&added));
    let text = out(&added);
    assert!(text.contains("calendar.page: "), "{text}");
    assert!(text.contains("notes.md: 1 sections for zenity"), "{text}");

    let found = ufo(
        &cluster,
        &[
            "knowledge",
            "search",
            "how do I let the user pick a date from a calendar",
            "--app",
            "zenity",
        ],
    )
    .await;
    assert!(found.status.success(), "{}", out(&found));
    let text = out(&found);
    assert!(
        text.starts_with("1. calendar.page (document, score "),
        "{text}"
    );
    assert!(text.contains("without --knowledge"), "{text}");
    let json = ufo(&cluster, &["knowledge", "search", "calendar", "--json"]).await;
    let parsed: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(parsed["hits"][0]["source"], "calendar.page", "{parsed}");

    // A binary file among good ones: refused, naming it; nothing of the upload is stored.
    let fresh = dir.path().join("fresh.md");
    std::fs::write(&fresh, "# Fresh\nA xylophone section.\n").unwrap();
    let refused = ufo(
        &cluster,
        &[
            "knowledge",
            "add",
            "--app",
            "zenity",
            &path(&fresh),
            &path(&logo),
        ],
    )
    .await;
    assert!(!refused.status.success(), "{}", out(&refused));
    let text = out(&refused);
    assert!(
        text.contains("files[1]") && text.contains("logo.txt") && text.contains("not text"),
        "{text}"
    );
    let none = ufo(&cluster, &["knowledge", "search", "xylophone"]).await;
    assert!(none.status.success(), "{}", out(&none));
    assert!(out(&none).starts_with("no hits"), "{}", out(&none));

    let missing = ufo(
        &cluster,
        &[
            "knowledge",
            "add",
            "--app",
            "zenity",
            "/nonexistent/help.md",
        ],
    )
    .await;
    assert!(!missing.status.success());
    assert!(out(&missing).contains("cannot read"), "{}", out(&missing));

    let unrated = ufo(
        &cluster,
        &["rate", "0195f8a0-0000-7000-8000-000000000000", "good"],
    )
    .await;
    assert!(!unrated.status.success(), "{}", out(&unrated));
    assert!(out(&unrated).contains("not found"), "{}", out(&unrated));
    let bad_word = ufo(
        &cluster,
        &["rate", "0195f8a0-0000-7000-8000-000000000000", "meh"],
    )
    .await;
    assert_eq!(bad_word.status.code(), Some(2), "{}", out(&bad_word));
    cluster.stop().await.unwrap();
}
