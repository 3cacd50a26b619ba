//! The AT-SPI2 half of the Linux backend: the accessibility tree over D-Bus and actions through the
//! Action / EditableText / Text / Value / Component interfaces.
//!
//! Speed: one `org.a11y.atspi.Cache.GetItems` call returns an application's whole cached tree (names,
//! roles, states, interfaces, parents); bounds come from concurrent `GetExtents` calls. The cache leaves
//! out the children of list and tree views, so those subtrees are walked with (concurrent) live calls.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use atspi::proxy::accessible::AccessibleProxy;
use atspi::proxy::action::ActionProxy;
use atspi::proxy::application::ApplicationProxy;
use atspi::proxy::bus::BusProxy;
use atspi::proxy::cache::CacheProxy;
use atspi::proxy::component::ComponentProxy;
use atspi::proxy::editable_text::EditableTextProxy;
use atspi::proxy::text::TextProxy;
use atspi::proxy::value::ValueProxy;
use atspi::{CoordType, Interface, InterfaceSet, Role, State, StateSet};
use futures::future::join_all;

use super::roles::control_type;
use crate::backend::{
    BackendError, BackendResult, ControlHandle, ControlState, RawNode, RawTree, TreeLimits,
    WindowInfo,
};
use crate::geometry::Rect;

fn derr(e: zbus::Error) -> BackendError {
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

const ROOT_PATH: &str = "/org/a11y/atspi/accessible/root";

/// A node key: (bus name, object path).
type Key = (String, String);

/// What the walk knows about one accessible.
#[derive(Debug, Clone)]
struct Info {
    name: String,
    role: Role,
    states: StateSet,
    child_count: i32,
}

/// The accessibility bus connection.
pub struct Atspi {
    conn: zbus::Connection,
    apps_by_pid: Mutex<HashMap<u32, String>>,
    /// Direct peer-to-peer connections to applications, by bus name (the cache interface and most
    /// calls are only served, or served much faster, there).
    peers: tokio::sync::Mutex<HashMap<String, zbus::Connection>>,
}

macro_rules! proxy {
    ($ty:ty, $conn:expr, $bus:expr, $path:expr) => {
        async {
            zbus::proxy::Builder::<$ty>::new($conn)
                .destination($bus.to_owned())?
                .path($path.to_owned())?
                .cache_properties(zbus::proxy::CacheProperties::No)
                .build()
                .await
        }
        .await
        .map_err(derr)
    };
}

/// Splits a control handle into its bus name and object path.
fn key_of(handle: &ControlHandle) -> BackendResult<(&str, &str)> {
    handle
        .0
        .split_once('\n')
        .ok_or(BackendError::Gone("control"))
}

fn visible(states: StateSet) -> bool {
    states.contains(State::Showing) && states.contains(State::Visible)
}

fn enabled(states: StateSet) -> bool {
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
        })
    }

    /// The connection to use for calls to application `bus`: a direct peer-to-peer one when the
    /// application offers it, else the accessibility bus.
    async fn conn_for(&self, bus: &str) -> zbus::Connection {
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

    async fn open_peer(&self, bus: &str) -> Option<zbus::Connection> {
        let app = zbus::proxy::Builder::<ApplicationProxy<'static>>::new(&self.conn)
            .destination(bus.to_owned())
            .ok()?
            .path(ROOT_PATH)
            .ok()?
            .cache_properties(zbus::proxy::CacheProperties::No)
            .build()
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
        let root = proxy!(
            AccessibleProxy<'static>,
            &self.conn,
            "org.a11y.atspi.Registry",
            ROOT_PATH
        )?;
        let children = root.get_children().await.map_err(derr)?;
        Ok(children
            .iter()
            .filter_map(|c| c.name_as_str().map(str::to_owned))
            .collect())
    }

    /// The application bus name owning process `pid`.
    async fn app_for_pid(&self, pid: u32) -> BackendResult<String> {
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
            BackendError::Failed(format!("process {pid} has no accessible application (is its accessibility bridge disabled?)"))
        })
    }

    /// Walks the controls of `window` within `limits`.
    pub async fn tree(&self, window: &WindowInfo, limits: &TreeLimits) -> BackendResult<RawTree> {
        let pid = window.pid.ok_or_else(|| {
            BackendError::Failed(format!("window '{}' has no process id", window.title))
        })?;
        let bus = self.app_for_pid(pid).await?;
        let cache = proxy!(
            CacheProxy<'static>,
            &self.conn_for(bus.as_str()).await,
            bus.as_str(),
            "/org/a11y/atspi/cache"
        )?;
        // Applications answer in the current item layout or the legacy one (children listed inline).
        let items: Vec<(
            atspi::ObjectRefOwned,
            atspi::ObjectRefOwned,
            i32,
            i32,
            String,
            Role,
            StateSet,
        )> = match cache.get_items().await {
            Ok(items) => items
                .into_iter()
                .map(|i| {
                    (
                        i.object,
                        i.parent,
                        i.index,
                        i.children,
                        i.short_name,
                        i.role,
                        i.states,
                    )
                })
                .collect(),
            Err(_) => {
                let legacy = cache.get_legacy_items().await.unwrap_or_default();
                let mut index_of: HashMap<String, i32> = HashMap::new();
                for it in &legacy {
                    for (i, c) in it.children.iter().enumerate() {
                        index_of.insert(c.path_as_str().to_owned(), i as i32);
                    }
                }
                legacy
                    .into_iter()
                    .map(|i| {
                        let idx = index_of.get(i.object.path_as_str()).copied().unwrap_or(0);
                        let n = i32::try_from(i.children.len()).unwrap_or(i32::MAX);
                        (i.object, i.parent, idx, n, i.short_name, i.role, i.states)
                    })
                    .collect()
            }
        };
        let mut info: HashMap<Key, Info> = HashMap::with_capacity(items.len());
        let mut children: HashMap<Key, Vec<(i32, Key)>> = HashMap::new();
        let mut frames = Vec::new();
        for (object, parent, index, count, name, role, states) in items {
            let key: Key = (bus.clone(), object.path_as_str().to_owned());
            let parent: Key = (bus.clone(), parent.path_as_str().to_owned());
            if parent.1 == ROOT_PATH
                && matches!(
                    role,
                    Role::Frame | Role::Window | Role::Dialog | Role::Alert
                )
            {
                frames.push((key.clone(), name.clone(), states));
            }
            children
                .entry(parent)
                .or_default()
                .push((index, key.clone()));
            info.insert(
                key,
                Info {
                    name,
                    role,
                    states,
                    child_count: count,
                },
            );
        }
        let mut cut = false;
        if info.is_empty() {
            // No cache interface: walk the application live, level by level with concurrent calls.
            let root: Key = (bus.clone(), ROOT_PATH.to_owned());
            let root_info = self
                .live_info(&root)
                .await
                .ok_or(BackendError::Gone("application"))?;
            info.insert(root.clone(), root_info);
            cut = self
                .fill_uncached(&mut info, &mut children, &root, limits)
                .await;
            for (_, k) in children.get(&root).cloned().unwrap_or_default() {
                if let Some(i) = info.get(&k).filter(|i| {
                    matches!(
                        i.role,
                        Role::Frame | Role::Window | Role::Dialog | Role::Alert
                    )
                }) {
                    frames.push((k.clone(), i.name.clone(), i.states));
                }
            }
        }
        for list in children.values_mut() {
            list.sort_by_key(|(i, _)| *i);
        }
        let frame = frames
            .iter()
            .find(|(_, name, _)| name == &window.title)
            .or_else(|| frames.iter().find(|(_, _, s)| s.contains(State::Active)))
            .or(frames.first())
            .map(|(k, _, _)| k.clone())
            .ok_or_else(|| {
                BackendError::Failed(format!("window '{}' has no accessible frame", window.title))
            })?;

        cut |= self
            .fill_uncached(&mut info, &mut children, &frame, limits)
            .await;

        // Pre-order within the limits.
        let mut order: Vec<(Key, Option<usize>, u32)> = Vec::new();
        let mut stack = vec![(frame, None, 0u32)];
        let mut truncated = cut;
        while let Some((key, parent, depth)) = stack.pop() {
            if order.len() >= limits.max_nodes || Instant::now() >= limits.deadline {
                truncated = true;
                break;
            }
            let me = order.len();
            if let Some(kids) = children.get(&key) {
                if depth >= limits.max_depth {
                    truncated |= !kids.is_empty();
                } else {
                    stack.extend(
                        kids.iter()
                            .rev()
                            .map(|(_, k)| (k.clone(), Some(me), depth + 1)),
                    );
                }
            }
            order.push((key, parent, depth));
        }
        let extents = join_all(order.iter().map(|(k, _, _)| self.extents(&k.0, &k.1))).await;
        let nodes = order
            .into_iter()
            .zip(extents)
            .filter_map(|((key, parent, depth), rect)| {
                let i = info.get(&key)?;
                Some(RawNode {
                    handle: ControlHandle(format!("{}\n{}", key.0, key.1)),
                    parent,
                    depth,
                    name: i.name.clone(),
                    control_type: control_type(i.role, i.states.contains(State::Editable))
                        .to_owned(),
                    rect: rect.unwrap_or_default(),
                    enabled: enabled(i.states),
                    visible: visible(i.states),
                    automation_id: String::new(),
                })
            })
            .collect();
        Ok(RawTree { nodes, truncated })
    }

    /// Walks, level by level with concurrent calls, the subtrees the cache leaves out (list and tree
    /// views) below `frame`.
    async fn fill_uncached(
        &self,
        info: &mut HashMap<Key, Info>,
        children: &mut HashMap<Key, Vec<(i32, Key)>>,
        frame: &Key,
        limits: &TreeLimits,
    ) -> bool {
        // Containers whose cached children are fewer than they report.
        let mut frontier: Vec<Key> = Vec::new();
        let mut stack = vec![frame.clone()];
        while let Some(k) = stack.pop() {
            let have = children.get(&k).map_or(0, Vec::len);
            if info
                .get(&k)
                .is_some_and(|i| i.child_count > 0 && have < i.child_count as usize)
            {
                frontier.push(k.clone());
            }
            if let Some(kids) = children.get(&k) {
                stack.extend(kids.iter().map(|(_, c)| c.clone()));
            }
        }
        let mut budget = limits.max_nodes.saturating_sub(info.len());
        let mut level = 0;
        while !frontier.is_empty()
            && budget > 0
            && Instant::now() < limits.deadline
            && level < limits.max_depth
        {
            level += 1;
            let lists = join_all(frontier.iter().map(|k| self.live_children(k))).await;
            // (parent, index in parent, child) for every child not known yet, fetched in one round.
            let mut wanted: Vec<(Key, i32, Key)> = Vec::new();
            for (parent, kids) in frontier.iter().zip(lists) {
                for (i, k) in kids.into_iter().enumerate() {
                    if wanted.len() < budget && !info.contains_key(&k) {
                        wanted.push((parent.clone(), i32::try_from(i).unwrap_or(i32::MAX), k));
                    }
                }
            }
            budget -= wanted.len();
            let infos = join_all(wanted.iter().map(|(_, _, k)| self.live_info(k))).await;
            let mut next_keys = Vec::new();
            for ((parent, index, k), inf) in wanted.into_iter().zip(infos) {
                if let Some(inf) = inf {
                    if inf.child_count > 0 {
                        next_keys.push(k.clone());
                    }
                    children.entry(parent).or_default().push((index, k.clone()));
                    info.insert(k, inf);
                }
            }
            frontier = next_keys;
        }
        for list in children.values_mut() {
            list.sort_by_key(|(i, _)| *i);
        }
        !frontier.is_empty()
    }

    async fn live_children(&self, key: &Key) -> Vec<Key> {
        let Ok(p) = proxy!(
            AccessibleProxy<'static>,
            &self.conn_for(key.0.as_str()).await,
            key.0.as_str(),
            key.1.as_str()
        ) else {
            return Vec::new();
        };
        p.get_children()
            .await
            .map(|c| {
                c.iter()
                    .filter_map(|o| Some((o.name_as_str()?.to_owned(), o.path_as_str().to_owned())))
                    .collect()
            })
            .unwrap_or_default()
    }

    async fn live_info(&self, key: &Key) -> Option<Info> {
        let p = proxy!(
            AccessibleProxy<'static>,
            &self.conn_for(key.0.as_str()).await,
            key.0.as_str(),
            key.1.as_str()
        )
        .ok()?;
        let (name, role, states, count) =
            futures::join!(p.name(), p.get_role(), p.get_state(), p.child_count());
        Some(Info {
            name: name.ok()?,
            role: role.ok()?,
            states: states.ok()?,
            child_count: count.unwrap_or(0),
        })
    }

    async fn extents(&self, bus: &str, path: &str) -> Option<Rect> {
        let c = proxy!(
            ComponentProxy<'static>,
            &self.conn_for(bus).await,
            bus,
            path
        )
        .ok()?;
        let (x, y, w, h) = c.get_extents(CoordType::Screen).await.ok()?;
        Some(Rect::from_xywh(x, y, w, h))
    }

    /// Live enabled/visible/bounds.
    pub async fn state(&self, handle: &ControlHandle) -> BackendResult<ControlState> {
        let (bus, path) = key_of(handle)?;
        let a = proxy!(
            AccessibleProxy<'static>,
            &self.conn_for(bus).await,
            bus,
            path
        )?;
        let (states, rect) = futures::join!(a.get_state(), self.extents(bus, path));
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

    async fn interfaces(&self, bus: &str, path: &str) -> BackendResult<InterfaceSet> {
        let a = proxy!(
            AccessibleProxy<'static>,
            &self.conn_for(bus).await,
            bus,
            path
        )?;
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
        let act = proxy!(ActionProxy<'static>, &self.conn_for(bus).await, bus, path)?;
        let actions = act.get_actions().await.map_err(derr)?;
        const CLICKS: &[&str] = &[
            "click", "press", "activate", "toggle", "jump", "select", "open",
        ];
        let Some((i, name)) = CLICKS.iter().find_map(|want| {
            actions
                .iter()
                .position(|a| a.name.eq_ignore_ascii_case(want))
                .map(|i| (i, *want))
        }) else {
            return Ok(None);
        };
        if act.do_action(i as i32).await.map_err(derr)? {
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
        let e = proxy!(
            EditableTextProxy<'static>,
            &self.conn_for(bus).await,
            bus,
            path
        )?;
        let done = if clear {
            e.set_text_contents(text).await.map_err(derr)?
        } else {
            let t = proxy!(TextProxy<'static>, &self.conn_for(bus).await, bus, path)?;
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
            let t = proxy!(TextProxy<'static>, &self.conn_for(bus).await, bus, path)?;
            return t.get_text(0, -1).await.map_err(derr);
        }
        if ifaces.contains(Interface::Value) {
            let v = proxy!(ValueProxy<'static>, &self.conn_for(bus).await, bus, path)?;
            return Ok(v.current_value().await.map_err(derr)?.to_string());
        }
        Ok(name.to_owned())
    }

    /// Grabs keyboard focus; false when the control would not take it.
    pub async fn grab_focus(&self, handle: &ControlHandle) -> BackendResult<bool> {
        let (bus, path) = key_of(handle)?;
        let c = proxy!(
            ComponentProxy<'static>,
            &self.conn_for(bus).await,
            bus,
            path
        )?;
        c.grab_focus().await.map_err(derr)
    }
}

impl Atspi {
    /// Whether a control is checked or pressed (how tests observe toggles through AT-SPI).
    pub async fn is_checked(&self, handle: &ControlHandle) -> BackendResult<bool> {
        let (bus, path) = key_of(handle)?;
        let a = proxy!(
            AccessibleProxy<'static>,
            &self.conn_for(bus).await,
            bus,
            path
        )?;
        let s = a.get_state().await.map_err(derr)?;
        Ok(s.contains(State::Checked) || s.contains(State::Pressed))
    }
}
