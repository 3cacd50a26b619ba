//! Windows as Win32 sees them: the top-level application windows (visible, unowned, not tool windows,
//! not cloaked), activation with the foreground-lock workaround, closing, and the child windows, text
//! and focus of native controls (the fallbacks for UI Automation features a desktop may lack).

use std::time::{Duration, Instant};

use windows::Win32::Foundation::{CloseHandle, HWND, LPARAM, RECT, WPARAM};
use windows::Win32::Graphics::Dwm::{DWMWA_CLOAKED, DwmGetWindowAttribute};
use windows::Win32::System::Threading::{
    AttachThreadInput, GetCurrentThreadId, OpenProcess, PROCESS_NAME_WIN32,
    PROCESS_QUERY_LIMITED_INFORMATION, QueryFullProcessImageNameW,
};
use windows::Win32::UI::Input::KeyboardAndMouse::{GetFocus, SetFocus};
use windows::Win32::UI::WindowsAndMessaging::{
    BringWindowToTop, EnumChildWindows, EnumWindows, GA_PARENT, GW_OWNER, GWL_EXSTYLE, GetAncestor,
    GetClassNameW, GetForegroundWindow, GetWindow, GetWindowLongW, GetWindowRect, GetWindowTextW,
    GetWindowThreadProcessId, IsIconic, IsWindow, IsWindowVisible, PostMessageW, SMTO_ABORTIFHUNG,
    SW_RESTORE, SendMessageTimeoutW, SetForegroundWindow, ShowWindow, WM_CLOSE, WM_GETTEXT,
    WM_GETTEXTLENGTH, WS_EX_TOOLWINDOW,
};
use windows::core::{BOOL, PWSTR};

use super::win32::{self, hwnd, rect, werr};
use crate::backend::{BackendResult, WindowInfo, WindowsOptions};
use crate::geometry::Rect;

unsafe extern "system" fn collect(h: HWND, data: LPARAM) -> BOOL {
    // SAFETY: `data` is the `Vec` passed by the enumerating function and outlives the enumeration.
    let out = unsafe { &mut *(data.0 as *mut Vec<HWND>) };
    out.push(h);
    BOOL(1)
}

fn process_name(pid: u32) -> String {
    // SAFETY: the handle is closed before returning; the buffer outlives the call.
    unsafe {
        let Ok(h) = OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, false, pid) else {
            return String::new();
        };
        let mut buf = [0u16; 1024];
        let mut len = buf.len() as u32;
        let ok =
            QueryFullProcessImageNameW(h, PROCESS_NAME_WIN32, PWSTR(buf.as_mut_ptr()), &mut len)
                .is_ok();
        let _ = CloseHandle(h);
        if !ok {
            return String::new();
        }
        let path = String::from_utf16_lossy(&buf[..len as usize]);
        path.rsplit('\\').next().unwrap_or_default().to_owned()
    }
}

/// Information about one window.
pub fn window_info(h: HWND) -> Option<WindowInfo> {
    // SAFETY: read-only queries on a window handle; buffers outlive the calls.
    unsafe {
        let mut title = [0u16; 512];
        let n = GetWindowTextW(h, &mut title);
        let mut class = [0u16; 256];
        let c = GetClassNameW(h, &mut class);
        let mut r = RECT::default();
        GetWindowRect(h, &mut r).ok()?;
        let mut pid = 0u32;
        GetWindowThreadProcessId(h, Some(&mut pid));
        Some(WindowInfo {
            handle: h.0 as usize as u64,
            title: String::from_utf16_lossy(&title[..n.max(0) as usize]),
            process_name: process_name(pid),
            pid: (pid != 0).then_some(pid),
            rect: rect(r),
            class_name: String::from_utf16_lossy(&class[..c.max(0) as usize]),
        })
    }
}

/// True when DWM hides the window although it is "visible" (suspended UWP apps, windows on another
/// virtual desktop). Where DWM cannot tell (no composition, Wine) the window counts as shown.
fn cloaked(h: HWND) -> bool {
    let mut v = 0u32;
    // SAFETY: a 4-byte out-parameter, as DWMWA_CLOAKED requires.
    let ok = unsafe {
        DwmGetWindowAttribute(
            h,
            DWMWA_CLOAKED,
            (&mut v as *mut u32).cast(),
            size_of::<u32>() as u32,
        )
    }
    .is_ok();
    ok && v != 0
}

/// Visible, uncloaked, unowned, non-tool top-level windows in Z order.
pub fn windows() -> BackendResult<Vec<WindowInfo>> {
    let mut handles: Vec<HWND> = Vec::new();
    // SAFETY: the callback only touches `handles` during the call.
    unsafe { EnumWindows(Some(collect), LPARAM(&mut handles as *mut _ as isize)) }
        .map_err(|e| werr("EnumWindows", e))?;
    Ok(handles
        .into_iter()
        .filter(|&h| {
            // SAFETY: read-only queries.
            unsafe {
                IsWindowVisible(h).as_bool()
                    && GetWindow(h, GW_OWNER).map_or(true, |o| o.0.is_null())
                    && (GetWindowLongW(h, GWL_EXSTYLE) as u32 & WS_EX_TOOLWINDOW.0) == 0
            }
        })
        .filter(|&h| !cloaked(h))
        .filter_map(window_info)
        .collect())
}

/// Restores a window and brings it to the foreground; true once it is observed there.
///
/// Windows refuses `SetForegroundWindow` to a process that is not in the foreground unless it sent
/// the last input event or shares the foreground thread's input state, so (the documented ways) this
/// first sends a zero-distance mouse move, then attaches to the foreground thread's input around the
/// call, and finally waits (bounded) until the switch is seen.
/// `wait` bounds that last wait (the switch completes asynchronously on the target's thread).
pub fn activate(handle: u64, wait: Duration) -> bool {
    let h = hwnd(handle);
    // SAFETY: window management calls on a handle; the input attachment is undone before returning.
    unsafe {
        if IsIconic(h).as_bool() {
            let _ = ShowWindow(h, SW_RESTORE);
        }
        if GetForegroundWindow() == h {
            return true;
        }
        let _ = win32::nudge();
        let me = GetCurrentThreadId();
        let fg = GetForegroundWindow();
        let fg_thread = if fg.0.is_null() {
            0
        } else {
            GetWindowThreadProcessId(fg, None)
        };
        let attached =
            fg_thread != 0 && fg_thread != me && AttachThreadInput(me, fg_thread, true).as_bool();
        let _ = BringWindowToTop(h);
        let _ = SetForegroundWindow(h);
        if attached {
            let _ = AttachThreadInput(me, fg_thread, false);
        }
        let until = Instant::now() + wait;
        while GetForegroundWindow() != h {
            if Instant::now() >= until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        true
    }
}

/// The foreground window, when there is one.
pub fn foreground() -> Option<u64> {
    // SAFETY: a read-only query.
    let h = unsafe { GetForegroundWindow() };
    (!h.0.is_null()).then_some(h.0 as usize as u64)
}

/// Posts WM_CLOSE.
pub fn close(handle: u64) -> BackendResult<()> {
    // SAFETY: posting a message to a window handle.
    unsafe { PostMessageW(Some(hwnd(handle)), WM_CLOSE, WPARAM(0), LPARAM(0)) }
        .map_err(|e| werr("PostMessageW", e))
}

/// The visible direct child windows of `parent`, in Z order.
pub fn child_windows(parent: u64) -> Vec<u64> {
    let p = hwnd(parent);
    let mut all: Vec<HWND> = Vec::new();
    // SAFETY: the callback only touches `all` during the call.
    let _ =
        unsafe { EnumChildWindows(Some(p), Some(collect), LPARAM(&mut all as *mut _ as isize)) };
    all.into_iter()
        // SAFETY: read-only queries.
        .filter(|&c| unsafe { GetAncestor(c, GA_PARENT) == p && IsWindowVisible(c).as_bool() })
        .map(|c| c.0 as usize as u64)
        .collect()
}

/// True while the window exists.
pub fn is_window(handle: u64) -> bool {
    // SAFETY: a read-only query.
    unsafe { IsWindow(Some(hwnd(handle))).as_bool() }
}

/// The window's frame in screen pixels.
pub fn window_rect(handle: u64) -> Option<Rect> {
    let mut r = RECT::default();
    // SAFETY: an out-parameter to a local.
    unsafe { GetWindowRect(hwnd(handle), &mut r) }.ok()?;
    Some(rect(r))
}

/// The text of a native control (an edit's content, a button's caption) through WM_GETTEXT, which
/// unlike GetWindowText reaches controls of other processes; `None` when it does not answer.
/// `opts` bounds the wait for an answer and the length read.
pub fn window_text(handle: u64, opts: &WindowsOptions) -> Option<String> {
    let h = hwnd(handle);
    let ask = |msg: u32, wparam: usize, lparam: isize| {
        let mut out = 0usize;
        // SAFETY: a bounded synchronous message; `lparam` points to a buffer of `wparam` units.
        let r = unsafe {
            SendMessageTimeoutW(
                h,
                msg,
                WPARAM(wparam),
                LPARAM(lparam),
                SMTO_ABORTIFHUNG,
                u32::try_from(opts.native_text_timeout.as_millis()).unwrap_or(u32::MAX),
                Some(&mut out),
            )
        };
        (r.0 != 0).then_some(out)
    };
    let len = ask(WM_GETTEXTLENGTH, 0, 0)?.min(opts.max_native_text_chars);
    let mut buf = vec![0u16; len + 1];
    let got = ask(WM_GETTEXT, buf.len(), buf.as_mut_ptr() as isize)?.min(len);
    Some(String::from_utf16_lossy(&buf[..got]))
}

/// Gives a native control the keyboard focus: its top-level window is activated, then this thread
/// shares the control's input state for the `SetFocus` call. True once the control has the focus.
/// `wait` bounds the activation.
pub fn focus_native(handle: u64, wait: Duration) -> bool {
    let h = hwnd(handle);
    // SAFETY: window and input-state calls on handles; the attachment is undone before returning.
    unsafe {
        let mut top = h;
        loop {
            let p = GetAncestor(top, GA_PARENT);
            if p.0.is_null() || GetWindowThreadProcessId(p, None) == 0 {
                break;
            }
            if GetAncestor(p, GA_PARENT).0.is_null() {
                break;
            }
            top = p;
        }
        let _ = activate(top.0 as usize as u64, wait);
        let me = GetCurrentThreadId();
        let target = GetWindowThreadProcessId(h, None);
        if target == 0 {
            return false;
        }
        let attached = target != me && AttachThreadInput(me, target, true).as_bool();
        let _ = SetFocus(Some(h));
        let focused = GetFocus() == h;
        if attached {
            let _ = AttachThreadInput(me, target, false);
        }
        focused
    }
}
