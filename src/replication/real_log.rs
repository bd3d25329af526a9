//! The real log (`log::Log`) as a replica's storage: the replica core
//! (`replica::ReplicaState`) is written against `ReplicaLog`, which the simulator serves
//! from memory and this file from the segments on disk.

use bytes::Bytes;

use super::replica::ReplicaLog;
use crate::log::truncate::Doomed;
use crate::log::txn::TxnMarker;
use crate::log::{AppendError, AppendInfo, Log, OffsetOutOfRange};
use crate::model::{LeaderEpoch, Offset};

/// The real log as a replica's storage.
impl ReplicaLog for Log {
    type Removed = Doomed;

    fn log_start(&self) -> Offset {
        self.log_start_offset()
    }
    fn log_end(&self) -> Offset {
        self.log_end_offset()
    }
    fn leader_epoch(&self) -> LeaderEpoch {
        Log::leader_epoch(self)
    }
    fn set_leader_epoch(&mut self, epoch: LeaderEpoch) {
        Log::set_leader_epoch(self, epoch);
    }
    fn start_leader_epoch(&mut self, epoch: LeaderEpoch) -> Result<(), AppendError> {
        Log::start_leader_epoch(self, epoch)
    }
    fn latest_epoch(&self) -> Option<LeaderEpoch> {
        Log::latest_epoch(self)
    }
    fn end_offset_for_epoch(&self, epoch: LeaderEpoch) -> (LeaderEpoch, Offset) {
        Log::end_offset_for_epoch(self, epoch)
    }
    fn append(&mut self, records: &[u8], now_ms: i64) -> Result<AppendInfo, AppendError> {
        Log::append(self, records, now_ms)
    }
    fn append_replicated(&mut self, records: &[u8]) -> Result<AppendInfo, AppendError> {
        Log::append_replicated(self, records)
    }
    fn append_marker(
        &mut self,
        marker: &TxnMarker,
        now_ms: i64,
    ) -> Result<AppendInfo, AppendError> {
        Log::append_marker(self, marker, now_ms)
    }
    fn first_unstable_offset(&self, high_watermark: Offset) -> Option<Offset> {
        Log::first_unstable_offset(self, high_watermark)
    }
    fn forget_replicated_txns(&mut self, high_watermark: Offset) {
        Log::forget_replicated_txns(self, high_watermark);
    }
    fn truncate_to(&mut self, offset: Offset) -> Result<Doomed, AppendError> {
        Log::truncate_to(self, offset)
    }
    fn reset_to(&mut self, offset: Offset) -> Result<Doomed, AppendError> {
        Log::reset_to(self, offset)
    }
    fn raise_log_start(&mut self, offset: Offset) -> Result<Doomed, AppendError> {
        Log::delete_records_before(self, offset).map(|(_, doomed)| doomed)
    }
    fn durable_end(&self) -> Offset {
        self.recovery_point()
    }
    fn flush_messages(&self) -> i64 {
        self.config().flush_messages
    }
    fn read(
        &self,
        offset: Offset,
        max_bytes: u64,
        min_one: bool,
        upper: Offset,
    ) -> Result<Option<Bytes>, OffsetOutOfRange> {
        self.read_below(offset, max_bytes, min_one, upper)
    }
}
