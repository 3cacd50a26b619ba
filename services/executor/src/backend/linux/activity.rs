//! What the desktop is doing, for the settle protocol (`executor.proto`, `Settle`): the rectangles the
//! X server reports drawn ([`super::damage`]) and the applications' accessibility events
//! ([`super::events`]), each with when it happened, kept for a few seconds. An observation after an
//! action waits on this log (see docs/executor-settle.md):
//!
//! 1. for a change after the action's mark (a drawing, or an accessibility event), else "no change"
//!    after the first-change time;
//! 2. then for quiet: nothing drawn for the quiet time, and every accessibility event followed by a
//!    drawing (the application said something changed: its redraw is awaited, at most four quiet
//!    times);
//! 3. bounded by the timeout.
//!
//! With a [`Scope`] (the selected window's rectangles and its application's bus name), drawing and
//! events elsewhere are ignored (counted, not waited for): a caret blinking in another window, a clock,
//! another program typing never hold the wait. Windows mapped, unmapped or moved after the mark (a
//! dialog, a menu the action opened) and the popups on screen (menus are override-redirect windows)
//! join the scope, as the window watcher ([`super::damage`]) reports them.
//!
//! Drawing that repeats in one rectangle at a steady rhythm of at least `animation_hz` for at least
//! [`ANIMATION_PERIODS`] periods (a spinner, a pulsing progress bar) is an animation: it is not waited
//! for, before or after the action, and the report counts the animated rectangles. Nothing here sleeps
//! a fixed time: waits end on new activity or on the bounds.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::backend::{SettleOptions, SettleOutcome, SettleReport};

/// How long activity is remembered (animation detection looks this far back).
const HISTORY: Duration = Duration::from_secs(3);
/// Most drawings remembered (bounds memory when something draws very fast).
const MAX_DRAWS: usize = 4096;
/// Most accessibility events remembered.
const MAX_EVENTS: usize = 1024;
/// Most window changes (maps, unmaps, moves) remembered.
const MAX_SHOWN: usize = 256;
/// Most separate drawn rectangles [`Activity::changes`] reports.
pub const MAX_CHANGED_AREAS: usize = 32;
/// A rectangle redrawn steadily for this many periods of `animation_hz` is an animation.
pub const ANIMATION_PERIODS: u32 = 4;

/// A drawn rectangle in root-window pixels: x, y, width, height.
pub type Area = (i16, i16, u16, u16);

#[derive(Debug)]
struct Draw {
    seq: u64,
    at: Instant,
    areas: Vec<Area>,
}

/// An accessibility event: its place in the log, when, who sent it and what it announces.
#[derive(Debug)]
struct Event {
    seq: u64,
    at: Instant,
    app: String,
    kind: &'static str,
}

/// A top-level window mapped, unmapped, moved or restacked: the places it covered and covers.
#[derive(Debug)]
struct Shown {
    seq: u64,
    at: Instant,
    areas: Vec<Area>,
}

#[derive(Debug, Default)]
struct Log {
    seq: u64,
    draws: VecDeque<Draw>,
    events: VecDeque<Event>,
    shown: VecDeque<Shown>,
    /// The override-redirect windows (menus, popups, tooltips) on screen now.
    popups: Vec<Area>,
}

/// What an observation waits for: drawing that touches `areas` (the selected window and its
/// application's other windows, frames included) and accessibility events of `app` (its bus name;
/// `None`: every application's). Windows changed after the mark and the popups on screen are added.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scope {
    /// Rectangles in root-window pixels.
    pub areas: Vec<Area>,
    /// The application's accessibility bus name.
    pub app: Option<String>,
}

impl Log {
    fn forget(&mut self, now: Instant) {
        while self
            .draws
            .front()
            .is_some_and(|d| now.duration_since(d.at) > HISTORY)
            || self.draws.len() > MAX_DRAWS
        {
            self.draws.pop_front();
        }
        while self
            .events
            .front()
            .is_some_and(|e| now.duration_since(e.at) > HISTORY)
            || self.events.len() > MAX_EVENTS
        {
            self.events.pop_front();
        }
        while self
            .shown
            .front()
            .is_some_and(|w| now.duration_since(w.at) > HISTORY)
            || self.shown.len() > MAX_SHOWN
        {
            self.shown.pop_front();
        }
    }
}

/// The desktop's activity log, fed by the watchers and read by settle waits.
#[derive(Debug)]
pub struct Activity {
    log: Mutex<Log>,
    tx: watch::Sender<u64>,
}

impl Default for Activity {
    fn default() -> Self {
        Self {
            log: Mutex::default(),
            tx: watch::channel(0).0,
        }
    }
}

/// What the log says about the time since an action.
#[derive(Debug, Default, PartialEq)]
struct Since {
    /// The last drawing after the mark outside animations.
    last_draw: Option<Instant>,
    /// Accessibility events after the mark: count and last.
    events: u32,
    last_event: Option<Instant>,
    /// Drawings after the mark (animated ones included).
    draws: u32,
    /// Rectangles recognised as animations.
    animations: u32,
    /// Drawings and events after the mark outside the scope (not waited for).
    ignored: u32,
}

impl Activity {
    fn lock(&self) -> std::sync::MutexGuard<'_, Log> {
        // A poisoned lock only means a watcher panicked mid-push; the log is still usable.
        self.log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records a drawing of `areas` (empty: the area is unknown, the whole screen).
    pub fn drawn(&self, areas: Vec<Area>) {
        let now = Instant::now();
        let seq = {
            let mut log = self.lock();
            log.seq += 1;
            let seq = log.seq;
            log.draws.push_back(Draw {
                seq,
                at: now,
                areas,
            });
            log.forget(now);
            seq
        };
        self.tx.send_replace(seq);
    }

    /// Records top-level windows mapped, unmapped, moved or restacked (`areas`: where they were and
    /// are), and the override-redirect windows on screen now (`popups`).
    pub fn windows_changed(&self, areas: Vec<Area>, popups: Vec<Area>) {
        let now = Instant::now();
        let seq = {
            let mut log = self.lock();
            log.seq += 1;
            let seq = log.seq;
            log.shown.push_back(Shown {
                seq,
                at: now,
                areas,
            });
            log.popups = popups;
            log.forget(now);
            seq
        };
        self.tx.send_replace(seq);
    }

    /// Records an accessibility event of unknown origin.
    pub fn event(&self) {
        self.event_from(String::new(), "event");
    }

    /// Records an accessibility event `app` sent, announcing a change of `kind`.
    pub fn event_from(&self, app: String, kind: &'static str) {
        let now = Instant::now();
        let seq = {
            let mut log = self.lock();
            log.seq += 1;
            let seq = log.seq;
            log.events.push_back(Event {
                seq,
                at: now,
                app,
                kind,
            });
            log.forget(now);
            seq
        };
        self.tx.send_replace(seq);
    }

    /// The activity count so far (an action's mark).
    pub fn mark(&self) -> u64 {
        self.lock().seq
    }

    /// Waits until there is activity after `mark` or `until` passes; true when there was.
    pub async fn after(&self, mark: u64, until: Instant) -> bool {
        let mut rx = self.tx.subscribe();
        loop {
            if *rx.borrow_and_update() > mark {
                return true;
            }
            match tokio::time::timeout_at(until.into(), rx.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => return false,
            }
        }
    }

    fn since(&self, mark: u64, now: Instant, hz: f64, scope: Option<&Scope>) -> Since {
        let log = self.lock();
        let animated = animated_areas(log.draws.iter().map(|d| (d.at, &d.areas[..])), now, hz);
        let mut s = Since {
            animations: animated.len() as u32,
            ..Since::default()
        };
        // The places that matter: the scope's, the popups on screen, the windows changed since.
        let region: Option<Vec<Area>> = scope.map(|sc| {
            let mut r = sc.areas.clone();
            r.extend_from_slice(&log.popups);
            for w in log.shown.iter().filter(|w| w.seq > mark) {
                r.extend_from_slice(&w.areas);
            }
            r
        });
        // One batch of drawing may hold rectangles of several windows (the watcher reads what was
        // drawn since its last read): each rectangle is judged on its own.
        let in_scope = |a: &Area| region.as_ref().is_none_or(|r| touches(a, r));
        for d in log.draws.iter().filter(|d| d.seq > mark) {
            if !d.areas.is_empty() && !d.areas.iter().any(in_scope) {
                s.ignored += 1;
                continue;
            }
            s.draws += 1;
            let real = d.areas.is_empty()
                || d.areas
                    .iter()
                    .any(|a| in_scope(a) && !covered(a, &animated));
            if real {
                s.last_draw = Some(d.at);
            }
        }
        let app = scope.and_then(|sc| sc.app.as_deref());
        for e in log.events.iter().filter(|e| e.seq > mark) {
            if app.is_some_and(|a| !e.app.is_empty() && e.app != a) {
                s.ignored += 1;
                continue;
            }
            s.events += 1;
            s.last_event = Some(e.at);
        }
        s
    }

    /// What was reported after `mark`: the accessibility events (of `app` when given) as (app, kind),
    /// and the drawn rectangles outside the places animated at `hz` (at most [`MAX_CHANGED_AREAS`],
    /// merged into their union beyond that).
    pub fn changes(
        &self,
        mark: u64,
        hz: f64,
        app: Option<&str>,
    ) -> (Vec<(String, &'static str)>, Vec<Area>) {
        let now = Instant::now();
        let log = self.lock();
        let animated = animated_areas(log.draws.iter().map(|d| (d.at, &d.areas[..])), now, hz);
        let events = log
            .events
            .iter()
            .filter(|e| e.seq > mark && app.is_none_or(|a| e.app.is_empty() || e.app == a))
            .map(|e| (e.app.clone(), e.kind))
            .collect();
        let mut drawn: Vec<Area> = Vec::new();
        for d in log.draws.iter().filter(|d| d.seq > mark) {
            for a in &d.areas {
                if covered(a, &animated)
                    || drawn.iter().any(|b| covered(a, std::slice::from_ref(b)))
                {
                    continue;
                }
                if drawn.len() >= MAX_CHANGED_AREAS {
                    let all = drawn.iter().fold(*a, |u, b| union(&u, b));
                    drawn = vec![all];
                } else {
                    drawn.push(*a);
                }
            }
        }
        (events, drawn)
    }

    /// Waits until the screen changed after `mark` (read at `since`) and then settled, within `opts`;
    /// with a `scope`, only what happens there counts (see [`Scope`]).
    pub async fn settle(
        &self,
        mark: u64,
        since: Instant,
        opts: &SettleOptions,
        scope: Option<&Scope>,
    ) -> SettleReport {
        let start = Instant::now();
        let deadline = start + opts.timeout;
        let first_by = (since + opts.first_change).min(deadline);
        let mut rx = self.tx.subscribe();
        loop {
            rx.borrow_and_update();
            let now = Instant::now();
            let s = self.since(mark, now, opts.animation_hz, scope);
            let report = |outcome| SettleReport {
                outcome,
                waited: start.elapsed(),
                draws: s.draws,
                events: s.events,
                animations: s.animations,
                ignored: s.ignored,
            };
            let wake = match (s.last_draw, s.last_event) {
                (None, None) => {
                    if now >= first_by {
                        return report(SettleOutcome::NoChange);
                    }
                    first_by
                }
                (draw, event) => {
                    let last = draw.max(event).unwrap_or(now);
                    let mut until = last + opts.quiet;
                    // An accessibility event with no drawing after it or shortly before it (the bus
                    // may deliver it after the X server reported the redraw): its redraw is coming
                    // (GTK draws on its next frame), unless the event changed nothing visible.
                    if let Some(e) = event
                        && draw.is_none_or(|d| d + opts.quiet < e)
                    {
                        until = until.max(e + redraw_wait(opts));
                    }
                    if now >= until {
                        return report(SettleOutcome::Settled);
                    }
                    if now >= deadline {
                        return report(SettleOutcome::Timeout);
                    }
                    until.min(deadline)
                }
            };
            if now >= deadline {
                return report(SettleOutcome::Timeout);
            }
            // Wake at the bound, on new activity, or after a period (an animation may become
            // recognisable without anything new outside it).
            let period = Duration::from_secs_f64(1.0 / opts.animation_hz.max(0.1));
            let wake = wake.min(now + period);
            if let Ok(Err(_)) = tokio::time::timeout_at(wake.into(), rx.changed()).await {
                return report(SettleOutcome::Unsupported);
            }
        }
    }
}

/// How long the redraw an accessibility event announces is awaited: four quiet times (a few frames),
/// at most the first-change time.
fn redraw_wait(opts: &SettleOptions) -> Duration {
    (opts.quiet * 4).min(opts.first_change)
}

/// Whether `a` lies inside one of `areas`.
fn covered(a: &Area, areas: &[Area]) -> bool {
    areas.iter().any(|b| {
        let (ax, ay, bx, by) = (
            i32::from(a.0),
            i32::from(a.1),
            i32::from(b.0),
            i32::from(b.1),
        );
        ax >= bx
            && ay >= by
            && ax + i32::from(a.2) <= bx + i32::from(b.2)
            && ay + i32::from(a.3) <= by + i32::from(b.3)
    })
}

/// Whether `a` overlaps one of `areas` (by at least one pixel).
fn touches(a: &Area, areas: &[Area]) -> bool {
    areas.iter().any(|b| {
        let (ax, ay, bx, by) = (
            i32::from(a.0),
            i32::from(a.1),
            i32::from(b.0),
            i32::from(b.1),
        );
        ax < bx + i32::from(b.2)
            && bx < ax + i32::from(a.2)
            && ay < by + i32::from(b.3)
            && by < ay + i32::from(a.3)
    })
}

/// Two drawings are in the same place when their rectangles overlap by at least this much
/// (intersection over union), or when one lies inside the other: toolkits redraw an animation's region
/// with a few pixels' wobble, or only part of it.
const SAME_PLACE: f64 = 0.8;

/// A drawing that encloses a place and is at most this many times its size redraws that place with a
/// margin (GTK draws one bounding box of a frame's invalid regions: a spinner and the check box beside
/// it that just changed): it keeps the place's rhythm. A larger one (the whole window) does not.
const AROUND_PLACE: f64 = 2.0;

/// Whether `a` encloses `place` and is at most [`AROUND_PLACE`] times its size.
fn around(a: &Area, place: &Area) -> bool {
    covered(place, std::slice::from_ref(a)) && area_px(a) <= AROUND_PLACE * area_px(place)
}

fn area_px(a: &Area) -> f64 {
    f64::from(a.2) * f64::from(a.3)
}

fn same_place(a: &Area, b: &Area) -> bool {
    let (ax0, ay0, bx0, by0) = (
        i32::from(a.0),
        i32::from(a.1),
        i32::from(b.0),
        i32::from(b.1),
    );
    let w = (ax0 + i32::from(a.2)).min(bx0 + i32::from(b.2)) - ax0.max(bx0);
    let h = (ay0 + i32::from(a.3)).min(by0 + i32::from(b.3)) - ay0.max(by0);
    if w <= 0 || h <= 0 {
        return false;
    }
    let inter = f64::from(w) * f64::from(h);
    inter / (area_px(a) + area_px(b) - inter) >= SAME_PLACE
}

fn union(a: &Area, b: &Area) -> Area {
    let x0 = a.0.min(b.0);
    let y0 = a.1.min(b.1);
    let x1 = (i32::from(a.0) + i32::from(a.2)).max(i32::from(b.0) + i32::from(b.2));
    let y1 = (i32::from(a.1) + i32::from(a.3)).max(i32::from(b.1) + i32::from(b.3));
    let w = u16::try_from(x1 - i32::from(x0)).unwrap_or(u16::MAX);
    let h = u16::try_from(y1 - i32::from(y0)).unwrap_or(u16::MAX);
    (x0, y0, w, h)
}

/// One place drawn repeatedly: the union of its rectangles, the start of its current steady run, and
/// when it was last drawn.
struct Place {
    area: Area,
    start: Instant,
    last: Instant,
}

/// The places drawn again and again at a steady rhythm of at least `hz` (no gap over two periods) for
/// at least [`ANIMATION_PERIODS`] periods, up to `now` (the last repeat within two periods of it).
fn animated_areas<'a>(
    draws: impl Iterator<Item = (Instant, &'a [Area])>,
    now: Instant,
    hz: f64,
) -> Vec<Area> {
    if hz <= 0.0 {
        return Vec::new();
    }
    let period = Duration::from_secs_f64(1.0 / hz);
    let mut places: Vec<Place> = Vec::new();
    for (at, areas) in draws {
        for a in areas {
            // Inside a place counts as that place (a frame that redraws only part of it), and so does
            // a frame that redraws it with a margin.
            match places
                .iter_mut()
                .find(|p| same_place(&p.area, a) || covered(a, &[p.area]) || around(a, &p.area))
            {
                Some(p) => {
                    // A missed frame or two (a busy machine) does not break the rhythm.
                    if at.duration_since(p.last) > period * 2 {
                        p.start = at;
                        p.area = *a;
                    } else {
                        p.area = union(&p.area, a);
                    }
                    p.last = at;
                }
                // Bounded by the log's size (MAX_DRAWS).
                None => places.push(Place {
                    area: *a,
                    start: at,
                    last: at,
                }),
            }
        }
    }
    let mut out: Vec<Area> = places
        .into_iter()
        .filter(|p| {
            now.saturating_duration_since(p.last) <= period * 2
                && p.last.duration_since(p.start) >= period * ANIMATION_PERIODS
        })
        .map(|p| p.area)
        .collect();
    out.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPINNER: Area = (100, 100, 16, 16);
    const TEXT: Area = (10, 10, 300, 20);

    /// A spinner that never stops, drawn at about 60 Hz from another thread until `stop`; returns once
    /// the log sees it as an animation.
    async fn spinning(
        activity: &std::sync::Arc<Activity>,
        stop: &std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) -> std::thread::JoinHandle<()> {
        let spinner = {
            let (activity, stop) = (activity.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    activity.drawn(vec![SPINNER]);
                    std::thread::sleep(Duration::from_millis(16));
                }
            })
        };
        while activity.since(0, Instant::now(), 10.0, None).animations == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        spinner
    }

    fn opts() -> SettleOptions {
        SettleOptions {
            timeout: Duration::from_secs(2),
            quiet: Duration::from_millis(40),
            first_change: Duration::from_millis(300),
            animation_hz: 10.0,
            whole_screen: false,
        }
    }

    #[test]
    fn a_steady_rhythm_is_an_animation_and_a_burst_is_not() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        // A spinner at 60 Hz for half a second; text drawn three times within 50 ms.
        let mut draws: Vec<(Instant, Vec<Area>)> =
            (0..30).map(|i| (ms(i * 16), vec![SPINNER])).collect();
        draws.extend((0..3).map(|i| (ms(400 + i * 20), vec![TEXT])));
        draws.sort_by_key(|d| d.0);
        let view = || draws.iter().map(|(t, a)| (*t, &a[..]));
        assert_eq!(animated_areas(view(), ms(480), 10.0), vec![SPINNER]);
        // Stopped: no longer an animation once two periods passed without it.
        assert!(animated_areas(view(), ms(800), 10.0).is_empty());
        // Too slow for 10 Hz (a caret blinking every 600 ms).
        let blink: Vec<(Instant, Vec<Area>)> = (0..5).map(|i| (ms(i * 600), vec![TEXT])).collect();
        assert!(animated_areas(blink.iter().map(|(t, a)| (*t, &a[..])), ms(2400), 10.0).is_empty());
        // A region redrawn with a few pixels' wobble is one place.
        let wobble: Vec<(Instant, Vec<Area>)> = (0..30)
            .map(|i| {
                (
                    ms(i * 16),
                    vec![(256 + (i % 5) as i16, 81, 608 - (i % 5) as u16, 397)],
                )
            })
            .collect();
        assert_eq!(
            animated_areas(wobble.iter().map(|(t, a)| (*t, &a[..])), ms(480), 10.0),
            vec![(256, 81, 608, 397)]
        );
        // A frame redrawing only part of an animated place continues its rhythm.
        let mut part = wobble.clone();
        part.extend((30..40).map(|i| (ms(i * 16), vec![(300, 90, 100, 100)])));
        assert_eq!(
            animated_areas(part.iter().map(|(t, a)| (*t, &a[..])), ms(640), 10.0),
            vec![(256, 81, 608, 397)]
        );
        // A frame redrawing the place with a margin (a neighbour that changed, drawn in the same
        // bounding box) continues its rhythm, and the place grows to cover it; the whole window
        // redrawn around it does not.
        let mut margin = wobble.clone();
        margin.extend((30..40).map(|i| (ms(i * 16), vec![(14, 81, 850, 397)])));
        assert_eq!(
            animated_areas(margin.iter().map(|(t, a)| (*t, &a[..])), ms(640), 10.0),
            vec![(14, 81, 850, 397)]
        );
        let mut whole = wobble.clone();
        whole.push((ms(30 * 16), vec![(0, 0, 1280, 900)]));
        let places = animated_areas(whole.iter().map(|(t, a)| (*t, &a[..])), ms(480), 10.0);
        assert_eq!(places, vec![(256, 81, 608, 397)]);
        // Switched off.
        assert!(animated_areas(view(), ms(480), 0.0).is_empty());
        assert!(covered(&(102, 102, 4, 4), &[SPINNER]) && !covered(&TEXT, &[SPINNER]));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn settles_past_a_spinner_and_waits_for_the_redraw_an_event_announces() {
        let activity = std::sync::Arc::new(Activity::default());
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        // A spinner seen for longer than ANIMATION_PERIODS periods before the action.
        let spinner = spinning(&activity, &stop).await;
        let (mark, since) = (activity.mark(), Instant::now());
        activity.drawn(vec![TEXT]);
        let r = activity.settle(mark, since, &opts(), None).await;
        assert_eq!(r.outcome, SettleOutcome::Settled, "{r:?}");
        assert!(r.waited < Duration::from_millis(500), "{r:?}");
        assert_eq!(r.animations, 1);
        assert!(r.draws >= 2, "the spinner's drawings are counted: {r:?}");

        // Nothing but the spinner: no change.
        let (mark, since) = (activity.mark(), Instant::now());
        let r = activity.settle(mark, since, &opts(), None).await;
        assert_eq!(r.outcome, SettleOutcome::NoChange, "{r:?}");

        // An accessibility event, then its redraw 150 ms later: the wait covers the redraw.
        let (mark, since) = (activity.mark(), Instant::now());
        activity.event();
        let later = {
            let activity = activity.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(150));
                activity.drawn(vec![TEXT]);
            })
        };
        let r = activity.settle(mark, since, &opts(), None).await;
        later.join().unwrap();
        assert_eq!(r.outcome, SettleOutcome::Settled, "{r:?}");
        assert!(r.waited >= Duration::from_millis(150), "{r:?}");
        assert_eq!(r.events, 1);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        spinner.join().unwrap();
    }

    const WINDOW: Area = (0, 0, 800, 600);
    const OTHER: Area = (1000, 0, 400, 300);

    #[test]
    fn drawing_and_events_outside_the_scope_are_ignored_and_new_windows_join_it() {
        let activity = Activity::default();
        let scope = Scope {
            areas: vec![WINDOW],
            app: Some(":1.5".into()),
        };
        let mark = activity.mark();
        // Another window draws and another application speaks: nothing for the scope.
        activity.drawn(vec![(1010, 10, 8, 16)]);
        activity.event_from(":1.9".into(), "text-changed");
        let s = activity.since(mark, Instant::now(), 10.0, Some(&scope));
        assert_eq!(
            (s.last_draw, s.last_event, s.draws, s.ignored),
            (None, None, 0, 2)
        );
        // The whole screen sees both.
        let all = activity.since(mark, Instant::now(), 10.0, None);
        assert!(
            all.last_draw.is_some() && all.last_event.is_some(),
            "{all:?}"
        );
        assert_eq!(all.ignored, 0);
        // A drawing touching the window counts, so does its application's event.
        activity.drawn(vec![(790, 590, 30, 30)]);
        activity.event_from(":1.5".into(), "text-changed");
        let s = activity.since(mark, Instant::now(), 10.0, Some(&scope));
        assert!(s.last_draw.is_some() && s.last_event.is_some(), "{s:?}");
        assert_eq!((s.draws, s.events, s.ignored), (1, 1, 2));

        // A dialog mapped after the mark over the other window: its drawing counts from then on.
        let mark = activity.mark();
        activity.drawn(vec![(1010, 10, 8, 16)]);
        activity.windows_changed(vec![OTHER], Vec::new());
        activity.drawn(vec![(1010, 30, 8, 16)]);
        let s = activity.since(mark, Instant::now(), 10.0, Some(&scope));
        assert_eq!((s.draws, s.ignored), (2, 0), "{s:?}");
        // Not for an action after it (the dialog has no part in the scope then) unless it is a popup.
        let mark = activity.mark();
        activity.drawn(vec![(1010, 10, 8, 16)]);
        let s = activity.since(mark, Instant::now(), 10.0, Some(&scope));
        assert_eq!((s.draws, s.ignored), (0, 1), "{s:?}");
        activity.windows_changed(Vec::new(), vec![OTHER]);
        let mark = activity.mark();
        activity.drawn(vec![(1010, 10, 8, 16)]);
        let s = activity.since(mark, Instant::now(), 10.0, Some(&scope));
        assert_eq!((s.draws, s.ignored), (1, 0), "{s:?}");
    }

    /// Another program "typing" (drawing every few milliseconds at a moving place, never quiet and never
    /// an animation) holds a whole-screen wait to its timeout; a scoped wait settles on the window.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_typist_elsewhere_does_not_hold_a_scoped_wait() {
        let activity = std::sync::Arc::new(Activity::default());
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let typist = {
            let (activity, stop) = (activity.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut i = 0i16;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    activity.drawn(vec![(1000 + (i % 40) * 9, 20 * (i / 40 % 10), 9, 18)]);
                    i = i.wrapping_add(1).rem_euclid(400);
                    std::thread::sleep(Duration::from_millis(5));
                }
            })
        };
        let scope = Scope {
            areas: vec![WINDOW],
            app: None,
        };
        let (mark, since) = (activity.mark(), Instant::now());
        activity.drawn(vec![TEXT]);
        let r = activity.settle(mark, since, &opts(), Some(&scope)).await;
        assert_eq!(r.outcome, SettleOutcome::Settled, "{r:?}");
        assert!(r.ignored > 0, "the typist was seen and ignored: {r:?}");
        assert_eq!(r.draws, 1, "{r:?}");
        // Nothing in the window: no change, whatever the typist does.
        let (mark, since) = (activity.mark(), Instant::now());
        let r = activity.settle(mark, since, &opts(), Some(&scope)).await;
        assert_eq!(r.outcome, SettleOutcome::NoChange, "{r:?}");

        // A spinner in the window: a batch of drawing holding a spinner frame and the typist's glyph
        // (read together by the watcher) is not a change of the window.
        let spinner = spinning(&activity, &stop).await;
        let mark = activity.mark();
        activity.drawn(vec![SPINNER, (1010, 10, 8, 16)]);
        let s = activity.since(mark, Instant::now(), 10.0, Some(&scope));
        assert_eq!(s.last_draw, None, "{s:?}");
        assert!(s.draws >= 1, "{s:?}");
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        typist.join().unwrap();
        spinner.join().unwrap();
    }
}
