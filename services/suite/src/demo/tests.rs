//! Demonstration sentences as a person writes them, and the mistakes they make.

use super::*;

fn t(kind: Kind, name: &str) -> Option<Target> {
    Some(Target {
        kind,
        name: name.into(),
        nth: Nth::Index(1),
    })
}

#[test]
fn sentences_a_person_writes() {
    let s = Step::parse("click the menu item named 'Save As…'").unwrap();
    assert_eq!(s.action, Action::Click);
    assert_eq!(s.target, t(Kind::MenuItem, "Save As…"));
    let s = Step::parse("type 'it''s {x}' into the text field labelled \"Name\"").unwrap();
    assert_eq!(s.action, Action::Type("it's {x}".into()));
    assert_eq!(s.target, t(Kind::Edit, "Name"));
    let s = Step::parse("press ctrl+s").unwrap();
    assert_eq!(s.action, Action::Press("^s".into()));
    assert_eq!(s.target, None);
    let s = Step::parse("press down down enter in the slider named 'Volume'").unwrap();
    assert_eq!(s.action, Action::Press("{DOWN}{DOWN}{ENTER}".into()));
    assert_eq!(s.target, t(Kind::Slider, "Volume"));
    let s = Step::parse("select the second row named 'Otto'").unwrap();
    assert_eq!(s.target.unwrap().nth, Nth::Index(2));
    let s = Step::parse("set the last field named '' to 'x'").unwrap();
    assert_eq!(s.action, Action::SetText("x".into()));
    assert_eq!(s.target.unwrap().nth, Nth::Last);
    assert_eq!(
        Step::parse("wait for the button named 'OK'")
            .unwrap()
            .action,
        Action::WaitFor
    );
    assert_eq!(
        Step::parse("read the text named 'R'").unwrap().function(),
        Some("texts")
    );
}

#[test]
fn mistakes_are_named() {
    for (bad, says) in [
        ("fling the button named 'x'", "unknown verb"),
        (
            "click the gizmo named 'x'",
            "unknown kind of control \"gizmo\"",
        ),
        ("click the button 'x'", "expected `named"),
        ("click the button named x", "in quotes"),
        ("click the button named 'x", "unclosed"),
        ("type 'a' the field named 'x'", "unexpected words"),
        ("press ctrl+", "missing key"),
        ("press hyper+x", "unknown modifier"),
        ("click the button named 'x' now", "unexpected words"),
    ] {
        let e = Step::parse(bad).unwrap_err().to_string();
        assert!(e.contains(says), "{bad}: {e}");
    }
}

#[test]
fn text_typed_where_the_focus_is_has_no_control() {
    let s = Step::parse("type '1\t2\n3'").unwrap();
    assert_eq!(s.action, Action::Type("1\t2\n3".into()));
    assert_eq!(s.target, None);
    assert_eq!(s.function(), Some("keyboard_input"));
}

#[test]
fn typed_text_is_escaped_for_the_key_syntax() {
    assert_eq!(escape_text("a+b (c) {d}\n"), "a{+}b {(}c{)} {{}d{}}{ENTER}");
}
