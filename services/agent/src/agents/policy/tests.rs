use serde_json::json;

use super::*;
use crate::agents::settings::AgentSettings;

fn args(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap()
}

fn example() -> Policy {
    Policy::parse(
        r#"{
            "default": "allow",
            "tools": {"close_application": "confirm", "drag_on_coordinates": "deny"},
            "launch_directories": ["/home/me/Documents"],
            "rules": [
                {"tool": "launch_application", "argument": "args", "pattern": "^--new-window$",
                 "verdict": "allow"},
                {"tool": "launch_application", "argument": "args", "pattern": "^https://",
                 "verdict": "confirm", "reason": "opens a web page"},
                {"tool": "keyboard_input", "argument": "keys", "pattern": "(?i)\\{VK_LWIN\\}",
                 "verdict": "deny", "reason": "the Windows key"},
                {"tool": "*", "argument": "text", "pattern": "password", "verdict": "confirm"}
            ]
        }"#,
    )
    .unwrap()
}

#[test]
fn tools_and_launch_arguments_are_classified() {
    let p = example();
    let v = |f: &str, a: Value| p.judge(f, &args(a)).verdict;
    assert_eq!(v("click_input", json!({"id": "3"})), Verdict::Allow);
    assert_eq!(v("close_application", json!({})), Verdict::Confirm);
    assert_eq!(v("drag_on_coordinates", json!({})), Verdict::Deny);
    let launch = |a: Value| v("launch_application", json!({"name": "mousepad", "args": a}));
    assert_eq!(launch(json!([])), Verdict::Allow);
    assert_eq!(launch(json!(["/home/me/Documents/a.txt"])), Verdict::Allow);
    assert_eq!(launch(json!(["--new-window"])), Verdict::Allow);
    assert_eq!(launch(json!(["https://example.org"])), Verdict::Confirm);
    assert_eq!(launch(json!(["/etc/shadow"])), Verdict::Deny);
    assert_eq!(
        launch(json!(["/home/me/Documents/../.ssh/id_rsa"])),
        Verdict::Deny
    );
    // The strictest wins: a denied argument next to one needing confirmation.
    assert_eq!(
        launch(json!(["https://example.org", "/etc/shadow"])),
        Verdict::Deny
    );
    assert_eq!(
        v("keyboard_input", json!({"keys": "{vk_lwin}r"})),
        Verdict::Deny
    );
    assert_eq!(
        v("set_edit_text", json!({"id": "2", "text": "my password"})),
        Verdict::Confirm
    );
}

#[test]
fn a_denial_names_the_argument_and_the_directories() {
    let p = example();
    let d = p
        .denial(
            "launch_application",
            &args(json!({"name": "mousepad", "args": ["/etc/shadow"]})),
        )
        .unwrap();
    assert_eq!(
        d.error,
        "the operator's policy denies launching with argument 1 \"/etc/shadow\": it is not an \
         absolute path inside a launch directory (launch directories: /home/me/Documents)"
    );
    assert_eq!(d.result["denied"], true);
    let keys = p
        .denial("keyboard_input", &args(json!({"keys": "{VK_LWIN}"})))
        .unwrap();
    assert_eq!(
        keys.error,
        "the operator's policy denies keyboard_input with keys \"{VK_LWIN}\" (the Windows key)"
    );
    assert!(p.denial("click_input", &args(json!({"id": "1"}))).is_none());
    // Without a policy file: tools allowed, launch arguments denied.
    let none = Policy::default();
    assert!(none.denial("close_application", &Map::new()).is_none());
    let e = none
        .denial(
            "launch_application",
            &args(json!({"name": "x", "args": ["/tmp/a"]})),
        )
        .unwrap()
        .error;
    assert!(e.contains("no launch directory is declared"), "{e}");
}

#[test]
fn a_task_policy_only_adds_holds() {
    let mut s = AgentSettings {
        policy: std::sync::Arc::new(example()),
        ..AgentSettings::default()
    };
    let (none, click) = (Map::new(), args(json!({"id": "1"})));
    let (close, click, drag) = (&none, &click, &none);
    fn batch<'a>(f: &'a str, a: &'a Map<String, Value>) -> Vec<(&'a str, &'a Map<String, Value>)> {
        vec![(f, a)]
    }
    // The operator's confirm holds even when the task says never.
    for (always, never) in [(false, false), (true, false), (false, true)] {
        s.confirm_always = always;
        s.confirm_never = never;
        assert!(matches!(
            s.hold(false, true, &batch("close_application", close)),
            Some(Hold::Policy(_))
        ));
        // A denied batch is not held: it is refused when it runs.
        assert_eq!(
            s.hold(true, true, &batch("drag_on_coordinates", drag)),
            None
        );
    }
    s.confirm_always = false;
    s.confirm_never = false;
    assert_eq!(s.hold(false, true, &batch("click_input", click)), None);
    assert_eq!(
        s.hold(true, false, &batch("click_input", click)),
        Some(Hold::Model)
    );
    s.confirm_never = true;
    assert_eq!(s.hold(true, false, &batch("click_input", click)), None);
    s.confirm_never = false;
    s.confirm_always = true;
    assert_eq!(
        s.hold(false, true, &batch("click_input", click)),
        Some(Hold::Task)
    );
    // Nothing to hold: no function, or a status that runs nothing.
    assert_eq!(s.hold(false, true, &batch("", click)), None);
    assert_eq!(s.hold(false, false, &batch("click_input", click)), None);
    let both = vec![("click_input", click), ("close_application", close)];
    s.confirm_always = false;
    assert_eq!(
        s.hold(false, true, &both),
        Some(Hold::Policy(
            "the operator's policy asks a person to confirm close_application".into()
        ))
    );
}

#[test]
fn the_policy_file_is_read_and_checked_at_start() {
    use clap::Parser as _;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("policy.json");
    std::fs::write(&file, r#"{"tools": {"click_input": "maybe"}}"#).unwrap();
    let parse =
        || crate::Config::try_parse_from(["ufo-agent", "--policy-file", file.to_str().unwrap()]);
    let e = parse()
        .unwrap()
        .agents
        .load_policy()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("unknown variant `maybe`") && e.contains("policy.json"),
        "{e}"
    );
    std::fs::write(&file, r#"{"tools": {"close_application": "confirm"}}"#).unwrap();
    let agents = parse().unwrap().agents;
    let settings = agents.settings(agents.load_policy().unwrap());
    assert_eq!(settings.policy.tools["close_application"], Verdict::Confirm);
    let agents = crate::Config::try_parse_from(["ufo-agent"]).unwrap().agents;
    let none = agents.settings(agents.load_policy().unwrap());
    assert!(none.policy.tools.is_empty() && none.policy.launch_elsewhere == Verdict::Deny);
}
