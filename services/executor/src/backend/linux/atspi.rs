//! The AT-SPI2 half of the Linux backend: connections (peer-to-peer where the application offers it)
//! and actions through the Action / EditableText / Text / Value / Component interfaces. The tree walk
//! is in [`super::walk`].
//!
//! Speed: the walk remembers what it fetched for each listed control (interfaces, bounds); the live
//! check before an action through the accessibility API reads the states only (and, the first time,
//! the action list, concurrently), keeping the listing's bounds; the action itself is then one call.
//! Pointer actions read the bounds live as well.

use std::collections::HashMap;
use std::sync::Mutex;

use atspi::proxy::accessible::AccessibleProxy;
use atspi::proxy::action::ActionProxy;
use atspi::proxy::application::ApplicationProxy;
use atspi::proxy::bus::BusProxy;
use atspi::proxy::component::ComponentProxy;
use atspi::proxy::editable_text::EditableTextProxy;
use atspi::proxy::text::TextProxy;
use atspi::proxy::value::ValueProxy;
use atspi::{CoordType, Interface, InterfaceSet, ScrollType, State, StateSet};
use futures::future::join_all;

use crate::backend::{BackendError, BackendResult, ControlFacts, ControlHandle, ControlState};
use crate::geometry::Rect;

pub(super) fn derr(e: zbus::Error) -> BackendError {
    match &e {
        zbus::Error::MethodError(name, _, _)
            if name.as_str().contains("UnknownObject")
                || name.as_str().contains("UnknownMethod") =>
        {
            BackendError::Gone("control")
        }
        zbus::Error::MethodError(name, _, _)
            if name.as_str().contains("ServiceUnknown")
                || name.as_str().contains("NameHasNoOwner") =>
        {
            BackendError::Gone("application")
        }
        _ => BackendError::Failed(format!("accessibility call failed: {e}")),
    }
}

pub(super) const ROOT_PATH: &str = "/org/a11y/atspi/accessible/root";

/// A node key: (bus name, object path).
pub(super) type Key = (String, String);

/// The action names that mean "click", in order of preference.
const CLICKS: &[&str] = &[
    "click", "press", "activate", "toggle", "jump", "select", "open",
];

/// What the last walk fetched about a listed control, reused by actions on it.
#[derive(Debug, Clone, Default)]
struct Known {
    ifaces: InterfaceSet,
    /// Index and name of its click-like action: `None` until asked, `Some(None)` when it has none.
    click: Option<Option<(i32, &'static str)>>,
}

/// Most controls remembered between walks (the walk replaces the set each time).
const MAX_KNOWN: usize = 20_000;

/// The accessibility bus connection.
pub struct Atspi {
    conn: zbus::Connection,
    apps_by_pid: Mutex<HashMap<u32, String>>,
    /// Direct peer-to-peer connections to applications, by bus name (the cache interface and most
    /// calls are only served, or served much faster, there).
    peers: tokio::sync::Mutex<HashMap<String, zbus::Connection>>,
    /// What the last walks fetched, by control.
    known: Mutex<HashMap<Key, Known>>,
}

/// A proxy of interface `P` for the object `path` of `bus` over `conn` (properties are read fresh).
pub(super) async fn proxy<P>(conn: &zbus::Connection, bus: &str, path: &str) -> BackendResult<P>
where
    P: zbus::proxy::Defaults + From<zbus::Proxy<'static>> + Send,
{
    async {
        zbus::proxy::Builder::<P>::new(conn)
            .destination(bus.to_owned())?
            .path(path.to_owned())?
            .cache_properties(zbus::proxy::CacheProperties::No)
            .build()
            .await
    }
    .await
    .map_err(derr)
}

/// Splits a control handle into its bus name and object path.
fn key_of(handle: &ControlHandle) -> BackendResult<(&str, &str)> {
    handle
        .0
        .split_once('\n')
        .ok_or(BackendError::Gone("control"))
}

pub(super) fn visible(states: StateSet) -> bool {
    states.contains(State::Showing) && states.contains(State::Visible)
}

pub(super) fn enabled(states: StateSet) -> bool {
    states.contains(State::Enabled) || states.contains(State::Sensitive)
}

impl Atspi {
    /// Connects to the accessibility bus announced on `session_bus` (`None`: the process's session bus).
    pub async fn connect(session_bus: Option<&str>) -> BackendResult<Self> {
        let una = |e: zbus::Error| BackendError::Unavailable(format!("accessibility bus: {e}"));
        let session = match session_bus {
            Some(addr) => zbus::connection::Builder::address(addr)
                .map_err(una)?
                .build()
                .await
                .map_err(una)?,
            None => zbus::Connection::session().await.map_err(una)?,
        };
        let addr = BusProxy::new(&session)
            .await
            .map_err(una)?
            .get_address()
            .await
            .map_err(una)?;
        let conn = zbus::connection::Builder::address(addr.as_str())
            .map_err(una)?
            .build()
            .await
            .map_err(una)?;
        Ok(Self {
            conn,
            apps_by_pid: Mutex::new(HashMap::new()),
            peers: tokio::sync::Mutex::new(HashMap::new()),
            known: Mutex::new(HashMap::new()),
        })
    }

    /// The accessibility bus connection.
    pub fn connection(&self) -> &zbus::Connection {
        &self.conn
    }

    /// The connection to use for calls to application `bus`: a direct peer-to-peer one when the
    /// application offers it, else the accessibility bus.
    pub(super) async fn conn_for(&self, bus: &str) -> zbus::Connection {
        let mut peers = self.peers.lock().await;
        if let Some(c) = peers.get(bus) {
            return c.clone();
        }
        let conn = match self.open_peer(bus).await {
            Some(c) => c,
            None => self.conn.clone(),
        };
        peers.insert(bus.to_owned(), conn.clone());
        conn
    }

    /// A proxy of interface `P` for the object `path` of `bus`, over the application's own
    /// connection when there is one.
    pub(super) async fn at<P>(&self, bus: &str, path: &str) -> BackendResult<P>
    where
        P: zbus::proxy::Defaults + From<zbus::Proxy<'static>> + Send,
    {
        proxy(&self.conn_for(bus).await, bus, path).await
    }

    async fn open_peer(&self, bus: &str) -> Option<zbus::Connection> {
        let app = proxy::<ApplicationProxy>(&self.conn, bus, ROOT_PATH)
            .await
            .ok()?;
        let addr = app.get_application_bus_address().await.ok()?;
        if addr.is_empty() {
            return None;
        }
        zbus::connection::Builder::address(addr.as_str())
            .ok()?
            .p2p()
            .build()
            .await
            .ok()
    }

    /// Forgets connections to applications that are no longer registered.
    async fn forget_peers_except(&self, live: &[String]) {
        self.peers.lock().await.retain(|bus, _| live.contains(bus));
    }

    /// Bus names of the applications registered with the AT-SPI registry.
    pub async fn applications(&self) -> BackendResult<Vec<String>> {
        let root =
            proxy::<AccessibleProxy>(&self.conn, "org.a11y.atspi.Registry", ROOT_PATH).await?;
        let children = root.get_children().await.map_err(derr)?;
        Ok(children
            .iter()
            .filter_map(|c| c.name_as_str().map(str::to_owned))
            .collect())
    }

    /// The application bus name owning process `pid`.
    pub(super) async fn app_for_pid(&self, pid: u32) -> BackendResult<String> {
        if let Some(name) = self
            .apps_by_pid
            .lock()
            .ok()
            .and_then(|m| m.get(&pid).cloned())
        {
            return Ok(name);
        }
        let dbus = zbus::fdo::DBusProxy::new(&self.conn).await.map_err(derr)?;
        let apps = self.applications().await?;
        self.forget_peers_except(&apps).await;
        let pids = join_all(apps.iter().map(|a| {
            let dbus = &dbus;
            async move {
                let name = zbus::names::BusName::try_from(a.as_str()).ok()?;
                dbus.get_connection_unix_process_id(name).await.ok()
            }
        }))
        .await;
        let mut map = self
            .apps_by_pid
            .lock()
            .map_err(|_| BackendError::Failed("lock poisoned".into()))?;
        map.clear();
        for (a, p) in apps.into_iter().zip(pids) {
            if let Some(p) = p {
                map.insert(p, a);
            }
        }
        map.get(&pid).cloned().ok_or_else(|| {
            BackendError::Inaccessible(format!("process {pid} has no accessible application (is its accessibility bridge disabled?)"))
        })
    }

    /// The bounds of an accessible in screen coordinates; `None` when it has none. One call, made
    /// without building a proxy (a listing makes one per node).
    pub(super) async fn extents(&self, bus: &str, path: &str) -> Option<Rect> {
        let reply = self
            .conn_for(bus)
            .await
            .call_method(
                Some(bus),
                path,
                Some("org.a11y.atspi.Component"),
                "GetExtents",
                &(CoordType::Screen,),
            )
            .await
            .ok()?;
        let (x, y, w, h): (i32, i32, i32, i32) = reply.body().deserialize().ok()?;
        Some(Rect::from_xywh(x, y, w, h))
    }

    /// Asks the control's scrollable ancestors to bring it into view (`Component.ScrollTo`) and returns
    /// its bounds afterwards; `None` when it has no Component interface or the toolkit declines.
    pub async fn scroll_into_view(&self, handle: &ControlHandle) -> BackendResult<Option<Rect>> {
        let (bus, path) = key_of(handle)?;
        if !self
            .interfaces(bus, path)
            .await?
            .contains(Interface::Component)
        {
            return Ok(None);
        }
        let c = self.at::<ComponentProxy>(bus, path).await?;
        if !c.scroll_to(ScrollType::Anywhere).await.map_err(derr)? {
            return Ok(None);
        }
        Ok(self.extents(bus, path).await)
    }

    /// Replaces what the walks remember with the controls of the latest walk.
    pub(super) fn remember(&self, controls: Vec<(Key, InterfaceSet, Option<Rect>)>) {
        let Ok(mut known) = self.known.lock() else {
            return;
        };
        let mut next = HashMap::with_capacity(controls.len().min(MAX_KNOWN));
        for (k, ifaces, _) in controls.into_iter().take(MAX_KNOWN) {
            // Keep the action index learnt earlier: it does not change while the control lives.
            let click = known.get(&k).and_then(|o| o.click);
            next.insert(k, Known { ifaces, click });
        }
        *known = next;
    }

    fn known(&self, bus: &str, path: &str) -> Option<Known> {
        self.known
            .lock()
            .ok()?
            .get(&(bus.to_owned(), path.to_owned()))
            .cloned()
    }

    /// Remembers the click action of a control the last walk listed. A control it did not list is not
    /// added: an entry without the control's interfaces would answer "no Action interface" next time.
    fn learn_click(&self, bus: &str, path: &str, click: Option<(i32, &'static str)>) {
        if let Ok(mut known) = self.known.lock()
            && let Some(k) = known.get_mut(&(bus.to_owned(), path.to_owned()))
        {
            k.click = Some(click);
        }
    }

    /// The click-like action among a control's actions.
    async fn fetch_click(
        &self,
        bus: &str,
        path: &str,
    ) -> BackendResult<Option<(i32, &'static str)>> {
        let act = self.at::<ActionProxy>(bus, path).await?;
        let actions = act.get_actions().await.map_err(derr)?;
        let click = CLICKS.iter().find_map(|want| {
            actions
                .iter()
                .position(|a| a.name.eq_ignore_ascii_case(want))
                .map(|i| (i32::try_from(i).unwrap_or(i32::MAX), *want))
        });
        self.learn_click(bus, path, click);
        Ok(click)
    }

    /// Live enabled/visible/bounds. For a control the walk listed, the first check also learns its
    /// click action in the same round, so the click that follows is a single call.
    pub async fn state(&self, handle: &ControlHandle) -> BackendResult<ControlState> {
        self.read_state(handle, None, true).await
    }

    /// Live enabled/visible, with `rect` (the listing's) as the bounds: before an action through the
    /// accessibility API, one call (the states) instead of two. `learn_click`: learn the click action
    /// too when not known yet (a click follows; a text set needs none).
    pub async fn state_keeping_rect(
        &self,
        handle: &ControlHandle,
        rect: Rect,
        learn_click: bool,
    ) -> BackendResult<ControlState> {
        self.read_state(handle, Some(rect), learn_click).await
    }

    /// The control's bounds now.
    pub async fn bounds(&self, handle: &ControlHandle) -> BackendResult<Option<Rect>> {
        let (bus, path) = key_of(handle)?;
        Ok(self.extents(bus, path).await)
    }

    async fn read_state(
        &self,
        handle: &ControlHandle,
        rect: Option<Rect>,
        learn_click: bool,
    ) -> BackendResult<ControlState> {
        let (bus, path) = key_of(handle)?;
        let a = self.at::<AccessibleProxy>(bus, path).await?;
        let learn = learn_click
            && self
                .known(bus, path)
                .is_some_and(|k| k.ifaces.contains(Interface::Action) && k.click.is_none());
        let click = async {
            if learn {
                // Not knowing the action yet is not an error of the state check.
                let _ = self.fetch_click(bus, path).await;
            }
        };
        let bounds = async {
            match rect {
                Some(r) => Some(r),
                None => self.extents(bus, path).await,
            }
        };
        let (states, rect, ()) = futures::join!(a.get_state(), bounds, click);
        let states = states.map_err(derr)?;
        if states.contains(State::Defunct) {
            return Err(BackendError::Gone("control"));
        }
        Ok(ControlState {
            enabled: enabled(states),
            visible: visible(states),
            rect: rect.unwrap_or_default(),
        })
    }

    /// The control's interfaces: remembered from the walk, else asked.
    async fn interfaces(&self, bus: &str, path: &str) -> BackendResult<InterfaceSet> {
        if let Some(k) = self.known(bus, path) {
            return Ok(k.ifaces);
        }
        let a = self.at::<AccessibleProxy>(bus, path).await?;
        a.get_interfaces().await.map_err(derr)
    }

    /// Runs the control's click-like action; `Ok(None)` when it has none.
    pub async fn do_click_action(&self, handle: &ControlHandle) -> BackendResult<Option<String>> {
        let (bus, path) = key_of(handle)?;
        if !self
            .interfaces(bus, path)
            .await?
            .contains(Interface::Action)
        {
            return Ok(None);
        }
        let click = match self.known(bus, path).and_then(|k| k.click) {
            Some(c) => c,
            None => self.fetch_click(bus, path).await?,
        };
        let Some((i, name)) = click else {
            return Ok(None);
        };
        let act = self.at::<ActionProxy>(bus, path).await?;
        if act.do_action(i).await.map_err(derr)? {
            Ok(Some(format!("action:{name}")))
        } else {
            Err(BackendError::Failed(format!(
                "the control refused its '{name}' action"
            )))
        }
    }

    /// Sets or appends text through EditableText.
    pub async fn set_text(
        &self,
        handle: &ControlHandle,
        text: &str,
        clear: bool,
    ) -> BackendResult<()> {
        let (bus, path) = key_of(handle)?;
        let ifaces = self.interfaces(bus, path).await?;
        if !ifaces.contains(Interface::EditableText) {
            return Err(BackendError::Failed("the control is not editable".into()));
        }
        let e = self.at::<EditableTextProxy>(bus, path).await?;
        let done = if clear {
            e.set_text_contents(text).await.map_err(derr)?
        } else {
            let t = self.at::<TextProxy>(bus, path).await?;
            let end = t.character_count().await.map_err(derr)?;
            let len = i32::try_from(text.chars().count())
                .map_err(|_| BackendError::Failed("text too long".into()))?;
            e.insert_text(end, text, len).await.map_err(derr)?
        };
        if done {
            Ok(())
        } else {
            Err(BackendError::Failed("the control refused the text".into()))
        }
    }

    /// Text content, else value, else name.
    pub async fn read_text(&self, handle: &ControlHandle, name: &str) -> BackendResult<String> {
        let (bus, path) = key_of(handle)?;
        let ifaces = self.interfaces(bus, path).await?;
        if ifaces.contains(Interface::Text) {
            let t = self.at::<TextProxy>(bus, path).await?;
            return t.get_text(0, -1).await.map_err(derr);
        }
        if ifaces.contains(Interface::Value) {
            let v = self.at::<ValueProxy>(bus, path).await?;
            return Ok(v.current_value().await.map_err(derr)?.to_string());
        }
        Ok(name.to_owned())
    }

    /// Grabs keyboard focus; false when the control would not take it.
    pub async fn grab_focus(&self, handle: &ControlHandle) -> BackendResult<bool> {
        let (bus, path) = key_of(handle)?;
        let c = self.at::<ComponentProxy>(bus, path).await?;
        c.grab_focus().await.map_err(derr)
    }
}

/// Longest text [`Atspi::facts`] reads: a longer text is compared by this prefix and its length.
const FACT_CHARS: i32 = 4096;

impl Atspi {
    /// The control's text (its first [`FACT_CHARS`] characters, with the length when longer) or
    /// value, and its states: the states and the text are read concurrently, one round trip.
    pub async fn facts(&self, handle: &ControlHandle) -> BackendResult<ControlFacts> {
        let (bus, path) = key_of(handle)?;
        let ifaces = self.interfaces(bus, path).await?;
        let a = self.at::<AccessibleProxy>(bus, path).await?;
        let value = async {
            if ifaces.contains(Interface::Text) {
                let t = self.at::<TextProxy>(bus, path).await?;
                let (count, text) = futures::join!(t.character_count(), t.get_text(0, FACT_CHARS));
                let (count, text) = (count.map_err(derr)?, text.map_err(derr)?);
                return Ok(Some(if count > FACT_CHARS {
                    format!("{text}… ({count} characters)")
                } else {
                    text
                }));
            }
            if ifaces.contains(Interface::Value) {
                let v = self.at::<ValueProxy>(bus, path).await?;
                return Ok(Some(v.current_value().await.map_err(derr)?.to_string()));
            }
            Ok::<_, BackendError>(None)
        };
        let (states, value) = futures::join!(a.get_state(), value);
        let states = states.map_err(derr)?;
        if states.contains(State::Defunct) {
            return Err(BackendError::Gone("control"));
        }
        let has = |able: State, on: State| states.contains(able).then(|| states.contains(on));
        // GTK 3 does not announce `checkable`: every control is read as checked or not (a push
        // button is never checked once the screen has settled, so it never shows a change).
        let checked = Some(states.contains(State::Checked) || states.contains(State::Pressed));
        Ok(ControlFacts {
            value: value?,
            checked,
            selected: has(State::Selectable, State::Selected),
            expanded: has(State::Expandable, State::Expanded),
            focused: has(State::Focusable, State::Focused),
            enabled: enabled(states),
        })
    }

    /// The bus name of the application with process `pid`, when a walk has met it.
    pub fn app_of_pid(&self, pid: u32) -> Option<String> {
        self.apps_by_pid.lock().ok()?.get(&pid).cloned()
    }
}

impl Atspi {
    /// Whether a control is checked or pressed (how tests observe toggles through AT-SPI).
    pub async fn is_checked(&self, handle: &ControlHandle) -> BackendResult<bool> {
        let (bus, path) = key_of(handle)?;
        let a = self.at::<AccessibleProxy>(bus, path).await?;
        let s = a.get_state().await.map_err(derr)?;
        Ok(s.contains(State::Checked) || s.contains(State::Pressed))
    }
}
