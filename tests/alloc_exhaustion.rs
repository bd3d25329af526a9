//! Exhausting the decoder's large-allocation reservations (src/alloc.rs) is refused
//! cleanly: a decode error and a closed connection, never an allocator failure (which
//! would abort the process). Its own test binary, so that holding half the slots cannot
//! make the decodes of unrelated tests fail.

use kafka_protocol::messages::{ApiKey, MetadataRequest};
use tern::alloc::{decoding, live_reservations, LARGE_BYTES};
use tern::limits::GUARDED_ALLOCATION_HIGH_WATER as HIGH_WATER;
use tern::wire::{decode_untrusted, DecodeError};

/// Metadata v1 claiming 2^31 topics: the decoder reserves ~150 GB before failing.
fn hostile_decode() -> DecodeError {
    let mut body = bytes::Bytes::from_static(&[0x7f, 0xff, 0xff, 0xff]);
    match decode_untrusted::<MetadataRequest>(ApiKey::Metadata, &mut body, 1) {
        Ok(_) => panic!("a truncated body decoded"),
        Err(error) => error,
    }
}

#[test]
fn holding_the_reservations_refuses_decodes_until_they_are_freed() {
    assert!(!hostile_decode().reason.contains("busy"));
    let mut held: Vec<Vec<u8>> = Vec::new();
    while live_reservations() < HIGH_WATER {
        held.push(decoding(|| Vec::with_capacity(LARGE_BYTES)));
    }
    let refused = hostile_decode();
    assert!(refused.reason.contains("busy"), "{refused}");
    // Allocations outside a decode are unaffected.
    let ordinary = std::hint::black_box(vec![1u8; 2 * LARGE_BYTES]);
    assert_eq!(ordinary.len(), 2 * LARGE_BYTES);
    drop(held);
    assert_eq!(live_reservations(), 0);
    assert!(!hostile_decode().reason.contains("busy"));
}
