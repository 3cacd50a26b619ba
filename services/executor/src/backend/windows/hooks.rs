//! The person's input on Windows (`record_input`): low-level mouse and keyboard hooks (`WH_MOUSE_LL`,
//! `WH_KEYBOARD_LL`) on a thread of their own, which runs the message loop the hooks are called from.
//! Each hook call queues a [`RawInput`] with the moment it came (never blocking: a hook that is slow
//! to return delays every program's input) and passes the input on unchanged. Key codes become
//! characters through the keyboard layout with the shift and caps-lock states held; Unicode input
//! (`VK_PACKET`, what `SendInput` types) carries its character. Dropping the feed posts `WM_QUIT` to
//! the thread, which unhooks and ends.

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use windows::Win32::Foundation::{LPARAM, LRESULT, WPARAM};
use windows::Win32::System::Threading::GetCurrentThreadId;
use windows::Win32::UI::Input::KeyboardAndMouse::{GetAsyncKeyState, ToUnicode};
use windows::Win32::UI::WindowsAndMessaging::{
    CallNextHookEx, DispatchMessageW, GetMessageW, KBDLLHOOKSTRUCT, MSG, MSLLHOOKSTRUCT,
    PostThreadMessageW, SetWindowsHookExW, UnhookWindowsHookEx, WH_KEYBOARD_LL, WH_MOUSE_LL,
    WM_KEYDOWN, WM_LBUTTONDOWN, WM_MBUTTONDOWN, WM_MOUSEMOVE, WM_MOUSEWHEEL, WM_QUIT,
    WM_RBUTTONDOWN, WM_SYSKEYDOWN,
};

use super::win32::vk;
use crate::backend::{BackendError, BackendResult, InputEvent, InputFeed, MouseButton, RawInput};
use crate::geometry::Point;
use crate::keys::{Key, NamedKey};

/// Events queued unread; past this many, new ones are dropped rather than delaying input.
const QUEUE: usize = 4096;

/// `VK_PACKET`: a character sent as Unicode input (its UTF-16 unit is the scan code).
const VK_PACKET: u32 = 0xE7;

/// Where the hooks, called on the hook thread, put what they see.
struct Sink {
    tx: tokio::sync::mpsc::Sender<InputEvent>,
    pointer: Arc<AtomicU64>,
}

thread_local! {
    static SINK: RefCell<Option<Sink>> = const { RefCell::new(None) };
}

fn queue(input: RawInput) {
    SINK.with(|s| {
        if let Some(s) = s.borrow().as_ref() {
            let _ = s.tx.try_send(InputEvent {
                at: Instant::now(),
                input,
            });
        }
    });
}

/// Ends the hook thread when dropped.
struct Stop {
    thread: u32,
}

impl Drop for Stop {
    fn drop(&mut self) {
        // SAFETY: posting a message to a thread id has no memory-safety requirements.
        let _ = unsafe { PostThreadMessageW(self.thread, WM_QUIT, WPARAM(0), LPARAM(0)) };
    }
}

/// Starts the hooks.
pub fn capture() -> BackendResult<InputFeed> {
    let (tx, rx) = tokio::sync::mpsc::channel(QUEUE);
    let pointer = Arc::new(AtomicU64::new(0));
    let sink_pointer = pointer.clone();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<BackendResult<u32>>();
    std::thread::Builder::new()
        .name("input-hooks".into())
        .spawn(move || {
            SINK.with(|s| {
                *s.borrow_mut() = Some(Sink {
                    tx,
                    pointer: sink_pointer,
                });
            });
            // SAFETY: the procedures are valid for the process's life; the hooks are removed below
            // on this same thread.
            let hooks = unsafe {
                (
                    SetWindowsHookExW(WH_MOUSE_LL, Some(mouse_proc), None, 0),
                    SetWindowsHookExW(WH_KEYBOARD_LL, Some(keyboard_proc), None, 0),
                )
            };
            let (mouse, keyboard) = match hooks {
                (Ok(m), Ok(k)) => (m, k),
                (m, k) => {
                    let why = [m.as_ref().err(), k.as_ref().err()]
                        .into_iter()
                        .flatten()
                        .map(|e| e.message())
                        .collect::<Vec<_>>()
                        .join("; ");
                    for h in [m, k].into_iter().flatten() {
                        // SAFETY: a hook installed above, removed once.
                        let _ = unsafe { UnhookWindowsHookEx(h) };
                    }
                    let _ = ready_tx.send(Err(BackendError::Unavailable(format!(
                        "cannot install the input hooks: {why}"
                    ))));
                    return;
                }
            };
            // SAFETY: no preconditions.
            let _ = ready_tx.send(Ok(unsafe { GetCurrentThreadId() }));
            let mut msg = MSG::default();
            // SAFETY: `msg` is a valid MSG for each call; the loop ends on WM_QUIT (0) or an error (-1).
            while unsafe { GetMessageW(&mut msg, None, 0, 0) }.0 > 0 {
                // SAFETY: a message GetMessageW filled in.
                unsafe { DispatchMessageW(&msg) };
            }
            // SAFETY: the hooks installed above, removed once, on their thread.
            unsafe {
                let _ = UnhookWindowsHookEx(mouse);
                let _ = UnhookWindowsHookEx(keyboard);
            }
            SINK.with(|s| s.borrow_mut().take());
        })
        .map_err(|e| BackendError::Unavailable(format!("cannot start the input hooks: {e}")))?;
    let thread = ready_rx
        .recv()
        .map_err(|_| BackendError::Unavailable("the input hook thread stopped".into()))??;
    Ok(InputFeed {
        events: rx,
        pointer,
        guard: Box::new(Stop { thread }),
    })
}

unsafe extern "system" fn mouse_proc(code: i32, wparam: WPARAM, lparam: LPARAM) -> LRESULT {
    if code >= 0 {
        // SAFETY: for WH_MOUSE_LL with code >= 0, lparam points to an MSLLHOOKSTRUCT for the call.
        let info = unsafe { &*(lparam.0 as *const MSLLHOOKSTRUCT) };
        let at = Point {
            x: info.pt.x,
            y: info.pt.y,
        };
        let press = |button| queue(RawInput::Press { at, button });
        match u32::try_from(wparam.0).unwrap_or(0) {
            WM_MOUSEMOVE => SINK.with(|s| {
                if let Some(s) = s.borrow().as_ref() {
                    s.pointer.store(InputFeed::pack(at), Ordering::Relaxed);
                }
            }),
            WM_LBUTTONDOWN => press(MouseButton::Left),
            WM_RBUTTONDOWN => press(MouseButton::Right),
            WM_MBUTTONDOWN => press(MouseButton::Middle),
            WM_MOUSEWHEEL => {
                // The wheel delta is the high word, signed.
                let delta = (info.mouseData >> 16) as u16 as i16;
                if delta != 0 {
                    queue(RawInput::Wheel {
                        at,
                        notches: if delta > 0 { 1 } else { -1 },
                    });
                }
            }
            _ => {}
        }
    }
    // SAFETY: passing the call on, as every hook must.
    unsafe { CallNextHookEx(None, code, wparam, lparam) }
}

unsafe extern "system" fn keyboard_proc(code: i32, wparam: WPARAM, lparam: LPARAM) -> LRESULT {
    if code >= 0
        && matches!(
            u32::try_from(wparam.0).unwrap_or(0),
            WM_KEYDOWN | WM_SYSKEYDOWN
        )
    {
        // SAFETY: for WH_KEYBOARD_LL with code >= 0, lparam points to a KBDLLHOOKSTRUCT for the call.
        let info = unsafe { &*(lparam.0 as *const KBDLLHOOKSTRUCT) };
        if let Some(input) = key_input(info.vkCode, info.scanCode) {
            queue(input);
        }
    }
    // SAFETY: passing the call on, as every hook must.
    unsafe { CallNextHookEx(None, code, wparam, lparam) }
}

/// Whether a virtual key is down now.
fn held(vk: i32) -> bool {
    // SAFETY: no preconditions.
    let state = unsafe { GetAsyncKeyState(vk) };
    state < 0
}

/// The input of a key going down (`None`: a modifier alone, or a key the key syntax cannot name).
fn key_input(vk_code: u32, scan: u32) -> Option<RawInput> {
    let (ctrl, alt, shift) = (held(0x11), held(0x12), held(0x10));
    let win = held(0x5B) || held(0x5C);
    let key = if vk_code == VK_PACKET {
        Key::Char(char::from_u32(scan & 0xffff)?)
    } else if let Some(n) = named(vk_code) {
        if n.is_modifier() {
            return None;
        }
        Key::Named(n)
    } else {
        Key::Char(layout_char(vk_code, scan, shift)?)
    };
    Some(RawInput::Key {
        key,
        ctrl,
        alt,
        shift,
        win,
    })
}

/// The character a key types in the keyboard layout with shift (and caps lock) as given.
fn layout_char(vk_code: u32, scan: u32, shift: bool) -> Option<char> {
    let mut state = [0u8; 256];
    if shift {
        state[0x10] = 0x80;
    }
    // SAFETY: no preconditions.
    if unsafe { windows::Win32::UI::Input::KeyboardAndMouse::GetKeyState(0x14) } & 1 != 0 {
        state[0x14] = 1;
    }
    let mut buf = [0u16; 4];
    // Flag 4: leave the keyboard state (dead keys) of the thread alone.
    // SAFETY: both buffers are valid for the call.
    let n = unsafe { ToUnicode(vk_code, scan, Some(&state), &mut buf, 4) };
    let n = usize::try_from(n).ok().filter(|&n| n > 0)?;
    char::decode_utf16(buf[..n.min(buf.len())].iter().copied())
        .next()?
        .ok()
        .filter(|c| !c.is_control())
}

/// The named key of a virtual key (the inverse of [`vk`]).
fn named(vk_code: u32) -> Option<NamedKey> {
    use NamedKey::*;
    const ALL: [NamedKey; 25] = [
        Enter,
        Tab,
        Escape,
        Backspace,
        Delete,
        Insert,
        Home,
        End,
        PageUp,
        PageDown,
        Left,
        Up,
        Right,
        Down,
        CapsLock,
        NumLock,
        ScrollLock,
        PrintScreen,
        Pause,
        Apps,
        Shift,
        Control,
        Alt,
        Win,
        Space,
    ];
    match vk_code {
        // Space types a character.
        0x20 => None,
        // Left/right Shift, Control and Alt; the right Windows key.
        0xA0 | 0xA1 => Some(Shift),
        0xA2 | 0xA3 => Some(Control),
        0xA4 | 0xA5 => Some(Alt),
        0x5C => Some(Win),
        0x70..=0x87 => Some(F(u8::try_from(vk_code - 0x70 + 1).ok()?)),
        _ => ALL.into_iter().find(|&n| u32::from(vk(n)) == vk_code),
    }
}
