//! Hand-written record batch (magic 2) encoder/decoder and a magic-1 message encoder,
//! independent of the broker's and the kafka-protocol crate's record code.

#[derive(Debug, Clone, Default)]
pub struct Rec {
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    /// Timestamp delta from the batch base timestamp.
    pub ts_delta: i64,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
}

impl Rec {
    pub fn value(v: &[u8]) -> Rec {
        Rec {
            value: Some(v.to_vec()),
            ..Default::default()
        }
    }
    pub fn kv(k: &[u8], v: &[u8]) -> Rec {
        Rec {
            key: Some(k.to_vec()),
            value: Some(v.to_vec()),
            ..Default::default()
        }
    }
}

#[derive(Debug, Clone)]
pub struct BatchSpec {
    pub base_offset: i64,
    pub partition_leader_epoch: i32,
    pub attributes: i16,
    pub base_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub records: Vec<Rec>,
}

impl BatchSpec {
    pub fn new(base_timestamp: i64, records: Vec<Rec>) -> BatchSpec {
        BatchSpec {
            base_offset: 0,
            partition_leader_epoch: -1,
            attributes: 0,
            base_timestamp,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            records,
        }
    }
}

pub fn put_varint(out: &mut Vec<u8>, v: i32) {
    put_uvarint(out, ((v << 1) ^ (v >> 31)) as u32 as u64);
}

pub fn put_varlong(out: &mut Vec<u8>, v: i64) {
    put_uvarint(out, ((v << 1) ^ (v >> 63)) as u64);
}

pub fn put_uvarint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_varbytes(out: &mut Vec<u8>, b: &Option<Vec<u8>>) {
    match b {
        None => put_varint(out, -1),
        Some(b) => {
            put_varint(out, b.len() as i32);
            out.extend_from_slice(b);
        }
    }
}

fn encode_record(offset_delta: i32, r: &Rec) -> Vec<u8> {
    let mut body = Vec::new();
    body.push(0u8); // attributes
    put_varlong(&mut body, r.ts_delta);
    put_varint(&mut body, offset_delta);
    put_varbytes(&mut body, &r.key);
    put_varbytes(&mut body, &r.value);
    put_varint(&mut body, r.headers.len() as i32);
    for (k, v) in &r.headers {
        put_varint(&mut body, k.len() as i32);
        body.extend_from_slice(k.as_bytes());
        put_varbytes(&mut body, v);
    }
    let mut out = Vec::new();
    put_varint(&mut out, body.len() as i32);
    out.extend_from_slice(&body);
    out
}

/// Encodes a magic-2 record batch with a correct CRC-32C.
pub fn encode_batch(spec: &BatchSpec) -> Vec<u8> {
    let n = spec.records.len() as i32;
    let max_ts = spec
        .records
        .iter()
        .map(|r| spec.base_timestamp + r.ts_delta)
        .max()
        .unwrap_or(spec.base_timestamp);
    // Everything covered by the CRC: attributes .. end.
    let mut tail = Vec::new();
    tail.extend_from_slice(&spec.attributes.to_be_bytes());
    tail.extend_from_slice(&(n - 1).max(0).to_be_bytes()); // last offset delta
    tail.extend_from_slice(&spec.base_timestamp.to_be_bytes());
    tail.extend_from_slice(&max_ts.to_be_bytes());
    tail.extend_from_slice(&spec.producer_id.to_be_bytes());
    tail.extend_from_slice(&spec.producer_epoch.to_be_bytes());
    tail.extend_from_slice(&spec.base_sequence.to_be_bytes());
    tail.extend_from_slice(&n.to_be_bytes());
    for (i, r) in spec.records.iter().enumerate() {
        tail.extend_from_slice(&encode_record(i as i32, r));
    }
    let crc = crc32c::crc32c(&tail);
    let mut out = Vec::with_capacity(tail.len() + 21);
    out.extend_from_slice(&spec.base_offset.to_be_bytes());
    let batch_length = (4 + 1 + 4 + tail.len()) as i32; // leader epoch + magic + crc + tail
    out.extend_from_slice(&batch_length.to_be_bytes());
    out.extend_from_slice(&spec.partition_leader_epoch.to_be_bytes());
    out.push(2u8); // magic
    out.extend_from_slice(&crc.to_be_bytes());
    out.extend_from_slice(&tail);
    out
}

/// A plain (non-idempotent) batch of values with consecutive timestamps from `base_ts`.
pub fn simple_batch(base_ts: i64, values: &[&[u8]]) -> Vec<u8> {
    let recs = values
        .iter()
        .enumerate()
        .map(|(i, v)| Rec {
            ts_delta: i as i64,
            ..Rec::kv(format!("k{i}").as_bytes(), v)
        })
        .collect();
    encode_batch(&BatchSpec::new(base_ts, recs))
}

/// A batch of `n` small records.
pub fn batch_of(n: usize, base_ts: i64) -> Vec<u8> {
    let values: Vec<Vec<u8>> = (0..n).map(|i| format!("value-{i}").into_bytes()).collect();
    let refs: Vec<&[u8]> = values.iter().map(|v| v.as_slice()).collect();
    simple_batch(base_ts, &refs)
}

/// Idempotent batch: producer id/epoch and base sequence set.
pub fn idempotent_batch(
    pid: i64,
    epoch: i16,
    base_sequence: i32,
    base_ts: i64,
    values: &[&[u8]],
) -> Vec<u8> {
    let recs = values.iter().map(|v| Rec::value(v)).collect();
    let mut spec = BatchSpec::new(base_ts, recs);
    spec.producer_id = pid;
    spec.producer_epoch = epoch;
    spec.base_sequence = base_sequence;
    encode_batch(&spec)
}

/// A legacy magic-1 message set holding one message (offset 0), CRC-32 (IEEE) correct.
pub fn magic1_message_set(ts: i64, key: Option<&[u8]>, value: &[u8]) -> Vec<u8> {
    let mut msg = Vec::new();
    msg.push(1u8); // magic
    msg.push(0u8); // attributes
    msg.extend_from_slice(&ts.to_be_bytes());
    match key {
        None => msg.extend_from_slice(&(-1i32).to_be_bytes()),
        Some(k) => {
            msg.extend_from_slice(&(k.len() as i32).to_be_bytes());
            msg.extend_from_slice(k);
        }
    }
    msg.extend_from_slice(&(value.len() as i32).to_be_bytes());
    msg.extend_from_slice(value);
    let crc = crc32_ieee(&msg);
    let mut out = Vec::new();
    out.extend_from_slice(&0i64.to_be_bytes());
    out.extend_from_slice(&((msg.len() + 4) as i32).to_be_bytes());
    out.extend_from_slice(&crc.to_be_bytes());
    out.extend_from_slice(&msg);
    out
}

/// A legacy magic-0 message set holding one message.
pub fn magic0_message_set(value: &[u8]) -> Vec<u8> {
    let mut msg = Vec::new();
    msg.push(0u8); // magic
    msg.push(0u8); // attributes
    msg.extend_from_slice(&(-1i32).to_be_bytes()); // null key
    msg.extend_from_slice(&(value.len() as i32).to_be_bytes());
    msg.extend_from_slice(value);
    let crc = crc32_ieee(&msg);
    let mut out = Vec::new();
    out.extend_from_slice(&0i64.to_be_bytes());
    out.extend_from_slice(&((msg.len() + 4) as i32).to_be_bytes());
    out.extend_from_slice(&crc.to_be_bytes());
    out.extend_from_slice(&msg);
    out
}

pub fn crc32_ieee(data: &[u8]) -> u32 {
    let mut crc = 0xffff_ffffu32;
    for &b in data {
        crc ^= b as u32;
        for _ in 0..8 {
            let mask = (!(crc & 1)).wrapping_add(1);
            crc = (crc >> 1) ^ (0xedb8_8320 & mask);
        }
    }
    !crc
}

// ---------------------------------------------------------------- decoding

#[derive(Debug, Clone)]
pub struct DecodedRecord {
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: usize,
}

#[derive(Debug, Clone)]
#[allow(dead_code)] // every header field is decoded; not all are asserted on
pub struct DecodedBatch {
    pub base_offset: i64,
    pub batch_length: i32,
    pub partition_leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub crc_ok: bool,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub record_count: i32,
    pub records: Vec<DecodedRecord>,
}

impl DecodedBatch {
    pub fn last_offset(&self) -> i64 {
        self.base_offset + self.last_offset_delta as i64
    }
    pub fn next_offset(&self) -> i64 {
        self.last_offset() + 1
    }
}

struct Cur<'a> {
    b: &'a [u8],
    p: usize,
}

impl<'a> Cur<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.p + n > self.b.len() {
            return Err(format!(
                "record data truncated at {} (+{n} > {})",
                self.p,
                self.b.len()
            ));
        }
        let s = &self.b[self.p..self.p + n];
        self.p += n;
        Ok(s)
    }
    fn i8(&mut self) -> Result<i8, String> {
        Ok(self.take(1)?[0] as i8)
    }
    fn i16(&mut self) -> Result<i16, String> {
        let s = self.take(2)?;
        Ok(i16::from_be_bytes([s[0], s[1]]))
    }
    fn i32(&mut self) -> Result<i32, String> {
        let s = self.take(4)?;
        Ok(i32::from_be_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn i64(&mut self) -> Result<i64, String> {
        let s = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        Ok(i64::from_be_bytes(a))
    }
    fn uvarint(&mut self) -> Result<u64, String> {
        let mut v = 0u64;
        for i in 0..10 {
            let b = self.take(1)?[0];
            v |= ((b & 0x7f) as u64) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("varint too long".into())
    }
    fn varlong(&mut self) -> Result<i64, String> {
        let u = self.uvarint()?;
        Ok(((u >> 1) as i64) ^ -((u & 1) as i64))
    }
    fn varint(&mut self) -> Result<i32, String> {
        Ok(self.varlong()? as i32)
    }
    fn varbytes(&mut self) -> Result<Option<Vec<u8>>, String> {
        let n = self.varint()?;
        if n < 0 {
            return Ok(None);
        }
        Ok(Some(self.take(n as usize)?.to_vec()))
    }
}

/// Decodes all complete magic-2 batches in `data`. A trailing partial batch (allowed in
/// fetch responses) is ignored. Batches must be uncompressed to have their records decoded.
pub fn decode_batches(data: &[u8]) -> Result<Vec<DecodedBatch>, String> {
    let mut out = Vec::new();
    let mut p = 0usize;
    while data.len() - p >= 12 {
        let base_offset = i64::from_be_bytes(data[p..p + 8].try_into().expect("8 bytes"));
        let batch_length = i32::from_be_bytes(data[p + 8..p + 12].try_into().expect("4 bytes"));
        if batch_length < 0 {
            return Err(format!("negative batch length {batch_length} at byte {p}"));
        }
        let end = p + 12 + batch_length as usize;
        if end > data.len() {
            break; // partial trailing batch
        }
        let mut c = Cur {
            b: &data[..end],
            p: p + 12,
        };
        let partition_leader_epoch = c.i32()?;
        let magic = c.i8()?;
        if magic != 2 {
            return Err(format!("batch at byte {p} has magic {magic}, expected 2"));
        }
        let crc = c.i32()? as u32;
        let crc_ok = crc32c::crc32c(&data[c.p..end]) == crc;
        let attributes = c.i16()?;
        let last_offset_delta = c.i32()?;
        let base_timestamp = c.i64()?;
        let max_timestamp = c.i64()?;
        let producer_id = c.i64()?;
        let producer_epoch = c.i16()?;
        let base_sequence = c.i32()?;
        let record_count = c.i32()?;
        let mut records = Vec::new();
        let compression = attributes & 0x7;
        let is_control = attributes & 0x20 != 0;
        if compression == 0 && !is_control {
            for _ in 0..record_count.max(0) {
                let len = c.varint()?;
                if len < 0 {
                    return Err("negative record length".into());
                }
                let rec_end = c.p + len as usize;
                if rec_end > end {
                    return Err("record overruns its batch".into());
                }
                let _attr = c.i8()?;
                let ts_delta = c.varlong()?;
                let off_delta = c.varint()?;
                let key = c.varbytes()?;
                let value = c.varbytes()?;
                let nh = c.varint()?;
                for _ in 0..nh.max(0) {
                    let klen = c.varint()?;
                    c.take(klen.max(0) as usize)?;
                    c.varbytes()?;
                }
                if c.p != rec_end {
                    return Err(format!("record length {len} does not match its fields"));
                }
                records.push(DecodedRecord {
                    offset: base_offset + off_delta as i64,
                    timestamp: base_timestamp + ts_delta,
                    key,
                    value,
                    headers: nh.max(0) as usize,
                });
            }
            if c.p != end {
                return Err(format!(
                    "batch at byte {p}: {} bytes after its {record_count} records",
                    end - c.p
                ));
            }
        }
        out.push(DecodedBatch {
            base_offset,
            batch_length,
            partition_leader_epoch,
            magic,
            crc,
            crc_ok,
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            record_count,
            records,
        });
        p = end;
    }
    Ok(out)
}

/// Tiny deterministic PRNG (xorshift64*), for fixed-seed hostile payloads.
#[derive(Debug, Clone)]
pub struct Prng(u64);

impl Prng {
    pub fn new(seed: u64) -> Prng {
        Prng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| (self.next_u64() >> 56) as u8).collect()
    }
}

#[cfg(test)]
mod self_tests {
    use super::*;

    #[test]
    fn batch_roundtrip_and_crc() {
        let b = simple_batch(1000, &[b"a", b"bb", b"ccc"]);
        let d = decode_batches(&b).expect("decode");
        assert_eq!(d.len(), 1);
        assert!(d[0].crc_ok);
        assert_eq!(d[0].record_count, 3);
        assert_eq!(d[0].last_offset_delta, 2);
        assert_eq!(d[0].max_timestamp, 1002);
        assert_eq!(d[0].records[2].value.as_deref(), Some(&b"ccc"[..]));
        assert_eq!(d[0].batch_length as usize, b.len() - 12);
        // partial trailing batch is ignored
        let mut two = b.clone();
        two.extend_from_slice(&b[..20]);
        assert_eq!(decode_batches(&two).expect("decode").len(), 1);
    }

    #[test]
    fn crc32_ieee_known_value() {
        assert_eq!(crc32_ieee(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32c::crc32c(b"123456789"), 0xE306_9283);
    }
}
