//! Children that do not outlive the process that started them.

/// Asks the kernel to send the child `signal` when the thread that starts it ends (`PR_SET_PDEATHSIG`),
/// and sends it at once if the parent already died between fork and exec. Callers start children from
/// threads that live as long as the process (the runtime's), so a SIGKILLed service leaves no orphan
/// behind: neither the programs an executor launched, nor its headless desktop's X server and buses, nor
/// an agent's MCP servers.
#[cfg(target_os = "linux")]
pub fn die_with_parent(cmd: &mut std::process::Command, signal: libc::c_int) {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: getpid(2) is async-signal-safe.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the closure runs in the forked child before exec and calls only the async-signal-safe
    // prctl(2), getppid(2) and raise(3).
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, signal) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                libc::raise(signal);
            }
            Ok(())
        });
    }
}
