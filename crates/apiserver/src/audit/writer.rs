//! The audit log file: JSON lines appended by one background thread. Requests only push a
//! line into a shared buffer (never blocking on I/O, never dropping); the thread drains it
//! every few milliseconds, so a busy server pays no thread wake-up per event. Rotation: once
//! the file would pass `--audit-log-maxsize` MB it is renamed `<name>-<time>.<ext>` and a new
//! one started; only `--audit-log-maxbackup` old files are kept (0 = all). `close` drains and
//! flushes everything queued.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often the writer thread drains the buffer.
const DRAIN_EVERY: Duration = Duration::from_millis(10);

pub struct Writer {
    lines: Arc<Mutex<Vec<Vec<u8>>>>,
    stop: Arc<AtomicBool>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

#[derive(Clone, Debug)]
pub struct Rotation {
    /// Bytes; 0 = never rotate.
    pub max_size: u64,
    /// Old files kept; 0 = all.
    pub max_backup: usize,
}

impl Writer {
    /// Opens (appending) `path`; fails when it cannot be created.
    pub fn open(path: &Path, rotation: Rotation) -> std::io::Result<Self> {
        let file = open_append(path)?;
        let size = file.metadata()?.len();
        let lines: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (l, st, path) = (lines.clone(), stop.clone(), path.to_path_buf());
        let thread = std::thread::Builder::new()
            .name("audit-log".into())
            .spawn(move || write_loop(path, file, size, rotation, l, st))?;
        Ok(Writer {
            lines,
            stop,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Queues one line (a newline is added).
    pub fn write(&self, mut line: Vec<u8>) {
        line.push(b'\n');
        self.lines.lock().unwrap().push(line);
    }

    /// Writes out everything queued and stops the thread.
    pub fn close(&self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.lock().unwrap().take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

fn open_append(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

fn write_loop(
    path: PathBuf,
    file: File,
    mut size: u64,
    rotation: Rotation,
    lines: Arc<Mutex<Vec<Vec<u8>>>>,
    stop: Arc<AtomicBool>,
) {
    let mut out = BufWriter::new(file);
    loop {
        let stopping = stop.load(Ordering::SeqCst);
        let batch = std::mem::take(&mut *lines.lock().unwrap());
        for line in batch {
            if rotation.max_size > 0 && size > 0 && size + line.len() as u64 > rotation.max_size {
                let _ = out.flush();
                match rotate(&path, &rotation) {
                    Ok(f) => {
                        out = BufWriter::new(f);
                        size = 0;
                    }
                    Err(e) => {
                        tracing::error!(error = %e, path = %path.display(), "audit log rotation failed")
                    }
                }
            }
            if let Err(e) = out.write_all(&line) {
                tracing::error!(error = %e, path = %path.display(), "audit log write failed");
            }
            size += line.len() as u64;
        }
        let _ = out.flush();
        if stopping {
            return;
        }
        std::thread::park_timeout(DRAIN_EVERY);
    }
}

/// Renames the current file to a timestamped backup, prunes old backups, opens a fresh file.
fn rotate(path: &Path, rotation: &Rotation) -> std::io::Result<File> {
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("audit");
    let ext = path.extension().and_then(|s| s.to_str()).unwrap_or("log");
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let stamp = rkube_api::meta::now_rfc3339_micros().replace(':', "-");
    std::fs::rename(path, dir.join(format!("{stem}-{stamp}.{ext}")))?;
    if rotation.max_backup > 0 {
        let prefix = format!("{stem}-");
        let suffix = format!(".{ext}");
        let mut backups: Vec<PathBuf> = std::fs::read_dir(dir)?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(&suffix))
            })
            .collect();
        backups.sort();
        let extra = backups.len().saturating_sub(rotation.max_backup);
        for old in &backups[..extra] {
            let _ = std::fs::remove_file(old);
        }
    }
    open_append(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotates_by_size_keeps_max_backup_and_loses_nothing_on_close() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let w = Writer::open(
            &path,
            Rotation {
                max_size: 1000,
                max_backup: 2,
            },
        )
        .unwrap();
        for i in 0..100 {
            w.write(format!("{{\"line\":{i:04},\"pad\":\"{}\"}}", "x".repeat(80)).into_bytes());
        }
        w.close();
        let mut files: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        files.sort();
        assert_eq!(files.len(), 3, "the current file and 2 backups: {files:?}");
        assert!(files
            .iter()
            .all(|f| f == "audit.log" || (f.starts_with("audit-") && f.ends_with(".log"))));
        for f in &files {
            assert!(
                std::fs::metadata(dir.path().join(f)).unwrap().len() <= 1000,
                "{f}"
            );
        }
        // The newest lines are all there, in order, up to the last one.
        let current = std::fs::read_to_string(&path).unwrap();
        assert!(current
            .trim_end()
            .ends_with(&format!("\"pad\":\"{}\"}}", "x".repeat(80))));
        assert!(current.contains("\"line\":0099"));
    }
}
