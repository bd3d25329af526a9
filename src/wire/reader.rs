//! Size-prefixed frames read from a byte stream into one buffer that serves frame after
//! frame.
//!
//! Why not a fresh buffer per frame: a produce request is up to a MiB, and an allocation
//! that large comes from `mmap` (glibc's threshold), is faulted in page by page while the
//! socket fills it and is unmapped after: about a tenth of the broker's produce CPU went
//! to those page faults. Here a connection reads into one `BytesMut`. A large frame is
//! split off it without a copy; once its request is done and the frame dropped, the same
//! memory takes the next frames. While a pipelined frame still holds it, reading goes on
//! in a spare buffer (up to [`SPARE_BUFFERS`] of them), so a client with several requests
//! in flight cycles through a few buffers instead of allocating one per frame. A small
//! frame is copied out into an allocation of its own, so that the few bytes a request may
//! leave behind (a member's metadata kept by its group, say) never pin a whole buffer.
//!
//! Memory: room for a frame is reserved once its size is known and checked (the
//! connection holds request memory for it by then; pages the peer never fills are never
//! touched). A connection keeps at most `1 + SPARE_BUFFERS` buffers, each about the size
//! of the largest frame it sent up to [`KEEP_MAX_BYTES`]; a larger frame's memory goes
//! with the frame.

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

/// The least room a read offers: several small frames arrive per `read`.
const READ_AHEAD_BYTES: usize = 64 * 1024;
/// Frames of at least this size are split off the buffer rather than copied.
const SPLIT_MIN_BYTES: usize = 64 * 1024;
/// Buffers kept besides the one being read into, for frames still alive.
const SPARE_BUFFERS: usize = 3;
/// A frame larger than this takes its memory with it: a connection that once sent a
/// rare huge request does not keep that much for as long as it stays open.
const KEEP_MAX_BYTES: usize = 16 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame size {size} outside 0..={max}")]
    BadSize { size: i32, max: u32 },
    #[error("the stream ended inside a frame ({received} bytes of it received)")]
    Truncated { received: usize },
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Reads frames (a big-endian `i32` size, then that many bytes) from `inner`.
#[derive(Debug)]
pub struct FrameReader<R> {
    inner: R,
    /// Bytes received and not yet handed out as a frame.
    buffer: BytesMut,
    /// Earlier buffers, empty, whose memory returns once their frames are dropped.
    spares: Vec<BytesMut>,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    pub fn new(inner: R) -> Self {
        Self {
            inner,
            buffer: BytesMut::with_capacity(READ_AHEAD_BYTES),
            spares: Vec::new(),
        }
    }

    /// Reads a whole frame; `Ok(None)` on a clean end of stream. (The broker's
    /// connections read the size, wait for request memory, then read the body.)
    pub async fn read_frame(&mut self, max: u32) -> Result<Option<Bytes>, FrameError> {
        match self.read_size(max).await? {
            Some(size) => Ok(Some(self.read_body(size).await?)),
            None => Ok(None),
        }
    }

    /// Reads the next frame's size and checks it against `max`; `Ok(None)` on a clean
    /// end of stream (between frames).
    pub async fn read_size(&mut self, max: u32) -> Result<Option<usize>, FrameError> {
        if !self.fill(4).await? {
            return match self.buffer.len() {
                0 => Ok(None),
                received => Err(FrameError::Truncated { received }),
            };
        }
        let size = self.buffer.get_i32();
        match u32::try_from(size) {
            Ok(checked) if checked <= max => Ok(Some(checked as usize)),
            _ => Err(FrameError::BadSize { size, max }),
        }
    }

    /// Reads the body of `size` bytes that the last [`Self::read_size`] announced.
    pub async fn read_body(&mut self, size: usize) -> Result<Bytes, FrameError> {
        if !self.fill(size).await? {
            return Err(FrameError::Truncated {
                received: self.buffer.len(),
            });
        }
        if size >= SPLIT_MIN_BYTES {
            let frame = self.buffer.split_to(size).freeze();
            if size > KEEP_MAX_BYTES {
                // Bytes read past it (at most READ_AHEAD_BYTES) move to memory of their own.
                self.buffer = BytesMut::from(&self.buffer[..]);
            }
            return Ok(frame);
        }
        let frame = Bytes::copy_from_slice(&self.buffer[..size]);
        self.buffer.advance(size);
        Ok(frame)
    }

    /// Reads until `want` bytes are buffered; `false` if the stream ended first. A
    /// read takes at most what is missing, or [`READ_AHEAD_BYTES`] when less is missing
    /// (small frames come several per read): more read past a large frame would have to
    /// move with it when it needs a buffer of its own.
    async fn fill(&mut self, want: usize) -> std::io::Result<bool> {
        while self.buffer.len() < want {
            let limit = (want - self.buffer.len()).max(READ_AHEAD_BYTES);
            self.make_room(limit);
            let read = (&mut self.inner)
                .take(limit as u64)
                .read_buf(&mut self.buffer)
                .await?;
            if read == 0 {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Gives the buffer room for `additional` more bytes: in its own memory once the
    /// frames split off it are dropped, else in a spare whose frames are, else in a new
    /// allocation. The bytes already received (part of one frame) move along.
    fn make_room(&mut self, additional: usize) {
        if self.buffer.try_reclaim(additional) {
            return;
        }
        let needed = self.buffer.len() + additional;
        let reusable = self
            .spares
            .iter_mut()
            .position(|spare| spare.try_reclaim(needed));
        let mut next = match reusable {
            Some(at) => self.spares.swap_remove(at),
            None => BytesMut::with_capacity(needed + READ_AHEAD_BYTES),
        };
        next.extend_from_slice(&self.buffer);
        let mut previous = std::mem::replace(&mut self.buffer, next);
        previous.clear();
        if self.spares.len() < SPARE_BUFFERS {
            self.spares.push(previous);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(bodies: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for body in bodies {
            out.extend_from_slice(&(body.len() as i32).to_be_bytes());
            out.extend_from_slice(body);
        }
        out
    }

    async fn next(reader: &mut FrameReader<&[u8]>, max: u32) -> Result<Option<Bytes>, FrameError> {
        reader.read_frame(max).await
    }

    #[tokio::test]
    async fn small_and_large_frames_come_out_whole_and_in_order() {
        let large = vec![7u8; 3 * 256 * 1024 + 5];
        let stream = framed(&[b"abc", &large, b"", b"xyz"]);
        let mut reader = FrameReader::new(&stream[..]);
        let max = u32::MAX >> 1;
        assert_eq!(
            next(&mut reader, max).await.ok().flatten().as_deref(),
            Some(&b"abc"[..])
        );
        let got = next(&mut reader, max).await.ok().flatten();
        assert_eq!(got.as_deref(), Some(&large[..]));
        assert_eq!(
            next(&mut reader, max).await.ok().flatten().as_deref(),
            Some(&b""[..])
        );
        assert_eq!(
            next(&mut reader, max).await.ok().flatten().as_deref(),
            Some(&b"xyz"[..])
        );
        assert!(matches!(next(&mut reader, max).await, Ok(None)));
    }

    #[tokio::test]
    async fn a_dropped_large_frame_gives_its_memory_to_the_next() {
        let large = vec![1u8; 2 * SPLIT_MIN_BYTES];
        let stream = framed(&[&large, &large, &large]);
        let mut reader = FrameReader::new(&stream[..]);
        let first = next(&mut reader, u32::MAX >> 1).await.ok().flatten();
        let first_at = first.as_ref().map(|f| f.as_ptr());
        drop(first);
        let mut reused = false;
        while let Ok(Some(frame)) = next(&mut reader, u32::MAX >> 1).await {
            assert_eq!(frame.len(), large.len());
            reused |= Some(frame.as_ptr()) == first_at;
        }
        assert!(reused, "a later frame was read into the first one's memory");
    }

    #[tokio::test]
    async fn a_frame_above_the_keep_limit_takes_its_memory_with_it() {
        let huge = vec![3u8; KEEP_MAX_BYTES + 1];
        let stream = framed(&[&huge, b"next"]);
        let mut reader = FrameReader::new(&stream[..]);
        let frame = next(&mut reader, u32::MAX >> 1).await.ok().flatten();
        assert_eq!(frame.map(|f| f.len()), Some(huge.len()));
        // The frame is dropped: no buffer can take that much again without allocating.
        assert!(!reader.buffer.try_reclaim(KEEP_MAX_BYTES));
        assert!(!reader
            .spares
            .iter_mut()
            .any(|s| s.try_reclaim(KEEP_MAX_BYTES)));
        assert_eq!(
            next(&mut reader, 1024).await.ok().flatten().as_deref(),
            Some(&b"next"[..])
        );
    }

    #[tokio::test]
    async fn bad_sizes_and_truncation_are_errors() {
        let mut huge = FrameReader::new(&[0x7f, 0xff, 0xff, 0xff][..]);
        assert!(matches!(
            next(&mut huge, 1024).await,
            Err(FrameError::BadSize { .. })
        ));
        let mut negative = FrameReader::new(&[0xff, 0xff, 0xff, 0xfe][..]);
        assert!(matches!(
            next(&mut negative, 1024).await,
            Err(FrameError::BadSize { .. })
        ));
        let mut truncated = FrameReader::new(&[0, 0, 0, 5, 1][..]);
        assert!(matches!(
            next(&mut truncated, 1024).await,
            Err(FrameError::Truncated { received: 1 })
        ));
        let mut half_size = FrameReader::new(&[0, 0][..]);
        assert!(matches!(
            next(&mut half_size, 1024).await,
            Err(FrameError::Truncated { received: 2 })
        ));
    }
}
