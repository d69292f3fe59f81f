//! Free loopback ports for a process started next (tests, benchmarks, `rkube cluster`):
//! chosen below the kernel's ephemeral range, so no outbound connection's local port takes
//! one between the choice and the child's bind (it did once: etcd exited on
//! "address already in use" in CI).

use std::hash::{BuildHasher, RandomState};
use std::io;
use std::net::TcpListener;

/// Lowest port handed out: above the well-known and most registered services.
const FLOOR: u16 = 10_000;
/// Tries per port wanted before falling back to a kernel-chosen (ephemeral) port.
const TRIES_PER_PORT: usize = 64;

/// `n` distinct free ports on 127.0.0.1, each held open until all are chosen.
pub fn free_ports(n: usize) -> io::Result<Vec<u16>> {
    let ceiling = ephemeral_start().unwrap_or(32_768);
    let random = RandomState::new();
    let mut held: Vec<TcpListener> = Vec::with_capacity(n);
    if ceiling > FLOOR {
        let span = u64::from(ceiling - FLOOR);
        for i in 0..n * TRIES_PER_PORT {
            if held.len() == n {
                break;
            }
            let port = FLOOR + (random.hash_one(i) % span) as u16;
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

/// The first port of Linux's ephemeral range (`ip_local_port_range`), where it can be read.
fn ephemeral_start() -> Option<u16> {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    range.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_bindable_and_below_the_ephemeral_range() {
        let ports = free_ports(20).unwrap();
        let mut sorted = ports.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 20, "{ports:?}");
        let ceiling = ephemeral_start().unwrap_or(32_768);
        for p in ports {
            assert!(
                (FLOOR..ceiling).contains(&p),
                "{p} outside {FLOOR}..{ceiling}"
            );
            TcpListener::bind(("127.0.0.1", p)).expect("released after choosing");
        }
    }
}
