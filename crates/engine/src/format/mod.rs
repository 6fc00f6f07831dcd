//! The four basic Wink formats. Each module opens with its byte layout; `docs/FORMAT.md` is the
//! prose version. These modules know nothing of the filesys or the store above them.

pub(crate) mod bytes;
pub mod hash;
pub mod hindex;
pub mod kvseq;
pub mod perm;
pub mod repr;
pub mod superblock;
