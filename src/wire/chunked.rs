//! Response buffers that reference large record sets instead of copying them.
//!
//! A Fetch response's record sets are `Bytes` views of segment maps. Encoding them into
//! one contiguous buffer would copy every byte a consumer reads. [`ChunkedBuf`]
//! implements the protocol crate's output-buffer trait; when the encoder writes a slice
//! that *is* one of the registered record sets (same address and length), the
//! buffer keeps a reference to it as its own chunk. The connection then writes all
//! chunks with vectored writes, so record bytes go from the page cache to the socket
//! with no copy in between.

use std::ops::Range;

use bytes::buf::UninitSlice;
use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::protocol::buf::ByteBufMut;

/// Record sets smaller than this are copied: a chunk costs more than the copy.
pub const SHARE_MIN_BYTES: usize = 4096;

/// An encoded response as a list of chunks, in order.
#[derive(Debug, Default)]
pub struct ChunkedBuf {
    chunks: Vec<Bytes>,
    tail: BytesMut,
    /// Slices the encoder may write that should be referenced, not copied.
    shared: Vec<Bytes>,
    /// Bytes in `chunks` (not counting `tail`).
    chunked_len: usize,
}

impl ChunkedBuf {
    /// A buffer that will reference, rather than copy, any of `shared` when written.
    pub fn new(shared: Vec<Bytes>) -> Self {
        Self {
            tail: BytesMut::with_capacity(1024),
            shared: shared
                .into_iter()
                .filter(|b| b.len() >= SHARE_MIN_BYTES)
                .collect(),
            ..Self::default()
        }
    }

    pub fn len(&self) -> usize {
        self.chunked_len + self.tail.len()
    }

    fn close_tail(&mut self) {
        if !self.tail.is_empty() {
            let tail = self.tail.split().freeze();
            self.chunked_len += tail.len();
            self.chunks.push(tail);
        }
    }

    /// All chunks, in order.
    pub fn into_chunks(mut self) -> Vec<Bytes> {
        self.close_tail();
        self.chunks
    }

    /// Copies everything into one buffer; only for the rare `range` over old chunks.
    fn flatten(&mut self) {
        if self.chunks.is_empty() {
            return;
        }
        let mut all = BytesMut::with_capacity(self.len());
        for chunk in self.chunks.drain(..) {
            all.extend_from_slice(&chunk);
        }
        all.extend_from_slice(&self.tail);
        self.tail = all;
        self.chunked_len = 0;
    }
}

// SAFETY: all three methods delegate to the `BytesMut` tail, which upholds `BufMut`'s
// contract; `put_slice` only adds whole chunks before delegating.
#[allow(unsafe_code)]
unsafe impl BufMut for ChunkedBuf {
    fn remaining_mut(&self) -> usize {
        self.tail.remaining_mut()
    }

    unsafe fn advance_mut(&mut self, cnt: usize) {
        // SAFETY: the caller initialised `cnt` bytes of `chunk_mut`, which is the tail's.
        unsafe { self.tail.advance_mut(cnt) }
    }

    fn chunk_mut(&mut self) -> &mut UninitSlice {
        self.tail.chunk_mut()
    }

    fn put_slice(&mut self, src: &[u8]) {
        if src.len() >= SHARE_MIN_BYTES {
            if let Some(shared) = self
                .shared
                .iter()
                .find(|b| b.as_ptr() == src.as_ptr() && b.len() == src.len())
            {
                let shared = shared.clone();
                self.close_tail();
                self.chunked_len += shared.len();
                self.chunks.push(shared);
                return;
            }
        }
        self.tail.extend_from_slice(src);
    }
}

impl ByteBufMut for ChunkedBuf {
    fn offset(&self) -> usize {
        self.len()
    }

    fn seek(&mut self, offset: usize) {
        if offset < self.chunked_len {
            self.flatten();
        }
        let in_tail = offset - self.chunked_len;
        self.tail.resize(in_tail, 0);
    }

    fn range(&mut self, r: Range<usize>) -> &mut [u8] {
        if r.start < self.chunked_len {
            self.flatten();
        }
        let start = r.start - self.chunked_len;
        let end = r.end - self.chunked_len;
        &mut self.tail[start..end]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_slices_become_chunks_and_others_are_copied() {
        let big = Bytes::from(vec![7u8; 8192]);
        let mut buf = ChunkedBuf::new(vec![big.clone()]);
        buf.put_i32(1);
        buf.put_slice(&big);
        buf.put_slice(&vec![7u8; 8192]); // equal bytes, different address: copied
        buf.put_i16(2);
        assert_eq!(buf.len(), 4 + 8192 + 8192 + 2);
        let chunks = buf.into_chunks();
        assert_eq!(chunks.len(), 3);
        assert_eq!(
            chunks[1].as_ptr(),
            big.as_ptr(),
            "no copy of the shared record set"
        );
        let flat: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
        assert_eq!(flat.len(), 4 + 8192 + 8192 + 2);
    }

    #[test]
    fn gaps_over_earlier_chunks_still_work() {
        let big = Bytes::from(vec![1u8; 5000]);
        let mut buf = ChunkedBuf::new(vec![big.clone()]);
        buf.put_i32(0);
        buf.put_slice(&big);
        buf.range(0..4).copy_from_slice(&9i32.to_be_bytes());
        let flat: Vec<u8> = buf
            .into_chunks()
            .iter()
            .flat_map(|c| c.iter().copied())
            .collect();
        assert_eq!(&flat[..4], &9i32.to_be_bytes());
        assert_eq!(flat.len(), 5004);
    }
}
