//! The desktop pool's RPCs (issue 36): validation of desktop names, labels and wants, and the handlers the
//! `SessionStore` implementation delegates to.

use std::collections::BTreeMap;

use tonic::Status;
use ufo_proto::v1::{
    CheckInAndClaimRequest, CheckInAndClaimResponse, CheckInDesktopRequest, Desktop, DesktopChange,
    ListDesktopsResponse, RegisterDesktopRequest, RemoveDesktopRequest, RenewDesktopRequest,
    SetDesktopStateRequest,
};

use super::SessionService;
use super::status::status;
use super::validate::{self, invalid, required, uuid};
use crate::store::{DesktopCheckIn, DesktopWant, NewDesktop};

/// Longest desktop name, label key or label value.
const MAX_NAME: usize = 128;
/// Most labels on one desktop or in one want.
const MAX_LABELS: usize = 32;

fn text_ok(text: &str, empty_ok: bool) -> bool {
    (empty_ok || !text.trim().is_empty())
        && text.len() <= MAX_NAME
        && !text.chars().any(char::is_control)
}

/// A desktop name (an executor's): 1–128 bytes, not blank, no control characters.
pub fn name(field: &str, value: String) -> Result<String, Status> {
    if text_ok(&value, false) {
        Ok(value)
    } else {
        Err(invalid(
            field,
            "a desktop name is 1-128 bytes without control characters",
        ))
    }
}

/// A desktop's labels, by key.
pub type Labels = BTreeMap<String, String>;

/// Labels: at most 32; keys 1–128 bytes, values at most 128, no control characters.
pub fn labels(
    field: &str,
    value: std::collections::HashMap<String, String>,
) -> Result<Labels, Status> {
    if value.len() > MAX_LABELS {
        return Err(invalid(field, "at most 32 labels"));
    }
    value
        .into_iter()
        .map(|(k, v)| {
            if text_ok(&k, false) && text_ok(&v, true) {
                Ok((k, v))
            } else {
                Err(invalid(
                    field,
                    "label keys are 1-128 bytes, values at most 128, without control characters",
                ))
            }
        })
        .collect()
}

/// A session's want: exactly one of a name, `any` and labels.
pub fn want(value: Option<ufo_proto::v1::DesktopWant>) -> Result<Option<DesktopWant>, Status> {
    let Some(w) = value else {
        return Ok(None);
    };
    let given =
        usize::from(!w.name.is_empty()) + usize::from(w.any) + usize::from(!w.labels.is_empty());
    if given != 1 {
        return Err(invalid(
            "desktop",
            "give exactly one of a desktop name, any, or labels",
        ));
    }
    Ok(Some(if w.any {
        DesktopWant::Any
    } else if w.name.is_empty() {
        DesktopWant::Labels(labels("desktop.labels", w.labels)?)
    } else {
        DesktopWant::Name(name("desktop.name", w.name)?)
    }))
}

impl SessionService {
    pub(super) async fn register_desktop_rpc(
        &self,
        r: RegisterDesktopRequest,
    ) -> Result<Desktop, Status> {
        if r.version.len() > MAX_NAME {
            return Err(invalid("version", "at most 128 characters"));
        }
        let new = NewDesktop {
            name: name("name", r.name)?,
            labels: labels("labels", r.labels)?,
            version: r.version,
            generation: validate::bounded("generation", r.generation)?,
        };
        self.store.register_desktop(new).await.map_err(status)
    }

    pub(super) async fn check_in_desktop_rpc(
        &self,
        r: CheckInDesktopRequest,
    ) -> Result<Desktop, Status> {
        let back = DesktopCheckIn {
            name: name("name", r.name)?,
            session: uuid("session_id", &r.session_id)?,
            worker: required("worker_id", r.worker_id)?,
            broken: validate::optional(r.broken_reason),
        };
        self.store.check_in_desktop(back).await.map_err(status)
    }

    pub(super) async fn check_in_and_claim_rpc(
        &self,
        r: CheckInAndClaimRequest,
    ) -> Result<CheckInAndClaimResponse, Status> {
        let check_in = r
            .check_in
            .ok_or_else(|| invalid("check_in", "the check-in is required"))?;
        let back = DesktopCheckIn {
            name: name("check_in.name", check_in.name)?,
            session: uuid("check_in.session_id", &check_in.session_id)?,
            worker: required("check_in.worker_id", check_in.worker_id)?,
            broken: validate::optional(check_in.broken_reason),
        };
        let (checked_in, claimed) = self
            .store
            .check_in_and_claim(back, self.limits.lease(r.lease_ms), r.start)
            .await
            .map_err(status)?;
        let (session, desktop, start) = match claimed {
            Some(claim) => (Some(claim.session), claim.desktop, claim.start),
            None => (None, None, None),
        };
        Ok(CheckInAndClaimResponse {
            checked_in: Some(checked_in),
            session,
            desktop,
            start,
        })
    }

    pub(super) async fn renew_desktop_rpc(
        &self,
        r: RenewDesktopRequest,
    ) -> Result<Desktop, Status> {
        let desktop = name("name", r.name)?;
        let session = uuid("session_id", &r.session_id)?;
        let worker = required("worker_id", r.worker_id)?;
        self.store
            .renew_desktop(&desktop, session, &worker, self.limits.lease(r.lease_ms))
            .await
            .map_err(status)
    }

    pub(super) async fn list_desktops_rpc(&self) -> Result<ListDesktopsResponse, Status> {
        let desktops = self.store.list_desktops().await.map_err(status)?;
        let waiting_sessions = self
            .store
            .count_waiting_for_desktop()
            .await
            .map_err(status)?;
        Ok(ListDesktopsResponse {
            desktops,
            waiting_sessions,
        })
    }

    pub(super) async fn set_desktop_state_rpc(
        &self,
        r: SetDesktopStateRequest,
    ) -> Result<Desktop, Status> {
        let desktop = name("name", r.name)?;
        let change = match validate::known::<DesktopChange>("change", r.change)? {
            DesktopChange::Unspecified => {
                return Err(invalid("change", "DRAIN, UNDRAIN or READY is required"));
            }
            known => known,
        };
        self.store
            .set_desktop_state(&desktop, change)
            .await
            .map_err(status)
    }

    pub(super) async fn remove_desktop_rpc(&self, r: RemoveDesktopRequest) -> Result<(), Status> {
        let desktop = name("name", r.name)?;
        self.store.remove_desktop(&desktop).await.map_err(status)
    }
}
