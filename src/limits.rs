//! The broker's fixed limits: every queue, wait and size bound that an operator does not
//! tune (those are `config::ServeArgs`), named in one place so that what bounds what can be
//! read off one page. Each says why it has its value. A leaf: it imports nothing of tern.

use std::time::Duration;

// Untrusted input.

/// Allocations at least this large are reserved lazily (`MAP_NORESERVE`) while
/// network bytes are decoded, so a hostile length costs address space, not memory.
pub const GUARDED_ALLOCATION_BYTES: usize = 1 << 20;
/// Lazily reserved mappings alive at once. A hostile claim lives only while its
/// decode runs (one per worker thread); a reservation outlives its decode only when
/// the array was really that long, so live ones are bounded by the request bytes in
/// flight (`queued_max_request_bytes`): tens of thousands at the very most. A power
/// of two (the table is hashed).
pub const GUARDED_ALLOCATION_SLOTS: usize = 1 << 16;
/// Decoding stops (the request is refused and its connection closed) while this
/// many reservations are alive: half the table, so that the decodes already
/// running can never run out of slots, and the allocator never has to fail.
pub const GUARDED_ALLOCATION_HIGH_WATER: usize = GUARDED_ALLOCATION_SLOTS / 2;
/// Bytes read from a socket per growth step of a frame buffer (a request here, a
/// response in the client): a frame's memory grows only as its bytes arrive, never
/// to the size a peer merely claims.
pub const READ_CHUNK_BYTES: usize = 256 * 1024;
/// The largest client SASL token any mechanism here accepts, in bytes.
///
/// Why: a SCRAM or PLAIN message is a user name, a nonce, a password or a proof and a few
/// separators; real clients send well under 300 bytes. Refusing anything longer before parsing
/// bounds the work an unauthenticated peer can cause (Kafka's own bound is its 512 KiB
/// `sasl.server.max.receive.size`, far above any legitimate token).
pub const SASL_MESSAGE_BYTES_MAX: usize = 4096;
/// Pause after a failed accept (out of file descriptors), instead of spinning.
pub const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);
/// Longest a TLS handshake may take: a client that opens a TLS connection and says
/// nothing holds a connection slot no longer than this.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

// The Kafka client (the CLI, and this broker asking its peers).

/// Largest response frame accepted from a broker: far above any response tern's
/// own requests ask for (a Fetch asks for at most 1 MiB).
pub const CLIENT_MAX_RESPONSE_BYTES: usize = 64 * 1024 * 1024;
/// Bound on connecting and on one request/response exchange.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);
// Replication.

/// How long a controlled shutdown waits for its leaderships to move before it
/// leaves anyway (Kafka retries ControlledShutdown for about as long).
pub const CONTROLLED_SHUTDOWN_WAIT: Duration = Duration::from_secs(15);

/// How long a group's commit waits for its ISR before REQUEST_TIMED_OUT (Kafka's
/// `offsets.commit.timeout.ms`).
pub const OFFSET_COMMIT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a follower's fetch waits at the leader for new data (Kafka's
/// `replica.fetch.wait.max.ms`): short enough that high-watermark news reaches
/// followers quickly, long enough that idle followers cost nothing.
pub const REPLICA_FETCH_WAIT_MS: i32 = 500;
/// Bytes a follower fetches per partition per round (`replica.fetch.max.bytes`, whose
/// Kafka default is 1 MiB). Larger here because a round trip is what a catch-up costs
/// the leader: measured with `bench/follower.sh` (one partition, 2 GB), the leader
/// spent 1.6–1.7x a consumer's CPU per GB at 1 MiB rounds and 0.7–1.2x at 8 MiB. The
/// fetcher rotates which partition comes first, so one lagging partition's share does
/// not starve the others of the response's [`REPLICA_FETCH_MAX_BYTES`].
pub const REPLICA_FETCH_PARTITION_MAX_BYTES: i32 = 8 * 1024 * 1024;
/// Bytes per follower fetch response (`replica.fetch.response.max.bytes`).
pub const REPLICA_FETCH_MAX_BYTES: i32 = 10 * 1024 * 1024;
/// Pause after a failed replica fetch (leader unreachable, not leader yet).
/// Shorter than Kafka's 1 s `replica.fetch.backoff.ms`: failover speed matters
/// more here than a few idle reconnects.
pub const REPLICA_FETCH_BACKOFF: Duration = Duration::from_millis(100);

/// Connections kept to each peer broker: enough for concurrent HTTP calls to
/// overlap, few enough that a cluster's mesh stays small.
pub const CONNECTIONS_PER_PEER: usize = 4;

// The HTTP API.

/// Largest request body: one message with its key and headers, as JSON.
pub const HTTP_MAX_BODY_BYTES: usize = 1024 * 1024;
/// Longest a long poll (`GET /message?wait_ms=`) may wait.
pub const HTTP_MAX_WAIT: Duration = Duration::from_secs(30);
/// How long a call that failed with a transient error (a leader that just moved,
/// a topic its leader has not opened yet) is retried before its 503: a few of the
/// cluster's placement rounds.
pub const HTTP_RETRY_FOR: Duration = Duration::from_secs(3);
/// First and longest pause between those retries (doubling in between).
pub const HTTP_RETRY_BACKOFF: (Duration, Duration) =
    (Duration::from_millis(20), Duration::from_millis(500));
/// How long a share-partition's leader asks its group's coordinator again while
/// that coordinator is moving or out of reach, before the request that needed the
/// share state answers with the error (or, for a fetch, with nothing yet: see
/// [`SHARE_STATE_LOADING_GRACE`]). A placement change or a controlled shutdown moves a
/// coordinator in well under it.
pub const SHARE_STATE_RETRY_FOR: Duration = Duration::from_secs(2);
/// First and longest pause between those tries (doubling in between).
pub const SHARE_STATE_RETRY_BACKOFF: (Duration, Duration) =
    (Duration::from_millis(20), Duration::from_millis(500));
/// How long a share-partition whose state cannot be loaded (its coordinator moving,
/// restarting, or its lease running out after a crash) is answered to fetches as
/// still loading — no records, no error — before the error is returned: Kafka answers
/// a fetch of a share-partition that is still initializing with nothing for it, and
/// its persister gives up after about this long (five tries, backoff 1 s doubling).
pub const SHARE_STATE_LOADING_GRACE: Duration = Duration::from_secs(30);
/// How often a waiting reader looks again at partitions other brokers lead (their
/// appends wake nothing here).
pub const HTTP_REMOTE_POLL: Duration = Duration::from_millis(100);
/// How long an SSE stream waits for an append before it looks again (and notices a
/// new partition or leader).
pub const HTTP_STREAM_WAIT: Duration = Duration::from_secs(15);
/// How long an SSE stream retries a failure that may pass (the group coordinator or
/// a partition leader moving: a few lease TTLs) before it sends an `error` event and
/// ends.
pub const HTTP_STREAM_RETRY_FOR: Duration = Duration::from_secs(30);
/// Largest decompressed records section read for one batch.
pub const HTTP_MAX_DECOMPRESSED_BYTES: usize = 64 * 1024 * 1024;
/// How long a publish forwarded to the partition's leader (Produce acks=all) may
/// wait for its acknowledgement.
pub const HTTP_FORWARD_PRODUCE_TIMEOUT_MS: i32 = 30_000;
/// Most bytes asked of a remote leader per read (as much as a local read takes);
/// a read asks about `HTTP_READ_BYTES_PER_MESSAGE` per wanted message, at least
/// `HTTP_READ_MIN_BYTES`.
pub const HTTP_READ_BYTES: i32 = 1024 * 1024;
pub const HTTP_READ_BYTES_PER_MESSAGE: usize = 2 * 1024;
pub const HTTP_READ_MIN_BYTES: usize = 64 * 1024;

// Topics, placement and groups.

/// Longest commit metadata accepted (Kafka's `offset.metadata.max.bytes` default).
pub const OFFSET_METADATA_MAX_BYTES: usize = 4096;
/// Most partitions one topic may have; each costs files and mappings.
pub const MAX_PARTITIONS_PER_TOPIC: i32 = 10_000;
/// Longest a topic change waits for the controller to place its partitions before
/// it answers (the placement still happens; clients retry on LEADER_NOT_AVAILABLE).
pub const PLACEMENT_WAIT: Duration = Duration::from_secs(5);
/// How often that wait looks at the placement.
pub const PLACEMENT_POLL: Duration = Duration::from_millis(20);
/// How often a controller re-checks placement without being told of a change.
pub const CONTROLLER_RECHECK: Duration = Duration::from_secs(3);
/// How often a broker that is not the controller looks whether the post is free,
/// besides on every store event.
pub const CONTROLLER_CAMPAIGN_PAUSE: Duration = Duration::from_secs(1);
/// A parked JoinGroup is answered within the rebalance timeout; this margin past it
/// covers the timer tick that completes the rebalance.
pub const JOIN_MARGIN: Duration = Duration::from_secs(5);
/// Period of the group timers (sessions, rebalance deadlines).
pub const GROUP_TICK: Duration = Duration::from_millis(100);

// Storage.

/// How far ahead of the write position a segment's disk blocks are allocated:
/// large enough that `posix_fallocate` is rare, small enough that idle partitions
/// do not hoard disk.
pub const SEGMENT_ALLOCATE_CHUNK_BYTES: u64 = 4 * 1024 * 1024;

// etcd (cluster mode).

/// Connecting to an etcd endpoint.
pub const ETCD_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// One etcd request.
pub const ETCD_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// gRPC keep-alive of the etcd connection: interval, and how long a ping may go
/// unanswered, so a dead connection is noticed well within a lease TTL.
pub const ETCD_KEEP_ALIVE: (Duration, Duration) = (Duration::from_secs(2), Duration::from_secs(2));
/// Attempts of one compare-and-swap before giving up with `Contended`.
pub const ETCD_CAS_ATTEMPTS: usize = 20;
/// Longest a write waits for its own watch event (read-your-writes).
pub const ETCD_READ_YOUR_WRITES_WAIT: Duration = Duration::from_secs(5);
/// Past the lease TTL, how long start-up waits for a previous run's registration of
/// the same broker id to expire.
pub const ETCD_REGISTER_GRACE: Duration = Duration::from_secs(2);
/// How long start-up keeps retrying an etcd it cannot reach (a restart during a
/// network blip should wait it out, as a Kafka broker waits for its controllers).
pub const ETCD_STARTUP_RETRY: Duration = Duration::from_secs(60);
/// Pause between attempts to re-read the store, re-register or renew a session.
pub const ETCD_RETRY_PAUSE: Duration = Duration::from_millis(500);
/// A broker stops leading this long before its lease's TTL runs out by its own
/// clock (a sixth of the TTL, at least this), so it is out before etcd says so.
pub const ETCD_LEASE_MIN_MARGIN: Duration = Duration::from_millis(500);

// Shutdown and background work.

/// Longest a shutdown waits for in-flight requests before it closes the logs.
pub const SHUTDOWN_WAIT: Duration = Duration::from_secs(10);
/// Longest pause of the flusher between two passes (a new write or a changed
/// `flush.ms` may make a log due sooner than the last pass saw).
pub const FLUSH_INTERVAL_RECHECK: Duration = Duration::from_secs(1);
/// Shortest pause of the flusher between two passes, so that `flush.ms=0` on a busy
/// topic batches its fsyncs instead of spinning.
pub const FLUSH_MIN_WAIT: Duration = Duration::from_millis(10);
/// Period of the gauges sampled rather than updated (log sizes, lag, disk), and of
/// the exporter's upkeep (histogram buckets).
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(5);
