//! TEMPORARY stand-ins with the agreed signatures; replaced by the repl-log branch.
#![allow(dead_code, unused_variables, clippy::todo)]
use bytes::Bytes;

use super::{AppendError, AppendInfo, Doomed, Log, OffsetOutOfRange};

impl Log {
    pub fn latest_epoch(&self) -> Option<i32> {
        todo!()
    }
    pub fn end_offset_for_epoch(&self, epoch: i32) -> (i32, i64) {
        todo!()
    }
    pub fn append_replicated(&mut self, records: &[u8]) -> Result<AppendInfo, AppendError> {
        todo!()
    }
    pub fn truncate_to(&mut self, offset: i64) -> Result<Doomed, AppendError> {
        todo!()
    }
    pub fn reset_to(&mut self, offset: i64) -> Result<Doomed, AppendError> {
        todo!()
    }
    pub fn read_below(
        &self,
        offset: i64,
        max_bytes: u64,
        min_one: bool,
        upper: i64,
    ) -> Result<Option<Bytes>, OffsetOutOfRange> {
        todo!()
    }
}
