//! UI Automation property reads through `Get{Cached,Current}PropertyValueEx` and the VARIANTs they
//! return. The backend reads every property this way rather than with the typed getters
//! (`CachedName`, `CurrentIsEnabled`, ...) because some implementations (Wine 10's, some third-party
//! providers) answer the generic call and leave the typed ones unimplemented; on Windows both agree.

use windows::Win32::System::Com::SAFEARRAY;
use windows::Win32::System::Ole::{
    SafeArrayAccessData, SafeArrayGetLBound, SafeArrayGetUBound, SafeArrayUnaccessData,
};
use windows::Win32::System::Variant::{
    VARENUM, VARIANT, VT_ARRAY, VT_BOOL, VT_BSTR, VT_I4, VT_R8, VariantClear,
};
use windows::Win32::UI::Accessibility::{IUIAutomationElement, UIA_PROPERTY_ID};

use crate::geometry::Rect;

/// A VARIANT that is cleared (its BSTR or SAFEARRAY freed) when dropped.
struct Var(VARIANT);

impl Drop for Var {
    fn drop(&mut self) {
        // SAFETY: the VARIANT was returned by UIA and is owned here.
        let _ = unsafe { VariantClear(&mut self.0) };
    }
}

impl Var {
    fn vt(&self) -> VARENUM {
        // SAFETY: reading the type tag of an initialised VARIANT.
        unsafe { self.0.Anonymous.Anonymous.vt }
    }

    /// The elements of a one-dimensional SAFEARRAY of `T` (VT_ARRAY | `elem`).
    fn array<T: Copy>(&self, elem: VARENUM) -> Option<Vec<T>> {
        if self.vt() != VARENUM(VT_ARRAY.0 | elem.0) {
            return None;
        }
        // SAFETY: the tag says the union holds a SAFEARRAY of `T`; it is accessed and released here.
        unsafe {
            let sa: *mut SAFEARRAY = self.0.Anonymous.Anonymous.Anonymous.parray;
            if sa.is_null() {
                return Some(Vec::new());
            }
            let lo = SafeArrayGetLBound(sa, 1).ok()?;
            let hi = SafeArrayGetUBound(sa, 1).ok()?;
            let n = usize::try_from(hi - lo + 1).unwrap_or(0);
            let mut data = std::ptr::null_mut();
            SafeArrayAccessData(sa, &mut data).ok()?;
            let out = std::slice::from_raw_parts(data as *const T, n).to_vec();
            let _ = SafeArrayUnaccessData(sa);
            Some(out)
        }
    }
}

/// Where a property is read from.
#[derive(Clone, Copy)]
pub(super) enum From {
    /// The element's cache, falling back to a live read when the cache lacks the property.
    Cache,
    /// A live read.
    Live,
}

fn read(e: &IUIAutomationElement, id: UIA_PROPERTY_ID, from: From) -> Option<Var> {
    // SAFETY: property reads on a live element; the VARIANT is owned by `Var`.
    unsafe {
        if let From::Cache = from
            && let Ok(v) = e.GetCachedPropertyValueEx(id, false)
        {
            let v = Var(v);
            if v.vt().0 != 0 {
                return Some(v);
            }
        }
        e.GetCurrentPropertyValueEx(id, false).ok().map(Var)
    }
}

/// A string property ("" when absent).
pub(super) fn string(e: &IUIAutomationElement, id: UIA_PROPERTY_ID, from: From) -> String {
    read(e, id, from)
        .filter(|v| v.vt() == VT_BSTR)
        // SAFETY: the tag says the union holds a BSTR.
        .map(|v| unsafe { v.0.Anonymous.Anonymous.Anonymous.bstrVal.to_string() })
        .unwrap_or_default()
}

/// An integer property.
pub(super) fn int(e: &IUIAutomationElement, id: UIA_PROPERTY_ID, from: From) -> Option<i32> {
    read(e, id, from)
        .filter(|v| v.vt() == VT_I4)
        // SAFETY: the tag says the union holds an i32.
        .map(|v| unsafe { v.0.Anonymous.Anonymous.Anonymous.lVal })
}

/// A boolean property.
pub(super) fn boolean(e: &IUIAutomationElement, id: UIA_PROPERTY_ID, from: From) -> Option<bool> {
    read(e, id, from)
        .filter(|v| v.vt() == VT_BOOL)
        // SAFETY: the tag says the union holds a VARIANT_BOOL.
        .map(|v| unsafe { v.0.Anonymous.Anonymous.Anonymous.boolVal.0 != 0 })
}

/// The bounding rectangle (UIA gives left, top, width, height as doubles); `None` when unknown.
pub(super) fn rect(e: &IUIAutomationElement, id: UIA_PROPERTY_ID, from: From) -> Option<Rect> {
    let v = read(e, id, from)?.array::<f64>(VT_R8)?;
    let [x, y, w, h] = v[..] else { return None };
    if !(x.is_finite() && y.is_finite() && w.is_finite() && h.is_finite()) {
        return None;
    }
    Some(Rect::from_xywh(
        x.round() as i32,
        y.round() as i32,
        w.round() as i32,
        h.round() as i32,
    ))
}

/// The runtime id (an array of integers), `None` when the implementation gives none.
pub(super) fn runtime_id(e: &IUIAutomationElement, id: UIA_PROPERTY_ID) -> Option<Vec<i32>> {
    read(e, id, From::Cache)?
        .array::<i32>(VT_I4)
        .filter(|v| !v.is_empty())
}
