//! Plain Win32 for the Windows backend: monitors (per-monitor DPI), GDI BitBlt capture of any region of
//! the virtual desktop, and SendInput mouse and keyboard input (windows themselves: [`super::window`]).

use windows::Win32::Foundation::{HWND, LPARAM, RECT};
use windows::Win32::Graphics::Gdi::{
    BI_RGB, BITMAPINFO, BITMAPINFOHEADER, BitBlt, CAPTUREBLT, CreateCompatibleBitmap,
    CreateCompatibleDC, DIB_RGB_COLORS, DeleteDC, DeleteObject, EnumDisplayMonitors, GetDC,
    GetDIBits, GetMonitorInfoW, HDC, HMONITOR, MONITORINFO, ReleaseDC, SRCCOPY, SelectObject,
};
use windows::Win32::UI::HiDpi::{GetDpiForMonitor, MDT_EFFECTIVE_DPI};
use windows::Win32::UI::Input::KeyboardAndMouse::{
    INPUT, INPUT_0, INPUT_KEYBOARD, INPUT_MOUSE, KEYBD_EVENT_FLAGS, KEYBDINPUT, KEYEVENTF_KEYUP,
    KEYEVENTF_UNICODE, MOUSE_EVENT_FLAGS, MOUSEEVENTF_ABSOLUTE, MOUSEEVENTF_LEFTDOWN,
    MOUSEEVENTF_LEFTUP, MOUSEEVENTF_MIDDLEDOWN, MOUSEEVENTF_MIDDLEUP, MOUSEEVENTF_MOVE,
    MOUSEEVENTF_RIGHTDOWN, MOUSEEVENTF_RIGHTUP, MOUSEEVENTF_VIRTUALDESK, MOUSEEVENTF_WHEEL,
    MOUSEINPUT, SendInput, VIRTUAL_KEY,
};
use windows::Win32::UI::WindowsAndMessaging::{
    GetSystemMetrics, MONITORINFOF_PRIMARY, SM_CXVIRTUALSCREEN, SM_CYVIRTUALSCREEN,
    SM_XVIRTUALSCREEN, SM_YVIRTUALSCREEN,
};
use windows::core::BOOL;

use crate::backend::{BackendError, BackendResult, Capture, MouseButton, ScreenInfo};
use crate::geometry::{Point, Rect, dpi_scale, normalized_absolute};
use crate::keys::{Key, KeyStroke, NamedKey};

pub(super) fn werr(what: &str, e: windows::core::Error) -> BackendError {
    BackendError::Failed(format!("{what}: {}", e.message()))
}

pub(super) fn rect(r: RECT) -> Rect {
    Rect {
        left: r.left,
        top: r.top,
        right: r.right,
        bottom: r.bottom,
    }
}

pub(super) fn hwnd(handle: u64) -> HWND {
    HWND(handle as usize as *mut core::ffi::c_void)
}

/// The virtual desktop spanning every monitor.
pub fn virtual_desktop() -> Rect {
    // SAFETY: plain metric queries.
    unsafe {
        Rect::from_xywh(
            GetSystemMetrics(SM_XVIRTUALSCREEN),
            GetSystemMetrics(SM_YVIRTUALSCREEN),
            GetSystemMetrics(SM_CXVIRTUALSCREEN),
            GetSystemMetrics(SM_CYVIRTUALSCREEN),
        )
    }
}

unsafe extern "system" fn monitor_proc(m: HMONITOR, _: HDC, _: *mut RECT, data: LPARAM) -> BOOL {
    // SAFETY: `data` is the `Vec` passed by `screens` and outlives the enumeration.
    let out = unsafe { &mut *(data.0 as *mut Vec<ScreenInfo>) };
    let mut info = MONITORINFO {
        cbSize: size_of::<MONITORINFO>() as u32,
        ..Default::default()
    };
    // SAFETY: `info` is a properly sized MONITORINFO.
    if unsafe { GetMonitorInfoW(m, &mut info) }.as_bool() {
        let (mut dx, mut dy) = (96u32, 96u32);
        // SAFETY: out-pointers to locals.
        let _ = unsafe { GetDpiForMonitor(m, MDT_EFFECTIVE_DPI, &mut dx, &mut dy) };
        out.push(ScreenInfo {
            rect: rect(info.rcMonitor),
            scale: dpi_scale(dx),
            primary: info.dwFlags & MONITORINFOF_PRIMARY != 0,
        });
    }
    BOOL(1)
}

/// Monitors, primary first (coordinates are physical: the process is per-monitor DPI aware).
pub fn screens() -> BackendResult<Vec<ScreenInfo>> {
    let mut out: Vec<ScreenInfo> = Vec::new();
    // SAFETY: the callback only touches `out` during the call.
    unsafe {
        let _ = EnumDisplayMonitors(
            None,
            None,
            Some(monitor_proc),
            LPARAM(&mut out as *mut _ as isize),
        );
    }
    out.sort_by_key(|s| !s.primary);
    Ok(out)
}

/// BitBlt of `region` (clipped to the virtual desktop) into RGB.
pub fn capture(region: Rect) -> BackendResult<Capture> {
    let r = region.intersect(&virtual_desktop());
    if r.is_empty() {
        return Err(BackendError::Failed(
            "the region is outside the screen".into(),
        ));
    }
    let (w, h) = (r.width() as i32, r.height() as i32);
    // SAFETY: GDI objects are created, used and released in this scope.
    unsafe {
        let screen = GetDC(None);
        let mem = CreateCompatibleDC(Some(screen));
        let bmp = CreateCompatibleBitmap(screen, w, h);
        let old = SelectObject(mem, bmp.into());
        let blt = BitBlt(
            mem,
            0,
            0,
            w,
            h,
            Some(screen),
            r.left,
            r.top,
            SRCCOPY | CAPTUREBLT,
        );
        let mut info = BITMAPINFO {
            bmiHeader: BITMAPINFOHEADER {
                biSize: size_of::<BITMAPINFOHEADER>() as u32,
                biWidth: w,
                biHeight: -h,
                biPlanes: 1,
                biBitCount: 32,
                biCompression: BI_RGB.0,
                ..Default::default()
            },
            ..Default::default()
        };
        let mut bgra = vec![0u8; (w * h * 4) as usize];
        let lines = GetDIBits(
            mem,
            bmp,
            0,
            h as u32,
            Some(bgra.as_mut_ptr().cast()),
            &mut info,
            DIB_RGB_COLORS,
        );
        SelectObject(mem, old);
        let _ = DeleteObject(bmp.into());
        let _ = DeleteDC(mem);
        ReleaseDC(None, screen);
        blt.map_err(|e| werr("BitBlt", e))?;
        if lines != h {
            return Err(BackendError::Failed(
                "GetDIBits returned too few lines".into(),
            ));
        }
        let mut rgb = Vec::with_capacity((w * h * 3) as usize);
        for px in bgra.chunks_exact(4) {
            rgb.extend_from_slice(&[px[2], px[1], px[0]]);
        }
        Ok(Capture {
            width: w as u32,
            height: h as u32,
            rgb,
            origin: Point {
                x: r.left,
                y: r.top,
            },
        })
    }
}

fn mouse(flags: MOUSE_EVENT_FLAGS, dx: i32, dy: i32, data: i32) -> INPUT {
    INPUT {
        r#type: INPUT_MOUSE,
        Anonymous: INPUT_0 {
            mi: MOUSEINPUT {
                dx,
                dy,
                mouseData: data as u32,
                dwFlags: flags,
                time: 0,
                dwExtraInfo: 0,
            },
        },
    }
}

fn send(inputs: &[INPUT]) -> BackendResult<()> {
    // SAFETY: a slice of initialised INPUT structures.
    let sent = unsafe { SendInput(inputs, size_of::<INPUT>() as i32) };
    if sent as usize == inputs.len() {
        Ok(())
    } else {
        Err(BackendError::Failed(
            "SendInput was blocked (another desktop or a higher-integrity window has input)".into(),
        ))
    }
}

fn move_input(p: Point) -> INPUT {
    let (dx, dy) = normalized_absolute(p, &virtual_desktop());
    mouse(
        MOUSEEVENTF_MOVE | MOUSEEVENTF_ABSOLUTE | MOUSEEVENTF_VIRTUALDESK,
        dx,
        dy,
        0,
    )
}

fn button_flags(b: MouseButton) -> (MOUSE_EVENT_FLAGS, MOUSE_EVENT_FLAGS) {
    match b {
        MouseButton::Left => (MOUSEEVENTF_LEFTDOWN, MOUSEEVENTF_LEFTUP),
        MouseButton::Right => (MOUSEEVENTF_RIGHTDOWN, MOUSEEVENTF_RIGHTUP),
        MouseButton::Middle => (MOUSEEVENTF_MIDDLEDOWN, MOUSEEVENTF_MIDDLEUP),
    }
}

/// A mouse move by zero pixels: an input event that changes nothing on screen but makes this process
/// the last to have sent input, which Windows requires before it lets a background process take the
/// foreground (see `SetForegroundWindow`).
pub(super) fn nudge() -> BackendResult<()> {
    send(&[mouse(MOUSEEVENTF_MOVE, 0, 0, 0)])
}

/// Clicks at a point.
pub fn click(p: Point, b: MouseButton, double: bool) -> BackendResult<()> {
    let (down, up) = button_flags(b);
    let mut v = vec![move_input(p)];
    for _ in 0..if double { 2 } else { 1 } {
        v.push(mouse(down, 0, 0, 0));
        v.push(mouse(up, 0, 0, 0));
    }
    send(&v)
}

/// Presses at `from`, moves in steps to `to`, releases.
pub fn drag(from: Point, to: Point, b: MouseButton) -> BackendResult<()> {
    let (down, up) = button_flags(b);
    let mut v = vec![move_input(from), mouse(down, 0, 0, 0)];
    for i in 1..=8 {
        v.push(move_input(Point {
            x: from.x + (to.x - from.x) * i / 8,
            y: from.y + (to.y - from.y) * i / 8,
        }));
    }
    v.push(mouse(up, 0, 0, 0));
    send(&v)
}

/// Wheel notches at a point (120 units each; positive scrolls up).
pub fn wheel(p: Point, notches: i32) -> BackendResult<()> {
    send(&[
        move_input(p),
        mouse(MOUSEEVENTF_WHEEL, 0, 0, notches.saturating_mul(120)),
    ])
}

/// The virtual-key code of a named key.
pub fn vk(n: NamedKey) -> u16 {
    use NamedKey::*;
    match n {
        Enter => 0x0D,
        Tab => 0x09,
        Escape => 0x1B,
        Backspace => 0x08,
        Delete => 0x2E,
        Insert => 0x2D,
        Home => 0x24,
        End => 0x23,
        PageUp => 0x21,
        PageDown => 0x22,
        Left => 0x25,
        Up => 0x26,
        Right => 0x27,
        Down => 0x28,
        Space => 0x20,
        CapsLock => 0x14,
        NumLock => 0x90,
        ScrollLock => 0x91,
        PrintScreen => 0x2C,
        Pause => 0x13,
        Apps => 0x5D,
        Shift => 0x10,
        Control => 0x11,
        Alt => 0x12,
        Win => 0x5B,
        F(k) => 0x70 + u16::from(k.saturating_sub(1)),
    }
}

fn key_input(vk: u16, scan: u16, flags: KEYBD_EVENT_FLAGS) -> INPUT {
    INPUT {
        r#type: INPUT_KEYBOARD,
        Anonymous: INPUT_0 {
            ki: KEYBDINPUT {
                wVk: VIRTUAL_KEY(vk),
                wScan: scan,
                dwFlags: flags,
                time: 0,
                dwExtraInfo: 0,
            },
        },
    }
}

/// Replays strokes: named keys as virtual keys; characters as Unicode input, except ASCII letters and
/// digits while a modifier is held (so Ctrl+C reaches applications as the C key).
pub fn keys(strokes: &[KeyStroke]) -> BackendResult<()> {
    let mut held = 0usize;
    let mut v = Vec::with_capacity(strokes.len() * 2);
    for s in strokes {
        let up = if s.down {
            KEYBD_EVENT_FLAGS(0)
        } else {
            KEYEVENTF_KEYUP
        };
        match s.key {
            Key::Named(n) => {
                if n.is_modifier() {
                    held = if s.down {
                        held + 1
                    } else {
                        held.saturating_sub(1)
                    };
                }
                v.push(key_input(vk(n), 0, up));
            }
            Key::Char(c) if held > 0 && c.is_ascii_alphanumeric() => {
                v.push(key_input(c.to_ascii_uppercase() as u16, 0, up));
            }
            Key::Char(c) => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    v.push(key_input(0, *unit, KEYEVENTF_UNICODE | up));
                }
            }
        }
    }
    send(&v)
}
