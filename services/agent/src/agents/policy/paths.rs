//! Whether a launch argument names a path inside a declared directory, judged from its text alone: the
//! agent may run on another machine than the executor (and the desktop may be Windows), so nothing is
//! resolved on disk here. The executor resolves symlinks itself before it starts anything (its own
//! `--launch-dir` limit); this check refuses what is plainly outside before it is sent.

/// A path split into its components: `/`-rooted (Unix) or drive-rooted (`C:\`, `c:/`), with either
/// separator; `None` unless absolute, or when any component is `..`.
fn components(path: &str) -> Option<(Root, Vec<&str>)> {
    let bytes = path.as_bytes();
    let (root, rest) = if path.starts_with('/') || path.starts_with('\\') {
        // `\\server\share` and `//server` (UNC) are not local paths: refused as not absolute.
        if path.starts_with("//") || path.starts_with("\\\\") {
            return None;
        }
        (Root::Unix, &path[1..])
    } else if bytes.len() >= 3
        && bytes[0].is_ascii_alphabetic()
        && bytes[1] == b':'
        && (bytes[2] == b'\\' || bytes[2] == b'/')
    {
        (Root::Drive(bytes[0].to_ascii_lowercase()), &path[3..])
    } else {
        return None;
    };
    let parts: Vec<&str> = rest
        .split(['/', '\\'])
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    if parts.contains(&"..") {
        return None;
    }
    Some((root, parts))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Root {
    Unix,
    Drive(u8),
}

/// Whether `arg` is an absolute path without `..` inside `dir` (or `dir` itself). Windows paths (drive
/// roots) compare case-insensitively, as Windows file systems do.
pub fn inside(arg: &str, dir: &str) -> bool {
    let (Some((root, parts)), Some((dir_root, dir_parts))) = (components(arg), components(dir))
    else {
        return false;
    };
    if root != dir_root || parts.len() < dir_parts.len() {
        return false;
    }
    dir_parts.iter().zip(&parts).all(|(d, p)| match root {
        Root::Unix => d == p,
        Root::Drive(_) => d.eq_ignore_ascii_case(p),
    })
}

/// Whether `dir` can serve as a launch directory (absolute, without `..`).
pub fn valid_dir(dir: &str) -> bool {
    components(dir).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_inside_and_outside() {
        for (arg, dir, expected) in [
            ("/home/me/Documents/a.txt", "/home/me/Documents", true),
            ("/home/me/Documents", "/home/me/Documents/", true),
            ("/home/me/Documents/./x/y.txt", "/home/me/Documents", true),
            ("/home/me/Documents2/a.txt", "/home/me/Documents", false),
            (
                "/home/me/Documents/../.ssh/id_rsa",
                "/home/me/Documents",
                false,
            ),
            ("/etc/shadow", "/home/me/Documents", false),
            ("Documents/a.txt", "/home/me/Documents", false),
            ("--new-window", "/home/me/Documents", false),
            ("file:///etc/shadow", "/", false),
            (
                r"C:\Users\Me\Documents\a.txt",
                r"c:\users\me\documents",
                true,
            ),
            (
                "c:/Users/Me/Documents/a.txt",
                r"C:\Users\Me\Documents",
                true,
            ),
            (
                r"D:\Users\Me\Documents\a.txt",
                r"C:\Users\Me\Documents",
                false,
            ),
            (r"\\server\share\a.txt", r"C:\", false),
            (
                r"C:\Users\Me\Documents\..\x",
                r"C:\Users\Me\Documents",
                false,
            ),
        ] {
            assert_eq!(inside(arg, dir), expected, "{arg} in {dir}");
        }
        assert!(valid_dir("/srv/docs") && valid_dir(r"C:\Docs"));
        assert!(!valid_dir("docs") && !valid_dir("/srv/../etc"));
    }
}
