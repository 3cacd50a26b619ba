//! How sure the executor is that an action did something (executor.proto `EffectKind`): the executor
//! judges it, the agent reads it into prompts and records it with the step.

use ufo_proto::v1;

/// How sure the executor is that an action did something.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EffectKind {
    /// Something changed that the action can be credited with.
    Confirmed,
    /// The executor watched and nothing changed.
    NoneObserved,
    /// The executor cannot tell.
    Unverifiable,
}

impl EffectKind {
    /// The word the wire's JSON, prompts and records use.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Confirmed => "confirmed",
            Self::NoneObserved => "none_observed",
            Self::Unverifiable => "unverifiable",
        }
    }

    /// The proto value.
    pub fn to_proto(self) -> v1::EffectKind {
        match self {
            Self::Confirmed => v1::EffectKind::Confirmed,
            Self::NoneObserved => v1::EffectKind::NoneObserved,
            Self::Unverifiable => v1::EffectKind::Unverifiable,
        }
    }

    /// The proto value as it comes off the wire; `None` when the sender did not say (unspecified or a
    /// value this build does not know).
    pub fn from_proto(value: i32) -> Option<Self> {
        match v1::EffectKind::try_from(value) {
            Ok(v1::EffectKind::Confirmed) => Some(Self::Confirmed),
            Ok(v1::EffectKind::NoneObserved) => Some(Self::NoneObserved),
            Ok(v1::EffectKind::Unverifiable) => Some(Self::Unverifiable),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_survives_the_wire() {
        for kind in [
            EffectKind::Confirmed,
            EffectKind::NoneObserved,
            EffectKind::Unverifiable,
        ] {
            assert_eq!(EffectKind::from_proto(kind.to_proto() as i32), Some(kind));
        }
        assert_eq!(EffectKind::from_proto(0), None);
        assert_eq!(EffectKind::from_proto(999), None);
    }
}
