//! Task files as written, and the mistakes in them said clearly.

use super::*;

const GOOD: &str = r#"
request = "save it as {dir}/a.txt"
[[setup.apps]]
command = "zenity"
args = ["--entry"]
window = "Entry"
output = true
[[subtask]]
app = "Entry"
do = "fill it"
steps = ["type 'x' into the text field named 'Name'", "click the button named 'OK'"]
[[check]]
process = "zenity"
exit_code = 0
stdout = "x"
[[check]]
file = "a.txt"
contains = "{dir}"
"#;

fn err(text: &str) -> String {
    Task::parse(Path::new("t.toml"), text)
        .unwrap_err()
        .to_string()
}

#[test]
fn a_good_task_loads_and_resolves_its_directory() {
    let t = Task::parse(Path::new("x/entry.toml"), GOOD).unwrap();
    assert_eq!(t.name, "entry");
    let r = t.resolved(Path::new("/tmp/d"));
    assert_eq!(r.request, "save it as /tmp/d/a.txt");
    assert_eq!(
        r.checks[1],
        Check::File {
            path: "a.txt".into(),
            expect: TextExpect::Contains("/tmp/d".into())
        }
    );
}

#[test]
fn bad_tasks_say_what_is_wrong() {
    assert!(
        err("request = 1").contains("t.toml"),
        "{}",
        err("request = 1")
    );
    assert!(err(&GOOD.replace("request", "requets")).contains("unknown field"));
    assert!(
        err(&GOOD.replace("file = \"a.txt\"", "file = \"../a.txt\""))
            .contains("inside the task directory")
    );
    assert!(
        err(&GOOD.replace("output = true", "")).contains("needs `output = true`"),
        "{}",
        err(&GOOD.replace("output = true", ""))
    );
    assert!(err(&GOOD.replace("type 'x' into", "fling 'x' at")).contains("step 1"));
    let no_checks = GOOD.split("[[check]]").next().unwrap();
    assert!(err(no_checks).contains("at least one [[check]]"));
}

#[test]
fn text_expectations_ignore_one_trailing_newline() {
    assert!(TextExpect::Equals("a".into()).holds("a\n"));
    assert!(!TextExpect::Equals("a".into()).holds("a\n\n"));
    assert!(TextExpect::Contains("b".into()).holds("abc"));
}

#[test]
fn a_replay_section_changes_the_documents_and_the_checks_of_the_replay_only() {
    let text = format!(
        "{GOOD}\n[setup]\nfiles = [{{ path = \"a.txt\", content = \"old {{dir}}\" }}]\n\
         [replay]\nfiles = [{{ path = \"a.txt\", content = \"new {{dir}}\" }}]\n\
         [[replay.check]]\nfile = \"a.txt\"\nequals = \"new {{dir}}\"\n"
    );
    let t = Task::parse(Path::new("x/entry.toml"), &text)
        .unwrap()
        .resolved(Path::new("/tmp/d"));
    assert_eq!(t.files[0].content, "old /tmp/d");
    assert_eq!(t.checks.len(), 2);
    let r = t.for_replay();
    assert_eq!(r.files.len(), 1);
    assert_eq!(r.files[0].content, "new /tmp/d");
    assert_eq!(
        r.checks,
        [Check::File {
            path: "a.txt".into(),
            expect: TextExpect::Equals("new /tmp/d".into()),
        }]
    );
    let bad = format!("{GOOD}\n[replay]\nfiles = [{{ path = \"../x\", content = \"\" }}]\n");
    assert!(err(&bad).contains("replay file \"../x\""), "{}", err(&bad));
    let bad = format!("{GOOD}\n[[replay.check]]\nfile = \"a.txt\"\n");
    assert!(err(&bad).contains("replay check 1"), "{}", err(&bad));
}

/// A learner: GOOD without its demonstration, taught by `teacher`.
fn learner(teacher: &str) -> String {
    let (head, rest) = GOOD.split_once("[[subtask]]").unwrap();
    let checks = rest.split_once("[[check]]").unwrap().1;
    format!(
        "learn_from = \"{teacher}\"\nrequest = \"save it again\"\n{}[[check]]{checks}",
        &head[head.find("[[setup").unwrap()..]
    )
}

#[test]
fn a_learning_task_has_no_demonstration_and_runs_after_its_teacher() {
    let t = Task::parse(Path::new("x/b-learner.toml"), &learner("z-teacher")).unwrap();
    assert!(t.subtasks.is_empty());
    assert_eq!(t.learn_from.as_deref(), Some("z-teacher"));
    // A learner with a demonstration, a teacher that is itself, no teacher at all.
    let both = format!("learn_from = \"z\"\n{GOOD}");
    assert!(
        err(&both).contains("carries no demonstration"),
        "{}",
        err(&both)
    );
    assert!(
        Task::parse(Path::new("x/t.toml"), &learner("t"))
            .unwrap_err()
            .to_string()
            .contains("learn from itself")
    );
    let no_demo = learner("z").replace("learn_from = \"z\"\n", "");
    assert!(err(&no_demo).contains("or learn_from"), "{}", err(&no_demo));

    // Chosen alone, the learner brings its teacher, which runs first.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("b-learner.toml"), learner("z-teacher")).unwrap();
    std::fs::write(dir.path().join("z-teacher.toml"), GOOD).unwrap();
    std::fs::write(
        dir.path().join("other.toml"),
        GOOD.replace("save it as", "other"),
    )
    .unwrap();
    let all = load_all(&[dir.path().to_owned()]).unwrap();
    let names = |v: Vec<Task>| v.into_iter().map(|t| t.name).collect::<Vec<_>>();
    assert_eq!(
        names(select(&all, &["learner".into()])),
        ["z-teacher", "b-learner"]
    );
    assert_eq!(
        names(select(&all, &[])),
        ["other", "z-teacher", "b-learner"]
    );
    // A teacher that is not among the task files.
    std::fs::write(
        dir.path().join("c-lost.toml"),
        learner("nobody").replace("again", "lost"),
    )
    .unwrap();
    let e = load_all(&[dir.path().to_owned()]).unwrap_err().to_string();
    assert!(e.contains("no task named \"nobody\""), "{e}");
}

const API: &str = r#"
request = "fill {dir}/s.csv"
[[setup.apps]]
command = "python3"
args = ["{here}/mcp/calc_uno.py", "launch", "{dir}/s.csv"]
window = "s.csv"
[[mcp]]
name = "calc"
command = "python3"
args = ["{here}/mcp/calc_uno.py", "serve", "{dir}/s.csv"]
applications = ["s.csv"]
[[subtask]]
app = "s.csv"
do = "fill it"
steps = ["press ctrl+s"]
[[subtask.api]]
tool = "calc.set_cells"
arguments = { range = "A1:B1", values = [[1, "{dir}"]] }
[[subtask.api]]
tool = "calc.save"
[[check]]
file = "s.csv"
equals = "1"
"#;

#[test]
fn mcp_servers_and_api_calls_load_and_resolve() {
    let t = Task::parse(Path::new("/repo/tasks/fill.toml"), API).unwrap();
    let r = t.resolved(Path::new("/tmp/d"));
    assert_eq!(
        r.mcp[0].args,
        ["/repo/tasks/mcp/calc_uno.py", "serve", "/tmp/d/s.csv"]
    );
    assert_eq!(r.apps[0].args[0], "/repo/tasks/mcp/calc_uno.py");
    assert_eq!(r.mcp[0].bind, McpBind::Applications(vec!["s.csv".into()]));
    let api = &r.subtasks[0].api;
    assert_eq!(api.len(), 2);
    assert_eq!(api[0].function(), "mcp__calc__set_cells");
    assert_eq!(
        serde_json::Value::Object(api[0].arguments.clone()),
        serde_json::json!({"range": "A1:B1", "values": [[1, "/tmp/d"]]})
    );
    assert!(api[1].arguments.is_empty());
    assert_eq!(
        r.mcp[0].config()["bind"],
        serde_json::json!({"type": "applications", "applications": ["s.csv"]})
    );
}

#[test]
fn bad_mcp_sections_say_what_is_wrong() {
    let unknown = API.replace("tool = \"calc.save\"", "tool = \"other.save\"");
    assert!(
        err(&unknown).contains("names no [[mcp]] server"),
        "{}",
        err(&unknown)
    );
    let shape = API.replace("tool = \"calc.save\"", "tool = \"save\"");
    assert!(
        err(&shape).contains("must be SERVER.TOOL"),
        "{}",
        err(&shape)
    );
    let both = API.replace(
        "applications = [\"s.csv\"]",
        "applications = [\"s.csv\"]\nagent = \"files\"",
    );
    assert!(err(&both).contains("not both"), "{}", err(&both));
    let name = API.replace("name = \"calc\"", "name = \"a__b\"");
    assert!(err(&name).contains("single '_'"), "{}", err(&name));
}

#[test]
fn a_task_a_person_shows_loads_and_its_mistakes_are_said() {
    let shown = GOOD.replace(
        "[[subtask]]\napp = \"Entry\"\ndo = \"fill it\"\n",
        "[person]\napp = \"zenity\"\nwindow = \"Entry {dir}\"\n",
    );
    let t = Task::parse(Path::new("x/shown.toml"), &shown).unwrap();
    assert!(t.first() && t.subtasks.is_empty());
    let p = t.resolved(Path::new("/tmp/d")).person.unwrap();
    assert_eq!(
        (p.app.as_str(), p.window.as_str()),
        ("zenity", "Entry /tmp/d")
    );
    assert_eq!(p.steps.len(), 2);
    // A person clicks named controls and types; pressing keys is not among the person's steps.
    let pressed = shown.replace("click the button named 'OK'", "press enter");
    assert!(
        err(&pressed).contains("[person] step 2: a person clicks"),
        "{}",
        err(&pressed)
    );
    assert!(err(&shown.replace("app = \"zenity\"\n", "app = \"\"\n")).contains("needs an app"));
    let learner = format!("learn_from = \"b\"\n{shown}");
    assert!(
        err(&learner).contains("has no [[subtask]], learn_from"),
        "{}",
        err(&learner)
    );
    let both =
        format!("{shown}\n[[subtask]]\napp = \"Entry\"\ndo = \"x\"\nsteps = [\"press enter\"]\n");
    assert!(err(&both).contains("has no [[subtask]]"), "{}", err(&both));
}
