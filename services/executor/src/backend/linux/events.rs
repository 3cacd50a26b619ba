//! The accessibility half of the settle protocol's activity log ([`super::activity`]): the
//! applications' AT-SPI events that announce a visible change (text, states, children, names and
//! values, selection, windows). Applications send events only for kinds some listener registered with
//! the AT-SPI registry, so this registers them and then listens on the accessibility bus.

use std::sync::Arc;

use atspi::proxy::registry::RegistryProxy;
use futures::StreamExt as _;

use super::activity::Activity;

/// The event kinds registered (AT-SPI registry event strings).
const KINDS: &[&str] = &[
    "object:text-changed",
    "object:state-changed",
    "object:children-changed",
    "object:property-change",
    "object:selection-changed",
    "window:",
];

/// Most events queued unread (the listener only counts them, so this is never reached in practice).
const MAX_QUEUED: usize = 1024;

/// Registers the event kinds and records every such event into `activity` until the connection
/// closes. Returns an error when the registry refuses; the settle wait then relies on drawing alone.
pub async fn listen(conn: &zbus::Connection, activity: Arc<Activity>) -> zbus::Result<()> {
    let rule = zbus::MatchRule::builder()
        .msg_type(zbus::message::Type::Signal)
        .path_namespace("/org/a11y/atspi/accessible")?
        .build();
    let mut stream = zbus::MessageStream::for_match_rule(rule, conn, Some(MAX_QUEUED)).await?;
    let registry = RegistryProxy::new(conn).await?;
    for kind in KINDS {
        registry.register_event(kind).await?;
    }
    tokio::spawn(async move {
        while let Some(msg) = stream.next().await {
            let Ok(msg) = msg else { continue };
            let header = msg.header();
            let window = match header.interface().map(|i| i.as_str()) {
                Some("org.a11y.atspi.Event.Object") => false,
                Some("org.a11y.atspi.Event.Window") => true,
                _ => continue,
            };
            let member = header.member().map(|m| m.as_str()).unwrap_or_default();
            let app = header
                .sender()
                .map(|s| s.as_str().to_owned())
                .unwrap_or_default();
            activity.event_from(app, kind(window, member));
        }
    });
    Ok(())
}

/// The event kind as the effect check names it: an Object event's member in AT-SPI's spelling
/// ("text-changed"), a Window event's as "window-<member>".
fn kind(window: bool, member: &str) -> &'static str {
    match (window, member) {
        (false, "TextChanged") => "text-changed",
        (false, "StateChanged") => "state-changed",
        (false, "ChildrenChanged") => "children-changed",
        (false, "PropertyChange") => "property-change",
        (false, "SelectionChanged") => "selection-changed",
        (false, _) => "object-changed",
        (true, "Create") => "window-create",
        (true, "Destroy") => "window-destroy",
        (true, "Activate") => "window-activate",
        (true, "Deactivate") => "window-deactivate",
        (true, _) => "window-changed",
    }
}
