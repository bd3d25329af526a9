//! Bounds-checked reading and writing of the classic (non-flexible) fields of Kafka's
//! internal records (`__consumer_offsets` keys and values): a malformed record reads as
//! `None`, never a panic, and no length read from it allocates more than it holds.

use bytes::{Buf, BufMut, Bytes, BytesMut};

pub fn put_string(out: &mut BytesMut, s: &str) {
    let len = s.len().min(i16::MAX as usize);
    out.put_i16(len as i16);
    out.put_slice(&s.as_bytes()[..len]);
}

/// A bounds-checked reader: every length is checked against what is left.
#[derive(Debug)]
pub struct Reader<'a>(pub &'a [u8]);

impl Reader<'_> {
    pub fn i8(&mut self) -> Option<i8> {
        (self.0.remaining() >= 1).then(|| self.0.get_i8())
    }
    pub fn i16(&mut self) -> Option<i16> {
        (self.0.remaining() >= 2).then(|| self.0.get_i16())
    }
    pub fn i32(&mut self) -> Option<i32> {
        (self.0.remaining() >= 4).then(|| self.0.get_i32())
    }
    pub fn i64(&mut self) -> Option<i64> {
        (self.0.remaining() >= 8).then(|| self.0.get_i64())
    }
    pub fn take(&mut self, n: usize) -> Option<&[u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
    pub fn uuid(&mut self) -> Option<uuid::Uuid> {
        let raw: [u8; 16] = self.take(16)?.try_into().ok()?;
        Some(uuid::Uuid::from_bytes(raw))
    }
    pub fn nullable_string(&mut self) -> Option<Option<String>> {
        let len = self.i16()?;
        if len < 0 {
            return Some(None);
        }
        let raw = self.take(len as usize)?;
        Some(Some(String::from_utf8_lossy(raw).into_owned()))
    }
    pub fn string(&mut self) -> Option<String> {
        self.nullable_string()?.or(Some(String::new()))
    }
    pub fn bytes(&mut self) -> Option<Bytes> {
        let len = usize::try_from(self.i32()?).unwrap_or(0);
        Some(Bytes::copy_from_slice(self.take(len)?))
    }
}
