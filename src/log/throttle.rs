//! A byte-rate limit for background work that reads the log (the cleaner's
//! `log.cleaner.io.max.bytes.per.second`, the archive's `--archive-io-max-bytes-per-second`):
//! after each chunk the worker waits until its bytes so far fit the rate.

use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct Throttle {
    rate: Option<f64>,
    started: Instant,
    bytes: u64,
}

impl Throttle {
    /// `rate` in bytes per second; `None` or not positive: no limit.
    pub fn new(rate: Option<f64>) -> Self {
        Self {
            rate: rate.filter(|r| *r > 0.0),
            started: Instant::now(),
            bytes: 0,
        }
    }

    /// Counts `bytes` and says how long to wait before going on.
    pub fn charge(&mut self, bytes: u64) -> Option<Duration> {
        let rate = self.rate?;
        self.bytes += bytes;
        let due = Duration::from_secs_f64(self.bytes as f64 / rate);
        due.checked_sub(self.started.elapsed())
    }

    /// [`Self::charge`], sleeping the thread (for work on a blocking thread of its own).
    pub fn pay_blocking(&mut self, bytes: u64) {
        if let Some(wait) = self.charge(bytes) {
            std::thread::sleep(wait);
        }
    }

    /// [`Self::charge`], sleeping the task.
    pub async fn pay(&mut self, bytes: u64) {
        if let Some(wait) = self.charge(bytes) {
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_rate_never_waits_and_a_rate_asks_for_the_time_the_bytes_take() {
        let mut free = Throttle::new(None);
        assert_eq!(free.charge(u64::MAX / 2), None);
        let mut slow = Throttle::new(Some(1000.0));
        let wait = slow.charge(2000).expect("2000 bytes at 1000/s take 2 s");
        assert!(wait > Duration::from_millis(1900) && wait <= Duration::from_secs(2));
    }
}
