//! What agents remember: [`MemoryItem`] (one key per field, per item), [`Memory`] (an agent's items in step
//! order) and the shared [`Blackboard`] (questions, requests, trajectories, images), their prompt
//! rendering, and conversion to and from the session protos so an agent can be rebuilt from what is stored.

pub mod blackboard;
pub mod board_images;
pub mod item;

pub use blackboard::{Blackboard, BlackboardImage};
pub use item::{Memory, MemoryItem};
