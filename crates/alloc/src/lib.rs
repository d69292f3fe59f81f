//! The apiserver's global allocator: mimalloc (under load glibc's malloc/free and its arena
//! locks took about a quarter of the apiserver's CPU), with a thread that has it return
//! memory freed a while ago to the OS.
//!
//! mimalloc's purge delay is not a timer: freed memory is handed back only during later
//! allocator calls, once the delay (1 s) is past. An apiserver that goes quiet after a burst —
//! a create storm, a big LIST — kept it all: 2.65× the cached pods' JSON in RSS instead of
//! 1.6× (apiserver-bench), for as long as it stayed quiet. Purging at every free instead
//! returned it, but re-faulted the buffers of back-to-back LISTs (2× their latency); a
//! collection every second purges what has been free past the delay, and nothing else.
//! Limit: pages a quiet worker thread owns whose blocks other threads freed wait for that
//! worker's next allocation (the benchmark's figure includes them).
//!
//! This crate exists because that takes `unsafe` FFI calls and the rest of the workspace
//! forbids `unsafe`; it holds those calls and nothing else.

use std::time::Duration;

pub use mimalloc::MiMalloc;

extern "C" {
    fn mi_thread_init();
    fn mi_collect(force: bool);
}

/// How often the purger runs.
const PERIOD: Duration = Duration::from_secs(1);

/// Starts the thread that has mimalloc return memory that has been free past its purge delay,
/// busy or idle. Call once, early in `main`.
pub fn start_purger() {
    let spawned = std::thread::Builder::new()
        .name("mimalloc-purge".into())
        .spawn(|| {
            // SAFETY: mimalloc's public API (linked in by `mimalloc`), taking nothing or a
            // bool; it initializes and collects the calling thread's own heap and the
            // process-wide arenas, which is thread-safe.
            #[allow(unsafe_code)]
            unsafe {
                mi_thread_init()
            };
            loop {
                std::thread::sleep(PERIOD);
                // SAFETY: as above; `false`: purge only what is past its delay.
                #[allow(unsafe_code)]
                unsafe {
                    mi_collect(false)
                };
            }
        });
    if let Err(e) = spawned {
        eprintln!("rkube-alloc: no purge thread ({e}); freed memory returns only under load");
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    #[global_allocator]
    static ALLOCATOR: super::MiMalloc = super::MiMalloc;

    fn rss() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace()
            .nth(1)
            .unwrap()
            .parse::<u64>()
            .unwrap()
            * 1024
    }

    #[test]
    fn memory_freed_by_a_quiet_process_goes_back_to_the_os() {
        const MIB: u64 = 1024 * 1024;
        // 256 MiB in 64 KiB blocks (arena pages, not direct OS mappings), all touched.
        let blocks: Vec<Vec<u8>> = (0..4096).map(|i| vec![i as u8 | 1; 64 * 1024]).collect();
        let loaded = rss();
        drop(blocks);
        super::start_purger();
        // Past mimalloc's delay, the purger's next round returns it.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let now = rss();
            if now + 192 * MIB < loaded {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "RSS stayed at {} MiB (loaded: {} MiB)",
                now / MIB,
                loaded / MIB
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}
