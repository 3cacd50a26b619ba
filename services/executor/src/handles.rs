//! Stable control handles for backends whose elements are objects, not names (UI Automation): a
//! handle minted for an element stays the same, and keeps resolving, across later tree walks until the
//! element leaves its window's tree — the semantics AT-SPI object paths give the Linux backend for free.
//!
//! Identity comes from a key the backend reads (the UIA runtime id, else the native window handle):
//! meeting the same key again returns the same handle and refreshes the stored object. An element
//! without a key gets a new handle each walk. A complete walk of a window forgets that window's
//! handles it did not meet (those elements are gone); a truncated walk forgets nothing. The table is
//! bounded: past its capacity the handles met longest ago are forgotten first.
//!
//! Platform-independent (generic over the stored object) so the Linux tests cover it.

use std::collections::HashMap;

/// How a backend recognises an element it met before.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ElementKey {
    /// UI Automation's runtime id (unique among live elements of the desktop).
    Runtime(Vec<i32>),
    /// A native window handle (HWND) for elements that are windows.
    Native(u64),
}

#[derive(Debug)]
struct Entry<T> {
    item: T,
    window: u64,
    key: Option<ElementKey>,
    /// The walk that last met this element.
    walk: u64,
}

/// Handles → elements, with identity by [`ElementKey`].
#[derive(Debug)]
pub struct HandleTable<T> {
    entries: HashMap<u64, Entry<T>>,
    by_key: HashMap<(u64, ElementKey), u64>,
    next_handle: u64,
    walk: u64,
    capacity: usize,
}

impl<T> HandleTable<T> {
    /// An empty table keeping at most `capacity` handles (at least one walk's worth is always kept).
    pub fn new(capacity: usize) -> Self {
        Self {
            entries: HashMap::new(),
            by_key: HashMap::new(),
            next_handle: 1,
            walk: 0,
            capacity,
        }
    }

    /// Starts a walk; pass the returned number to [`insert`](Self::insert) and [`finish`](Self::finish).
    pub fn begin(&mut self) -> u64 {
        self.walk += 1;
        self.walk
    }

    /// Records an element met during `walk` of `window`; returns its handle (the old one when `key`
    /// was met before in this window).
    pub fn insert(&mut self, walk: u64, window: u64, key: Option<ElementKey>, item: T) -> u64 {
        if let Some(k) = &key
            && let Some(&h) = self.by_key.get(&(window, k.clone()))
            && let Some(e) = self.entries.get_mut(&h)
        {
            e.item = item;
            e.walk = walk;
            return h;
        }
        let h = self.next_handle;
        self.next_handle += 1;
        if let Some(k) = &key {
            self.by_key.insert((window, k.clone()), h);
        }
        self.entries.insert(
            h,
            Entry {
                item,
                window,
                key,
                walk,
            },
        );
        h
    }

    /// Ends `walk` of `window`: a `complete` walk forgets the window's elements it did not meet; then
    /// the table is trimmed to its capacity, oldest walks first (never the elements of this walk).
    pub fn finish(&mut self, walk: u64, window: u64, complete: bool) {
        if complete {
            self.retain(|e| e.window != window || e.walk == walk);
        }
        if self.entries.len() > self.capacity {
            let mut walks: Vec<u64> = self.entries.values().map(|e| e.walk).collect();
            walks.sort_unstable();
            let excess = self.entries.len() - self.capacity;
            let cutoff = walks[excess - 1].min(walk - 1);
            self.retain(|e| e.walk > cutoff);
        }
    }

    fn retain(&mut self, keep: impl Fn(&Entry<T>) -> bool) {
        let by_key = &mut self.by_key;
        self.entries.retain(|_, e| {
            let k = keep(e);
            if !k && let Some(key) = e.key.take() {
                by_key.remove(&(e.window, key));
            }
            k
        });
    }

    /// The element behind a handle string, `None` when unknown or forgotten.
    pub fn get(&self, handle: &str) -> Option<&T> {
        let h = handle.parse::<u64>().ok()?;
        self.entries.get(&h).map(|e| &e.item)
    }

    /// How many handles the table holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when the table holds no handle.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn native(h: u64) -> Option<ElementKey> {
        Some(ElementKey::Native(h))
    }

    #[test]
    fn the_same_element_keeps_its_handle_across_walks() {
        let mut t = HandleTable::new(100);
        let w = t.begin();
        let a = t.insert(w, 7, native(1), "a1");
        let b = t.insert(w, 7, Some(ElementKey::Runtime(vec![42, 5])), "b1");
        t.finish(w, 7, true);
        let w2 = t.begin();
        assert_eq!(t.insert(w2, 7, native(1), "a2"), a);
        assert_eq!(
            t.insert(w2, 7, Some(ElementKey::Runtime(vec![42, 5])), "b2"),
            b
        );
        t.finish(w2, 7, true);
        // The stored object is the fresh one.
        assert_eq!(t.get(&a.to_string()), Some(&"a2"));
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn a_complete_walk_forgets_what_it_did_not_meet_a_truncated_one_does_not() {
        let mut t = HandleTable::new(100);
        let w = t.begin();
        let a = t.insert(w, 7, native(1), 1);
        let gone = t.insert(w, 7, native(2), 2);
        let other_window = t.insert(w, 8, native(3), 3);
        t.finish(w, 7, true);
        let w2 = t.begin();
        t.insert(w2, 7, native(1), 1);
        t.finish(w2, 7, false);
        assert!(
            t.get(&gone.to_string()).is_some(),
            "truncated walks keep handles"
        );
        let w3 = t.begin();
        t.insert(w3, 7, native(1), 1);
        t.finish(w3, 7, true);
        assert!(t.get(&gone.to_string()).is_none());
        assert!(t.get(&a.to_string()).is_some());
        assert!(t.get(&other_window.to_string()).is_some());
        // A forgotten key met again gets a new handle.
        let w4 = t.begin();
        assert_ne!(t.insert(w4, 7, native(2), 2), gone);
    }

    #[test]
    fn keyless_elements_get_new_handles_and_the_table_stays_bounded() {
        let mut t = HandleTable::new(5);
        let mut first = None;
        for round in 0..4 {
            let w = t.begin();
            let hs: Vec<u64> = (0..3).map(|i| t.insert(w, round, None, i)).collect();
            first.get_or_insert(hs[0]);
            t.finish(w, round, true);
            assert!(t.len() <= 5, "{} handles", t.len());
            assert!(hs.iter().all(|h| t.get(&h.to_string()).is_some()));
        }
        assert!(t.get(&first.unwrap().to_string()).is_none());
        assert!(t.get("not a number").is_none());
    }
}
