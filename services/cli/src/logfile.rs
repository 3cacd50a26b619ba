//! The services' logs under `ufo up`: each child's stdout and stderr are read line by line and appended
//! to `DATA_DIR/logs/NAME.log`, which is rotated when it reaches a size (`NAME.log.1` the newest of the
//! kept ones). A restart appends, after a line that says so: the log of the run that crashed is what the
//! operator needs after the crash.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};
use tokio::task::JoinHandle;

/// The longest line kept whole; a longer one is cut (a runaway line must not hold the memory).
const MAX_LINE: usize = 64 << 10;

/// One service's log file, rotated by size.
#[derive(Debug)]
pub struct RotatingLog {
    path: PathBuf,
    max_bytes: u64,
    keep: u32,
    file: File,
    size: u64,
}

impl RotatingLog {
    /// Opens `path` for appending (rotating it first when it is already full).
    pub fn open(path: &Path, max_bytes: u64, keep: u32) -> std::io::Result<Self> {
        let mut log = Self {
            path: path.to_path_buf(),
            max_bytes,
            keep,
            file: append(path)?,
            size: 0,
        };
        log.size = log.file.metadata()?.len();
        if log.size >= max_bytes {
            log.rotate()?;
        }
        Ok(log)
    }

    /// Appends `line` (which ends with a newline, or gets one), rotating first when it would not fit.
    pub fn write_line(&mut self, line: &[u8]) -> std::io::Result<()> {
        let extra = u64::from(!line.ends_with(b"\n"));
        let len = line.len() as u64 + extra;
        if self.size > 0 && self.size + len > self.max_bytes {
            self.rotate()?;
        }
        self.file.write_all(line)?;
        if extra == 1 {
            self.file.write_all(b"\n")?;
        }
        self.size += len;
        Ok(())
    }

    /// `NAME.log.(k)` → `NAME.log.(k+1)` for the kept ones (the oldest dropped), `NAME.log` →
    /// `NAME.log.1`, and a new empty `NAME.log`.
    fn rotate(&mut self) -> std::io::Result<()> {
        let numbered = |k: u32| {
            let mut name = self.path.clone().into_os_string();
            name.push(format!(".{k}"));
            PathBuf::from(name)
        };
        if self.keep == 0 {
            self.file = File::create(&self.path)?;
        } else {
            let _ = std::fs::remove_file(numbered(self.keep));
            for k in (1..self.keep).rev() {
                let from = numbered(k);
                if from.exists() {
                    std::fs::rename(&from, numbered(k + 1))?;
                }
            }
            std::fs::rename(&self.path, numbered(1))?;
            self.file = append(&self.path)?;
        }
        self.size = 0;
        Ok(())
    }
}

fn append(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// A log shared by a child's two output streams.
pub type SharedLog = Arc<Mutex<RotatingLog>>;

/// Copies `stream` into `log` line by line until it ends (the child exited and closed it).
pub fn copy_lines<R>(stream: R, log: SharedLog) -> JoinHandle<()>
where
    R: AsyncRead + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        let mut reader = BufReader::new(stream);
        let mut line = Vec::new();
        loop {
            line.clear();
            match (&mut reader)
                .take(MAX_LINE as u64)
                .read_until(b'\n', &mut line)
                .await
            {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    if let Ok(mut log) = log.lock() {
                        // A full disk loses lines, not the service: nothing to do but go on.
                        let _ = log.write_line(&line);
                    }
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(path: &Path) -> String {
        std::fs::read_to_string(path).unwrap_or_default()
    }

    #[test]
    fn appends_across_opens_and_rotates_at_the_size_keeping_the_newest() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("svc.log");
        let mut log = RotatingLog::open(&path, 100, 2).unwrap();
        log.write_line(b"first run\n").unwrap();
        drop(log);
        let mut log = RotatingLog::open(&path, 100, 2).unwrap();
        log.write_line(b"second run").unwrap();
        assert_eq!(read(&path), "first run\nsecond run\n");
        // 40-byte lines: two fit in 100 bytes, a third rotates (the first rotation also takes the 21
        // bytes of the two runs and 'a').
        let line = |c: char| format!("{}\n", c.to_string().repeat(39));
        for c in ['a', 'b', 'c', 'd', 'e', 'f', 'g'] {
            log.write_line(line(c).as_bytes()).unwrap();
        }
        let rotated = |k| dir.path().join(format!("svc.log.{k}"));
        assert_eq!(read(&path), format!("{}{}", line('f'), line('g')));
        assert_eq!(read(&rotated(1)), format!("{}{}", line('d'), line('e')));
        assert_eq!(read(&rotated(2)), format!("{}{}", line('b'), line('c')));
        assert!(!rotated(3).exists(), "only 2 are kept");
        drop(log);
        // Reopened full: rotated before the first line of the new run.
        std::fs::write(&path, "x".repeat(150)).unwrap();
        let mut log = RotatingLog::open(&path, 100, 2).unwrap();
        log.write_line(b"third run\n").unwrap();
        assert_eq!(read(&path), "third run\n");
        assert_eq!(read(&rotated(1)), "x".repeat(150));
        assert_eq!(read(&rotated(2)), format!("{}{}", line('d'), line('e')));
    }

    #[test]
    fn keeping_none_starts_the_file_anew() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("svc.log");
        let mut log = RotatingLog::open(&path, 10, 0).unwrap();
        log.write_line(b"0123456789\n").unwrap();
        log.write_line(b"abc\n").unwrap();
        assert_eq!(read(&path), "abc\n");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[tokio::test]
    async fn a_childs_two_streams_land_in_one_log_whole_lines_and_a_runaway_line_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("svc.log");
        let log: SharedLog = Arc::new(Mutex::new(RotatingLog::open(&path, 1 << 30, 1).unwrap()));
        let mut child = tokio::process::Command::new("sh")
            .args([
                "-c",
                "echo out; echo err >&2; head -c 200000 /dev/zero | tr '\\0' x; echo",
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let copies = [
            copy_lines(child.stdout.take().unwrap(), log.clone()),
            copy_lines(child.stderr.take().unwrap(), log.clone()),
        ];
        child.wait().await.unwrap();
        for copy in copies {
            copy.await.unwrap();
        }
        let text = read(&path);
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines.contains(&"out") && lines.contains(&"err"),
            "{lines:?}"
        );
        assert!(
            lines.iter().all(|l| l.len() <= MAX_LINE),
            "no line over the cap"
        );
        assert_eq!(
            text.matches('x').count(),
            200_000,
            "a long line is cut, not lost"
        );
    }
}
