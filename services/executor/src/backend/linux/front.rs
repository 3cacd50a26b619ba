//! Which top-level accessible of an application the user sees for a window: a shown dialog, file
//! chooser or alert wins over the main window; popups (menus, combo-box lists) hang under it.

use atspi::{Role, State};

use super::atspi::Key;
use super::walk::Info;

/// Roles of a window that sits in front of its application's main window while it is shown.
fn is_dialog(role: Role) -> bool {
    matches!(
        role,
        Role::Dialog | Role::FileChooser | Role::Alert | Role::ColorChooser | Role::FontChooser
    )
}

/// Roles of a transient window drawn over the main one (menus, combo-box and completion popups).
fn is_popup(role: Role) -> bool {
    matches!(role, Role::Window | Role::PopupMenu | Role::Menu)
}

/// Which top-level accessibles of an application are observed for `window`: the one the user sees as
/// active, plus the popups shown over it. Errors say why it cannot be told.
pub(super) fn choose_top(tops: &[(Key, &Info)], title: &str) -> Result<(Key, Vec<Key>), String> {
    let showing: Vec<&(Key, &Info)> = tops
        .iter()
        .filter(|(_, i)| i.states.contains(State::Showing))
        .collect();
    // The one window of `among` that passes `keep`; none when no window or several do.
    let pick = |among: &[&(Key, &Info)], keep: &dyn Fn(&Info) -> bool| {
        let mut kept = among.iter().filter(|(_, i)| keep(i));
        match (kept.next(), kept.next()) {
            (Some((key, _)), None) => Some(key.clone()),
            _ => None,
        }
    };
    // A shown dialog (modal or active) is what the user deals with first; then the active window; then
    // the window titled as the selected one; then the only window shown.
    let dialogs: Vec<_> = showing
        .iter()
        .copied()
        .filter(|(_, i)| is_dialog(i.role))
        .collect();
    let chosen = pick(&dialogs, &|i| i.states.contains(State::Active))
        .or_else(|| pick(&dialogs, &|i| i.states.contains(State::Modal)))
        .or_else(|| pick(&showing, &|i| i.states.contains(State::Active)))
        .or_else(|| pick(&showing, &|i| !is_popup(i.role) && i.name == title))
        .or_else(|| pick(&showing, &|i| !is_popup(i.role)));
    let Some(chosen) = chosen else {
        let names: Vec<String> = showing
            .iter()
            .map(|(_, i)| format!("'{}' ({})", i.name, i.role.name()))
            .collect();
        return Err(if names.is_empty() {
            format!("window '{title}' has no shown accessible window")
        } else {
            format!(
                "cannot tell which of the application's windows is the one on screen for '{title}': {} are shown and none is active or titled so",
                names.join(", ")
            )
        });
    };
    let popups = showing
        .iter()
        .filter(|(k, i)| *k != chosen && is_popup(i.role))
        .map(|(k, _)| k.clone())
        .collect();
    Ok((chosen, popups))
}

#[cfg(test)]
mod tests {
    use super::*;
    use atspi::InterfaceSet;

    fn info(name: &str, role: Role, states: &[State]) -> Info {
        Info {
            name: name.into(),
            role,
            states: states.iter().copied().collect(),
            child_count: 0,
            ifaces: InterfaceSet::empty(),
        }
    }

    fn key(p: &str) -> Key {
        (":1.1".into(), p.into())
    }

    #[test]
    fn a_shown_file_chooser_wins_over_the_main_window() {
        let main = info("Untitled 1 - Mousepad", Role::Frame, &[State::Showing]);
        let chooser = info(
            "Save As",
            Role::FileChooser,
            &[State::Showing, State::Modal],
        );
        let tops = vec![(key("/1"), &main), (key("/2"), &chooser)];
        let (k, popups) = choose_top(&tops, "Untitled 1 - Mousepad").unwrap();
        assert_eq!(k, key("/2"));
        assert!(popups.is_empty());
    }

    #[test]
    fn hidden_dialogs_do_not_count_and_popups_hang_under_the_window() {
        let main = info("Main", Role::Frame, &[State::Showing, State::Active]);
        let gone = info("Old", Role::Dialog, &[]);
        let popup = info("", Role::Window, &[State::Showing]);
        let tops = vec![(key("/1"), &main), (key("/2"), &gone), (key("/3"), &popup)];
        let (k, popups) = choose_top(&tops, "Main").unwrap();
        assert_eq!(k, key("/1"));
        assert_eq!(popups, vec![key("/3")]);
    }

    #[test]
    fn two_inactive_windows_with_other_titles_are_reported() {
        let a = info("A", Role::Frame, &[State::Showing]);
        let b = info("B", Role::Frame, &[State::Showing]);
        let tops = vec![(key("/1"), &a), (key("/2"), &b)];
        let err = choose_top(&tops, "C").unwrap_err();
        assert!(err.contains("cannot tell"), "{err}");
        assert!(
            err.contains("'A' (frame)") && err.contains("'B' (frame)"),
            "{err}"
        );
        assert_eq!(choose_top(&tops, "B").unwrap().0, key("/2"));
        assert!(choose_top(&[], "C").unwrap_err().contains("no shown"));
    }
}
