//! REST bodies: [`request`] (what clients send) and [`view`] (what they get back).

pub mod request;
pub mod view;

pub use request::*;
pub use view::*;
