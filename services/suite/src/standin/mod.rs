//! The model the suite's agent talks to: an OpenAI-compatible server ([`server`]) that either follows a
//! task's demonstration through the prompt alone ([`follow`], reading prompts with [`prompt`]) or
//! forwards to a real model endpoint, tallying what each task's prompts carried. A learning task (no
//! demonstration) is followed from the earlier task its prompt retrieved ([`learn`]).

pub mod follow;
pub mod learn;
pub mod prompt;
pub mod reuse;
pub mod server;

pub use follow::Patience;
pub use server::{Mode, ModelServer, Tally};
