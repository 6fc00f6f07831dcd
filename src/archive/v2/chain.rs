//! Chains of frames: a read of frame n decodes every frame from the key before it (a frame whose
//! base is not the previous frame) up to n, each against the raw revision before it. Keys are
//! placed by a decode budget: a new frame becomes a key when the raw bytes a read of it would
//! decode since the last key would pass `chain_bytes`. Decoding a frame against a near-identical
//! prefix costs about a copy of its raw bytes, so raw bytes are what a read pays for; a key costs
//! a whole revision compressed on its own, which is what the budget trades against.

use super::map::{Base, Map};

/// The key frame whose chain holds frame `n`.
pub fn key_of(map: &Map, n: usize) -> usize {
    let mut k = n;
    while k > 0 && map.frames[k].base == Base::Previous {
        k -= 1;
    }
    k
}

/// Raw bytes a read of frame `n` decodes within its title (a key that references another
/// title's key decodes that key too: one revision more).
pub fn decode_cost(map: &Map, n: usize) -> u64 {
    (key_of(map, n)..=n)
        .map(|i| u64::from(map.frames[i].raw))
        .sum()
}

/// Whether a new frame of `raw` bytes after the title's last frame must be a key.
pub fn needs_key(map: &Map, raw: u64, chain_bytes: u64) -> bool {
    match map.frames.len() {
        0 => true,
        n => decode_cost(map, n - 1).saturating_add(raw) > chain_bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::super::map::Frame;
    use super::*;

    #[test]
    fn a_key_when_the_chain_would_pass_the_budget() {
        let mut map = Map::default();
        let frame = |base| Frame {
            seg: 0,
            offset: 0,
            stored: 1,
            raw: 100,
            crc: 0,
            base,
        };
        assert!(needs_key(&map, 100, 1000));
        map.frames.push(frame(Base::Key));
        for _ in 0..8 {
            assert!(!needs_key(&map, 100, 1000));
            map.frames.push(frame(Base::Previous));
        }
        assert_eq!(decode_cost(&map, 8), 900);
        assert!(!needs_key(&map, 100, 1000));
        map.frames.push(frame(Base::Previous));
        assert!(
            needs_key(&map, 100, 1000),
            "1,000 bytes decoded, then 1,100"
        );
        map.frames.push(frame(Base::Title { title: 0, frame: 0 }));
        assert_eq!((key_of(&map, 10), decode_cost(&map, 10)), (10, 100));
        assert!(needs_key(&map, 1, 0), "budget 0: every frame a key");
    }
}
