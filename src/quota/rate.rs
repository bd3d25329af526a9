//! Kafka's quota rate (`org.apache.kafka.common.metrics.stats.Rate` over a
//! `SampledStat`): what was recorded in the last `samples` windows, divided by the
//! time they span, never less than `samples - 1` whole windows. The floor is why a
//! client that was idle may burst up to about `(samples - 1) × window × quota` before
//! its first throttle, exactly as against Kafka. Pure: the caller passes the clock.

/// The sampling of every quota rate: Kafka's `quota.window.num` (11) windows of
/// `quota.window.size.seconds` (1 s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub samples: usize,
    pub sample_ms: u64,
}

impl Default for Window {
    fn default() -> Self {
        Self {
            samples: 11,
            sample_ms: 1_000,
        }
    }
}

impl Window {
    /// The most that may be recorded at once without a certain throttle: Kafka's
    /// `getMaxValueInQuotaWindow`, which caps a quota'd consumer's fetch size.
    pub fn max_in_window(&self, quota: f64) -> f64 {
        quota * (self.samples.saturating_sub(1)) as f64 * self.sample_ms as f64 / 1_000.0
    }
}

#[derive(Debug, Clone, Copy)]
struct Sample {
    start_ms: u64,
    value: f64,
}

/// One entity's rate of one quota kind.
#[derive(Debug, Clone)]
pub struct SampledRate {
    window: Window,
    /// Oldest first; at most `window.samples`, none older than the window.
    samples: std::collections::VecDeque<Sample>,
}

impl SampledRate {
    pub fn new(window: Window) -> Self {
        Self {
            window,
            samples: std::collections::VecDeque::with_capacity(window.samples),
        }
    }

    /// Adds `value` (bytes, or percent-seconds of request time) at `now_ms`.
    pub fn record(&mut self, value: f64, now_ms: u64) {
        self.purge(now_ms);
        match self.samples.back_mut() {
            Some(current) if now_ms < current.start_ms + self.window.sample_ms => {
                current.value += value
            }
            _ => {
                if self.samples.len() == self.window.samples {
                    self.samples.pop_front();
                }
                self.samples.push_back(Sample {
                    start_ms: now_ms,
                    value,
                });
            }
        }
    }

    /// The rate per second at `now_ms`.
    pub fn rate(&mut self, now_ms: u64) -> f64 {
        self.purge(now_ms);
        let total: f64 = self.samples.iter().map(|s| s.value).sum();
        total * 1_000.0 / self.window_ms(now_ms) as f64
    }

    /// How long the rate must see nothing more to come back down to `quota`: Kafka's
    /// `QuotaUtils.throttleTime`, `(observed - quota) / quota × window`; 0 within it.
    pub fn throttle_ms(&mut self, quota: f64, now_ms: u64) -> u64 {
        let observed = self.rate(now_ms);
        if observed <= quota || quota <= 0.0 && observed <= 0.0 {
            return 0;
        }
        if quota <= 0.0 {
            // A zero quota admits nothing: the longest throttle a window can ask for.
            return self.window.samples as u64 * self.window.sample_ms;
        }
        ((observed - quota) / quota * self.window_ms(now_ms) as f64).round() as u64
    }

    /// Whether every sample has expired: the rate is zero and forgetting it loses nothing.
    pub fn is_idle(&mut self, now_ms: u64) -> bool {
        self.purge(now_ms);
        self.samples.is_empty()
    }

    /// The time the samples span, at least `samples - 1` whole windows (Kafka's
    /// `Rate.windowSize`) and at least 1 ms.
    fn window_ms(&self, now_ms: u64) -> u64 {
        let oldest = self.samples.front().map_or(now_ms, |s| s.start_ms);
        let mut elapsed = now_ms.saturating_sub(oldest);
        let full = elapsed / self.window.sample_ms;
        let min_full = self.window.samples.saturating_sub(1) as u64;
        if full < min_full {
            elapsed += (min_full - full) * self.window.sample_ms;
        }
        elapsed.max(1)
    }

    fn purge(&mut self, now_ms: u64) {
        let expire = self.window.samples as u64 * self.window.sample_ms;
        while self
            .samples
            .front()
            .is_some_and(|s| now_ms.saturating_sub(s.start_ms) >= expire)
        {
            self.samples.pop_front();
        }
    }
}

/// Kafka's `TokenBucket` (KIP-599), for controller_mutation_rate: `quota` permits a
/// second accrue up to a burst of `quota × samples × window`; a mutation takes its
/// permits even if that leaves the bucket below zero, and the next one is refused
/// (strict) or throttled until the bucket is back at zero.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    window: Window,
    tokens: f64,
    last_ms: u64,
    /// The quota the tokens were last accrued at (the burst follows it).
    quota: f64,
}

impl TokenBucket {
    pub fn new(window: Window, quota: f64, now_ms: u64) -> Self {
        Self {
            window,
            tokens: Self::burst(window, quota),
            last_ms: now_ms,
            quota,
        }
    }

    fn burst(window: Window, quota: f64) -> f64 {
        quota * window.samples as f64 * window.sample_ms as f64 / 1_000.0
    }

    fn refill(&mut self, quota: f64, now_ms: u64) {
        let elapsed_s = now_ms.saturating_sub(self.last_ms) as f64 / 1_000.0;
        self.quota = quota;
        self.tokens = (self.tokens + quota * elapsed_s).min(Self::burst(self.window, quota));
        self.last_ms = now_ms;
    }

    /// Whether the bucket is below zero: a strict request's next mutation is refused.
    pub fn exceeded(&mut self, quota: f64, now_ms: u64) -> bool {
        self.refill(quota, now_ms);
        self.tokens < 0.0
    }

    pub fn record(&mut self, permits: f64, quota: f64, now_ms: u64) {
        self.refill(quota, now_ms);
        self.tokens -= permits;
    }

    /// Whether the bucket is full again: forgetting it changes nothing.
    pub fn is_full(&mut self, now_ms: u64) -> bool {
        self.refill(self.quota, now_ms);
        self.tokens >= Self::burst(self.window, self.quota)
    }

    /// How long until the bucket is back at zero, in ms.
    pub fn throttle_ms(&mut self, quota: f64, now_ms: u64) -> u64 {
        self.refill(quota, now_ms);
        if self.tokens >= 0.0 || quota <= 0.0 {
            return 0;
        }
        (-self.tokens / quota * 1_000.0).round() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idle_client_may_burst_up_to_the_window_floor_before_its_first_throttle() {
        let mut rate = SampledRate::new(Window::default());
        // 10 windows' worth of a 1 MB/s quota at once: exactly at the quota.
        rate.record(10_000_000.0, 0);
        assert_eq!(rate.throttle_ms(1_000_000.0, 0), 0);
        rate.record(1_000_000.0, 0);
        // 11 MB over a 10 s floor is 1.1 MB/s: (1.1 - 1) / 1 × 10 s = 1 s.
        assert_eq!(rate.throttle_ms(1_000_000.0, 0), 1_000);
    }

    #[test]
    fn a_throttle_of_the_computed_length_brings_the_rate_back_to_the_quota() {
        let window = Window::default();
        let mut rate = SampledRate::new(window);
        let quota = 1_000_000.0;
        let mut now = 0;
        let mut sent = 0.0;
        // A client that sends 100 KB whenever it is not throttled, for 60 s.
        while now < 60_000 {
            rate.record(100_000.0, now);
            sent += 100_000.0;
            now += rate.throttle_ms(quota, now).max(10);
        }
        let average = sent / 60.0;
        // The first 10 s may burst (the window floor); the average over a minute is
        // within that of the quota.
        assert!(average > quota * 0.95 && average < quota * 1.2, "{average}");
    }

    #[test]
    fn samples_expire_after_the_whole_window() {
        let mut rate = SampledRate::new(Window::default());
        rate.record(5.0, 0);
        assert!(!rate.is_idle(10_999));
        assert!(rate.is_idle(11_000));
        assert_eq!(rate.rate(11_000), 0.0);
    }

    #[test]
    fn a_zero_quota_throttles_anything_for_the_whole_window() {
        let mut rate = SampledRate::new(Window::default());
        assert_eq!(rate.throttle_ms(0.0, 0), 0);
        rate.record(1.0, 0);
        assert_eq!(rate.throttle_ms(0.0, 0), 11_000);
    }

    #[test]
    fn a_token_bucket_bursts_then_refuses_until_it_refills() {
        let window = Window::default();
        // 2 partitions a second: a burst of 22.
        let mut bucket = TokenBucket::new(window, 2.0, 0);
        assert!(!bucket.exceeded(2.0, 0));
        bucket.record(20.0, 2.0, 0);
        assert!(!bucket.exceeded(2.0, 0));
        bucket.record(10.0, 2.0, 0); // 8 below zero: 4 s to refill
        assert!(bucket.exceeded(2.0, 0));
        assert_eq!(bucket.throttle_ms(2.0, 0), 4_000);
        assert_eq!(bucket.throttle_ms(2.0, 3_000), 1_000);
        assert!(!bucket.exceeded(2.0, 4_000));
        assert!(!bucket.is_full(4_000));
        assert!(bucket.is_full(15_000));
    }

    #[test]
    fn the_fetch_cap_is_the_quota_over_all_but_one_window() {
        assert_eq!(Window::default().max_in_window(1_000_000.0), 10_000_000.0);
    }
}
