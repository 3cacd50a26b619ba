//! The person's input on Linux (`record_input`): the X RECORD extension reports every key and button
//! press the server delivers, to any program, without holding anything back. Two connections of their
//! own, as the extension's protocol has it: one controls the recording context, the other reads the
//! recorded data on a thread, which turns each press into a [`RawInput`] (key codes through the
//! keyboard mapping, with the modifiers held) and queues it with the moment it was read. The pointer's
//! motion only updates where the pointer is. Dropping the feed disables the context, which ends the
//! data stream and the thread.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use x11rb::connection::{Connection as _, RequestConnection as _};
use x11rb::protocol::record::{self, ConnectionExt as _};
use x11rb::protocol::xproto::{self, ConnectionExt as _};
use x11rb::rust_connection::RustConnection;
use x11rb::x11_utils::TryParse as _;

use crate::backend::{BackendError, BackendResult, InputEvent, InputFeed, MouseButton, RawInput};
use crate::geometry::Point;
use crate::keys::{Key, NamedKey};

/// Events queued unread before the reading thread waits for the recorder.
const QUEUE: usize = 4096;

/// The recorded data's category of data from the server (the extension's `FromServer`).
const FROM_SERVER: u8 = 0;

fn xerr(e: impl std::fmt::Display) -> BackendError {
    BackendError::Unavailable(format!("x11 record: {e}"))
}

/// Disables the recording context when dropped (ending the data stream and its thread).
struct Stop {
    ctrl: Arc<RustConnection>,
    context: record::Context,
}

impl Drop for Stop {
    fn drop(&mut self) {
        let _ = self.ctrl.record_disable_context(self.context);
        let _ = self.ctrl.record_free_context(self.context);
        let _ = self.ctrl.flush();
    }
}

/// The keyboard mapping as keysyms per keycode.
struct Keysyms {
    min: u8,
    per: usize,
    syms: Vec<u32>,
}

impl Keysyms {
    fn load(conn: &RustConnection) -> BackendResult<Self> {
        let setup = conn.setup();
        let (min, max) = (setup.min_keycode, setup.max_keycode);
        let m = conn
            .get_keyboard_mapping(min, max - min + 1)
            .map_err(xerr)?
            .reply()
            .map_err(xerr)?;
        Ok(Self {
            min,
            per: usize::from(m.keysyms_per_keycode.max(1)),
            syms: m.keysyms,
        })
    }

    /// The keysym of `code` at the shift level (the unshifted one where the shifted is missing).
    fn sym(&self, code: u8, shift: bool) -> u32 {
        let Some(i) = code.checked_sub(self.min) else {
            return 0;
        };
        let at = |level: usize| {
            self.syms
                .get(usize::from(i) * self.per + level)
                .copied()
                .unwrap_or(0)
        };
        let (plain, shifted) = (at(0), at(1));
        if shift && shifted != 0 {
            shifted
        } else if shift && (0x61..=0x7a).contains(&plain) {
            // A letter with one keysym: its capital.
            plain - 0x20
        } else {
            plain
        }
    }
}

/// Starts recording `display`'s key and button presses.
pub fn capture(display: Option<&str>) -> BackendResult<InputFeed> {
    let (ctrl, _) = x11rb::connect(display).map_err(xerr)?;
    let (data, _) = x11rb::connect(display).map_err(xerr)?;
    if ctrl
        .extension_information(record::X11_EXTENSION_NAME)
        .map_err(xerr)?
        .is_none()
    {
        return Err(BackendError::Unsupported(
            "recording input: the X server has no RECORD extension",
        ));
    }
    ctrl.record_query_version(1, 13)
        .map_err(xerr)?
        .reply()
        .map_err(xerr)?;
    let keysyms = Keysyms::load(&ctrl)?;
    let context = ctrl.generate_id().map_err(xerr)?;
    let none = record::Range8 { first: 0, last: 0 };
    let none_ext = record::ExtRange {
        major: none,
        minor: record::Range16 { first: 0, last: 0 },
    };
    let range = record::Range {
        core_requests: none,
        core_replies: none,
        ext_requests: none_ext,
        ext_replies: none_ext,
        delivered_events: none,
        // Key press/release, button press/release and motion.
        device_events: record::Range8 {
            first: xproto::KEY_PRESS_EVENT,
            last: xproto::MOTION_NOTIFY_EVENT,
        },
        errors: none,
        client_started: false,
        client_died: false,
    };
    ctrl.record_create_context(context, 0, &[record::CS::ALL_CLIENTS.into()], &[range])
        .map_err(xerr)?
        .check()
        .map_err(xerr)?;
    let ctrl = Arc::new(ctrl);
    let (tx, rx) = tokio::sync::mpsc::channel(QUEUE);
    let pointer = Arc::new(AtomicU64::new(0));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<BackendResult<()>>();
    let thread_pointer = pointer.clone();
    std::thread::Builder::new()
        .name("x-record".into())
        .spawn(move || {
            let replies = match data.record_enable_context(context) {
                Ok(r) => r,
                Err(e) => {
                    let _ = ready_tx.send(Err(xerr(e)));
                    return;
                }
            };
            let mut reader = Reader {
                keysyms,
                pointer: thread_pointer,
                tx,
                ready: Some(ready_tx),
            };
            for reply in replies {
                let Ok(reply) = reply else { return };
                if let Some(ready) = reader.ready.take() {
                    // The first reply (start of data) says the context is enabled.
                    let _ = ready.send(Ok(()));
                }
                if reply.category != FROM_SERVER || reply.client_swapped {
                    continue;
                }
                if !reader.read(&reply.data) {
                    return;
                }
            }
        })
        .map_err(xerr)?;
    let stop = Stop {
        ctrl: ctrl.clone(),
        context,
    };
    ready_rx
        .recv()
        .map_err(|_| xerr("the recording did not start"))??;
    Ok(InputFeed {
        events: rx,
        pointer,
        guard: Box::new(stop),
    })
}

/// The data thread's state.
struct Reader {
    keysyms: Keysyms,
    pointer: Arc<AtomicU64>,
    tx: tokio::sync::mpsc::Sender<InputEvent>,
    ready: Option<std::sync::mpsc::Sender<BackendResult<()>>>,
}

impl Reader {
    /// Reads the device events of one reply; false when the recorder is gone.
    fn read(&mut self, mut data: &[u8]) -> bool {
        while data.len() >= 32 {
            let at = Instant::now();
            let input = match data[0] & 0x7f {
                xproto::KEY_PRESS_EVENT => xproto::KeyPressEvent::try_parse(data)
                    .ok()
                    .and_then(|(e, _)| self.key(e.detail, u16::from(e.state))),
                xproto::BUTTON_PRESS_EVENT => xproto::ButtonPressEvent::try_parse(data)
                    .ok()
                    .and_then(|(e, _)| press(e.detail, e.root_x, e.root_y)),
                xproto::MOTION_NOTIFY_EVENT => {
                    if let Ok((e, _)) = xproto::MotionNotifyEvent::try_parse(data) {
                        let p = Point {
                            x: e.root_x.into(),
                            y: e.root_y.into(),
                        };
                        self.pointer.store(InputFeed::pack(p), Ordering::Relaxed);
                    }
                    None
                }
                _ => None,
            };
            data = &data[32..];
            if let Some(input) = input
                && self.tx.blocking_send(InputEvent { at, input }).is_err()
            {
                return false;
            }
        }
        true
    }

    fn key(&self, code: u8, state: u16) -> Option<RawInput> {
        let mask = |m: xproto::KeyButMask| state & u16::from(m) != 0;
        let shift = mask(xproto::KeyButMask::SHIFT);
        let key = key_of(self.keysyms.sym(code, shift))?;
        if matches!(key, Key::Named(n) if n.is_modifier()) {
            return None;
        }
        Some(RawInput::Key {
            key,
            ctrl: mask(xproto::KeyButMask::CONTROL),
            alt: mask(xproto::KeyButMask::MOD1),
            shift,
            win: mask(xproto::KeyButMask::MOD4),
        })
    }
}

/// A button press: buttons 1–3, or a wheel notch (4 up, 5 down).
fn press(button: u8, x: i16, y: i16) -> Option<RawInput> {
    let at = Point {
        x: x.into(),
        y: y.into(),
    };
    let button = match button {
        1 => MouseButton::Left,
        2 => MouseButton::Middle,
        3 => MouseButton::Right,
        4 => return Some(RawInput::Wheel { at, notches: 1 }),
        5 => return Some(RawInput::Wheel { at, notches: -1 }),
        _ => return None,
    };
    Some(RawInput::Press { at, button })
}

/// The key a keysym stands for (`None`: one the key syntax cannot name).
pub fn key_of(sym: u32) -> Option<Key> {
    use NamedKey::*;
    let named = match sym {
        0x20 => return Some(Key::Char(' ')),
        0x21..=0x7e | 0xa0..=0xff => return char::from_u32(sym).map(Key::Char),
        0x0100_0000..=0x0110_ffff => return char::from_u32(sym - 0x0100_0000).map(Key::Char),
        0xffb0..=0xffb9 => return char::from_u32(u32::from(b'0') + sym - 0xffb0).map(Key::Char),
        0xffaa => return Some(Key::Char('*')),
        0xffab => return Some(Key::Char('+')),
        0xffad => return Some(Key::Char('-')),
        0xffae => return Some(Key::Char('.')),
        0xffaf => return Some(Key::Char('/')),
        0xff0d | 0xff8d => Enter,
        0xff09 | 0xfe20 => Tab,
        0xff1b => Escape,
        0xff08 => Backspace,
        0xffff | 0xff9f => Delete,
        0xff63 | 0xff9e => Insert,
        0xff50 | 0xff95 => Home,
        0xff57 | 0xff9c => End,
        0xff55 | 0xff9a => PageUp,
        0xff56 | 0xff9b => PageDown,
        0xff51 | 0xff96 => Left,
        0xff52 | 0xff97 => Up,
        0xff53 | 0xff98 => Right,
        0xff54 | 0xff99 => Down,
        0xffe5 => CapsLock,
        0xff7f => NumLock,
        0xff14 => ScrollLock,
        0xff61 => PrintScreen,
        0xff13 => Pause,
        0xff67 => Apps,
        0xffe1 | 0xffe2 => Shift,
        0xffe3 | 0xffe4 => Control,
        0xffe9 | 0xffea | 0xffe7 | 0xffe8 | 0xfe03 => Alt,
        0xffeb | 0xffec => Win,
        0xffbe..=0xffd5 => F(u8::try_from(sym - 0xffbe + 1).ok()?),
        _ => return None,
    };
    Some(Key::Named(named))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::linux::x11::keysym;

    #[test]
    fn keysyms_name_the_keys_the_key_syntax_sends() {
        for k in [
            Key::Char('a'),
            Key::Char('Z'),
            Key::Char(' '),
            Key::Char('é'),
            Key::Char('€'),
            Key::Named(NamedKey::Enter),
            Key::Named(NamedKey::Tab),
            Key::Named(NamedKey::F(12)),
            Key::Named(NamedKey::Control),
        ] {
            assert_eq!(key_of(keysym(k)), Some(k), "{k:?}");
        }
        assert_eq!(key_of(0xff8d), Some(Key::Named(NamedKey::Enter)));
        assert_eq!(key_of(0xffb7), Some(Key::Char('7')));
        assert_eq!(key_of(0x1008ff13), None);
    }

    #[test]
    fn the_shift_level_picks_the_keysym() {
        let k = Keysyms {
            min: 8,
            per: 2,
            // keycode 8: a/A; keycode 9: b only; keycode 10: 1/!
            syms: vec![0x61, 0x41, 0x62, 0, 0x31, 0x21],
        };
        assert_eq!(k.sym(8, false), 0x61);
        assert_eq!(k.sym(8, true), 0x41);
        assert_eq!(k.sym(9, true), 0x42);
        assert_eq!(k.sym(10, true), 0x21);
        assert_eq!(k.sym(7, false), 0);
        assert_eq!(k.sym(200, false), 0);
    }
}
