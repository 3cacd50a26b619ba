//! The process's memory settings.

/// Stops the kernel from backing this process's memory with transparent huge pages (`PR_SET_THP_DISABLE`,
/// kept across `exec`), including memory the allocator already asked for them with `MADV_HUGEPAGE`. The
/// services free and take the same megabytes every step; with huge pages each fresh 2 MB page is zeroed
/// whole on its first touch (docs/benchmark.md, 2026-11-30 evening). Elsewhere than Linux: nothing to do.
pub fn disable_transparent_huge_pages() -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: PR_SET_THP_DISABLE takes one integer argument and touches no memory of ours.
        let rc = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Whether transparent huge pages are disabled for this process (`PR_GET_THP_DISABLE`); `false` where the
/// question does not exist.
pub fn transparent_huge_pages_disabled() -> bool {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: PR_GET_THP_DISABLE takes no argument and returns the flag.
        unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) == 1 }
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    #[test]
    fn turning_huge_pages_off_holds_for_the_process() {
        // nextest runs each test in a process of its own: this changes nothing for the others.
        super::disable_transparent_huge_pages().unwrap();
        assert!(super::transparent_huge_pages_disabled());
        // The kernel's own account of the process says so too (`THP_enabled:` in its status, where the kernel has that line).
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        if let Some(line) = status.lines().find(|l| l.starts_with("THP_enabled:")) {
            assert_eq!(line.split_whitespace().nth(1), Some("0"), "{line}");
        }
    }
}
