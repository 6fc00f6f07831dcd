//! The zstd frames of a v2 archive: one magicless frame per revision, no checksum (the map keeps
//! a CRC-32 of the raw revision), no content size (the map has the raw length; older frames have
//! it in the header, which decodes the same), compressed with the revision before
//! it (or nothing, or another title's key) as a single-use raw-content prefix.
//!
//! The decoder is one [`Decoder`] per reader, reused for every frame: creating a zstd context
//! costs more than decoding a frame against a near-identical prefix.

use zstd::zstd_safe::{self, DCtx, DParameter, FrameFormat};

use crate::archive::frame::compress_frame;

/// A zstd error code as text.
fn name(code: usize) -> String {
    zstd_safe::get_error_name(code).to_string()
}

/// `data` as one magicless frame against `prefix` at `level`.
pub fn compress(data: &[u8], prefix: &[u8], level: i32) -> Result<Vec<u8>, String> {
    compress_frame(data, prefix, level, true).map_err(name)
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
        out.clear();
        out.reserve(cap);
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
}

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
}
