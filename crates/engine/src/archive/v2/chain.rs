//! Chains of frames. Each frame that is not a key names the frame whose raw revision it was
//! compressed against, its **parent**: the frame before it, or another of the [`WINDOW`] frames
//! before it (a page that went back to an earlier look deltas best from that look). The parents
//! make a tree per key; a read of frame n decodes its **path**, the frames from its key down to
//! it, each against its parent's raw revision. Decoding a frame against a near-identical prefix
//! costs about a copy of its raw bytes, so the raw bytes of the path are what a read pays for; a
//! key costs a whole revision compressed on its own, which is what the decode budget trades
//! against: a new frame may take a parent only if the raw bytes of the parent's path and its own
//! stay within `chain_bytes`, and becomes a key when no candidate does.

use super::map::{Base, Map};

/// How far back a parent may lie: frame n's parent is one of frames n − WINDOW .. n − 1.
pub const WINDOW: usize = 16;

/// The frame whose raw revision frame `n` was compressed against, within its title.
pub fn parent(map: &Map, n: usize) -> Option<usize> {
    match map.frames[n].base {
        Base::Previous | Base::Unit | Base::After => n.checked_sub(1),
        Base::Earlier(j) => Some(j as usize),
        Base::Key | Base::Title { .. } => None,
    }
}

/// The frames a read of frame `n` decodes, from its key to `n`, in increasing order (a parent
/// precedes its child: the map's check refuses anything else).
pub fn path(map: &Map, n: usize) -> Vec<usize> {
    let mut out = vec![n];
    let mut at = n;
    while let Some(p) = parent(map, at).filter(|p| *p < at) {
        out.push(p);
        at = p;
    }
    out.reverse();
    out
}

/// The unit holding frame `n` (format 3): its first frame and its last (`n`, `n` for a frame
/// of its own).
pub fn unit(map: &Map, n: usize) -> (usize, usize) {
    let mut head = n;
    while head > 0 && map.frames[head].base == Base::Unit {
        head -= 1;
    }
    let mut last = n;
    while map
        .frames
        .get(last + 1)
        .is_some_and(|f| f.base == Base::Unit)
    {
        last += 1;
    }
    (head, last)
}

/// Raw bytes a read of frame `n` decodes within its title, at most: every unit its path passes
/// through, whole (a read stops decoding a unit after the last member it needs, so this bounds
/// a read of any member; a key that references another title's key decodes that key too: one
/// revision more).
pub fn decode_cost(map: &Map, n: usize) -> u64 {
    let mut cost = 0;
    let mut done = usize::MAX;
    for &i in path(map, n).iter().rev() {
        let (head, last) = unit(map, i);
        if head != done {
            cost += (head..=last)
                .map(|j| u64::from(map.frames[j].raw))
                .sum::<u64>();
            done = head;
        }
    }
    cost
}

/// Whether a new frame of `raw` bytes may take frame `parent` as its parent: within the window
/// of the frame it would be, and within the decode budget.
pub fn may_parent(map: &Map, parent: usize, raw: u64, chain_bytes: u64) -> bool {
    map.frames.len() - parent <= WINDOW
        && decode_cost(map, parent).saturating_add(raw) <= chain_bytes
}

#[cfg(test)]
mod tests {
    use super::super::map::Frame;
    use super::*;

    fn frame(base: Base) -> Frame {
        Frame {
            seg: 0,
            offset: 0,
            stored: 1,
            raw: 100,
            crc: 0,
            base,
        }
    }

    #[test]
    fn a_parent_within_the_budget_and_the_window() {
        let mut map = Map::default();
        map.frames.push(frame(Base::Key));
        for _ in 0..8 {
            assert!(may_parent(&map, map.frames.len() - 1, 100, 1000));
            map.frames.push(frame(Base::Previous));
        }
        assert_eq!(decode_cost(&map, 8), 900);
        assert!(may_parent(&map, 8, 100, 1000));
        map.frames.push(frame(Base::Previous));
        assert!(
            !may_parent(&map, 9, 100, 1000),
            "1,000 bytes decoded, then 1,100"
        );
        // An earlier frame has a shorter path: frame 10 from frame 2 decodes 0, 1, 2, 10.
        assert!(may_parent(&map, 2, 100, 1000));
        map.frames.push(frame(Base::Earlier(2)));
        assert_eq!(path(&map, 10), vec![0, 1, 2, 10]);
        assert_eq!((path(&map, 10)[0], decode_cost(&map, 10)), (0, 400));
        map.frames.push(frame(Base::Title { title: 0, frame: 0 }));
        assert_eq!((path(&map, 11)[0], decode_cost(&map, 11)), (11, 100));
        assert!(!may_parent(&map, 11, 1, 0), "budget 0: every frame a key");
        for _ in 0..WINDOW {
            map.frames.push(frame(Base::Previous));
        }
        assert!(!may_parent(&map, 11, 1, u64::MAX), "out of the window");
        assert!(may_parent(&map, 12, 1, u64::MAX));
    }
}
