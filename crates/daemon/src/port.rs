//! Free loopback ports for a process started next (tests, benchmarks, `rkube cluster`):
//! chosen outside the kernel's ephemeral range, so no outbound connection's local port takes
//! one between the choice and the child's bind (it did once: etcd exited on
//! "address already in use" in CI).

use std::hash::{BuildHasher, RandomState};
use std::io;
use std::net::TcpListener;
use std::ops::Range;

/// Ports below the ephemeral range start here: above the well-known and most registered ones.
const FLOOR: u16 = 10_000;
/// And stay below Kubernetes' NodePort range (30000–32767), which a kube-proxy on the host
/// may redirect on 127.0.0.1.
const NODE_PORTS: u16 = 30_000;
/// Fewest ports worth choosing from.
const MIN_SPAN: u16 = 1_000;
/// Tries per port wanted before falling back to a kernel-chosen (ephemeral) port.
const TRIES_PER_PORT: usize = 64;

/// `n` distinct free ports on 127.0.0.1, each held open until all are chosen.
pub fn free_ports(n: usize) -> io::Result<Vec<u16>> {
    let random = RandomState::new();
    let mut held: Vec<TcpListener> = Vec::with_capacity(n);
    if let Some(range) = outside_ephemeral(ephemeral_range()) {
        let span = u64::from(range.end - range.start);
        for i in 0..n * TRIES_PER_PORT {
            if held.len() == n {
                break;
            }
            let port = range.start + (random.hash_one(i) % span) as u16;
            if let Ok(l) = TcpListener::bind(("127.0.0.1", port)) {
                held.push(l);
            }
        }
    }
    while held.len() < n {
        held.push(TcpListener::bind("127.0.0.1:0")?);
    }
    held.iter().map(|l| Ok(l.local_addr()?.port())).collect()
}

/// One free loopback port (panics if none can be bound: for tests and benchmarks).
pub fn free_port() -> u16 {
    free_ports(1).expect("bind a loopback port")[0]
}

/// Linux's ephemeral range (`ip_local_port_range`), or its default where it cannot be read.
fn ephemeral_range() -> (u16, u16) {
    let read = || {
        let s = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
        let mut it = s.split_whitespace().map(str::parse::<u16>);
        Some((it.next()?.ok()?, it.next()?.ok()?))
    };
    read().unwrap_or((32_768, 60_999))
}

/// Where to choose: below the ephemeral range (and the NodePorts), else above it; `None`
/// when neither side leaves `MIN_SPAN` ports.
fn outside_ephemeral((lo, hi): (u16, u16)) -> Option<Range<u16>> {
    let below = FLOOR..lo.min(NODE_PORTS);
    let above = hi.saturating_add(1).max(FLOOR)..u16::MAX;
    [below, above]
        .into_iter()
        .find(|r| r.end > r.start && r.end - r.start >= MIN_SPAN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_bindable_and_outside_the_ephemeral_range() {
        let ports = free_ports(20).unwrap();
        let mut sorted = ports.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 20, "{ports:?}");
        let (lo, hi) = ephemeral_range();
        let outside = outside_ephemeral((lo, hi));
        for p in ports {
            if let Some(r) = &outside {
                assert!(r.contains(&p), "{p} outside {r:?}");
                assert!(!(lo..=hi).contains(&p), "{p} in the ephemeral range");
            }
            TcpListener::bind(("127.0.0.1", p)).expect("released after choosing");
        }
    }

    #[test]
    fn the_choice_avoids_the_ephemeral_range_and_node_ports() {
        assert_eq!(outside_ephemeral((32_768, 60_999)), Some(10_000..30_000));
        assert_eq!(outside_ephemeral((15_000, 60_999)), Some(10_000..15_000));
        assert_eq!(outside_ephemeral((1_024, 9_999)), Some(10_000..65_535));
        assert_eq!(outside_ephemeral((1_024, 60_000)), Some(60_001..65_535));
        assert_eq!(outside_ephemeral((1_024, 65_535)), None);
    }
}
