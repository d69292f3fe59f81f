//! The simulated shell that answers `kubectl exec` (pure: what a command prints, how long it
//! sleeps, how it exits, against a [`View`] of the container). Commands: `env`/`printenv`,
//! `hostname`, `cat`, `ls`, `echo`, `true`, `false`, `sleep`, `date`, `id`, `whoami`, `pwd`,
//! `cd`, `uname`, `exit`, `tar cf -` (for `kubectl cp`), and `sh`/`bash -c` scripts with `;`,
//! newlines, `&&`, `||`, quoting and `$VAR`; anything else exits 127, "command not found".
//! Pipelines into `grep`, `head`, `tail`, `wc`, `sort`, `uniq` and `cat`; redirections are
//! refused.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::chrono::{DateTime, Utc};

/// The container as its processes see it.
#[derive(Clone, Debug, Default)]
pub struct View {
    /// In order, as the runtime sets them (later duplicates win).
    pub env: Vec<(String, String)>,
    /// Absolute path → content.
    pub files: BTreeMap<String, Vec<u8>>,
    /// Absolute directories that exist even when empty (mount points, the usual ones).
    pub dirs: BTreeSet<String>,
    pub hostname: String,
    pub uid: i64,
    pub gid: i64,
    pub workdir: String,
}

/// The directories every image has.
pub const STANDARD_DIRS: [&str; 14] = [
    "/",
    "/bin",
    "/dev",
    "/etc",
    "/home",
    "/proc",
    "/root",
    "/run",
    "/sys",
    "/tmp",
    "/usr",
    "/usr/bin",
    "/usr/local",
    "/var",
];

impl View {
    fn var(&self, name: &str) -> Option<&str> {
        self.env
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn is_dir(&self, p: &str) -> bool {
        let prefix = if p == "/" {
            "/".to_string()
        } else {
            format!("{p}/")
        };
        self.dirs.contains(p)
            || self
                .files
                .range(prefix.clone()..)
                .next()
                .is_some_and(|(k, _)| k.starts_with(&prefix))
            || self
                .dirs
                .range(prefix.clone()..)
                .next()
                .is_some_and(|k| k.starts_with(&prefix))
    }

    /// The names directly inside directory `p`.
    fn entries(&self, p: &str) -> Vec<String> {
        let prefix = if p == "/" {
            "/".to_string()
        } else {
            format!("{p}/")
        };
        let child = |k: &String| -> Option<String> {
            let rest = k.strip_prefix(&prefix)?;
            let name = rest.split('/').next()?;
            (!name.is_empty()).then(|| name.to_string())
        };
        let names: BTreeSet<String> = self
            .files
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .filter_map(|(k, _)| child(k))
            .chain(
                self.dirs
                    .range(prefix.clone()..)
                    .take_while(|k| k.starts_with(&prefix))
                    .filter_map(child),
            )
            .collect();
        names.into_iter().collect()
    }
}

/// One effect of a command, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    Out(Vec<u8>),
    Err(Vec<u8>),
    Sleep(Duration),
}

/// What `exec` of an argv does.
#[derive(Debug, PartialEq)]
pub enum Plan {
    /// Effects, then the exit code.
    Run(Vec<Action>, i32),
    /// A shell without a script: reads commands from stdin (`Shell::line`).
    Interactive,
}

const SHELLS: [&str; 5] = ["sh", "bash", "ash", "dash", "zsh"];
const BIN_DIRS: [&str; 6] = [
    "/bin",
    "/usr/bin",
    "/sbin",
    "/usr/sbin",
    "/usr/local/bin",
    "/usr/local/sbin",
];
/// How deep `sh -c 'sh -c …'` may nest.
const MAX_DEPTH: usize = 8;
/// The longest `sleep`.
const MAX_SLEEP: Duration = Duration::from_secs(24 * 3600);
/// The most one command line (or one `exec`) may print: output is built before it is sent.
const MAX_OUTPUT: usize = 16 * 1024 * 1024;
/// The longest a command's expanded words may be together (the kernel's `ARG_MAX` is 2 MiB).
const MAX_ARGS: usize = 1024 * 1024;

fn size(out: &[Action]) -> usize {
    out.iter()
        .map(|a| match a {
            Action::Out(b) | Action::Err(b) => b.len(),
            Action::Sleep(_) => 0,
        })
        .sum()
}

/// A program's name: `/bin/ls` → `ls`; `None` for a path outside the usual bin directories.
fn program(arg0: &str) -> Option<&str> {
    match arg0.rsplit_once('/') {
        None => Some(arg0),
        Some((dir, name)) => BIN_DIRS.contains(&dir).then_some(name),
    }
}

/// The shell a container's process is, if it is one reading its stdin: its command and
/// args are a single `sh`/`bash`/`ash` (by path too), or empty on an image whose default
/// command is a shell (busybox, alpine, ubuntu, debian). `kubectl run -it … -- sh`.
pub fn container_shell(argv: &[&str], image: &str) -> Option<String> {
    let base = image.rsplit('/').next().unwrap_or(image);
    let first = match argv {
        [a] => a.rsplit('/').next().unwrap_or(a),
        [_, ..] => return None,
        [] if ["busybox", "alpine", "ubuntu", "debian"]
            .iter()
            .any(|i| base.starts_with(i)) =>
        {
            "sh"
        }
        [] => return None,
    };
    ["sh", "bash", "ash"]
        .contains(&first)
        .then(|| first.to_string())
}

/// A shell session: working directory, last exit code, whether `exit` ran.
pub struct Shell<'a> {
    view: &'a View,
    pub name: String,
    pub cwd: String,
    pub last: i32,
    pub exited: bool,
    now: DateTime<Utc>,
}

#[derive(Debug, PartialEq)]
enum Tok {
    Word(String),
    /// `|`: a pipeline's next stage (within one command).
    Pipe,
    And,
    Or,
    Semi,
    Unsupported(&'static str),
}

impl<'a> Shell<'a> {
    pub fn new(view: &'a View, name: &str, now: DateTime<Utc>) -> Self {
        let cwd = if view.workdir.starts_with('/') {
            view.workdir.clone()
        } else {
            "/".into()
        };
        Shell {
            view,
            name: name.into(),
            cwd,
            last: 0,
            exited: false,
            now,
        }
    }

    /// The clock `date` reads, moved on between an interactive shell's lines.
    pub fn now_is(&mut self, now: DateTime<Utc>) {
        self.now = now;
    }

    /// The prompt an interactive shell shows.
    pub fn prompt(&self) -> String {
        format!(
            "{} {} ",
            self.cwd,
            if self.view.uid == 0 { "#" } else { "$" }
        )
    }

    /// `argv` run directly, as the runtime execs it.
    pub fn exec(&mut self, argv: &[String]) -> Plan {
        let Some(arg0) = argv.first() else {
            return Plan::Run(vec![Action::Err(b"no command given\n".to_vec())], 126);
        };
        if program(arg0).is_some_and(|p| SHELLS.contains(&p)) && argv.len() == 1 {
            self.name = program(arg0).unwrap_or("sh").to_string();
            return Plan::Interactive;
        }
        let mut out = Vec::new();
        let known = program(arg0).is_some_and(|p| SHELLS.contains(&p) || is_builtin(p));
        if !known {
            let msg = format!(
                "OCI runtime exec failed: exec failed: unable to start container process: exec: \"{arg0}\": executable file not found in $PATH: unknown\n"
            );
            return Plan::Run(vec![Action::Err(msg.into_bytes())], 127);
        }
        let code = self.command(argv, &mut out, 0);
        Plan::Run(out, code)
    }

    /// One line of script, as typed into an interactive shell (or given to `-c`).
    pub fn line(&mut self, text: &str) -> Vec<Action> {
        let mut out = Vec::new();
        self.script(text, &mut out, 0);
        out
    }

    fn script(&mut self, text: &str, out: &mut Vec<Action>, depth: usize) {
        let mut rest = text;
        let mut skip = false;
        while !self.exited && !rest.trim().is_empty() {
            // One command at a time: `$?` and variables expand as it comes to run.
            let (toks, used) = match self.tokenize(rest) {
                Ok(t) => t,
                Err(e) => {
                    out.push(Action::Err(format!("{}: {e}\n", self.name).into_bytes()));
                    self.last = 2;
                    return;
                }
            };
            rest = &rest[used..];
            if toks
                .iter()
                .map(|t| match t {
                    Tok::Word(w) => w.len(),
                    _ => 0,
                })
                .sum::<usize>()
                > MAX_ARGS
            {
                out.push(Action::Err(
                    format!("{}: Argument list too long\n", self.name).into_bytes(),
                ));
                self.last = 126;
                continue;
            }
            if size(out) > MAX_OUTPUT {
                out.push(Action::Err(
                    b"output limit of rkube's simulated shell reached\n".to_vec(),
                ));
                self.last = 1;
                self.exited = true;
                return;
            }
            let mut words: Vec<String> = Vec::new();
            let mut stages: Vec<Vec<String>> = Vec::new();
            let mut sep = None;
            for t in toks {
                match t {
                    Tok::Word(w) => words.push(w),
                    Tok::Pipe => stages.push(std::mem::take(&mut words)),
                    Tok::Unsupported(what) => {
                        out.push(Action::Err(
                            format!(
                                "{}: {what} are not supported by rkube's simulated shell\n",
                                self.name
                            )
                            .into_bytes(),
                        ));
                        self.last = 2;
                        return;
                    }
                    t => sep = Some(t),
                }
            }
            if !stages.is_empty() && !skip {
                stages.push(words);
                self.last = self.pipeline(&stages, out, depth);
            } else if !words.is_empty() && !skip {
                self.last = self.command(&words, out, depth);
            }
            skip = match sep {
                Some(Tok::And) => self.last != 0,
                Some(Tok::Or) => self.last == 0,
                _ => false,
            };
        }
    }

    /// A pipeline: the first command runs as any, its output goes through the filters
    /// after it (`grep [-v] [-i] [-c] PATTERN` by substring, `^`/`$` anchored, `head`/`tail [-n N]`,
    /// `wc [-l|-w|-c]`, `sort [-r]`, `uniq`, `cat`); its code is the last stage's.
    fn pipeline(&mut self, stages: &[Vec<String>], out: &mut Vec<Action>, depth: usize) -> i32 {
        let syntax = |out: &mut Vec<Action>, name: &str| {
            out.push(Action::Err(
                format!("{name}: syntax error near unexpected token `|'\n").into_bytes(),
            ));
            2
        };
        let Some(head) = stages.first().filter(|w| !w.is_empty()) else {
            return syntax(out, &self.name);
        };
        let mut first = Vec::new();
        self.command(head, &mut first, depth);
        let mut data = Vec::new();
        for a in first {
            match a {
                Action::Out(b) => data.extend(b),
                other => out.push(other),
            }
        }
        let mut code = 0;
        for stage in &stages[1..] {
            let Some((name, args)) = stage.split_first() else {
                return syntax(out, &self.name);
            };
            match filter(program(name).unwrap_or(name), args, &data) {
                Ok((next, c)) => {
                    data = next;
                    code = c;
                }
                Err((msg, c)) => {
                    out.push(Action::Err(format!("{}: {msg}\n", self.name).into_bytes()));
                    data.clear();
                    code = c;
                }
            }
        }
        out.push(Action::Out(data));
        code
    }

    /// The next command's words and the operator after it (quotes removed, `$NAME`,
    /// `${NAME}`, `$?` expanded), and how much of `text` they took.
    fn tokenize(&self, text: &str) -> Result<(Vec<Tok>, usize), String> {
        let mut toks = Vec::new();
        let mut chars = text.char_indices().peekable();
        let mut word = String::new();
        let mut in_word = false;
        let push = |toks: &mut Vec<Tok>, word: &mut String, in_word: &mut bool| {
            if *in_word {
                toks.push(Tok::Word(std::mem::take(word)));
                *in_word = false;
            }
        };
        while let Some((i, c)) = chars.next() {
            let next_is = |chars: &mut std::iter::Peekable<std::str::CharIndices<'_>>, x: char| {
                chars.peek().is_some_and(|(_, c)| *c == x)
            };
            let sep = match c {
                ' ' | '\t' | '\r' => {
                    push(&mut toks, &mut word, &mut in_word);
                    None
                }
                // A comment runs to the end of its line.
                '#' if !in_word => {
                    while chars.next_if(|(_, c)| *c != '\n').is_some() {}
                    None
                }
                ';' | '\n' => Some((Tok::Semi, i + 1)),
                '&' if next_is(&mut chars, '&') => Some((Tok::And, i + 2)),
                '|' if next_is(&mut chars, '|') => Some((Tok::Or, i + 2)),
                '|' => {
                    push(&mut toks, &mut word, &mut in_word);
                    toks.push(Tok::Pipe);
                    None
                }
                '&' => Some((Tok::Unsupported("background jobs"), i + 1)),
                '>' | '<' => Some((Tok::Unsupported("redirections"), i + 1)),
                '`' => Some((Tok::Unsupported("command substitutions"), i + 1)),
                '\'' => {
                    in_word = true;
                    loop {
                        match chars.next() {
                            Some((_, '\'')) => break,
                            Some((_, c)) => word.push(c),
                            None => return Err("unterminated quoted string".into()),
                        }
                    }
                    None
                }
                '"' => {
                    in_word = true;
                    loop {
                        match chars.next() {
                            Some((_, '"')) => break,
                            Some((_, '\\')) => match chars.next() {
                                Some((_, c @ ('"' | '\\' | '$' | '`'))) => word.push(c),
                                Some((_, c)) => {
                                    word.push('\\');
                                    word.push(c);
                                }
                                None => return Err("unterminated quoted string".into()),
                            },
                            Some((_, '$')) => self.expand(&mut chars, &mut word),
                            Some((_, c)) => word.push(c),
                            None => return Err("unterminated quoted string".into()),
                        }
                    }
                    None
                }
                '\\' => {
                    in_word = true;
                    if let Some((_, c)) = chars.next() {
                        word.push(c);
                    }
                    None
                }
                '$' => {
                    let before = word.len();
                    self.expand(&mut chars, &mut word);
                    // An unquoted expansion to nothing is no word at all.
                    in_word |= word.len() > before;
                    None
                }
                c => {
                    in_word = true;
                    word.push(c);
                    None
                }
            };
            if let Some((tok, end)) = sep {
                push(&mut toks, &mut word, &mut in_word);
                toks.push(tok);
                return Ok((toks, end));
            }
        }
        push(&mut toks, &mut word, &mut in_word);
        Ok((toks, text.len()))
    }

    fn expand(
        &self,
        chars: &mut std::iter::Peekable<std::str::CharIndices<'_>>,
        word: &mut String,
    ) {
        match chars.peek().map(|(_, c)| *c) {
            Some('?') => {
                chars.next();
                word.push_str(&self.last.to_string());
            }
            Some('$') => {
                chars.next();
                word.push('1');
            }
            Some('{') => {
                chars.next();
                let name: String = chars
                    .by_ref()
                    .map(|(_, c)| c)
                    .take_while(|c| *c != '}')
                    .collect();
                word.push_str(self.view.var(&name).unwrap_or(""));
            }
            Some(c) if c.is_ascii_alphanumeric() || c == '_' => {
                let mut name = String::new();
                while let Some((_, c)) = chars
                    .peek()
                    .filter(|(_, c)| c.is_ascii_alphanumeric() || *c == '_')
                {
                    name.push(*c);
                    chars.next();
                }
                word.push_str(self.view.var(&name).unwrap_or(""));
            }
            _ => word.push('$'),
        }
    }

    fn path(&self, p: &str) -> String {
        let joined = if p.starts_with('/') {
            p.to_string()
        } else {
            format!("{}/{p}", self.cwd)
        };
        let mut parts: Vec<&str> = Vec::new();
        for seg in joined.split('/') {
            match seg {
                "" | "." => {}
                ".." => {
                    parts.pop();
                }
                s => parts.push(s),
            }
        }
        format!("/{}", parts.join("/"))
    }

    /// Runs one simple command; its exit code.
    fn command(&mut self, argv: &[String], out: &mut Vec<Action>, depth: usize) -> i32 {
        let err = |out: &mut Vec<Action>, s: String| out.push(Action::Err(s.into_bytes()));
        let say = |out: &mut Vec<Action>, s: String| out.push(Action::Out(s.into_bytes()));
        let args = &argv[1..];
        let Some(name) = program(&argv[0]) else {
            err(out, format!("{}: {}: not found\n", self.name, argv[0]));
            return 127;
        };
        match name {
            s if SHELLS.contains(&s) => match args {
                [c, script, ..] if c == "-c" => {
                    if depth >= MAX_DEPTH {
                        err(out, format!("{s}: too deeply nested\n"));
                        return 2;
                    }
                    let mut inner = Shell::new(self.view, s, self.now);
                    inner.cwd = self.cwd.clone();
                    inner.script(script, out, depth + 1);
                    inner.last
                }
                [] => 0,
                [file, ..] => {
                    err(
                        out,
                        format!("{s}: can't open '{file}': No such file or directory\n"),
                    );
                    127
                }
            },
            "true" | ":" => 0,
            "false" => 1,
            "exit" => {
                self.exited = true;
                args.first()
                    .map(|a| a.parse::<i64>().map_or(2, |n| (n & 0xff) as i32))
                    .unwrap_or(self.last)
            }
            "echo" => {
                let mut newline = true;
                let mut escapes = false;
                let mut rest = args;
                while let Some(flag) = rest
                    .first()
                    .filter(|a| matches!(a.as_str(), "-n" | "-e" | "-ne" | "-en"))
                {
                    newline &= !flag.contains('n');
                    escapes |= flag.contains('e');
                    rest = &rest[1..];
                }
                let mut text = rest.join(" ");
                if escapes {
                    text = text.replace("\\n", "\n").replace("\\t", "\t");
                }
                if newline {
                    text.push('\n');
                }
                say(out, text);
                0
            }
            "env" => {
                let text: String = self.env().map(|(k, v)| format!("{k}={v}\n")).collect();
                say(out, text);
                0
            }
            "printenv" => {
                if args.is_empty() {
                    return self.command(&["env".to_string()], out, depth);
                }
                let mut code = 0;
                for a in args {
                    match self.view.var(a) {
                        Some(v) => say(out, format!("{v}\n")),
                        None => code = 1,
                    }
                }
                code
            }
            "hostname" => {
                say(out, format!("{}\n", self.view.hostname));
                0
            }
            "pwd" => {
                say(out, format!("{}\n", self.cwd));
                0
            }
            "cd" => {
                let target = self.path(args.first().map_or("/root", |s| s.as_str()));
                if self.view.is_dir(&target) {
                    self.cwd = target;
                    0
                } else {
                    let shown = args.first().map_or("", |s| s.as_str());
                    err(
                        out,
                        format!(
                            "{}: cd: can't cd to {shown}: No such file or directory\n",
                            self.name
                        ),
                    );
                    2
                }
            }
            "cat" => {
                let mut code = 0;
                let mut budget = MAX_OUTPUT.saturating_sub(size(out));
                for a in args {
                    let p = self.path(a);
                    match self.view.files.get(&p) {
                        Some(body) if body.len() > budget => {
                            err(out, "cat: write error: output limit reached\n".into());
                            return 1;
                        }
                        Some(body) => {
                            budget -= body.len();
                            out.push(Action::Out(body.clone()));
                        }
                        None if self.view.is_dir(&p) => {
                            err(out, format!("cat: {a}: Is a directory\n"));
                            code = 1;
                        }
                        None => {
                            err(out, format!("cat: {a}: No such file or directory\n"));
                            code = 1;
                        }
                    }
                }
                code
            }
            "ls" => self.ls(args, out),
            "tar" => self.tar(args, out),
            "sleep" => {
                let Some(d) = args.first().and_then(|a| duration(a)) else {
                    err(
                        out,
                        format!(
                            "sleep: invalid time interval '{}'\n",
                            args.first().map_or("", |s| s.as_str())
                        ),
                    );
                    return 1;
                };
                out.push(Action::Sleep(d.min(MAX_SLEEP)));
                0
            }
            "date" => match args.iter().find(|a| a.starts_with('+')) {
                None => {
                    say(
                        out,
                        format!("{}\n", self.now.format("%a %b %e %H:%M:%S UTC %Y")),
                    );
                    0
                }
                Some(f) => {
                    use k8s_openapi::chrono::format::{Item, StrftimeItems};
                    let items: Vec<Item<'_>> = StrftimeItems::new(&f[1..]).collect();
                    if items.iter().any(|i| matches!(i, Item::Error)) {
                        err(out, format!("date: invalid format '{f}'\n"));
                        return 1;
                    }
                    say(
                        out,
                        format!("{}\n", self.now.format_with_items(items.into_iter())),
                    );
                    0
                }
            },
            "id" => {
                let (u, g) = (self.view.uid, self.view.gid);
                let name = |n: i64| {
                    if n == 0 {
                        "(root)".to_string()
                    } else {
                        String::new()
                    }
                };
                say(
                    out,
                    format!(
                        "uid={u}{} gid={g}{} groups={g}{}\n",
                        name(u),
                        name(g),
                        name(g)
                    ),
                );
                0
            }
            "whoami" => {
                if self.view.uid == 0 {
                    say(out, "root\n".into());
                    0
                } else {
                    err(
                        out,
                        format!("whoami: cannot find name for user ID {}\n", self.view.uid),
                    );
                    1
                }
            }
            "uname" => {
                let all = args.iter().any(|a| a == "-a");
                say(
                    out,
                    if all {
                        format!(
                            "Linux {} 6.1.0-rkube #1 SMP x86_64 GNU/Linux\n",
                            self.view.hostname
                        )
                    } else {
                        "Linux\n".into()
                    },
                );
                0
            }
            other => {
                err(out, format!("{}: {other}: command not found\n", self.name));
                127
            }
        }
    }

    /// The environment with later duplicates winning, in first-seen order.
    fn env(&self) -> impl Iterator<Item = (&str, &str)> {
        let mut seen = BTreeSet::new();
        let last: Vec<(&str, &str)> = self
            .view
            .env
            .iter()
            .rev()
            .filter(|(k, _)| seen.insert(k.as_str()))
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        last.into_iter().rev()
    }

    /// `tar cf - [-C dir] [--] paths…` (what `kubectl cp` runs to copy out of a pod): a
    /// ustar archive of the files on stdout. The filesystem is read-only: extracting fails.
    fn tar(&self, args: &[String], out: &mut Vec<Action>) -> i32 {
        let err = |out: &mut Vec<Action>, s: &str| out.push(Action::Err(s.as_bytes().to_vec()));
        let Some(mode) = args.first().map(|a| a.trim_start_matches('-')) else {
            err(out, "tar: no command given\n");
            return 2;
        };
        if !mode.contains('c') {
            err(out, "tar: Read-only file system\n");
            return 2;
        }
        let mut rest = args[1..].iter().peekable();
        if mode.contains('f') && rest.next().map(String::as_str) != Some("-") {
            err(out, "tar: only an archive on stdout (f -) is supported\n");
            return 2;
        }
        let mut dir = self.cwd.clone();
        let mut names: Vec<&str> = Vec::new();
        while let Some(a) = rest.next() {
            match a.as_str() {
                "-C" => dir = rest.next().map_or(dir, |d| self.path(d)),
                "--" => names.extend(rest.by_ref().map(String::as_str)),
                n => names.push(n),
            }
        }
        let mut archive = Vec::new();
        let mut code = 0;
        let base = Shell {
            cwd: dir,
            ..Shell::new(self.view, &self.name, self.now)
        };
        for n in names {
            let root = base.path(n);
            // Member names as given, without a leading `/` (as GNU tar strips it).
            let shown = n.trim_start_matches('/').trim_end_matches('/');
            let mut members: Vec<(String, Option<&Vec<u8>>)> = Vec::new();
            if let Some(body) = self.view.files.get(&root) {
                members.push((shown.to_string(), Some(body)));
            } else if self.view.is_dir(&root) {
                members.push((format!("{shown}/"), None));
                let prefix = if root == "/" {
                    "/".to_string()
                } else {
                    format!("{root}/")
                };
                for d in self
                    .view
                    .dirs
                    .range(prefix.clone()..)
                    .take_while(|d| d.starts_with(&prefix))
                {
                    members.push((format!("{shown}/{}/", &d[prefix.len()..]), None));
                }
                for (k, v) in self
                    .view
                    .files
                    .range(prefix.clone()..)
                    .take_while(|(k, _)| k.starts_with(&prefix))
                {
                    members.push((format!("{shown}/{}", &k[prefix.len()..]), Some(v)));
                }
            } else {
                err(
                    out,
                    &format!("tar: {n}: Cannot stat: No such file or directory\n"),
                );
                code = 2;
                continue;
            }
            for (name, body) in members {
                if size(out) + archive.len() + body.map_or(0, Vec::len) > MAX_OUTPUT {
                    err(out, "tar: output limit reached\n");
                    return 2;
                }
                archive.extend(tar_header(
                    &name,
                    body.map_or(0, Vec::len),
                    self.now.timestamp(),
                ));
                if let Some(b) = body {
                    archive.extend_from_slice(b);
                    archive.resize(archive.len().div_ceil(512) * 512, 0);
                }
            }
        }
        archive.extend_from_slice(&[0u8; 1024]);
        out.push(Action::Out(archive));
        code
    }

    fn ls(&self, args: &[String], out: &mut Vec<Action>) -> i32 {
        let flags: String = args
            .iter()
            .filter(|a| a.starts_with('-'))
            .flat_map(|a| a.chars().skip(1))
            .collect();
        let long = flags.contains('l');
        let mut paths: Vec<&str> = args
            .iter()
            .filter(|a| !a.starts_with('-'))
            .map(|s| s.as_str())
            .collect();
        if paths.is_empty() {
            paths.push(".");
        }
        let mut code = 0;
        let mut text = String::new();
        let line = |name: &str, size: Option<usize>| -> String {
            if !long {
                return format!("{name}\n");
            }
            match size {
                Some(n) => format!("-rw-r--r--    1 root     root    {n:>10} {name}\n"),
                None => format!("drwxr-xr-x    2 root     root          4096 {name}\n"),
            }
        };
        for (i, a) in paths.iter().enumerate() {
            let p = self.path(a);
            if let Some(body) = self.view.files.get(&p) {
                text.push_str(&line(a, Some(body.len())));
            } else if self.view.is_dir(&p) {
                if paths.len() > 1 {
                    text.push_str(&format!("{}{a}:\n", if i > 0 { "\n" } else { "" }));
                }
                for e in self.view.entries(&p) {
                    let child = if p == "/" {
                        format!("/{e}")
                    } else {
                        format!("{p}/{e}")
                    };
                    text.push_str(&line(&e, self.view.files.get(&child).map(Vec::len)));
                }
            } else {
                out.push(Action::Err(
                    format!("ls: cannot access '{a}': No such file or directory\n").into_bytes(),
                ));
                code = 2;
            }
        }
        out.push(Action::Out(text.into_bytes()));
        code
    }
}

fn is_builtin(p: &str) -> bool {
    matches!(
        p,
        "true"
            | ":"
            | "false"
            | "exit"
            | "echo"
            | "env"
            | "printenv"
            | "hostname"
            | "pwd"
            | "cd"
            | "cat"
            | "ls"
            | "tar"
            | "sleep"
            | "date"
            | "id"
            | "whoami"
            | "uname"
    )
}

/// One filter of a pipeline over its input: (output, exit code), or (message, code).
fn filter(name: &str, args: &[String], input: &[u8]) -> Result<(Vec<u8>, i32), (String, i32)> {
    let text = String::from_utf8_lossy(input);
    let lines: Vec<&str> = text.lines().collect();
    let join = |ls: Vec<&str>| -> Vec<u8> {
        let mut s = ls.join("\n");
        if !ls.is_empty() {
            s.push('\n');
        }
        s.into_bytes()
    };
    let flags: String = args
        .iter()
        .filter(|a| {
            a.starts_with('-') && a.len() > 1 && !a[1..].starts_with(|c: char| c.is_ascii_digit())
        })
        .flat_map(|a| a.chars().skip(1))
        .collect();
    let count = |default: usize| -> usize {
        let mut it = args.iter();
        while let Some(a) = it.next() {
            if a == "-n" {
                return it.next().and_then(|n| n.parse().ok()).unwrap_or(default);
            }
            if let Some(n) = a
                .strip_prefix("-n")
                .or_else(|| a.strip_prefix('-'))
                .and_then(|n| n.parse().ok())
            {
                return n;
            }
        }
        default
    };
    match name {
        "cat" if args.is_empty() => Ok((input.to_vec(), 0)),
        "grep" => {
            let Some(pattern) = args.iter().find(|a| !a.starts_with('-')) else {
                return Err(("grep: no pattern given".into(), 2));
            };
            let ci = flags.contains('i');
            let p = if ci {
                pattern.to_lowercase()
            } else {
                pattern.clone()
            };
            // A substring, anchored by a leading `^` or a trailing `$`.
            let (start, p) = p
                .strip_prefix('^')
                .map_or((false, p.as_str()), |r| (true, r));
            let (end, p) = p.strip_suffix('$').map_or((false, p), |r| (true, r));
            let hit = |l: &str| {
                let l = if ci { l.to_lowercase() } else { l.to_string() };
                let m = match (start, end) {
                    (true, true) => l == p,
                    (true, false) => l.starts_with(p),
                    (false, true) => l.ends_with(p),
                    (false, false) => l.contains(p),
                };
                m != flags.contains('v')
            };
            let found: Vec<&str> = lines.iter().filter(|l| hit(l)).copied().collect();
            let code = i32::from(found.is_empty());
            if flags.contains('c') {
                return Ok((format!("{}\n", found.len()).into_bytes(), code));
            }
            Ok((join(found), code))
        }
        "head" => Ok((join(lines.iter().take(count(10)).copied().collect()), 0)),
        "tail" => {
            let n = count(10);
            Ok((join(lines[lines.len().saturating_sub(n)..].to_vec()), 0))
        }
        "wc" => {
            let (l, w, c) = (lines.len(), text.split_whitespace().count(), input.len());
            let shown = match () {
                _ if flags.contains('l') => l.to_string(),
                _ if flags.contains('w') => w.to_string(),
                _ if flags.contains('c') => c.to_string(),
                _ => format!("{l:>7} {w:>7} {c:>7}"),
            };
            Ok((format!("{shown}\n").into_bytes(), 0))
        }
        "sort" => {
            let mut ls = lines.clone();
            ls.sort_unstable();
            if flags.contains('r') {
                ls.reverse();
            }
            Ok((join(ls), 0))
        }
        "uniq" => {
            let mut ls = lines.clone();
            ls.dedup();
            Ok((join(ls), 0))
        }
        other => Err((format!("{other}: command not found"), 127)),
    }
}

/// A ustar header for a file of `size` bytes, or a directory (a name ending in `/`).
fn tar_header(name: &str, size: usize, mtime: i64) -> [u8; 512] {
    let mut h = [0u8; 512];
    let dir = name.ends_with('/');
    // Long names go in the prefix field (up to 155 + 100 bytes), split at a `/`; bytes, not
    // characters, so a name in any script splits without panicking.
    let bytes = name.as_bytes();
    let (prefix, short): (&[u8], &[u8]) = if bytes.len() <= 100 {
        (&[], bytes)
    } else {
        bytes
            .iter()
            .enumerate()
            .position(|(i, b)| *b == b'/' && i <= 155 && bytes.len() - i - 1 <= 100)
            .map_or((&[][..], &bytes[bytes.len() - 100..]), |i| {
                (&bytes[..i], &bytes[i + 1..])
            })
    };
    let put = |h: &mut [u8; 512], at: usize, len: usize, v: &[u8]| {
        let n = v.len().min(len);
        h[at..at + n].copy_from_slice(&v[..n]);
    };
    put(&mut h, 0, 100, short);
    put(
        &mut h,
        100,
        8,
        if dir { b"0000755\0" } else { b"0000644\0" },
    );
    put(&mut h, 108, 8, b"0000000\0");
    put(&mut h, 116, 8, b"0000000\0");
    put(&mut h, 124, 12, format!("{size:011o}\0").as_bytes());
    put(
        &mut h,
        136,
        12,
        format!("{:011o}\0", mtime.max(0)).as_bytes(),
    );
    h[156] = if dir { b'5' } else { b'0' };
    put(&mut h, 257, 8, b"ustar\x0000");
    put(&mut h, 265, 32, b"root");
    put(&mut h, 297, 32, b"root");
    put(&mut h, 345, 155, prefix);
    // The checksum is computed with its own field as spaces.
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
    put(&mut h, 148, 8, format!("{sum:06o}\0 ").as_bytes());
    h
}

/// `sleep`'s argument: seconds, or with an `s`/`m`/`h`/`d` suffix.
fn duration(a: &str) -> Option<Duration> {
    let (num, unit) = match a.char_indices().last()? {
        (i, c @ ('s' | 'm' | 'h' | 'd')) => (&a[..i], c),
        _ => (a, 's'),
    };
    let n: f64 = num
        .parse()
        .ok()
        .filter(|n: &f64| n.is_finite() && *n >= 0.0)?;
    let secs = n * match unit {
        'm' => 60.0,
        'h' => 3600.0,
        'd' => 86400.0,
        _ => 1.0,
    };
    Some(Duration::from_secs_f64(secs.min(MAX_SLEEP.as_secs_f64())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view() -> View {
        let mut v = View {
            env: vec![
                ("PATH".into(), "/usr/bin:/bin".into()),
                ("GREETING".into(), "hello".into()),
                ("GREETING".into(), "hi there".into()),
            ],
            hostname: "web-0".into(),
            workdir: "/".into(),
            ..Default::default()
        };
        v.files
            .insert("/etc/config/app.conf".into(), b"key=value\n".to_vec());
        v.files.insert("/etc/config/mode".into(), b"fast".to_vec());
        v.dirs.extend(STANDARD_DIRS.iter().map(|s| s.to_string()));
        v.dirs.insert("/data".into());
        v
    }

    fn run(v: &View, argv: &[&str]) -> (String, String, i32) {
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        let now = "2026-11-27T11:35:01Z".parse().unwrap();
        match Shell::new(v, "sh", now).exec(&argv) {
            Plan::Run(actions, code) => {
                let (mut o, mut e) = (String::new(), String::new());
                for a in actions {
                    match a {
                        Action::Out(b) => o.push_str(&String::from_utf8_lossy(&b)),
                        Action::Err(b) => e.push_str(&String::from_utf8_lossy(&b)),
                        Action::Sleep(d) => o.push_str(&format!("<sleep {}ms>", d.as_millis())),
                    }
                }
                (o, e, code)
            }
            Plan::Interactive => ("<interactive>".into(), String::new(), 0),
        }
    }

    #[test]
    fn each_command_answers_as_a_container_would() {
        let v = view();
        assert_eq!(run(&v, &["hostname"]).0, "web-0\n");
        assert_eq!(run(&v, &["/bin/echo", "a", "b"]).0, "a b\n");
        assert_eq!(run(&v, &["printenv", "GREETING"]).0, "hi there\n");
        let env = run(&v, &["env"]).0;
        assert_eq!(env, "PATH=/usr/bin:/bin\nGREETING=hi there\n");
        assert_eq!(run(&v, &["cat", "/etc/config/app.conf"]).0, "key=value\n");
        let (_, e, code) = run(&v, &["cat", "/nope"]);
        assert_eq!(
            (e.as_str(), code),
            ("cat: /nope: No such file or directory\n", 1)
        );
        assert_eq!(run(&v, &["ls", "/etc/config"]).0, "app.conf\nmode\n");
        assert!(run(&v, &["ls", "/"]).0.contains("data\ndev\netc\n"));
        assert_eq!(run(&v, &["ls", "/missing"]).2, 2);
        assert_eq!(run(&v, &["false"]).2, 1);
        assert_eq!(run(&v, &["true"]).2, 0);
        assert_eq!(run(&v, &["sleep", "1.5"]).0, "<sleep 1500ms>");
        assert_eq!(run(&v, &["date"]).0, "Fri Nov 27 11:35:01 UTC 2026\n");
        assert_eq!(run(&v, &["date", "+%Y-%m-%d"]).0, "2026-11-27\n");
        assert_eq!(run(&v, &["date", "+%Q"]).2, 1);
        assert_eq!(
            run(&v, &["id"]).0,
            "uid=0(root) gid=0(root) groups=0(root)\n"
        );
        let (_, e, code) = run(&v, &["curl", "x"]);
        assert_eq!(code, 127);
        assert!(e.contains("executable file not found in $PATH"), "{e}");
        assert_eq!(run(&v, &["sh"]).0, "<interactive>");
    }

    #[test]
    fn scripts_expand_quote_and_chain() {
        let v = view();
        let sh = |s: &str| run(&v, &["sh", "-c", s]);
        assert_eq!(
            sh("echo $GREETING; echo '$GREETING'").0,
            "hi there\n$GREETING\n"
        );
        assert_eq!(sh("echo \"${GREETING}!\" $NOPE end").0, "hi there! end\n");
        assert_eq!(sh("false && echo no || echo yes").0, "yes\n");
        assert_eq!(sh("false; echo $?").0, "1\n");
        assert_eq!(sh("echo a # note\necho b").0, "a\nb\n");
        assert_eq!(
            sh("cd /etc/config && pwd && cat mode").0,
            "/etc/config\nfast"
        );
        assert_eq!(sh("exit 3; echo after"), (String::new(), String::new(), 3));
        let (_, e, code) = sh("nosuch --flag");
        assert_eq!((e.as_str(), code), ("sh: nosuch: command not found\n", 127));
        assert_eq!(sh("ls /etc/config | wc -l").0, "2\n");
        assert_eq!(
            sh("env | grep -i greet | head -n 1").0,
            "GREETING=hi there\n"
        );
        assert_eq!(sh("env | grep NOPE").2, 1);
        assert_eq!(sh("env | grep ^GREET").0, "GREETING=hi there\n");
        assert_eq!(sh("env | grep ^REETING").2, 1);
        assert_eq!(sh("env | grep -c bin$").0, "1\n");
        assert_eq!(
            sh("env | grep -v PATH | sort -r | tail -1").0,
            "GREETING=hi there\n"
        );
        assert_eq!(sh("echo b; echo a | sort").0, "b\na\n");
        assert_eq!(sh("echo x | nosuch").2, 127);
        assert_eq!(sh("| wc").2, 2);
        assert_eq!(sh("echo x > f").2, 2);
        assert_eq!(sh("echo 'open").2, 2);
        // Nesting is bounded.
        let mut deep = "true".to_string();
        for _ in 0..10 {
            deep = format!("sh -c {}", shell_quote(&deep));
        }
        assert_eq!(sh(&deep).2, 2);
    }

    #[test]
    fn tar_archives_what_kubectl_cp_asks_for() {
        let v = view();
        let argv: Vec<String> = ["tar", "cf", "-", "-C", "/etc", "--", "config"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let now = "2026-11-27T11:35:01Z".parse().unwrap();
        let plan = Shell::new(&v, "sh", now).exec(&argv);
        let Plan::Run(actions, 0) = plan else {
            panic!("tar failed: {plan:?}");
        };
        let Action::Out(tar) = &actions[0] else {
            panic!("no archive")
        };
        // Members: the directory, then its files, each header checksummed; two zero blocks.
        let name = |at: usize| {
            String::from_utf8_lossy(&tar[at..at + 100])
                .trim_end_matches('\0')
                .to_string()
        };
        assert_eq!(name(0), "config/");
        assert_eq!(tar[156], b'5');
        assert_eq!(name(512), "config/app.conf");
        assert_eq!(&tar[512 + 124..512 + 135], b"00000000012");
        assert_eq!(&tar[1024..1034], b"key=value\n");
        let sum: u32 = tar[512..1024]
            .iter()
            .enumerate()
            .map(|(i, b)| {
                if (148..156).contains(&i) {
                    32
                } else {
                    u32::from(*b)
                }
            })
            .sum();
        let stored = u32::from_str_radix(
            String::from_utf8_lossy(&tar[512 + 148..512 + 154]).trim(),
            8,
        )
        .unwrap();
        assert_eq!(sum, stored);
        assert_eq!(name(1536), "config/mode");
        assert!(tar.ends_with(&[0u8; 1024]));
        assert_eq!(tar.len() % 512, 0);
        // Extracting into the read-only filesystem fails.
        assert_eq!(run(&v, &["tar", "xf", "-"]).2, 2);
        assert_eq!(run(&v, &["tar", "cf", "-", "/nope"]).2, 2);
        // Long names, in any script, split at a `/` or keep their end — never a panic.
        let long = format!("{}/{}", "é".repeat(60), "ü".repeat(40));
        let h = tar_header(&long, 1, 0);
        assert_eq!(&h[345..465], "é".repeat(60).as_bytes());
        assert_eq!(&h[0..80], "ü".repeat(40).as_bytes());
        tar_header(&"ß".repeat(300), 1, 0);
        assert_eq!(container_shell(&["/bin/bash"], "x"), Some("bash".into()));
        assert_eq!(container_shell(&[], "busybox:1.36"), Some("sh".into()));
        assert_eq!(container_shell(&["sh", "-c", "echo"], "busybox"), None);
        assert_eq!(container_shell(&[], "nginx"), None);
    }

    fn shell_quote(s: &str) -> String {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}
