//! One zstd frame against a prefix: the archive's unit of compression in both formats (format
//! 1's blocks, format 2's revisions), with the window sized to reach back over the prefix.

/// The window (log2 bytes) a frame needs so that its matches reach back over `len` bytes (its
/// own and its prefix's): 1 MiB to 1 GiB.
fn window_log(len: usize) -> u32 {
    (usize::BITS - len.max(1).leading_zeros()).clamp(20, 30)
}

/// Compresses `data` as one zstd frame with `prefix` as its single-use dictionary: the prefix is
/// treated as the bytes right before `data` (the previous revisions), so matches reach into it.
pub fn compress(data: &[u8], prefix: &[u8], level: i32) -> std::io::Result<Vec<u8>> {
    compress_frame(data, prefix, level, false)
        .map_err(|code| std::io::Error::other(zstd::zstd_safe::get_error_name(code)))
}

/// [`compress`] for both formats: the window reaching back over the prefix; format 1 with the
/// content size in the header, format 2 (`magicless`) with no magic number, no checksum and no
/// content size (its map holds the raw length and a CRC-32: 4 bytes a frame saved). A context
/// per frame: its prefix is borrowed for the context's life, and building the match tables of
/// the prefix dominates the cost anyway. Errors are zstd's codes.
pub(crate) fn compress_frame(
    data: &[u8],
    prefix: &[u8],
    level: i32,
    magicless: bool,
) -> Result<Vec<u8>, usize> {
    use zstd::zstd_safe::{CCtx, CParameter, FrameFormat};
    let mut cctx = CCtx::create();
    cctx.set_parameter(CParameter::CompressionLevel(level))?;
    cctx.set_parameter(CParameter::WindowLog(window_log(data.len() + prefix.len())))?;
    cctx.set_parameter(CParameter::ContentSizeFlag(!magicless))?;
    if magicless {
        cctx.set_parameter(CParameter::ChecksumFlag(false))?;
        cctx.set_parameter(CParameter::Format(FrameFormat::Magicless))?;
    }
    // An empty prefix is none (zstd: referencing an empty prefix clears it).
    if !prefix.is_empty() {
        cctx.ref_prefix(prefix)?;
    }
    let mut out = Vec::with_capacity(zstd::zstd_safe::compress_bound(data.len()));
    cctx.compress2(&mut out, data)?;
    Ok(out)
}

/// Decompresses one frame of known raw length made by [`compress`] with the same prefix.
pub fn decompress(data: &[u8], prefix: &[u8], raw: u64) -> std::result::Result<Vec<u8>, String> {
    use zstd::zstd_safe::{DCtx, DParameter};
    let fail = |code: usize| zstd::zstd_safe::get_error_name(code).to_string();
    let mut dctx = DCtx::create();
    dctx.set_parameter(DParameter::WindowLogMax(31))
        .map_err(fail)?;
    dctx.ref_prefix(prefix).map_err(fail)?;
    // `raw` comes from a CRC-checked map and is bounded by MAX_BLOCK_RAW there.
    let mut out = Vec::with_capacity(raw as usize);
    dctx.decompress(&mut out, data).map_err(fail)?;
    if out.len() as u64 != raw {
        return Err(format!("{} bytes, the map says {raw}", out.len()));
    }
    Ok(out)
}
