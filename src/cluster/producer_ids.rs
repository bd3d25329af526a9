//! Producer ids, handed out cluster-wide without collision: each broker reserves blocks
//! of ids through the metadata store (an etcd transaction, or the embedded store's
//! file), so ids stay unique across restarts and across brokers. Idempotent producers
//! and the transaction coordinator take theirs here.

use std::sync::Arc;

use parking_lot::Mutex;

use super::store::{MetadataError, MetadataStore};

/// Hands out producer ids from blocks reserved in the metadata store, so ids stay
/// unique across restarts (and, with a shared store, across brokers).
#[derive(Debug)]
pub struct ProducerIdAllocator {
    store: Arc<dyn MetadataStore>,
    block: Mutex<(i64, i64)>,
}

const PRODUCER_ID_BLOCK: i64 = 1000;

impl ProducerIdAllocator {
    pub fn new(store: Arc<dyn MetadataStore>) -> Self {
        Self {
            store,
            block: Mutex::new((0, 0)),
        }
    }

    pub async fn next(&self) -> Result<i64, MetadataError> {
        {
            let mut block = self.block.lock();
            if block.0 < block.1 {
                block.0 += 1;
                return Ok(block.0 - 1);
            }
        }
        let first = self.store.allocate_producer_ids(PRODUCER_ID_BLOCK).await?;
        let mut block = self.block.lock();
        *block = (first + 1, first + PRODUCER_ID_BLOCK);
        Ok(first)
    }
}
