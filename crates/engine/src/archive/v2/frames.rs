//! The zstd frames of a v2 archive: one magicless frame per revision, no checksum (the map keeps
//! a CRC-32 of the raw revision), no content size (the map has the raw length; older frames have
//! it in the header, which decodes the same), compressed with the revision before
//! it (or nothing, or another title's key) as a single-use raw-content prefix.
//!
//! The decoder is one [`Decoder`] per reader, reused for every frame: creating a zstd context
//! costs more than decoding a frame against a near-identical prefix.

use zstd::zstd_safe::{self, DCtx, DParameter, FrameFormat, InBuffer, OutBuffer};

use crate::archive::frame::compress_frame;

/// A zstd error code as text.
fn name(code: usize) -> String {
    zstd_safe::get_error_name(code).to_string()
}

/// `data` as one magicless frame against `prefix` at `level`.
pub fn compress(data: &[u8], prefix: &[u8], level: i32) -> Result<Vec<u8>, String> {
    compress_frame(data, prefix, level, true).map_err(name)
}

/// `out` cleared, with room for `cap` bytes: a buffer too small is replaced rather than grown,
/// since growing would copy its old bytes, of no use here.
fn make_room(out: &mut Vec<u8>, cap: usize) {
    out.clear();
    if out.capacity() < cap {
        *out = Vec::with_capacity(cap);
    }
}

/// A reused decompression context for magicless frames.
pub struct Decoder {
    dctx: DCtx<'static>,
}

impl std::fmt::Debug for Decoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Decoder")
    }
}

fn magicless_dctx<'a>() -> Result<DCtx<'a>, String> {
    let mut dctx = DCtx::create();
    dctx.set_parameter(DParameter::WindowLogMax(31))
        .map_err(name)?;
    dctx.set_parameter(DParameter::Format(FrameFormat::Magicless))
        .map_err(name)?;
    Ok(dctx)
}

impl Decoder {
    /// A decoder for magicless frames; the error is zstd's, as text.
    pub fn new() -> Result<Decoder, String> {
        Ok(Decoder {
            dctx: magicless_dctx()?,
        })
    }

    /// Decodes one frame of `raw` bytes (bounded by the caller) against `prefix`.
    pub fn decompress(&mut self, data: &[u8], prefix: &[u8], raw: u64) -> Result<Vec<u8>, String> {
        let mut out = Vec::new();
        self.decompress_into(&mut out, data, prefix, raw)?;
        Ok(out)
    }

    /// [`Decoder::decompress`] into `out` (cleared first): a chain decodes into two buffers in
    /// turn, so that its memory is touched once rather than allocated anew per frame.
    pub fn decompress_into(
        &mut self,
        out: &mut Vec<u8>,
        data: &[u8],
        prefix: &[u8],
        raw: u64,
    ) -> Result<(), String> {
        let cap = usize::try_from(raw).map_err(|_| "raw length".to_string())?;
        make_room(out, cap);
        let magic = zstd_safe::MAGIC_DICTIONARY.to_le_bytes();
        if prefix.starts_with(&magic) {
            // A prefix that begins like a zstd dictionary would be parsed as one by the
            // dictionary call below; a one-off context takes it as raw content, as it was
            // compressed.
            let mut dctx = magicless_dctx()?;
            dctx.ref_prefix(prefix).map_err(name)?;
            dctx.decompress(out, data).map_err(name)?;
        } else {
            // Raw content as a dictionary is a prefix by another name, and a call that takes it
            // by argument lets one context live across reads.
            self.dctx
                .decompress_using_dict(out, data, prefix)
                .map_err(name)?;
        }
        if out.len() as u64 != raw {
            return Err(format!("{} bytes, the map says {raw}", out.len()));
        }
        Ok(())
    }

    /// The first `want` bytes of a frame of `raw` bytes against `prefix`, into `out` (cleared
    /// first): a unit's members up to the one a read needs. The frame is decoded block by block
    /// and the decoding stops at the block that reaches `want`, so what follows is neither
    /// decoded nor checked (`out` may hold up to one block more than `want`). `want` = `raw`
    /// decodes and checks the whole frame, as [`Decoder::decompress_into`].
    pub fn decompress_start_into(
        &mut self,
        out: &mut Vec<u8>,
        data: &[u8],
        prefix: &[u8],
        raw: u64,
        want: u64,
    ) -> Result<(), String> {
        if want >= raw {
            return self.decompress_into(out, data, prefix, raw);
        }
        let cap = usize::try_from(raw).map_err(|_| "raw length".to_string())?;
        let want = want as usize;
        make_room(out, cap);
        // Output straight into `out` (no window buffer of the context's own, which would be as
        // large as the frame's window), input handed over as zstd asks for it: one block per
        // call, so the decoding stops within a block of `want`. A context of its own, because a
        // prefix is borrowed for the context's life (the reused one takes it by argument).
        let mut dctx = magicless_dctx()?;
        dctx.set_parameter(DParameter::StableOutBuffer(true))
            .map_err(name)?;
        dctx.ref_prefix(prefix).map_err(name)?;
        let mut output = OutBuffer::around(out);
        // The first call: the frame header (at most 14 bytes, magicless) and a block header.
        let mut end = data.len().min(FIRST_INPUT);
        let mut pos = 0;
        loop {
            let mut input = InBuffer::around(&data[..end]);
            input.set_pos(pos);
            let hint = dctx
                .decompress_stream(&mut output, &mut input)
                .map_err(name)?;
            pos = input.pos();
            // A frame that ends before `want` fails the length check below.
            if output.pos() >= want || hint == 0 {
                break;
            }
            if pos == data.len() {
                return Err(format!("the frame's bytes end {hint} bytes early"));
            }
            end = (pos + hint).min(data.len());
        }
        if out.len() < want {
            return Err(format!("{} bytes, the map says {raw}", out.len()));
        }
        Ok(())
    }
}

/// Input handed to zstd's first call of a partial decode: a magicless frame header (2–14
/// bytes) and the first block's header (3).
const FIRST_INPUT: usize = 17;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_with_and_without_prefix_and_reuse_one_context() {
        let a: Vec<u8> = (0..50_000u32)
            .flat_map(|i| (i % 251).to_be_bytes())
            .collect();
        let mut b = a.clone();
        b[1000..1010].copy_from_slice(b"0123456789");
        let key = compress(&a, &[], 3).unwrap();
        let delta = compress(&b, &a, 3).unwrap();
        assert!(
            delta.len() < key.len() / 4,
            "{} vs {}",
            delta.len(),
            key.len()
        );
        assert_ne!(&key[..4], &0xFD2F_B528u32.to_le_bytes(), "magicless");
        let mut dec = Decoder::new().unwrap();
        for _ in 0..3 {
            assert_eq!(dec.decompress(&key, &[], a.len() as u64).unwrap(), a);
            assert_eq!(dec.decompress(&delta, &a, b.len() as u64).unwrap(), b);
        }
        assert!(dec.decompress(&delta, &a, b.len() as u64 - 1).is_err());
        assert!(dec
            .decompress(&delta[..delta.len() / 2], &a, b.len() as u64)
            .is_err());
        // Frames written before 26 Nov 2026 carry their content size: they decode the same.
        let mut cctx = zstd_safe::CCtx::create();
        cctx.set_parameter(zstd_safe::CParameter::ContentSizeFlag(true))
            .unwrap();
        cctx.set_parameter(zstd_safe::CParameter::Format(FrameFormat::Magicless))
            .unwrap();
        cctx.ref_prefix(&a[..]).unwrap();
        let mut sized = Vec::with_capacity(zstd_safe::compress_bound(b.len()));
        cctx.compress2(&mut sized, &b).unwrap();
        assert_eq!(dec.decompress(&sized, &a, b.len() as u64).unwrap(), b);
        // A prefix that starts like a zstd dictionary is still raw content.
        let mut odd = zstd_safe::MAGIC_DICTIONARY.to_le_bytes().to_vec();
        odd.extend_from_slice(&a);
        let f = compress(&b, &odd, 3).unwrap();
        assert_eq!(dec.decompress(&f, &odd, b.len() as u64).unwrap(), b);
    }

    #[test]
    fn the_start_of_a_frame_decodes_alone() {
        // A unit of a key and eight near copies, each 200 KB: more than one block each.
        let a: Vec<u8> = (0..50_000u32)
            .flat_map(|i| (i.wrapping_mul(2_654_435_761) >> 13).to_be_bytes())
            .collect();
        let mut unit = Vec::new();
        for k in 0..9u8 {
            let mut m = a.clone();
            m[1000 * usize::from(k)] = k;
            unit.extend_from_slice(&m);
        }
        let raw = unit.len() as u64;
        let prefix = &a[..100_000];
        let mut dec = Decoder::new().unwrap();
        for p in [&[][..], prefix] {
            let frame = compress(&unit, p, 3).unwrap();
            let mut out = Vec::new();
            for want in [1, 1000, 200_000, 200_001, 600_000, raw - 1, raw] {
                dec.decompress_start_into(&mut out, &frame, p, raw, want)
                    .unwrap();
                assert!(out.len() as u64 >= want, "{want}");
                assert!(out.len() as u64 <= (want + (128 << 10)).min(raw), "{want}");
                assert_eq!(out[..], unit[..out.len()], "{want}");
            }
            // Cut short, or the map's length too large: refused, whatever is asked for.
            let cut = &frame[..frame.len() / 2];
            assert!(dec
                .decompress_start_into(&mut out, cut, p, raw, raw - 1)
                .is_err());
            assert!(dec
                .decompress_start_into(&mut out, &frame, p, raw + 10, raw + 1)
                .is_err());
        }
    }
}
