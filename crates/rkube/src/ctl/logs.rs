//! `rkube cluster logs NAME [COMPONENT] [-f]`: one component's log as written, or every
//! component's with each line prefixed by its name (`apiserver | …`, as compose prints them);
//! `-f` follows new lines until interrupted or the cluster is deleted.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::bail;

use super::home::Home;

/// The components that have logs, in start order.
fn components(home: &Home) -> Vec<String> {
    let order = |n: &str| match n {
        "etcd" | "store" => (0, 0),
        "apiserver" => (1, 0),
        "controller-manager" => (2, 0),
        "scheduler" => (2, 1),
        n => (
            3,
            n.strip_prefix("node-")
                .and_then(|i| i.parse::<usize>().ok())
                .unwrap_or(usize::MAX),
        ),
    };
    let mut names = super::home::stems(&home.logs(), ".log");
    names.sort_by_key(|n| (order(n), n.clone()));
    names
}

struct Tail {
    prefix: Option<String>,
    path: PathBuf,
    offset: u64,
    partial: Vec<u8>,
}

impl Tail {
    /// Writes what was appended since the last call, 64 KiB at a time (logs are never read
    /// whole); with a prefix, a line still being written waits for its end.
    fn pump(&mut self, out: &mut impl Write) -> std::io::Result<()> {
        let Ok(mut f) = std::fs::File::open(&self.path) else {
            return Ok(());
        };
        if f.metadata()?.len() < self.offset {
            // Truncated: start over.
            self.offset = 0;
        }
        f.seek(SeekFrom::Start(self.offset))?;
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let n = f.read(&mut buf)?;
            if n == 0 {
                return Ok(());
            }
            self.offset += n as u64;
            let Some(prefix) = &self.prefix else {
                out.write_all(&buf[..n])?;
                continue;
            };
            self.partial.extend_from_slice(&buf[..n]);
            let mut start = 0;
            while let Some(end) = self.partial[start..].iter().position(|&b| b == b'\n') {
                out.write_all(prefix.as_bytes())?;
                out.write_all(&self.partial[start..=start + end])?;
                start += end + 1;
            }
            self.partial.drain(..start);
        }
    }

    /// A last line without its newline (when not following).
    fn finish(&mut self, out: &mut impl Write) -> std::io::Result<()> {
        if let (Some(prefix), false) = (&self.prefix, self.partial.is_empty()) {
            out.write_all(prefix.as_bytes())?;
            out.write_all(&self.partial)?;
            out.write_all(b"\n")?;
            self.partial.clear();
        }
        Ok(())
    }
}

pub fn logs(name: &str, component: Option<&str>, follow: bool) -> anyhow::Result<()> {
    let home = Home::of(name)?;
    home.load()?;
    let all = components(&home);
    let chosen: Vec<String> = match component {
        Some(c) if all.iter().any(|n| n == c) => vec![c.to_string()],
        Some(c) => bail!(
            "cluster {name:?} has no component {c:?}; it has: {}",
            all.join(", ")
        ),
        None => all,
    };
    let width = chosen.iter().map(String::len).max().unwrap_or(0);
    let mut tails: Vec<Tail> = chosen
        .iter()
        .map(|c| Tail {
            prefix: component.is_none().then(|| format!("{c:<width$} | ")),
            path: home.log(c),
            offset: 0,
            partial: Vec::new(),
        })
        .collect();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    loop {
        for t in &mut tails {
            if let Err(e) = t.pump(&mut out) {
                if e.kind() == std::io::ErrorKind::BrokenPipe {
                    return Ok(());
                }
                return Err(e.into());
            }
        }
        if !follow || !home.exists() {
            for t in &mut tails {
                t.finish(&mut out)?;
            }
            out.flush()?;
            return Ok(());
        }
        out.flush()?;
        std::thread::sleep(Duration::from_millis(200));
    }
}
