//! Stage configuration: how long each simulated step takes and which images fail or crash
//! (like kwok's stages: a selector — here an image pattern — a delay with jitter, an effect).
//! Built-in profiles `fast` (no delays) and `realistic`; a YAML/JSON file overrides either.

use std::collections::BTreeMap;
use std::time::Duration;

use rand::Rng;
use serde::Deserialize;

/// A crash effect: containers whose image matches exit with `exit_code` after `after`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Crash {
    pub image: String,
    #[serde(with = "dur")]
    pub after: Duration,
    #[serde(default = "one")]
    pub exit_code: i32,
}

/// The `fast` profile's run duration of containers that finish.
pub const DEFAULT_RUN: Duration = Duration::from_millis(100);

fn one() -> i32 {
    1
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct Stages {
    /// Pod sandbox (network) set-up.
    #[serde(with = "dur")]
    pub sandbox: Duration,
    /// Image pull, first time an image is needed on a node.
    #[serde(with = "dur")]
    pub pull: Duration,
    #[serde(with = "dur")]
    pub pull_jitter: Duration,
    /// Per-image pull delays (image pattern → delay).
    #[serde(with = "dur_map")]
    pub images: BTreeMap<String, Duration>,
    #[serde(with = "dur")]
    pub create: Duration,
    #[serde(with = "dur")]
    pub start: Duration,
    /// Stopping a container on deletion (capped by the grace period).
    #[serde(with = "dur")]
    pub stop: Duration,
    /// How long init containers, and the containers of pods with `restartPolicy: Never` or
    /// `OnFailure`, run before exiting (`--default-run-duration`; annotations override it).
    #[serde(with = "dur")]
    pub run: Duration,
    /// Images whose pull fails (ErrImagePull, then ImagePullBackOff).
    pub fail_images: Vec<String>,
    pub crash: Vec<Crash>,
}

impl Default for Stages {
    fn default() -> Self {
        Stages::fast()
    }
}

impl Stages {
    pub fn fast() -> Self {
        Stages {
            sandbox: Duration::ZERO,
            pull: Duration::ZERO,
            pull_jitter: Duration::ZERO,
            images: BTreeMap::new(),
            create: Duration::ZERO,
            start: Duration::ZERO,
            stop: Duration::ZERO,
            run: DEFAULT_RUN,
            fail_images: Vec::new(),
            crash: Vec::new(),
        }
    }

    pub fn realistic() -> Self {
        Stages {
            sandbox: Duration::from_millis(300),
            pull: Duration::from_secs(2),
            pull_jitter: Duration::from_secs(1),
            create: Duration::from_millis(100),
            start: Duration::from_millis(200),
            stop: Duration::from_millis(500),
            run: Duration::from_secs(1),
            ..Stages::fast()
        }
    }

    /// `fast`, `realistic`, or a file (YAML or JSON) whose fields override `fast`.
    pub fn load(spec: &str) -> Result<Self, String> {
        match spec {
            "fast" => Ok(Stages::fast()),
            "realistic" => Ok(Stages::realistic()),
            path => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("reading stages {path}: {e}"))?;
                serde_yaml::from_str(&text).map_err(|e| format!("parsing stages {path}: {e}"))
            }
        }
    }

    pub fn pull_delay(&self, image: &str) -> Duration {
        if let Some(d) = self
            .images
            .iter()
            .find(|(p, _)| matches(p, image))
            .map(|(_, d)| *d)
        {
            return d;
        }
        jitter(self.pull, self.pull_jitter)
    }

    pub fn pull_fails(&self, image: &str) -> bool {
        self.fail_images.iter().any(|p| matches(p, image))
    }

    pub fn crash_for(&self, image: &str) -> Option<&Crash> {
        self.crash.iter().find(|c| matches(&c.image, image))
    }
}

fn jitter(base: Duration, j: Duration) -> Duration {
    if j.is_zero() {
        base
    } else {
        base + j.mul_f64(rand::thread_rng().gen_range(0.0..1.0))
    }
}

/// `*` matches any run of characters; everything else literally.
pub fn matches(pattern: &str, s: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == s;
    }
    let mut rest = s;
    for (i, part) in parts.iter().enumerate() {
        if i == 0 {
            match rest.strip_prefix(part) {
                Some(r) => rest = r,
                None => return false,
            }
        } else if i == parts.len() - 1 {
            return rest.ends_with(part);
        } else {
            match rest.find(part) {
                Some(pos) => rest = &rest[pos + part.len()..],
                None => return false,
            }
        }
    }
    true
}

mod dur {
    use serde::{Deserialize, Deserializer};
    use std::time::Duration;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let s = String::deserialize(d)?;
        super::parse(&s).map_err(serde::de::Error::custom)
    }
}

mod dur_map {
    use serde::{Deserialize, Deserializer};
    use std::collections::BTreeMap;
    use std::time::Duration;

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<BTreeMap<String, Duration>, D::Error> {
        let m = BTreeMap::<String, String>::deserialize(d)?;
        m.into_iter()
            .map(|(k, v)| {
                super::parse(&v)
                    .map(|d| (k, d))
                    .map_err(serde::de::Error::custom)
            })
            .collect()
    }
}

fn parse(s: &str) -> Result<Duration, String> {
    rkube_daemon::parse_duration(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns() {
        assert!(matches("nginx:*", "nginx:1.14.2"));
        assert!(matches("*:broken", "app:broken"));
        assert!(matches("a*b*c", "axxbyyc"));
        assert!(!matches("nginx", "nginx:1"));
        assert!(matches("*", "anything"));
    }

    #[test]
    fn file_overrides_fast() {
        let s: Stages = serde_yaml::from_str(
            "pull: 2s\nimages: {\"big:*\": 10s}\nfailImages: [\"bad:*\"]\ncrash: [{image: \"crasher*\", after: 5s}]\n",
        )
        .unwrap();
        assert_eq!(s.pull_delay("nginx"), Duration::from_secs(2));
        assert_eq!(s.pull_delay("big:1"), Duration::from_secs(10));
        assert!(s.pull_fails("bad:latest"));
        assert_eq!(s.crash_for("crasher:v1").unwrap().exit_code, 1);
        assert_eq!(s.create, Duration::ZERO);
        assert!(serde_yaml::from_str::<Stages>("pull: forever").is_err());
    }
}
