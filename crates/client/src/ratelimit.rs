//! A token bucket: `qps` tokens per second, at most `burst` saved up. Used for the client's
//! request limit (`--kube-api-qps`/`--kube-api-burst`) and the work queue's overall limit.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

#[derive(Debug)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    state: Mutex<(f64, Instant)>,
}

impl TokenBucket {
    /// `qps <= 0` means unlimited.
    pub fn new(qps: f32, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        TokenBucket {
            qps: f64::from(qps),
            burst,
            state: Mutex::new((burst, Instant::now())),
        }
    }

    pub fn unlimited(&self) -> bool {
        self.qps <= 0.0
    }

    /// Takes one token and says how long the caller must wait before using it.
    pub fn reserve(&self) -> Duration {
        if self.unlimited() {
            return Duration::ZERO;
        }
        let mut st = self.state.lock().unwrap();
        let now = Instant::now();
        let (tokens, last) = *st;
        let tokens =
            (tokens + now.duration_since(last).as_secs_f64() * self.qps).min(self.burst) - 1.0;
        *st = (tokens, now);
        if tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-tokens / self.qps)
        }
    }

    /// Takes a token if one is there now; never goes into debt.
    pub fn try_take(&self) -> bool {
        if self.unlimited() {
            return true;
        }
        let mut st = self.state.lock().unwrap();
        let now = Instant::now();
        let (tokens, last) = *st;
        let tokens = (tokens + now.duration_since(last).as_secs_f64() * self.qps).min(self.burst);
        if tokens >= 1.0 {
            *st = (tokens - 1.0, now);
            true
        } else {
            *st = (tokens, now);
            false
        }
    }

    /// Waits for a token.
    pub async fn acquire(&self) {
        let d = self.reserve();
        if !d.is_zero() {
            tokio::time::sleep(d).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn burst_then_rate() {
        let b = TokenBucket::new(10.0, 3);
        for _ in 0..3 {
            assert_eq!(b.reserve(), Duration::ZERO);
        }
        assert_eq!(b.reserve(), Duration::from_millis(100));
        assert_eq!(b.reserve(), Duration::from_millis(200));
        tokio::time::advance(Duration::from_secs(1)).await;
        // 10 tokens accrued over the 2 owed, capped at the burst of 3.
        assert_eq!(b.reserve(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn try_take_never_borrows() {
        let b = TokenBucket::new(1.0, 2);
        assert!(b.try_take() && b.try_take());
        assert!(!b.try_take());
        assert!(!b.try_take());
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(
            b.try_take(),
            "one second refills one token despite the refusals"
        );
        assert!(!b.try_take());
    }

    #[test]
    fn zero_is_unlimited() {
        let b = TokenBucket::new(0.0, 0);
        for _ in 0..1000 {
            assert_eq!(b.reserve(), Duration::ZERO);
        }
    }
}
