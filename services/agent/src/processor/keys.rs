//! Well-known global keys every processor run can rely on (seed 004, "Context Separation Rationale":
//! request, session id, round and step numbers). Agents declare further keys next to their strategies.

use super::context::Key;

/// The user's request of the current round.
pub const REQUEST: Key<String> = Key::new("request");
/// The session (task) id.
pub const SESSION_ID: Key<String> = Key::new("session_id");
/// The running agent's name.
pub const AGENT_NAME: Key<String> = Key::new("agent_name");
/// Round number, 1-based.
pub const ROUND: Key<u32> = Key::new("round_num");
/// Step number within the round, 1-based.
pub const ROUND_STEP: Key<u32> = Key::new("round_step");
/// Step number within the session, 1-based.
pub const SESSION_STEP: Key<u64> = Key::new("session_step");
