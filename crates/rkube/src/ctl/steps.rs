//! Progress as checkmarked steps on stderr, as kind prints them: `• step …` while it runs (on
//! a terminal), then ` ✓ step` or ` ✗ step`.

use std::io::{IsTerminal, Write};
use std::time::Instant;

pub struct Steps {
    tty: bool,
    quiet: bool,
}

/// One step in progress; [`Step::done`] or [`Step::fail`] closes it.
pub struct Step<'a> {
    steps: &'a Steps,
    what: String,
    began: Instant,
}

impl Steps {
    pub fn new(quiet: bool) -> Steps {
        Steps {
            tty: std::io::stderr().is_terminal(),
            quiet,
        }
    }

    pub fn say(&self, line: &str) {
        if !self.quiet {
            eprintln!("{line}");
        }
    }

    pub fn start(&self, what: impl Into<String>) -> Step<'_> {
        let what = what.into();
        if self.tty && !self.quiet {
            eprint!(" • {what} …");
            let _ = std::io::stderr().flush();
        }
        Step {
            steps: self,
            what,
            began: Instant::now(),
        }
    }
}

impl Step<'_> {
    fn close(self, mark: &str, colour: &str, note: Option<&str>) {
        if self.steps.quiet {
            return;
        }
        let ms = self.began.elapsed().as_millis();
        let note = note.map(|n| format!(" ({n})")).unwrap_or_default();
        if self.steps.tty {
            eprintln!(
                "\r\x1b[2K \x1b[{colour}m{mark}\x1b[0m {}{note} \x1b[2m{ms} ms\x1b[0m",
                self.what
            );
        } else {
            eprintln!(" {mark} {}{note} {ms} ms", self.what);
        }
    }

    pub fn done(self) {
        self.close("✓", "32", None);
    }

    pub fn done_with(self, note: &str) {
        self.close("✓", "32", Some(note));
    }

    pub fn fail(self) {
        self.close("✗", "31", None);
    }
}
