//! Drives a Kafka broker with librdkafka and prints throughput and latency.
//!
//! `produce`: as fast as possible, keyless (or over `--keys` keys), to all partitions of a topic.
//! `consume`: read the topic back from the beginning (explicit assignment, no group).
//! `latency`: produce at a fixed rate; report produce (ack) and end-to-end latency.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::{Parser, ValueEnum};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{ClientContext, Offset, TopicPartitionList};

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Mode {
    Produce,
    Consume,
    Latency,
}

#[derive(Debug, Parser)]
struct Args {
    #[arg(long, value_enum)]
    mode: Mode,
    #[arg(long, default_value = "127.0.0.1:9092")]
    brokers: String,
    #[arg(long)]
    topic: String,
    #[arg(long, default_value_t = 8)]
    partitions: i32,
    #[arg(long, default_value_t = 1024)]
    size: usize,
    #[arg(long, default_value_t = 100_000)]
    count: u64,
    #[arg(long, default_value = "all")]
    acks: String,
    /// Messages per second in latency mode.
    #[arg(long, default_value_t = 10_000)]
    rate: u64,
    /// Latency mode: messages sent in the first this-many seconds are reported apart
    /// (consumer start-up), not in the steady-state percentiles.
    #[arg(long, default_value_t = 2)]
    warmup_s: u64,
    /// Produce with keys `k0`..`k<N-1>` in turn (a compacted topic needs keys); 0
    /// sends no key.
    #[arg(long, default_value_t = 0)]
    keys: u64,
    /// Upper bound on the run, seconds.
    #[arg(long, default_value_t = 60)]
    timeout_s: u64,
    /// librdkafka's socket.nagle.disable (Kafka's Java client always disables Nagle)
    #[arg(long)]
    nagle_disable: bool,
    /// Produce mode: payloads of pseudo-random bytes (incompressible, as real data is
    /// to a codec or a Parquet encoder) instead of one repeated byte.
    #[arg(long)]
    random_payload: bool,
}

fn now_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

struct Ctx;
impl ClientContext for Ctx {}
impl ProducerContext for Ctx {
    type DeliveryOpaque = Box<u64>;
    fn delivery(&self, result: &DeliveryResult<'_>, sent_us: Self::DeliveryOpaque) {
        if result.is_ok() {
            lock(&LAT).push(now_us().saturating_sub(*sent_us));
        } else {
            ERRORS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// Delivery latencies (µs) and failures, recorded by whichever thread serves the reports.
static LAT: std::sync::Mutex<Vec<u64>> = std::sync::Mutex::new(Vec::new());
static ERRORS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn producer(args: &Args) -> BaseProducer<Ctx> {
    ClientConfig::new()
        .set("bootstrap.servers", &args.brokers)
        .set("acks", &args.acks)
        .set("linger.ms", if matches!(args.mode, Mode::Latency) { "0" } else { "5" })
        .set("batch.size", "1000000")
        .set("queue.buffering.max.kbytes", "1048576")
        .set("queue.buffering.max.messages", "1000000")
        .set("enable.idempotence", "false")
        .set("socket.nagle.disable", if args.nagle_disable { "true" } else { "false" })
        .create_with_context(Ctx)
        .expect("producer")
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64 / 1000.0
}

/// What produce mode sends, in turn: one repeated-byte payload, or with
/// `--random-payload` 256 different pseudo-random ones (xorshift; no dependency).
fn payloads(args: &Args) -> Vec<Vec<u8>> {
    if !args.random_payload {
        return vec![vec![b'x'; args.size]];
    }
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    (0..256)
        .map(|_| {
            (0..args.size)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state as u8
                })
                .collect()
        })
        .collect()
}

/// The `n`th payload: under `--random-payload` every one differs (its first bytes
/// are `n`), so no encoder can dictionary-code a few distinct values.
fn payload_of<'a>(args: &Args, payloads: &'a [Vec<u8>], n: u64) -> std::borrow::Cow<'a, [u8]> {
    let base = &payloads[(n % payloads.len() as u64) as usize];
    if !args.random_payload || base.len() < 8 {
        return std::borrow::Cow::Borrowed(base);
    }
    let mut unique = base.clone();
    unique[..8].copy_from_slice(&n.to_le_bytes());
    std::borrow::Cow::Owned(unique)
}

/// The key of the `n`th message under `--keys`.
fn key_of(args: &Args, n: u64) -> Option<String> {
    (args.keys > 0).then(|| format!("k{}", n % args.keys))
}

fn produce(args: &Args) {
    let producer = producer(args);
    let payloads = payloads(args);
    let deadline = Instant::now() + Duration::from_secs(args.timeout_s);
    let start = Instant::now();
    let mut sent = 0u64;
    while sent < args.count && Instant::now() < deadline {
        let key = key_of(args, sent);
        let payload = payload_of(args, &payloads, sent);
        let record = BaseRecord::with_opaque_to(&args.topic, Box::new(now_us()))
            .payload(payload.as_ref())
            .partition((sent % args.partitions as u64) as i32);
        let record = match &key {
            Some(k) => record.key(k.as_str()),
            None => record,
        };
        match producer.send::<str, _>(record) {
            Ok(()) => sent += 1,
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                producer.poll(Duration::from_millis(1));
            }
            Err((e, _)) => panic!("produce failed: {e}"),
        }
        if sent.is_multiple_of(1024) {
            producer.poll(Duration::ZERO);
        }
    }
    let _ = producer.flush(Duration::from_secs(args.timeout_s));
    let secs = start.elapsed().as_secs_f64();
    let acked = lock(&LAT).len() as f64;
    let errors = ERRORS.load(std::sync::atomic::Ordering::Relaxed);
    println!(
        "produce size={}B acks={} msgs={} acked={} errors={} {:.0} msgs/s {:.1} MB/s",
        args.size, args.acks, sent, acked, errors, acked / secs, acked * args.size as f64 / secs / 1e6
    );
}

fn consumer(args: &Args) -> BaseConsumer {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &args.brokers)
        .set("group.id", "tern-bench-unused")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .create()
        .expect("consumer");
    let mut assignment = TopicPartitionList::new();
    for p in 0..args.partitions {
        let _ = assignment.add_partition_offset(&args.topic, p, Offset::Beginning);
    }
    consumer.assign(&assignment).expect("assign");
    consumer
}

fn consume(args: &Args) {
    let consumer = consumer(args);
    let deadline = Instant::now() + Duration::from_secs(args.timeout_s);
    let mut start: Option<Instant> = None;
    let (mut count, mut bytes) = (0u64, 0u64);
    while count < args.count && Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                start.get_or_insert_with(Instant::now);
                count += 1;
                bytes += m.payload_len() as u64;
            }
            Some(Err(e)) => panic!("consume failed: {e}"),
            None => {}
        }
    }
    let secs = start.map_or(f64::NAN, |s| s.elapsed().as_secs_f64());
    println!(
        "consume msgs={} {:.0} msgs/s {:.1} MB/s",
        count,
        count as f64 / secs,
        bytes as f64 / secs / 1e6
    );
}

fn latency(args: &Args) {
    let producer = std::sync::Arc::new(producer(args));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reports = {
        let (producer, stop) = (std::sync::Arc::clone(&producer), std::sync::Arc::clone(&stop));
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                producer.poll(Duration::from_millis(20));
            }
        })
    };
    let consumer = consumer(args);
    // The consumer reads from the beginning; wait until it has fetched something (the
    // topic's warm-up record) so that its start-up does not count as latency.
    let warm_deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < warm_deadline {
        if let Some(Ok(_)) = consumer.poll(Duration::from_millis(100)) {
            break;
        }
    }
    while consumer.poll(Duration::from_millis(200)).is_some() {}
    let interval = Duration::from_secs_f64(1.0 / args.rate as f64);
    let mut payload = vec![b'x'; args.size.max(16)];
    let start = Instant::now();
    let start_us = now_us();
    let mut next = start;
    let mut sent = 0u64;
    let mut e2e: Vec<u64> = Vec::with_capacity(args.count as usize);
    // (ms since start when sent, e2e ms, partition) of messages slower than 50 ms.
    let mut outliers: Vec<(u64, u64, i32)> = Vec::new();
    let (mut warmup_max, mut warmup_count) = (0u64, 0u64);
    let mut seen: HashMap<u64, ()> = HashMap::new();
    let deadline = start + Duration::from_secs(args.timeout_s);
    while (sent < args.count || e2e.len() as u64 + warmup_count < sent) && Instant::now() < deadline {
        if sent < args.count && Instant::now() >= next {
            payload[..8].copy_from_slice(&now_us().to_be_bytes());
            payload[8..16].copy_from_slice(&sent.to_be_bytes());
            let key = key_of(args, sent);
            let record = BaseRecord::with_opaque_to(&args.topic, Box::new(now_us()))
                .payload(&payload)
                .partition((sent % args.partitions as u64) as i32);
            let record = match &key {
                Some(k) => record.key(k.as_str()),
                None => record,
            };
            if producer.send::<str, _>(record).is_ok() {
                sent += 1;
                next += interval;
            }
        }
        while let Some(Ok(m)) = consumer.poll(Duration::ZERO) {
            if let Some(p) = m.payload().filter(|p| p.len() >= 16) {
                let mut t = [0u8; 8];
                t.copy_from_slice(&p[..8]);
                let mut id = [0u8; 8];
                id.copy_from_slice(&p[8..16]);
                if seen.insert(u64::from_be_bytes(id), ()).is_none() {
                    let sent_us = u64::from_be_bytes(t);
                    let took = now_us().saturating_sub(sent_us);
                    if sent_us < start_us + args.warmup_s * 1_000_000 {
                        warmup_max = warmup_max.max(took);
                        warmup_count += 1;
                        continue;
                    }
                    if took > 50_000 && outliers.len() < 2000 {
                        let since_start = sent_us.saturating_sub(start_us) / 1000;
                        outliers.push((since_start, took / 1000, m.partition()));
                    }
                    e2e.push(took);
                }
            }
        }
        // Sleep to the next send (or a while, once all are sent) rather than spin: a
        // spinning client holds a core the broker needs on a small machine, and every
        // thread it keeps waiting adds a scheduler time slice (~4 ms) to the tail.
        // Delivery reports are served meanwhile by `reports`, woken by each one.
        let now = Instant::now();
        let wake = if sent < args.count { next } else { now + Duration::from_millis(1) };
        if wake > now {
            std::thread::sleep(wake - now);
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = reports.join();
    let _ = producer.flush(Duration::from_secs(5));
    let mut acks = lock(&LAT).clone();
    acks.sort_unstable();
    e2e.sort_unstable();
    println!(
        "latency size={}B rate={}/s acks={} sent={} produce p50={:.2}ms p99={:.2}ms p99.9={:.2}ms max={:.2}ms end-to-end p50={:.2}ms p99={:.2}ms (n={}; first {}s: {} msgs, e2e max {:.0}ms)",
        args.size,
        args.rate,
        args.acks,
        sent,
        percentile(&acks, 0.50),
        percentile(&acks, 0.99),
        percentile(&acks, 0.999),
        percentile(&acks, 1.0),
        percentile(&e2e, 0.50),
        percentile(&e2e, 0.99),
        e2e.len(),
        args.warmup_s,
        warmup_count,
        warmup_max as f64 / 1000.0
    );
    if !outliers.is_empty() && std::env::var_os("BENCH_OUTLIERS").is_some() {
        let mut by_second: std::collections::BTreeMap<u64, (usize, u64)> = std::collections::BTreeMap::new();
        for (at, took, _) in &outliers {
            let e = by_second.entry(at / 1000).or_default();
            e.0 += 1;
            e.1 = e.1.max(*took);
        }
        println!("outliers (>50 ms) by second sent: {by_second:?}");
        println!("first outliers (sent ms, e2e ms, partition): {:?}", &outliers[..outliers.len().min(12)]);
    }
}

fn main() {
    let args = Args::parse();
    match args.mode {
        Mode::Produce => produce(&args),
        Mode::Consume => consume(&args),
        Mode::Latency => latency(&args),
    }
}
