//! `ufo-suite`: real-application tasks run against the whole system, as data.
//!
//! Layout:
//! - [`task`]: task files (TOML) — setup, request, demonstration, checks — read and checked.
//! - [`demo`]: demonstration steps written by name ("click the menu item named 'Save As…'"), parsed.
//! - [`standin`]: the model endpoint the agent calls — a stand-in that follows the demonstration through
//!   the prompt alone ([`standin::follow`], reading prompts with [`standin::prompt`]), or a forwarder to a
//!   real model — tallying each task's model calls and prompt sizes.
//! - [`desk`]: the one private desktop, and each task's applications on it (ready, sized, cleaned up).
//! - [`home`]: each task's private `HOME` and XDG folders, for its setup and its launched applications.
//! - [`check`]: checks on real state with independent tools (files, exit codes, a live pyatspi walk).
//! - [`run`]: one run — desktop, model endpoint and services shared by all tasks; a task at a time.
//! - [`report`]: the table, the summary and the JSON report.
//! - [`config`] and [`cli`]: the command's settings and what it does with them.

#[cfg(target_os = "linux")]
pub mod check;
#[cfg(target_os = "linux")]
pub mod cli;
pub mod config;
pub mod demo;
#[cfg(target_os = "linux")]
pub mod desk;
#[cfg(unix)]
pub mod home;
#[cfg(target_os = "linux")]
pub mod person;
pub mod report;
#[cfg(target_os = "linux")]
pub mod run;
pub mod standin;
pub mod task;
