//! Decompression of a record batch's records section, for readers that need the
//! records themselves (the HTTP API, the log cleaner, the key check of a compacted
//! topic's produce), and compression for the writers that rebuild batches (the
//! cleaner, a topic whose `compression.type` differs from the producer's). Fetch
//! never decompresses, nor does produce to a plain topic with `compression.type=producer`.
//!
//! Kafka's codecs: 1 gzip, 2 snappy (raw, or the "xerial" framing the Java client
//! writes), 3 lz4 (the LZ4 frame format), 4 zstd. Output is capped so that a small
//! hostile batch cannot expand without bound.

use std::borrow::Cow;
use std::io::Read;

#[derive(Debug, thiserror::Error)]
pub enum DecompressError {
    #[error("unknown compression codec {0}")]
    UnknownCodec(i16),
    #[error("{codec} data is corrupt: {reason}")]
    Corrupt { codec: &'static str, reason: String },
    #[error("decompressed records exceed {0} bytes")]
    TooLarge(usize),
}

/// The magic that starts xerial-framed snappy (`SnappyOutputStream`).
const XERIAL_MAGIC: &[u8] = &[0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];
/// Magic, then two 4-byte version fields.
const XERIAL_HEADER_BYTES: usize = 16;

/// The records section of a batch compressed with `codec`, decompressed (borrowed
/// as is when uncompressed); at most `limit` bytes.
pub fn decompress(codec: i16, data: &[u8], limit: usize) -> Result<Cow<'_, [u8]>, DecompressError> {
    let owned = match codec {
        0 => return Ok(Cow::Borrowed(data)),
        1 => read_capped(flate2::read::GzDecoder::new(data), "gzip", limit),
        2 => snappy(data, limit),
        3 => read_capped(lz4_flex::frame::FrameDecoder::new(data), "lz4", limit),
        4 => {
            let decoder = ruzstd::decoding::StreamingDecoder::new(data).map_err(|e| {
                DecompressError::Corrupt {
                    codec: "zstd",
                    reason: e.to_string(),
                }
            })?;
            read_capped(decoder, "zstd", limit)
        }
        other => Err(DecompressError::UnknownCodec(other)),
    };
    owned.map(Cow::Owned)
}

/// `data` compressed with Kafka codec `codec` (0 returns it as is). `level` is the
/// topic's `compression.<codec>.level` where the codec has levels here: gzip 1–9
/// (`None`: flate2's default, 6, Kafka's too). lz4 and zstd are pure-Rust encoders
/// with one level each (lz4_flex's fast mode; ruzstd's `Fastest`, about zstd level 1).
/// Snappy is written raw (one block), which every Kafka client reads.
pub fn compress(codec: i16, data: &[u8], level: Option<u32>) -> Result<Vec<u8>, DecompressError> {
    use std::io::Write;
    let failed = |codec: &'static str| {
        move |e: std::io::Error| DecompressError::Corrupt {
            codec,
            reason: e.to_string(),
        }
    };
    match codec {
        0 => Ok(data.to_vec()),
        1 => {
            let level = flate2::Compression::new(level.unwrap_or(6).clamp(1, 9));
            let mut out = flate2::write::GzEncoder::new(Vec::new(), level);
            out.write_all(data).map_err(failed("gzip"))?;
            out.finish().map_err(failed("gzip"))
        }
        2 => snap::raw::Encoder::new()
            .compress_vec(data)
            .map_err(|e| DecompressError::Corrupt {
                codec: "snappy",
                reason: e.to_string(),
            }),
        3 => {
            let mut out = lz4_flex::frame::FrameEncoder::new(Vec::new());
            out.write_all(data).map_err(failed("lz4"))?;
            out.finish().map_err(|e| DecompressError::Corrupt {
                codec: "lz4",
                reason: e.to_string(),
            })
        }
        4 => Ok(ruzstd::encoding::compress_to_vec(
            data,
            ruzstd::encoding::CompressionLevel::Fastest,
        )),
        other => Err(DecompressError::UnknownCodec(other)),
    }
}

fn read_capped(
    reader: impl Read,
    codec: &'static str,
    limit: usize,
) -> Result<Vec<u8>, DecompressError> {
    let mut out = Vec::new();
    reader
        .take(limit as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| DecompressError::Corrupt {
            codec,
            reason: e.to_string(),
        })?;
    if out.len() > limit {
        return Err(DecompressError::TooLarge(limit));
    }
    Ok(out)
}

fn snappy(data: &[u8], limit: usize) -> Result<Vec<u8>, DecompressError> {
    let corrupt = |reason: String| DecompressError::Corrupt {
        codec: "snappy",
        reason,
    };
    let mut decoder = snap::raw::Decoder::new();
    let mut block = |raw: &[u8], out: &mut Vec<u8>| -> Result<(), DecompressError> {
        let size = snap::raw::decompress_len(raw).map_err(|e| corrupt(e.to_string()))?;
        if out.len() + size > limit {
            return Err(DecompressError::TooLarge(limit));
        }
        let start = out.len();
        out.resize(start + size, 0);
        decoder
            .decompress(raw, &mut out[start..])
            .map_err(|e| corrupt(e.to_string()))?;
        Ok(())
    };
    let mut out = Vec::new();
    if !data.starts_with(XERIAL_MAGIC) {
        block(data, &mut out)?;
        return Ok(out);
    }
    let mut rest = data
        .get(XERIAL_HEADER_BYTES..)
        .ok_or_else(|| corrupt("short xerial header".into()))?;
    while !rest.is_empty() {
        let (len, tail) = rest
            .split_first_chunk::<4>()
            .ok_or_else(|| corrupt("short xerial block length".into()))?;
        let len = u32::from_be_bytes(*len) as usize;
        let chunk = tail
            .get(..len)
            .ok_or_else(|| corrupt("xerial block past the end".into()))?;
        block(chunk, &mut out)?;
        rest = &tail[len..];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    const TEXT: &[u8] = b"the quick brown fox jumps over the lazy dog, again and again and again";

    #[test]
    fn every_codec_round_trips_and_respects_the_cap() -> Result<(), Box<dyn std::error::Error>> {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(TEXT)?;
        let gz = gz.finish()?;
        assert_eq!(&*decompress(1, &gz, 1024)?, TEXT);

        let raw = snap::raw::Encoder::new().compress_vec(TEXT)?;
        assert_eq!(&*decompress(2, &raw, 1024)?, TEXT);
        let mut xerial = XERIAL_MAGIC.to_vec();
        xerial.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1]);
        for half in [&TEXT[..30], &TEXT[30..]] {
            let block = snap::raw::Encoder::new().compress_vec(half)?;
            xerial.extend_from_slice(&(block.len() as u32).to_be_bytes());
            xerial.extend_from_slice(&block);
        }
        assert_eq!(&*decompress(2, &xerial, 1024)?, TEXT);

        let mut lz4 = lz4_flex::frame::FrameEncoder::new(Vec::new());
        lz4.write_all(TEXT)?;
        let lz4 = lz4.finish()?;
        assert_eq!(&*decompress(3, &lz4, 1024)?, TEXT);

        assert!(matches!(
            decompress(1, &gz, 10),
            Err(DecompressError::TooLarge(10))
        ));
        assert!(matches!(
            decompress(2, &raw, 10),
            Err(DecompressError::TooLarge(10))
        ));
        assert!(decompress(1, b"not gzip", 1024).is_err());
        assert!(decompress(4, b"not zstd", 1024).is_err());
        assert!(matches!(
            decompress(7, b"", 1024),
            Err(DecompressError::UnknownCodec(7))
        ));
        Ok(())
    }

    #[test]
    fn what_compress_writes_decompresses_for_every_codec() -> Result<(), DecompressError> {
        let text = TEXT.repeat(50);
        for codec in 0..=4 {
            let packed = compress(codec, &text, None)?;
            if codec != 0 {
                assert!(
                    packed.len() < text.len(),
                    "codec {codec} compressed nothing"
                );
            }
            assert_eq!(
                &*decompress(codec, &packed, 1 << 20)?,
                &text[..],
                "codec {codec}"
            );
        }
        assert!(compress(9, &text, None).is_err());
        Ok(())
    }
}
