//! Vision for the AppAgent (seed 001, "AppControlInfoStrategy"): screenshots as bytes with their
//! pixel-to-screen transform, set-of-marks annotation drawn here (not in the executor), merging a
//! visual-grounding control source by IoU, downscaling for prompts (`prompt`: one resize per step, marks
//! drawn on the small copy) and cropping the selected control.

pub mod annotate;
pub mod derived;
pub mod grounding;
pub mod image_ops;
pub mod merge;
pub mod prompt;
pub mod screenshot;

pub use annotate::{Marker, Palette};
pub use derived::{Derived, Recipe, RenderError};
pub use image_ops::{crop_control, crop_pixels, downscale_pixels, downscale_png};
pub use merge::{iou, merge_controls};
pub use prompt::{PromptImageSpec, PromptImages, blackboard_images, prompt_images};
pub use screenshot::{Screenshot, VisionError};
