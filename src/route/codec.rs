//! Kafka's record compression codecs, both ways, bounded.
//!
//! Decompressing is how kroute looks at the keys inside a compressed batch
//! ([`super::batch::inspect`]) and splits one ([`super::divide`]): it never produces more than a
//! given limit, whatever the input claims. Compressing writes what Kafka's own Java producer
//! writes for each codec (gzip; snappy in xerial framing; lz4 in Kafka's frame: 64 KiB
//! independent blocks, no checksums beyond the header's; zstd), so every broker and consumer
//! version reads it. The batch header records the codec, not the level: kroute compresses at
//! each codec's default level (gzip 6, lz4 fast, zstd 3, as the Java producer does unless
//! `compression.<codec>.level` is set).

use std::io::{Read, Write};

use super::batch::{KeepReason, read_i32};

/// The codec numbers of a batch's attributes (bits 0-2).
pub const GZIP: i16 = 1;
pub const SNAPPY: i16 = 2;
pub const LZ4: i16 = 3;
pub const ZSTD: i16 = 4;

/// The xerial snappy framing's magic header (snappy-java's SnappyOutputStream).
const XERIAL_MAGIC: &[u8] = &[0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];
/// Input bytes per xerial block: snappy-java's default block size.
const XERIAL_BLOCK: usize = 32 * 1024;
/// zstd's level when a Java producer does not set one.
const ZSTD_LEVEL: i32 = 3;

/// Compresses `plain` with `codec` as the Java producer would; None for a codec kroute does
/// not write (or a failure of the codec library, which only happens on allocation failure).
pub fn compress(codec: i16, plain: &[u8]) -> Option<Vec<u8>> {
    match codec {
        GZIP => {
            let mut gz = flate2::write::GzEncoder::new(
                Vec::with_capacity(plain.len() / 2),
                flate2::Compression::default(),
            );
            gz.write_all(plain).ok()?;
            gz.finish().ok()
        }
        SNAPPY => xerial_snappy(plain),
        LZ4 => {
            let mut encoder = lz4::EncoderBuilder::new()
                .block_size(lz4::BlockSize::Max64KB)
                .block_mode(lz4::BlockMode::Independent)
                .checksum(lz4::ContentChecksum::NoChecksum)
                .build(Vec::with_capacity(plain.len() / 2))
                .ok()?;
            encoder.write_all(plain).ok()?;
            let (out, finished) = encoder.finish();
            finished.ok().map(|()| out)
        }
        ZSTD => zstd::bulk::compress(plain, ZSTD_LEVEL).ok(),
        _ => None,
    }
}

/// Snappy in xerial framing: the magic, version 1 and compatible version 1, then each block of
/// up to 32 KiB input as a length-prefixed raw snappy block.
fn xerial_snappy(plain: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(16 + plain.len() / 2);
    out.extend_from_slice(XERIAL_MAGIC);
    out.extend_from_slice(&1i32.to_be_bytes());
    out.extend_from_slice(&1i32.to_be_bytes());
    let mut encoder = snap::raw::Encoder::new();
    let mut block = vec![0u8; snap::raw::max_compress_len(XERIAL_BLOCK)];
    for chunk in plain.chunks(XERIAL_BLOCK) {
        let n = encoder.compress(chunk, &mut block).ok()?;
        out.extend_from_slice(&i32::try_from(n).ok()?.to_be_bytes());
        out.extend_from_slice(&block[..n]);
    }
    Some(out)
}

/// Decompresses a records region, giving up (Uninspectable) past `limit` bytes of output.
pub fn decompress(codec: i16, region: &[u8], limit: u64) -> Result<Vec<u8>, KeepReason> {
    let cap = usize::try_from(limit).unwrap_or(usize::MAX);
    match codec {
        GZIP => read_bounded(&mut flate2::read::MultiGzDecoder::new(region), cap),
        SNAPPY => snappy(region, limit),
        LZ4 => read_bounded(
            &mut lz4::Decoder::new(region).map_err(|_| KeepReason::Uninspectable)?,
            cap,
        ),
        ZSTD => read_bounded(&mut zstd_decoder(region)?, cap),
        _ => Err(KeepReason::Malformed),
    }
}

/// Reads a decoder's whole output, giving up (Uninspectable) past `limit` bytes. By hand, not
/// `take(limit + 1).read_to_end`: that doubles its buffer past the limit, up to twice it, and
/// holds the old and the new buffer at once while growing (3x the limit; the batch_inspect fuzz
/// target found it). Here the buffer never outgrows the limit, and growing holds at most 1.5x.
fn read_bounded(reader: &mut dyn Read, limit: usize) -> Result<Vec<u8>, KeepReason> {
    let mut out = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let n = match reader.read(&mut chunk) {
            Ok(0) => return Ok(out),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return Err(KeepReason::Uninspectable),
        };
        let len = out.len() + n;
        if len > limit {
            return Err(KeepReason::Uninspectable);
        }
        if len > out.capacity() {
            let grown = out.capacity().saturating_mul(2).clamp(len, limit);
            out.reserve_exact(grown - out.len());
        }
        out.extend_from_slice(&chunk[..n]);
    }
}

/// The largest zstd window kroute decodes: 2^26 bytes, the 64 MiB inspection budget. The C
/// decoder allocates the window a frame header announces before any output, up to 2^27 (128
/// MiB) by default; only frames written with the ultra levels 20-22 ask for more than 2^26, and
/// those batches stay where the client put them (uninspectable).
const ZSTD_WINDOW_LOG_MAX: u32 = 26;

fn zstd_decoder(region: &[u8]) -> Result<impl Read + '_, KeepReason> {
    let mut decoder =
        zstd::stream::read::Decoder::new(region).map_err(|_| KeepReason::Uninspectable)?;
    decoder
        .window_log_max(ZSTD_WINDOW_LOG_MAX)
        .map_err(|_| KeepReason::Uninspectable)?;
    Ok(decoder)
}

/// Snappy as Kafka clients write it: xerial framing (a magic header, then length-prefixed raw
/// snappy blocks), or one raw block. Each block announces its decompressed length, which is
/// checked against `limit` before anything is allocated.
fn snappy(region: &[u8], limit: u64) -> Result<Vec<u8>, KeepReason> {
    let mut blocks: Vec<&[u8]> = Vec::new();
    if region.starts_with(XERIAL_MAGIC) {
        let mut pos = 16; // magic, version i32, compatible-version i32
        while pos < region.len() {
            let len = read_i32(region, pos)
                .and_then(|l| usize::try_from(l).ok())
                .ok_or(KeepReason::Uninspectable)?;
            let block = region
                .get(pos + 4..pos + 4 + len)
                .ok_or(KeepReason::Uninspectable)?;
            blocks.push(block);
            pos += 4 + len;
        }
    } else {
        blocks.push(region);
    }
    let mut out = Vec::new();
    let mut decoder = snap::raw::Decoder::new();
    for block in blocks {
        let n = snap::raw::decompress_len(block).map_err(|_| KeepReason::Uninspectable)?;
        if (out.len() + n) as u64 > limit {
            return Err(KeepReason::Uninspectable);
        }
        let start = out.len();
        out.resize(start + n, 0);
        let written = decoder
            .decompress(block, &mut out[start..])
            .map_err(|_| KeepReason::Uninspectable)?;
        out.truncate(start + written);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snappy_bomb_is_refused_before_allocating() {
        // A raw snappy block announcing 4 GiB of output in 5 bytes.
        let bomb = [0x80, 0x80, 0x80, 0x80, 0x0f];
        assert_eq!(snappy(&bomb, 1024), Err(KeepReason::Uninspectable));
        let mut framed = vec![
            0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0, 0, 0, 0, 1, 0, 0, 0, 1,
        ];
        framed.extend_from_slice(&5i32.to_be_bytes());
        framed.extend_from_slice(&bomb);
        assert_eq!(snappy(&framed, 1024), Err(KeepReason::Uninspectable));
    }

    #[test]
    fn decompressing_never_holds_a_buffer_larger_than_the_limit() {
        // 550 KiB of output under a 600 KiB limit: a doubling buffer would reach 1 MiB.
        let limit = 600 * 1024;
        let plain = vec![7u8; 550 * 1024];
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, &plain).unwrap();
        let gz = gz.finish().unwrap();
        let out = decompress(1, &gz, limit as u64).unwrap();
        assert_eq!(out, plain);
        assert!(out.capacity() <= limit, "capacity {}", out.capacity());
        assert_eq!(
            decompress(1, &gz, plain.len() as u64 - 1),
            Err(KeepReason::Uninspectable)
        );
        assert_eq!(decompress(1, &gz, plain.len() as u64).unwrap(), plain);
    }

    /// A zstd frame asking for a 2^27-byte window (ultra levels, streamed: no content size)
    /// would make the C decoder allocate 128 MiB before any output, twice the budget.
    #[test]
    fn zstd_windows_above_the_budget_are_not_decoded() {
        use std::io::Write;
        let frame = |window_log: u32| {
            let mut encoder = zstd::stream::write::Encoder::new(Vec::new(), 3).unwrap();
            encoder
                .set_parameter(zstd::zstd_safe::CParameter::WindowLog(window_log))
                .unwrap();
            encoder.include_contentsize(false).unwrap();
            encoder.write_all(&[7u8; 4096]).unwrap();
            encoder.finish().unwrap()
        };
        assert_eq!(
            decompress(4, &frame(26), 1 << 26).map(|p| p.len()),
            Ok(4096)
        );
        assert_eq!(
            decompress(4, &frame(27), 1 << 26),
            Err(KeepReason::Uninspectable)
        );
    }
}
