//! Screen geometry shared by every backend: rectangles in screen pixels, points, the fraction-of-window
//! coordinates `click_on_coordinates` takes, and the DPI math that maps logical to device pixels.

use serde::Serialize;

/// A point in screen pixels (device pixels, origin at the top-left of the primary screen).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Point {
    /// Horizontal position.
    pub x: i32,
    /// Vertical position.
    pub y: i32,
}

/// A rectangle in screen pixels, stored as edges like the reference's `[left, top, right, bottom]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Rect {
    /// Left edge (inclusive).
    pub left: i32,
    /// Top edge (inclusive).
    pub top: i32,
    /// Right edge (exclusive).
    pub right: i32,
    /// Bottom edge (exclusive).
    pub bottom: i32,
}

impl Rect {
    /// A rectangle from its origin and size; a negative size is clamped to zero.
    pub fn from_xywh(x: i32, y: i32, width: i32, height: i32) -> Self {
        Self {
            left: x,
            top: y,
            right: x.saturating_add(width.max(0)),
            bottom: y.saturating_add(height.max(0)),
        }
    }

    /// Width in pixels (zero when the rectangle is inverted).
    pub fn width(&self) -> u32 {
        u32::try_from(self.right.saturating_sub(self.left)).unwrap_or(0)
    }

    /// Height in pixels (zero when the rectangle is inverted).
    pub fn height(&self) -> u32 {
        u32::try_from(self.bottom.saturating_sub(self.top)).unwrap_or(0)
    }

    /// True when the rectangle covers no pixel.
    pub fn is_empty(&self) -> bool {
        self.width() == 0 || self.height() == 0
    }

    /// The centre pixel, where clicks on a control land.
    pub fn center(&self) -> Point {
        Point {
            x: self.left + (self.right - self.left) / 2,
            y: self.top + (self.bottom - self.top) / 2,
        }
    }

    /// True when `p` is one of its pixels.
    pub fn contains(&self, p: Point) -> bool {
        (self.left..self.right).contains(&p.x) && (self.top..self.bottom).contains(&p.y)
    }

    /// The overlap of two rectangles (empty when they do not meet).
    pub fn intersect(&self, other: &Rect) -> Rect {
        let r = Rect {
            left: self.left.max(other.left),
            top: self.top.max(other.top),
            right: self.right.min(other.right),
            bottom: self.bottom.min(other.bottom),
        };
        if r.is_empty() { Rect::default() } else { r }
    }

    /// The smallest rectangle holding both (used to span all screens).
    pub fn union(&self, other: &Rect) -> Rect {
        if self.is_empty() {
            return *other;
        }
        if other.is_empty() {
            return *self;
        }
        Rect {
            left: self.left.min(other.left),
            top: self.top.min(other.top),
            right: self.right.max(other.right),
            bottom: self.bottom.max(other.bottom),
        }
    }

    /// `[left, top, right, bottom]`, the reference's JSON form.
    pub fn to_ltrb(self) -> [i32; 4] {
        [self.left, self.top, self.right, self.bottom]
    }

    /// The screen point at fractions `(fx, fy)` of this rectangle (0.0 = left/top, 1.0 = right/bottom);
    /// the result is clamped inside the rectangle so a fraction of exactly 1.0 stays on it.
    pub fn point_at_fraction(&self, fx: f64, fy: f64) -> Point {
        let w = f64::from(self.width());
        let h = f64::from(self.height());
        let x = (f64::from(self.left) + fx.clamp(0.0, 1.0) * w).floor() as i32;
        let y = (f64::from(self.top) + fy.clamp(0.0, 1.0) * h).floor() as i32;
        Point {
            x: x.min(self.right - 1).max(self.left),
            y: y.min(self.bottom - 1).max(self.top),
        }
    }

    /// Scales a rectangle given in logical pixels to device pixels at `scale` (DPI / 96).
    pub fn logical_to_device(&self, scale: f64) -> Rect {
        let s = |v: i32| (f64::from(v) * scale).round() as i32;
        Rect {
            left: s(self.left),
            top: s(self.top),
            right: s(self.right),
            bottom: s(self.bottom),
        }
    }
}

impl Serialize for Rect {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_ltrb().serialize(s)
    }
}

/// The DPI scale for a DPI value (96 DPI = 1.0), as Windows reports per-monitor DPI.
pub fn dpi_scale(dpi: u32) -> f64 {
    if dpi == 0 { 1.0 } else { f64::from(dpi) / 96.0 }
}

/// The `(dx, dy)` in 1/65535 units `SendInput` expects for an absolute move over the virtual desktop
/// `desktop`; points outside are clamped to its edges.
pub fn normalized_absolute(point: Point, desktop: &Rect) -> (i32, i32) {
    let norm = |v: i32, lo: i32, len: u32| -> i32 {
        if len <= 1 {
            return 0;
        }
        let clamped = v.clamp(lo, lo + len as i32 - 1) - lo;
        ((f64::from(clamped) * 65535.0) / f64::from(len - 1)).round() as i32
    };
    (
        norm(point.x, desktop.left, desktop.width()),
        norm(point.y, desktop.top, desktop.height()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_centres_and_fractions() {
        let r = Rect::from_xywh(100, 50, 200, 100);
        assert_eq!((r.width(), r.height()), (200, 100));
        assert_eq!(r.center(), Point { x: 200, y: 100 });
        assert!(r.contains(r.center()));
        assert!(!r.contains(Point { x: r.right, y: 100 }));
        assert!(!r.contains(Point {
            x: 200,
            y: r.top - 1
        }));
        assert_eq!(r.point_at_fraction(0.5, 0.5), Point { x: 200, y: 100 });
        assert_eq!(r.point_at_fraction(1.0, 1.0), Point { x: 299, y: 149 });
        assert_eq!(r.point_at_fraction(-3.0, 0.0), Point { x: 100, y: 50 });
        assert_eq!(r.to_ltrb(), [100, 50, 300, 150]);
        assert!(Rect::from_xywh(0, 0, -5, 10).is_empty());
    }

    #[test]
    fn intersections_and_unions() {
        let a = Rect::from_xywh(0, 0, 100, 100);
        let b = Rect::from_xywh(50, 50, 100, 100);
        assert_eq!(a.intersect(&b), Rect::from_xywh(50, 50, 50, 50));
        assert!(a.intersect(&Rect::from_xywh(200, 200, 5, 5)).is_empty());
        assert_eq!(a.union(&b), Rect::from_xywh(0, 0, 150, 150));
        assert_eq!(Rect::default().union(&b), b);
    }

    #[test]
    fn dpi_math() {
        assert_eq!(dpi_scale(144), 1.5);
        assert_eq!(dpi_scale(0), 1.0);
        let logical = Rect::from_xywh(10, 20, 100, 50);
        assert_eq!(
            logical.logical_to_device(1.5),
            Rect::from_xywh(15, 30, 150, 75)
        );
        let desk = Rect::from_xywh(-1920, 0, 3840, 1080);
        assert_eq!(normalized_absolute(Point { x: -1920, y: 0 }, &desk), (0, 0));
        assert_eq!(
            normalized_absolute(Point { x: 1919, y: 1079 }, &desk),
            (65535, 65535)
        );
        assert_eq!(
            normalized_absolute(Point { x: 9999, y: -5 }, &desk),
            (65535, 0)
        );
    }
}
