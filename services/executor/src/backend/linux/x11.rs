//! The X11 half of the Linux backend (x11rb, pure Rust): screens, screenshots through MIT-SHM (falling
//! back to GetImage), windows and activation through EWMH, and XTEST mouse and keyboard input. Screens
//! are the RandR 1.5 monitors (one per active monitor), or the root window without RandR.

use std::collections::HashMap;
use std::os::fd::AsRawFd as _;
use std::sync::Mutex;

use x11rb::connection::Connection as _;
use x11rb::protocol::randr::ConnectionExt as _;
use x11rb::protocol::shm::ConnectionExt as _;
use x11rb::protocol::xproto::{
    AtomEnum, ClientMessageEvent, ConnectionExt as _, EventMask, ImageFormat, Window,
};
use x11rb::protocol::xtest::ConnectionExt as _;
use x11rb::rust_connection::RustConnection;

use crate::backend::{BackendError, BackendResult, Capture, ScreenInfo, WindowInfo};
use crate::geometry::{Point, Rect};
use crate::keys::{Key, KeyStroke, NamedKey};

fn xerr(e: impl std::fmt::Display) -> BackendError {
    BackendError::Unavailable(format!("x11: {e}"))
}

x11rb::atom_manager! {
    /// Atoms the backend uses.
    pub Atoms: AtomsCookie {
        _NET_CLIENT_LIST,
        _NET_ACTIVE_WINDOW,
        _NET_WM_NAME,
        _NET_WM_PID,
        _NET_CLOSE_WINDOW,
        _NET_WM_WINDOW_TYPE,
        _NET_WM_WINDOW_TYPE_NORMAL,
        _NET_WM_WINDOW_TYPE_DIALOG,
        _NET_FRAME_EXTENTS,
        UTF8_STRING,
    }
}

/// A shared-memory segment the server writes screenshots into.
struct ShmSegment {
    seg: u32,
    ptr: *mut u8,
    len: usize,
}

// The mapping is only touched while the `Mutex` holding it is locked.
unsafe impl Send for ShmSegment {}

impl Drop for ShmSegment {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` come from a successful mmap and are unmapped once.
        unsafe {
            libc::munmap(self.ptr.cast(), self.len);
        }
    }
}

/// The keyboard mapping: keysym -> (keycode, shift level), and keycodes free for remapping.
#[derive(Default)]
struct KeyMap {
    syms: HashMap<u32, (u8, u8)>,
    spare: Vec<u8>,
    per_code: u8,
}

/// One X11 display connection.
pub struct X11 {
    conn: RustConnection,
    root: Window,
    atoms: Atoms,
    shm: Mutex<Option<ShmSegment>>,
    shm_ok: bool,
    /// The server speaks RandR 1.5 (GetMonitors).
    randr_ok: bool,
    keymap: Mutex<KeyMap>,
}

impl X11 {
    /// Connects to `display` (`None`: the `DISPLAY` the process was started with).
    pub fn connect(display: Option<&str>) -> BackendResult<Self> {
        let (conn, screen) = x11rb::connect(display).map_err(xerr)?;
        let root = conn
            .setup()
            .roots
            .get(screen)
            .map(|s| s.root)
            .ok_or_else(|| xerr("no screen"))?;
        let atoms = Atoms::new(&conn).map_err(xerr)?.reply().map_err(xerr)?;
        let shm_ok = conn
            .shm_query_version()
            .ok()
            .and_then(|c| c.reply().ok())
            .is_some_and(|v| (v.major_version, v.minor_version) >= (1, 2));
        // GetMonitors needs RandR 1.5; announcing the version we speak is also required before use.
        let randr_ok = conn
            .randr_query_version(1, 5)
            .ok()
            .and_then(|c| c.reply().ok())
            .is_some_and(|v| (v.major_version, v.minor_version) >= (1, 5));
        let x = Self {
            conn,
            root,
            atoms,
            shm: Mutex::new(None),
            shm_ok,
            randr_ok,
            keymap: Mutex::new(KeyMap::default()),
        };
        x.load_keymap()?;
        Ok(x)
    }

    fn root_rect(&self) -> BackendResult<Rect> {
        let g = self
            .conn
            .get_geometry(self.root)
            .map_err(xerr)?
            .reply()
            .map_err(xerr)?;
        Ok(Rect::from_xywh(0, 0, g.width.into(), g.height.into()))
    }

    /// The active monitors in root-window pixels (RandR 1.5), else the root window as one screen. X11
    /// has no per-monitor scale factor, so `scale` is 1.
    pub fn screens(&self) -> BackendResult<Vec<ScreenInfo>> {
        let root = self.root_rect()?;
        let monitors = if self.randr_ok {
            self.conn
                .randr_get_monitors(self.root, true)
                .map_err(xerr)?
                .reply()
                .map_err(xerr)?
                .monitors
                .iter()
                .map(|m| {
                    let rect =
                        Rect::from_xywh(m.x.into(), m.y.into(), m.width.into(), m.height.into());
                    (rect, m.primary)
                })
                .collect()
        } else {
            Vec::new()
        };
        Ok(screens_from_monitors(&monitors, root))
    }

    /// Pixels of `region`, clipped to the root window, as RGB.
    pub fn capture(&self, region: Rect) -> BackendResult<Capture> {
        let r = region.intersect(&self.root_rect()?);
        if r.is_empty() {
            return Err(BackendError::Failed(
                "the region is outside the screen".into(),
            ));
        }
        let (w, h) = (r.width(), r.height());
        let n = (w * h) as usize;
        let rgb = match self.capture_shm(r) {
            Some(rgb) => rgb,
            None => {
                let reply = self
                    .conn
                    .get_image(
                        ImageFormat::Z_PIXMAP,
                        self.root,
                        r.left as i16,
                        r.top as i16,
                        w as u16,
                        h as u16,
                        !0,
                    )
                    .map_err(xerr)?
                    .reply()
                    .map_err(xerr)?;
                if reply.data.len() < n * 4 {
                    return Err(xerr("short image"));
                }
                bgrx_to_rgb(&reply.data[..n * 4])
            }
        };
        Ok(Capture {
            width: w,
            height: h,
            rgb,
            origin: Point {
                x: r.left,
                y: r.top,
            },
        })
    }

    /// MIT-SHM capture into a segment kept between calls; `None` when SHM is unavailable or fails.
    fn capture_shm(&self, r: Rect) -> Option<Vec<u8>> {
        if !self.shm_ok {
            return None;
        }
        let mut guard = self.shm.lock().ok()?;
        let need = (r.width() * r.height() * 4) as usize;
        if guard.as_ref().is_none_or(|s| s.len < need) {
            *guard = None;
            let len =
                (self.root_rect().ok()?.width() * self.root_rect().ok()?.height() * 4) as usize;
            let seg = self.conn.generate_id().ok()?;
            let reply = self
                .conn
                .shm_create_segment(seg, len as u32, false)
                .ok()?
                .reply()
                .ok()?;
            // SAFETY: mapping a fresh fd the server gave us, of the size we asked for.
            let ptr = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ,
                    libc::MAP_SHARED,
                    reply.shm_fd.as_raw_fd(),
                    0,
                )
            };
            if ptr == libc::MAP_FAILED {
                return None;
            }
            *guard = Some(ShmSegment {
                seg,
                ptr: ptr.cast(),
                len,
            });
        }
        let shm = guard.as_ref()?;
        let reply = self
            .conn
            .shm_get_image(
                self.root,
                r.left as i16,
                r.top as i16,
                r.width() as u16,
                r.height() as u16,
                !0,
                ImageFormat::Z_PIXMAP.into(),
                shm.seg,
                0,
            )
            .ok()?
            .reply()
            .ok()?;
        let _ = reply;
        // SAFETY: the server finished writing `need` bytes (the reply arrived); we only read, and
        // convert straight out of the segment instead of copying it first.
        Some(bgrx_to_rgb(unsafe {
            std::slice::from_raw_parts(shm.ptr, need)
        }))
    }

    fn prop_u32s(&self, w: Window, atom: u32, ty: impl Into<u32>) -> Vec<u32> {
        self.conn
            .get_property(false, w, atom, ty, 0, 4096)
            .ok()
            .and_then(|c| c.reply().ok())
            .and_then(|r| r.value32().map(|v| v.collect()))
            .unwrap_or_default()
    }

    fn prop_string(&self, w: Window, atom: u32, ty: impl Into<u32>) -> Option<String> {
        let r = self
            .conn
            .get_property(false, w, atom, ty, 0, 4096)
            .ok()?
            .reply()
            .ok()?;
        (!r.value.is_empty()).then(|| String::from_utf8_lossy(&r.value).into_owned())
    }

    /// Top-level application windows from `_NET_CLIENT_LIST` (normal and dialog windows).
    pub fn windows(&self) -> BackendResult<Vec<WindowInfo>> {
        let list = self.application_windows();
        let mut out = Vec::with_capacity(list.len());
        for w in list {
            let title = self.title(w);
            let pid = self
                .prop_u32s(w, self.atoms._NET_WM_PID, AtomEnum::CARDINAL)
                .first()
                .copied();
            let class_name = self
                .prop_string(w, AtomEnum::WM_CLASS.into(), AtomEnum::STRING)
                .and_then(|c| c.split('\0').nth(1).map(str::to_owned))
                .unwrap_or_default();
            let Ok(Ok(g)) = self.conn.get_geometry(w).map(|c| c.reply()) else {
                continue;
            };
            let Ok(Ok(t)) = self
                .conn
                .translate_coordinates(w, self.root, 0, 0)
                .map(|c| c.reply())
            else {
                continue;
            };
            let process_name = pid
                .and_then(|p| std::fs::read_to_string(format!("/proc/{p}/comm")).ok())
                .map(|s| s.trim().to_owned())
                .unwrap_or_default();
            out.push(WindowInfo {
                handle: w.into(),
                title,
                process_name,
                pid,
                rect: Rect::from_xywh(
                    t.dst_x.into(),
                    t.dst_y.into(),
                    g.width.into(),
                    g.height.into(),
                ),
                class_name,
            });
        }
        Ok(out)
    }

    /// `window`'s place with the window manager's frame around it (`_NET_FRAME_EXTENTS`: the title
    /// bar a focus change or a new title redraws); its own rectangle when the manager says nothing.
    pub fn frame_rect(&self, window: &WindowInfo) -> Rect {
        let Ok(w) = u32::try_from(window.handle) else {
            return window.rect;
        };
        let r = window.rect;
        match self.prop_u32s(w, self.atoms._NET_FRAME_EXTENTS, AtomEnum::CARDINAL)[..] {
            [left, right, top, bottom] => {
                let grow = |v: u32| i32::try_from(v).unwrap_or(0);
                Rect {
                    left: r.left.saturating_sub(grow(left)),
                    top: r.top.saturating_sub(grow(top)),
                    right: r.right.saturating_add(grow(right)),
                    bottom: r.bottom.saturating_add(grow(bottom)),
                }
            }
            _ => r,
        }
    }

    /// The window manager's client windows that are application windows (normal or dialog).
    fn application_windows(&self) -> Vec<u32> {
        let mut list = self.prop_u32s(self.root, self.atoms._NET_CLIENT_LIST, AtomEnum::WINDOW);
        list.retain(|&w| {
            let types = self.prop_u32s(w, self.atoms._NET_WM_WINDOW_TYPE, AtomEnum::ATOM);
            types.is_empty()
                || types.iter().any(|t| {
                    *t == self.atoms._NET_WM_WINDOW_TYPE_NORMAL
                        || *t == self.atoms._NET_WM_WINDOW_TYPE_DIALOG
                })
        });
        list
    }

    /// A window's title (EWMH name, else the ICCCM one).
    fn title(&self, w: u32) -> String {
        self.prop_string(w, self.atoms._NET_WM_NAME, self.atoms.UTF8_STRING)
            .or_else(|| self.prop_string(w, AtomEnum::WM_NAME.into(), AtomEnum::STRING))
            .unwrap_or_default()
    }

    /// The listed windows' ids and titles (what [`Self::windows`] lists, without the geometry,
    /// process and class reads).
    pub fn window_titles(&self) -> BackendResult<Vec<(u64, String)>> {
        let list = self.application_windows();
        let mut out = Vec::with_capacity(list.len());
        for w in list {
            let title = self.title(w);
            out.push((w.into(), title));
        }
        Ok(out)
    }

    /// The active window id.
    pub fn active_window(&self) -> Option<u32> {
        self.prop_u32s(self.root, self.atoms._NET_ACTIVE_WINDOW, AtomEnum::WINDOW)
            .first()
            .copied()
    }

    fn client_message(&self, w: Window, atom: u32, data: [u32; 5]) -> BackendResult<()> {
        let ev = ClientMessageEvent::new(32, w, atom, data);
        self.conn
            .send_event(
                false,
                self.root,
                EventMask::SUBSTRUCTURE_REDIRECT | EventMask::SUBSTRUCTURE_NOTIFY,
                ev,
            )
            .map_err(xerr)?;
        self.conn.flush().map_err(xerr)
    }

    /// Asks the window manager to activate `w` (as a pager would).
    pub fn request_activate(&self, w: u32) -> BackendResult<()> {
        self.client_message(w, self.atoms._NET_ACTIVE_WINDOW, [2, 0, 0, 0, 0])
    }

    /// Asks the window manager to close `w`.
    pub fn request_close(&self, w: u32) -> BackendResult<()> {
        self.client_message(w, self.atoms._NET_CLOSE_WINDOW, [0, 2, 0, 0, 0])
    }

    fn fake(&self, ty: u8, detail: u8, x: i16, y: i16) -> BackendResult<()> {
        self.conn
            .xtest_fake_input(ty, detail, 0, self.root, x, y, 0)
            .map_err(xerr)?;
        Ok(())
    }

    /// Waits until the server processed everything sent so far.
    pub fn sync(&self) -> BackendResult<()> {
        self.conn
            .get_input_focus()
            .map_err(xerr)?
            .reply()
            .map_err(xerr)?;
        Ok(())
    }

    /// Moves the pointer.
    pub fn move_to(&self, p: Point) -> BackendResult<()> {
        self.fake(6, 0, p.x as i16, p.y as i16)
    }

    /// Presses (`down`) or releases X button `button` (1 left, 2 middle, 3 right, 4/5 wheel).
    pub fn button(&self, button: u8, down: bool) -> BackendResult<()> {
        self.fake(if down { 4 } else { 5 }, button, 0, 0)
    }

    fn load_keymap(&self) -> BackendResult<()> {
        let setup = self.conn.setup();
        let (min, max) = (setup.min_keycode, setup.max_keycode);
        let m = self
            .conn
            .get_keyboard_mapping(min, max - min + 1)
            .map_err(xerr)?
            .reply()
            .map_err(xerr)?;
        let per = m.keysyms_per_keycode.max(1);
        let mut km = KeyMap {
            per_code: per,
            ..KeyMap::default()
        };
        for (i, syms) in m.keysyms.chunks(per as usize).enumerate() {
            let code = min + i as u8;
            if syms.iter().all(|s| *s == 0) {
                km.spare.push(code);
                continue;
            }
            for (level, s) in syms.iter().take(2).enumerate() {
                if *s != 0 {
                    km.syms.entry(*s).or_insert((code, level as u8));
                }
            }
        }
        if let Ok(mut g) = self.keymap.lock() {
            *g = km;
        }
        Ok(())
    }

    /// (keycode, needs shift) for a keysym, remapping a spare keycode when the keyboard lacks it.
    fn keycode(&self, sym: u32) -> BackendResult<(u8, bool)> {
        let mut km = self
            .keymap
            .lock()
            .map_err(|_| xerr("keymap lock poisoned"))?;
        if let Some(&(code, level)) = km.syms.get(&sym) {
            return Ok((code, level == 1));
        }
        let code = km.spare.pop().ok_or_else(|| {
            BackendError::Failed(format!("no keycode free to type keysym {sym:#x}"))
        })?;
        let per = km.per_code;
        self.conn
            .change_keyboard_mapping(1, code, per, &vec![sym; per as usize])
            .map_err(xerr)?;
        self.sync()?;
        km.syms.insert(sym, (code, 0));
        Ok((code, false))
    }

    /// Replays key strokes with XTEST.
    pub fn keys(&self, strokes: &[KeyStroke]) -> BackendResult<()> {
        let (shift, _) = self.keycode(0xffe1)?;
        for s in strokes {
            let (code, needs_shift) = self.keycode(keysym(s.key))?;
            if needs_shift && s.down {
                self.fake(2, shift, 0, 0)?;
            }
            self.fake(if s.down { 2 } else { 3 }, code, 0, 0)?;
            if needs_shift && !s.down {
                self.fake(3, shift, 0, 0)?;
            }
        }
        self.sync()
    }
}

/// Converts 32-bit BGRX pixels (the X server's 24-bit depth layout) to packed RGB.
fn bgrx_to_rgb(bgrx: &[u8]) -> Vec<u8> {
    let mut rgb = vec![0u8; bgrx.len() / 4 * 3];
    for (dst, src) in rgb.chunks_exact_mut(3).zip(bgrx.chunks_exact(4)) {
        dst[0] = src[2];
        dst[1] = src[1];
        dst[2] = src[0];
    }
    rgb
}

/// The X keysym of a key.
pub fn keysym(key: Key) -> u32 {
    use NamedKey::*;
    match key {
        Key::Char(c) => {
            let cp = c as u32;
            if (0x20..=0x7e).contains(&cp) || (0xa0..=0xff).contains(&cp) {
                cp
            } else {
                0x0100_0000 + cp
            }
        }
        Key::Named(n) => match n {
            Enter => 0xff0d,
            Tab => 0xff09,
            Escape => 0xff1b,
            Backspace => 0xff08,
            Delete => 0xffff,
            Insert => 0xff63,
            Home => 0xff50,
            End => 0xff57,
            PageUp => 0xff55,
            PageDown => 0xff56,
            Left => 0xff51,
            Up => 0xff52,
            Right => 0xff53,
            Down => 0xff54,
            Space => 0x20,
            CapsLock => 0xffe5,
            NumLock => 0xff7f,
            ScrollLock => 0xff14,
            PrintScreen => 0xff61,
            Pause => 0xff13,
            Apps => 0xff67,
            Shift => 0xffe1,
            Control => 0xffe3,
            Alt => 0xffe9,
            Win => 0xffeb,
            F(k) => 0xffbe + u32::from(k.saturating_sub(1)),
        },
    }
}

/// Screens from RandR monitors `(rect, primary)`: clipped to the root, empty ones dropped, exactly one
/// primary (the first flagged one, else the first monitor); the root as one screen when none remain.
fn screens_from_monitors(monitors: &[(Rect, bool)], root: Rect) -> Vec<ScreenInfo> {
    let mut screens: Vec<ScreenInfo> = monitors
        .iter()
        .map(|(rect, primary)| ScreenInfo {
            rect: rect.intersect(&root),
            scale: 1.0,
            primary: *primary,
        })
        .filter(|s| !s.rect.is_empty())
        .collect();
    let first_primary = screens.iter().position(|s| s.primary).unwrap_or(0);
    for (i, s) in screens.iter_mut().enumerate() {
        s.primary = i == first_primary;
    }
    if screens.is_empty() {
        screens.push(ScreenInfo {
            rect: root,
            scale: 1.0,
            primary: true,
        });
    }
    screens
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monitors_become_screens_with_one_primary() {
        let root = Rect::from_xywh(0, 0, 3840, 1080);
        let left = Rect::from_xywh(0, 0, 1920, 1080);
        let right = Rect::from_xywh(1920, 0, 1920, 1080);
        let s = screens_from_monitors(&[(left, false), (right, true)], root);
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].rect, s[0].primary), (left, false));
        assert_eq!((s[1].rect, s[1].primary), (right, true));
        // No primary flagged: the first monitor is primary; two flagged: only the first keeps it.
        let s = screens_from_monitors(&[(left, false), (right, false)], root);
        assert!(s[0].primary && !s[1].primary);
        let s = screens_from_monitors(&[(left, true), (right, true)], root);
        assert!(s[0].primary && !s[1].primary);
        // A monitor partly outside the root is clipped; one fully outside is dropped.
        let wide = Rect::from_xywh(3000, 0, 1920, 1080);
        let gone = Rect::from_xywh(5000, 0, 100, 100);
        let s = screens_from_monitors(&[(wide, true), (gone, false)], root);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].rect, Rect::from_xywh(3000, 0, 840, 1080));
        // Nothing usable: the root is the one screen.
        let s = screens_from_monitors(&[], root);
        assert_eq!((s.len(), s[0].rect, s[0].primary), (1, root, true));
    }

    #[test]
    fn keysyms() {
        assert_eq!(keysym(Key::Char('a')), 0x61);
        assert_eq!(keysym(Key::Char('é')), 0xe9);
        assert_eq!(keysym(Key::Char('€')), 0x0100_20ac);
        assert_eq!(keysym(Key::Named(NamedKey::F(12))), 0xffc9);
        assert_eq!(keysym(Key::Named(NamedKey::Enter)), 0xff0d);
    }
}
