//! Helpers shared by the integration tests.
#![allow(dead_code)]

use wink::archive::{decompress, Archive};

pub fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Every block of every title, decompressed frame by frame as docs/FORMAT.md defines it: a
/// block's first frame against the last revision of the block before (nothing for a key block),
/// each later frame against the block's content so far.
pub fn decompressed_blocks(a: &Archive) -> Vec<(Vec<u8>, u32, Vec<u8>)> {
    let mut out = Vec::new();
    for key in a.titles().unwrap() {
        let map = a.map(&key).unwrap().unwrap();
        let mut prev: Vec<u8> = Vec::new();
        for (n, block) in map.blocks.iter().enumerate() {
            let name = [b"b/".as_slice(), &key, format!("#{n}").as_bytes()].concat();
            let stored = a.filesys().read(&name).unwrap();
            let first: Vec<u8> = if block.key || n == 0 {
                Vec::new()
            } else {
                let last = map.blocks[n - 1].last_len as usize;
                prev[prev.len() - last..].to_vec()
            };
            let mut content = Vec::new();
            let mut at = 0usize;
            for frame in &block.frames {
                let data = &stored[at..at + frame.stored as usize];
                at += frame.stored as usize;
                let prefix = if content.is_empty() { &first } else { &content };
                let raw = decompress(data, prefix, frame.raw).unwrap();
                content.extend_from_slice(&raw);
            }
            assert_eq!(at, stored.len(), "block {n} of {key:?} is its frames");
            prev = content.clone();
            out.push((key.clone(), n as u32, content));
        }
    }
    out
}
