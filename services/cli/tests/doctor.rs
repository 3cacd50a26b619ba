//! `ufo doctor` as a newcomer meets it on a bare machine: no display, none of the headless desktop's
//! programs on PATH and no model key. It must name both problems, each with its fix, and exit 1.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use ufo_testkit::workspace_binary;

#[test]
fn doctor_on_a_bare_machine_names_the_missing_display_and_model_key_with_their_fixes() {
    let bin_dir = workspace_binary("ufo-agent")
        .unwrap()
        .parent()
        .unwrap()
        .to_owned();
    let data = tempfile::tempdir().unwrap();
    // `.invalid` never resolves (RFC 6761): a hosted endpoint that cannot be reached, and no key for it.
    // PATH without Xvfb, dbus-daemon or xfwm4: what a server without the desktop packages has.
    let empty_path = tempfile::tempdir().unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_ufo"))
        .arg("doctor")
        .arg("--bin-dir")
        .arg(&bin_dir)
        .arg("--data-dir")
        .arg(data.path())
        .env_remove("DISPLAY")
        .env_remove("WAYLAND_DISPLAY")
        .env_remove("DBUS_SESSION_BUS_ADDRESS")
        .env_remove("UFO_LLM_API_KEY")
        .env_remove("UFO_TOKEN")
        .env_remove("UFO_UP_DESKTOP")
        .env("PATH", empty_path.path())
        .env("UFO_LLM_BASE_URL", "http://model.invalid/v1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(1),
        "doctor must fail on a bare machine\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let problem = |what: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with("PROBLEM") && l.split_whitespace().nth(1) == Some(what))
            .unwrap_or_else(|| panic!("no PROBLEM line for {what}:\n{stdout}"))
            .to_owned()
    };
    let display = problem("display");
    assert!(
        display.contains("no display") && display.contains("fix: apt-get install"),
        "{display}"
    );
    for package in ["xvfb", "dbus", "xfwm4"] {
        assert!(display.contains(package), "{package} not named: {display}");
    }
    let model = stdout
        .lines()
        .filter(|l| l.starts_with("PROBLEM") && l.split_whitespace().nth(1) == Some("model"))
        .collect::<Vec<_>>();
    assert!(
        model.iter().any(|l| l.contains("no API key")
            && l.contains("fix: give the key with --llm-api-key (UFO_LLM_API_KEY for ufo up")),
        "the missing key is not named with its fix:\n{stdout}"
    );
    // The OCR engine is checked by the agent itself: this machine has Tesseract (`.ci/run` installs it);
    // with a language that does not exist it is a note with its fix, not a failure.
    let grounding = stdout
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some("grounding"))
        .unwrap_or_else(|| panic!("no grounding line:\n{stdout}"));
    assert!(
        grounding.starts_with("ok") && grounding.contains("tesseract"),
        "{grounding}"
    );
    // Every problem line carries its fix.
    for line in stdout.lines().filter(|l| l.starts_with("PROBLEM")) {
        assert!(line.contains("fix:"), "a problem without a fix: {line}");
    }
}

#[test]
fn a_missing_ocr_language_is_a_grounding_note_with_its_fix() {
    let output = std::process::Command::new(workspace_binary("ufo-agent").unwrap())
        .arg("--check-model")
        .env("UFO_AGENT_GROUNDING_LANG", "nosuchlang")
        .env("UFO_AGENT_LLM_BASE_URL", "http://model.invalid/v1")
        .env_remove("UFO_AGENT_LLM_API_KEY")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let note = stdout
        .lines()
        .find(|l| l.starts_with("grounding-note: "))
        .unwrap_or_else(|| panic!("no grounding note:\n{stdout}"));
    assert!(
        note.contains("fix: apt-get install tesseract-ocr"),
        "{note}"
    );
}
