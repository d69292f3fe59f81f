//! The cluster's processes at the OS level: started detached (a process group of their own,
//! stdin closed, output appended to `logs/<name>.log`, the pid and its start time in
//! `run/<name>.pid`), found alive only while `/proc/<pid>/stat` shows that start time and no
//! zombie (a recycled pid is never taken for ours), and stopped with SIGTERM, then SIGKILL
//! after a grace period.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;

use super::home::Home;
use super::plan::Proc;

/// Starts `p` detached; its pid is written to its pid file.
pub fn spawn(home: &Home, p: &Proc) -> anyhow::Result<u32> {
    let log_path = home.log(&p.name);
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .with_context(|| format!("open {}", log_path.display()))?;
    let child = Command::new(&p.program)
        .args(&p.args)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        // Its own process group: a terminal's Ctrl-C reaches whoever is in the foreground,
        // never the cluster.
        .process_group(0)
        .spawn()
        .with_context(|| format!("start {} ({})", p.name, p.program.display()))?;
    let pid = child.id();
    // Not waited on: the process outlives this command (and is reaped by init once it ends).
    drop(child);
    let started = start_time(pid).context("read the new process's start time")?;
    std::fs::write(home.pid_file(&p.name), format!("{pid} {started}\n"))?;
    Ok(pid)
}

/// The pid in `name`'s pid file, if that process is alive and ours.
pub fn running(home: &Home, name: &str) -> Option<u32> {
    let (pid, started) = read_pid_file(&home.pid_file(name))?;
    is_ours(pid, started).then_some(pid)
}

fn read_pid_file(path: &Path) -> Option<(u32, u64)> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut it = text.split_whitespace();
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

/// `pid`'s start time (clock ticks since boot) if it is alive and not a zombie.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid …`: comm may hold spaces and parentheses, so fields are
    // counted after the last ')'; starttime is the 22nd field, the 20th after comm.
    let fields: Vec<&str> = stat
        .get(stat.rfind(')')? + 1..)?
        .split_whitespace()
        .collect();
    if matches!(fields.first(), Some(&"Z") | Some(&"X") | None) {
        return None;
    }
    fields.get(19)?.parse().ok()
}

/// `pid` is alive and is the process that started at `started` (not a recycled pid).
pub fn is_ours(pid: u32, started: u64) -> bool {
    start_time(pid) == Some(started)
}

fn signal(pid: u32, sig: rustix::process::Signal) {
    if let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process(pid, sig);
    }
}

/// Sends SIGTERM to each of `names` that runs, waits up to `grace` for all of them, SIGKILLs
/// the rest and removes their pid files. Returns the names that had to be killed.
pub fn stop(home: &Home, names: &[String], grace: Duration) -> Vec<String> {
    let pids: Vec<(String, u32, u64)> = names
        .iter()
        .filter_map(|n| {
            let (pid, started) = read_pid_file(&home.pid_file(n))?;
            is_ours(pid, started).then(|| (n.clone(), pid, started))
        })
        .collect();
    for (_, pid, _) in &pids {
        signal(*pid, rustix::process::Signal::TERM);
    }
    let deadline = Instant::now() + grace;
    let mut left = pids;
    while !left.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        left.retain(|(_, pid, started)| is_ours(*pid, *started));
    }
    let killed: Vec<String> = left.iter().map(|(n, _, _)| n.clone()).collect();
    for (_, pid, _) in &left {
        signal(*pid, rustix::process::Signal::KILL);
    }
    // SIGKILL is not refused; the process is gone once the kernel reaps it, which takes
    // milliseconds: wait a little so ports are free when this returns.
    let deadline = Instant::now() + Duration::from_secs(5);
    while left.iter().any(|(_, pid, started)| is_ours(*pid, *started)) && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    left.retain(|(_, pid, started)| is_ours(*pid, *started));
    // Pid files go with their processes; one that survived SIGKILL stays tracked.
    for n in names
        .iter()
        .filter(|n| !left.iter().any(|(l, _, _)| l == *n))
    {
        let _ = std::fs::remove_file(home.pid_file(n));
    }
    killed
}

/// The last `n` lines of `name`'s log (for an error message).
pub fn log_tail(home: &Home, name: &str, n: usize) -> String {
    let text = std::fs::read(home.log(name)).unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_is_known_by_its_pid_and_start_time() {
        let me = std::process::id();
        let started = start_time(me).expect("this process runs");
        assert!(is_ours(me, started));
        assert!(
            !is_ours(me, started + 1),
            "a recycled pid starts at another time"
        );
        assert!(!is_ours(u32::MAX - 1, started));
    }

    #[test]
    fn a_stopped_process_is_gone_and_its_pid_file_removed() {
        let t = tempfile::tempdir().unwrap();
        let home = Home {
            dir: t.path().join("c"),
        };
        home.create_dirs().unwrap();
        let p = Proc {
            name: "sleeper".into(),
            stage: super::super::plan::Stage::Nodes,
            program: "sh".into(),
            args: vec!["-c".into(), "sleep 30".into()],
            ready: super::super::plan::Ready::Listening(0),
        };
        let pid = spawn(&home, &p).unwrap();
        assert_eq!(running(&home, "sleeper"), Some(pid));
        let killed = stop(&home, &["sleeper".into()], Duration::from_secs(5));
        assert!(killed.is_empty(), "sh ends on SIGTERM");
        assert_eq!(running(&home, "sleeper"), None);
        assert!(!home.pid_file("sleeper").exists());
    }
}
