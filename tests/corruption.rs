//! Bad bytes (docs/INTERNALS.md § Errors): small but representative files of every format, written
//! by the library, then truncated at every offset and damaged byte by byte, and read back through
//! every public read API.
//!
//! Every call must return the right data or an error; a corruption error names the file and an
//! offset within it (`wink_harness::fuzzing::check_error`); nothing panics, and nothing allocates more
//! than [`ALLOC_LIMIT`] at once (the guard allocator below refuses, which aborts this binary).
//!
//! The formats carry no checksum of key or value bytes (docs/FORMAT.md § Conventions), so each
//! damaged offset is classified from the pristine file's layout:
//! - structural (superblock, delflag, length fields, padding, gaps, cells, pairs): the damage is
//!   detected — a call fails, or a consistency check of the kind `wink check` makes (ENTRIES and
//!   AENTRIES against a walk, every used cell verified against its key, every pair's hash against
//!   its key) disagrees — or every call returns exactly the original data;
//! - payload (key and value bytes): an error, or the original data with exactly that byte changed;
//! - meaningless (past FILESIZE): exactly the original data, and no error.

use std::alloc::{GlobalAlloc, Layout, System};
use std::fmt::Debug;
use std::path::Path;
use std::sync::Arc;

use wink::clock::ManualClock;
use wink::format::hindex::{Cell, Found, HIndex, HIndexOptions};
use wink::format::kvseq::{EntryLayout, KvPointer, KvSeq, KvSeqOptions};
use wink::format::perm::{Pair, Perm, PermOptions};
use wink::format::repr::Repr;
use wink::format::superblock::{self, var, Superblock, VarName};
use wink::storage::{FileStorage, MemStorage, Storage};
use wink::Error;
use wink_harness::fuzzing::check_error;

// ---- allocation guard --------------------------------------------------------------------

/// Largest single allocation this binary allows. The files here are a few hundred bytes; a
/// reader that sizes a buffer from a damaged header asks for far more and is stopped here.
const ALLOC_LIMIT: usize = 16 << 20;

struct AllocGuard;

// SAFETY: every call is forwarded to `System` with the caller's own arguments, so `System`'s
// guarantees carry over; refusing an allocation by returning null is what `GlobalAlloc` allows.
unsafe impl GlobalAlloc for AllocGuard {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if refuse(layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded unchanged (see the impl's comment).
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if refuse(layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded unchanged.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if refuse(new_size) {
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GUARD: AllocGuard = AllocGuard;

fn refuse(size: usize) -> bool {
    if size <= ALLOC_LIMIT {
        return false;
    }
    // Formatting an integer to stderr does not allocate, so this cannot recurse.
    eprintln!("allocation guard: refused {size} bytes (limit {ALLOC_LIMIT})");
    true
}

#[test]
fn the_guard_refuses_large_allocations() {
    let mut v: Vec<u8> = Vec::new();
    assert!(v.try_reserve_exact(ALLOC_LIMIT + 1).is_err());
    assert!(v.try_reserve_exact(ALLOC_LIMIT).is_ok());
}

// ---- observations and verdicts -----------------------------------------------------------

/// What one damaged file showed: the data the read APIs returned, the errors they gave (each
/// already checked to name the file and an offset within it), and the consistency findings.
struct Seen<V> {
    opened: bool,
    view: V,
    errors: Vec<String>,
    findings: Vec<String>,
}

impl<V: Default> Seen<V> {
    fn new() -> Self {
        Seen {
            opened: false,
            view: V::default(),
            errors: Vec::new(),
            findings: Vec::new(),
        }
    }
}

impl<V> Seen<V> {
    fn error(&mut self, e: Error, files: &[(&Path, u64)]) {
        check_error(&e, files);
        self.errors.push(e.to_string());
    }

    /// `r`'s value, or `None` after recording its error.
    fn take<T>(&mut self, r: wink::Result<T>, files: &[(&Path, u64)]) -> Option<T> {
        r.map_err(|e| self.error(e, files)).ok()
    }

    fn detected(&self) -> bool {
        !self.errors.is_empty() || !self.findings.is_empty()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    Structural,
    Payload,
    Meaningless,
}

/// Reads a (damaged) copy of a subject's file through every read API.
type Observe<V> = Box<dyn Fn(&[u8]) -> Seen<V>>;
/// The original view with the byte at an offset xor-ed with a mask (payload bytes only).
type Patch<V> = Box<dyn Fn(&V, usize, u8) -> V>;

/// One pristine file and how to read it.
struct Subject<V> {
    name: String,
    bytes: Vec<u8>,
    classes: Vec<Class>,
    /// Shorter files lack bytes the header promises (FILESIZE, the table, the pairs).
    logical_end: usize,
    observe: Observe<V>,
    /// The original view with the byte at `offset` xor-ed with `mask` (payload bytes only).
    patched: Patch<V>,
    /// The one undetectable structural change the format admits, if any (see its uses).
    admissible: fn(original: &V, seen: &V) -> bool,
    original: V,
}

#[derive(Default, Debug)]
struct Tally {
    structural_detected: usize,
    structural_by_check_only: usize,
    structural_unchanged: usize,
    structural_admissible: usize,
    payload_changed: usize,
    payload_detected: usize,
    meaningless: usize,
}

impl<V: PartialEq + Debug> Subject<V> {
    fn new(
        name: &str,
        bytes: Vec<u8>,
        classes: Vec<Class>,
        logical_end: usize,
        observe: Observe<V>,
        patched: Patch<V>,
        admissible: fn(&V, &V) -> bool,
    ) -> Self {
        let seen = observe(&bytes);
        assert!(
            !seen.detected(),
            "{name}: pristine file: {:?} {:?}",
            seen.errors,
            seen.findings
        );
        Subject {
            name: name.to_string(),
            bytes,
            classes,
            logical_end,
            observe,
            patched,
            admissible,
            original: seen.view,
        }
    }

    /// Damage: `bytes[offset] ^= mask`, judged by the offset's class.
    fn flip(&self, offset: usize, mask: u8, tally: &mut Tally) {
        let mut bytes = self.bytes.clone();
        bytes[offset] ^= mask;
        let seen = (self.observe)(&bytes);
        let what = format!(
            "{}: byte {offset} ^ {mask:#04x} ({:?})",
            self.name, self.classes[offset]
        );
        match self.classes[offset] {
            Class::Meaningless => {
                assert!(
                    !seen.detected(),
                    "{what}: false alarm: {:?} {:?}",
                    seen.errors,
                    seen.findings
                );
                assert_eq!(seen.view, self.original, "{what}");
                tally.meaningless += 1;
            }
            Class::Structural if seen.detected() => {
                tally.structural_detected += 1;
                if seen.errors.is_empty() {
                    tally.structural_by_check_only += 1;
                }
            }
            Class::Structural if seen.view == self.original => tally.structural_unchanged += 1,
            Class::Structural => {
                let admissible = (self.admissible)(&self.original, &seen.view);
                assert!(
                    admissible,
                    "{what}: undetected, and the data changed:\n{:?}\nwas\n{:?}",
                    seen.view, self.original
                );
                tally.structural_admissible += 1;
            }
            Class::Payload if seen.detected() => tally.payload_detected += 1,
            Class::Payload => {
                let expected = (self.patched)(&self.original, offset, mask);
                assert_eq!(seen.view, expected, "{what}: more changed than the byte");
                tally.payload_changed += 1;
            }
        }
    }

    /// Every prefix of the file: shorter than the header promises is an error at open; longer
    /// reads exactly as the whole file.
    fn truncations(&self) {
        for len in 0..self.bytes.len() {
            let seen = (self.observe)(&self.bytes[..len]);
            if len < self.logical_end {
                assert!(
                    !seen.opened,
                    "{}: opened when cut to {len} bytes",
                    self.name
                );
            } else {
                assert!(
                    !seen.detected(),
                    "{}: cut to {len}: {:?}",
                    self.name,
                    seen.errors
                );
                assert_eq!(seen.view, self.original, "{}: cut to {len}", self.name);
            }
        }
    }

    /// Every byte with three masks, then `rounds` random single-byte flips; returns the tally.
    fn flips(&self, seed: u64, rounds: usize) -> Tally {
        let mut tally = Tally::default();
        for offset in 0..self.bytes.len() {
            for mask in [0x01, 0x80, 0xff] {
                self.flip(offset, mask, &mut tally);
            }
        }
        let mut rng = Rng(seed);
        for _ in 0..rounds {
            let offset = rng.below(self.bytes.len() as u64) as usize;
            let mask = rng.below(255) as u8 + 1;
            self.flip(offset, mask, &mut tally);
        }
        assert!(
            tally.structural_detected > 0,
            "{}: no damage ever detected: {tally:?}",
            self.name
        );
        tally
    }

    /// Several bytes at once, or a run overwritten: only "no panic, well-formed errors" holds.
    fn bursts(&self, seed: u64, rounds: usize, harness: fn(&[u8])) {
        let mut rng = Rng(seed);
        for _ in 0..rounds {
            let mut bytes = self.bytes.clone();
            let len = bytes.len() as u64;
            if rng.below(2) == 0 {
                for _ in 0..1 + rng.below(8) {
                    bytes[rng.below(len) as usize] ^= rng.below(255) as u8 + 1;
                }
            } else {
                let start = rng.below(len) as usize;
                let end = (start + 1 + rng.below(24) as usize).min(bytes.len());
                bytes[start..end]
                    .iter_mut()
                    .for_each(|b| *b = rng.below(256) as u8);
            }
            (self.observe)(&bytes);
            harness(&bytes);
        }
    }
}

/// splitmix64: a seeded, dependency-free source of offsets and masks.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % n
    }
}

fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(1_700_000_000))
}

/// Superblock bytes are structural (magic, names, values, terminator, and the zero room too:
/// docs/FORMAT.md § Superblock says it is zero, so a reader may check it).
fn classes_with_superblock(len: usize) -> Vec<Class> {
    vec![Class::Structural; len]
}

// ---- kvseq -------------------------------------------------------------------------------

#[derive(Clone, Debug, Default, PartialEq)]
struct Ent {
    layout: Option<EntryLayout>,
    deleted: bool,
    key: Vec<u8>,
    value: Vec<u8>,
}

/// Everything the kvseq read APIs return for one file.
#[derive(Clone, Debug, Default, PartialEq)]
struct KvView {
    filesize: u64,
    first: u64,
    shape: (i64, i64, bool, u64),
    /// `iter_entries(first, false)`, up to its first error.
    all: Vec<Ent>,
    /// `iter(first, true)`: pointers and keys of live entries.
    live: Vec<(u64, Vec<u8>)>,
    /// The point reads at each pristine pointer.
    points: Vec<Point>,
}

/// `read`, `read_key`, `read_value`, `layout` and `read_value_at` of one pointer, and the
/// pointers an `iter` from there meets.
#[derive(Clone, Debug, Default, PartialEq)]
struct Point {
    entry: Option<Ent>,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    layout: Option<EntryLayout>,
    value_at: Option<Vec<u8>>,
    from_here: Vec<u64>,
}

struct KvShape {
    name: &'static str,
    keyrepr: Repr,
    valrepr: Repr,
    delflag: bool,
    align: u64,
    fileincr: u64,
}

const P1: Repr = Repr::Prefixed { width: 1 };
const P2: Repr = Repr::Prefixed { width: 2 };
const P4: Repr = Repr::Prefixed { width: 4 };
const P8: Repr = Repr::Prefixed { width: 8 };

fn kv_shapes() -> Vec<KvShape> {
    let shape = |name, keyrepr, valrepr, delflag, align, fileincr| KvShape {
        name,
        keyrepr,
        valrepr,
        delflag,
        align,
        fileincr,
    };
    vec![
        shape("p1-p2-del", P1, P2, true, 0, 0),
        shape("p2-p4", P2, P4, false, 0, 0),
        shape("p4-p8-del-align16", P4, P8, true, 16, 0),
        shape("p8-p1-preallocated", P8, P1, false, 0, 64),
        shape(
            "fixed8-fixed5-del",
            Repr::Fixed { len: 8 },
            Repr::Fixed { len: 5 },
            true,
            0,
            0,
        ),
        shape(
            "fixed8-fixed0",
            Repr::Fixed { len: 8 },
            Repr::Fixed { len: 0 },
            false,
            0,
            0,
        ),
        shape(
            "pad12-pad20-del-align8",
            Repr::Padded { max: 12 },
            Repr::Padded { max: 20 },
            true,
            8,
            0,
        ),
        shape("pad6-p2-align4", Repr::Padded { max: 6 }, P2, false, 4, 0),
    ]
}

/// `data` cut, or for fixed representations padded with dots, to what `repr` holds.
fn fit(repr: Repr, data: &[u8]) -> Vec<u8> {
    let mut out = data.to_vec();
    match repr {
        Repr::Fixed { len } => out.resize(usize::from(len), b'.'),
        _ => out.truncate(repr.max_len().min(data.len() as u64) as usize),
    }
    out
}

/// A kvseq of six entries (an empty key, an empty value, a deleted entry where KVDELFL allows,
/// one replaced in place, the last one replaced by a longer one); returns its bytes and pointers.
fn build_kvseq(shape: &KvShape) -> (Vec<u8>, Vec<KvPointer>) {
    let storage = MemStorage::new("build");
    let opts = KvSeqOptions {
        sbsize: 256,
        keyrepr: shape.keyrepr,
        valrepr: shape.valrepr,
        delflag: shape.delflag,
        align: shape.align,
        fileincr: shape.fileincr,
        clock: clock(),
        ..KvSeqOptions::default()
    };
    let mut kv = KvSeq::create(Box::new(storage.clone()), &opts).expect("create");
    let keys: [&[u8]; 6] = [b"", b"a", b"key", b"k3", b"longer-key", b"z"];
    let values: [&[u8]; 6] = [b"v0", b"", b"value-2", b"x", b"0123456789abcdef", b"end"];
    let mut ptrs = Vec::new();
    for (k, v) in keys.iter().zip(values) {
        ptrs.push(
            kv.append(&fit(shape.keyrepr, k), &fit(shape.valrepr, v))
                .expect("append"),
        );
    }
    kv.replace(
        ptrs[3],
        &fit(shape.keyrepr, b"k3"),
        &fit(shape.valrepr, b"y"),
    )
    .expect("replace");
    kv.replace(
        ptrs[5],
        &fit(shape.keyrepr, b"z"),
        &fit(shape.valrepr, b"the end"),
    )
    .expect("replace last");
    if shape.delflag {
        kv.delete(ptrs[2]).expect("delete");
    }
    kv.sync().expect("sync");
    drop(kv);
    (storage.to_vec(), ptrs)
}

fn observe_kv(name: &str, bytes: &[u8], ptrs: &[KvPointer]) -> Seen<KvView> {
    observe_kv_in(Box::new(MemStorage::from_bytes(name, bytes.to_vec())), ptrs)
}

fn observe_kv_in(storage: Box<dyn Storage>, ptrs: &[KvPointer]) -> Seen<KvView> {
    let mut seen = Seen::<KvView>::new();
    let path = storage.path().to_path_buf();
    let files = [(path.as_path(), storage.len().expect("length"))];
    let Some(kv) = seen.take(KvSeq::open(storage, false), &files) else {
        return seen;
    };
    seen.opened = true;
    let mut view = KvView {
        filesize: kv.filesize(),
        first: kv.first().0,
        shape: (
            kv.keyrepr().code(),
            kv.valrepr().code(),
            kv.has_delflag(),
            kv.align(),
        ),
        ..KvView::default()
    };
    let mut walk_ok = true;
    for item in kv.iter_entries(kv.first(), false) {
        match item {
            Ok(info) => view.all.push(Ent {
                layout: Some(info.layout),
                deleted: info.layout.deleted,
                key: info.key,
                value: info.value.expect("iter_entries yields values"),
            }),
            Err(e) => {
                seen.error(e, &files);
                walk_ok = false;
            }
        }
    }
    for item in kv.iter(kv.first(), true) {
        if let Some(info) = seen.take(item, &files) {
            view.live.push((info.layout.ptr.0, info.key));
        }
    }
    for &ptr in ptrs {
        let point = observe_point(&kv, ptr, &mut seen, &files);
        view.points.push(point);
    }
    if walk_ok {
        cross_check_counts(&kv, &view, &mut seen);
    }
    seen.view = view;
    seen
}

fn observe_point(
    kv: &KvSeq,
    ptr: KvPointer,
    seen: &mut Seen<KvView>,
    files: &[(&Path, u64)],
) -> Point {
    let entry = seen.take(kv.read(ptr), files).map(|e| Ent {
        layout: None,
        deleted: e.deleted,
        key: e.key,
        value: e.value,
    });
    let key = seen.take(kv.read_key(ptr), files).map(|(_, key)| key);
    let value = seen.take(kv.read_value(ptr), files);
    let layout = seen.take(kv.layout(ptr), files);
    let value_at = layout.and_then(|l| {
        let mut buf = vec![0u8; l.value_len as usize];
        seen.take(kv.read_value_at(&l, 0, &mut buf), files)
            .map(|()| buf)
    });
    let mut from_here = Vec::new();
    for item in kv.iter(ptr, false) {
        match seen.take(item, files) {
            Some(info) => from_here.push(info.layout.ptr.0),
            None => break,
        }
    }
    Point {
        entry,
        key,
        value,
        layout,
        value_at,
        from_here,
    }
}

/// What a checker compares after a clean walk: ENTRIES and AENTRIES against the entries met.
fn cross_check_counts(kv: &KvSeq, view: &KvView, seen: &mut Seen<KvView>) {
    let live = view.all.iter().filter(|e| !e.deleted).count() as u64;
    for (name, stored, counted) in [
        ("ENTRIES", kv.entries(), view.all.len() as u64),
        ("AENTRIES", kv.live_entries(), live),
    ] {
        if stored.is_some_and(|n| n != counted) {
            seen.findings
                .push(format!("{name} {stored:?} but the walk met {counted}"));
        }
    }
    if view.live.len() as u64 != live {
        seen.findings
            .push("live walk and full walk disagree".into());
    }
}

/// Marks key and value bytes as payload and bytes past FILESIZE as meaningless.
fn kv_classes(bytes: &[u8], view: &KvView) -> Vec<Class> {
    let mut classes = classes_with_superblock(bytes.len());
    for e in &view.all {
        let l = e.layout.expect("walked entries have layouts");
        for (at, len) in [(l.key_offset, l.key_len), (l.value_offset, l.value_len)] {
            classes[at as usize..(at + len) as usize].fill(Class::Payload);
        }
    }
    classes[view.filesize as usize..].fill(Class::Meaningless);
    classes
}

/// `view` with the byte at file offset `at` xor-ed with `mask` wherever a key or value holds it.
fn patch_kv(view: &KvView, at: usize, mask: u8) -> KvView {
    let mut view = view.clone();
    let layouts: Vec<EntryLayout> = view.all.iter().filter_map(|e| e.layout).collect();
    let at = at as u64;
    let hit = |start: u64, data: &mut [u8]| {
        if (start..start + data.len() as u64).contains(&at) {
            data[(at - start) as usize] ^= mask;
        }
    };
    let owner = |ptr: u64| layouts.iter().find(|l| l.ptr.0 == ptr).copied();
    for e in &mut view.all {
        let l = e.layout.expect("walked entries have layouts");
        hit(l.key_offset, &mut e.key);
        hit(l.value_offset, &mut e.value);
    }
    for (ptr, key) in &mut view.live {
        hit(
            owner(*ptr).expect("a live entry was walked").key_offset,
            key,
        );
    }
    for p in &mut view.points {
        let l = p.layout.expect("pristine pointers have layouts");
        if let Some(e) = &mut p.entry {
            hit(l.key_offset, &mut e.key);
            hit(l.value_offset, &mut e.value);
        }
        for (start, data) in [
            (l.key_offset, &mut p.key),
            (l.value_offset, &mut p.value),
            (l.value_offset, &mut p.value_at),
        ] {
            if let Some(data) = data {
                hit(start, data);
            }
        }
    }
    view
}

fn kv_subject(shape: &KvShape) -> Subject<KvView> {
    let (bytes, ptrs) = build_kvseq(shape);
    let name = format!("corrupt/{}.kvseq", shape.name);
    let observe_name = name.clone();
    let observe: Observe<KvView> = Box::new(move |b| observe_kv(&observe_name, b, &ptrs));
    let pristine = observe(&bytes);
    let classes = kv_classes(&bytes, &pristine.view);
    let logical_end = pristine.view.filesize as usize;
    Subject::new(
        &name,
        bytes,
        classes,
        logical_end,
        observe,
        Box::new(patch_kv),
        grew_over_zeros,
    )
}

/// A length field that grew over zero bytes (a padded slot's padding, or an alignment gap) leaves
/// a valid file that differs from the original only in that one key or value, which gained
/// trailing zeros. Without a checksum of the data no reader can tell (docs/FORMAT.md
/// § Conventions); this exact outcome, and no other, is admitted.
fn grew_over_zeros(original: &KvView, seen: &KvView) -> bool {
    let frame = |v: &KvView| (v.filesize, v.first, v.shape, v.all.len());
    if frame(original) != frame(seen) || !derived_consistent(seen) {
        return false;
    }
    let changed: Vec<usize> = (0..seen.all.len())
        .filter(|i| original.all[*i] != seen.all[*i])
        .collect();
    let [i] = changed[..] else {
        return false;
    };
    let (a, b) = (&original.all[i], &seen.all[i]);
    let grew = |old: &[u8], new: &[u8]| {
        new.len() > old.len() && new.starts_with(old) && new[old.len()..].iter().all(|x| *x == 0)
    };
    let ptr = |e: &Ent| e.layout.map(|l| l.ptr);
    ptr(a) == ptr(b)
        && a.deleted == b.deleted
        && ((a.key == b.key && grew(&a.value, &b.value))
            || (a.value == b.value && grew(&a.key, &b.key)))
}

/// The live walk and the point reads say what the full walk says.
fn derived_consistent(view: &KvView) -> bool {
    let ptr = |e: &Ent| e.layout.expect("walked entries have layouts").ptr.0;
    let live: Vec<(u64, Vec<u8>)> = view
        .all
        .iter()
        .filter(|e| !e.deleted)
        .map(|e| (ptr(e), e.key.clone()))
        .collect();
    live == view.live
        && view.points.len() == view.all.len()
        && view
            .points
            .iter()
            .zip(&view.all)
            .enumerate()
            .all(|(i, (point, e))| {
                let expected = Point {
                    entry: Some(Ent {
                        layout: None,
                        ..e.clone()
                    }),
                    key: Some(e.key.clone()),
                    value: Some(e.value.clone()),
                    layout: e.layout,
                    value_at: Some(e.value.clone()),
                    from_here: view.all[i..].iter().map(ptr).collect(),
                };
                *point == expected
            })
}

#[test]
fn kvseq_truncated_at_every_offset() {
    for shape in kv_shapes() {
        kv_subject(&shape).truncations();
    }
}

#[test]
fn kvseq_flipped_bytes() {
    for (i, shape) in kv_shapes().iter().enumerate() {
        let subject = kv_subject(shape);
        let tally = subject.flips(0x5eed_0000 + i as u64, 3000);
        assert!(tally.payload_changed > 0, "{}: {tally:?}", shape.name);
        eprintln!("{}: {tally:?}", shape.name);
        subject.bursts(
            0xb0b0_0000 + i as u64,
            500,
            wink_harness::fuzzing::kvseq_walk,
        );
    }
}

#[test]
fn kvseq_pristine_views_hold_what_was_written() {
    for shape in kv_shapes() {
        let s = kv_subject(&shape);
        let v = &s.original;
        assert_eq!(v.all.len(), 6, "{}", shape.name);
        assert_eq!(
            v.all[5].value,
            fit(shape.valrepr, b"the end"),
            "{}",
            shape.name
        );
        assert_eq!(v.all[2].deleted, shape.delflag, "{}", shape.name);
        assert_eq!(
            v.live.len(),
            if shape.delflag { 5 } else { 6 },
            "{}",
            shape.name
        );
        assert!(s.classes.contains(&Class::Payload) || shape.keyrepr == Repr::Fixed { len: 0 });
        let past_filesize = s
            .classes
            .iter()
            .filter(|c| **c == Class::Meaningless)
            .count();
        assert_eq!(past_filesize > 0, shape.fileincr > 0, "{}", shape.name);
    }
}

// ---- hindex ------------------------------------------------------------------------------

/// The datafile the hindex and perm cases index: KEYREPR 1, VALREPR 2, KVDELFL 1.
struct Indexed {
    kv: KvSeq,
    kv_len: u64,
    /// Keys in insertion order: `wraps[0]` and `wraps[1]` share home cell 15 of 16, so the second
    /// wraps to cell 0, and `wraps[2]` (home 0) is pushed to cell 1; `wraps[0]` is then deleted,
    /// leaving an HTDEL cell on the others' probe paths.
    keys: Vec<Vec<u8>>,
    ptrs: Vec<KvPointer>,
}

const HTSIZE: u64 = 16;
const INDEX_DATA: &str = "corrupt/indexed.kvseq";

fn home(key: &[u8]) -> u64 {
    wink::format::hash::KeyHash::of(key).home(HTSIZE)
}

fn indexed() -> Indexed {
    let candidates: Vec<Vec<u8>> = (0..1000).map(|i| format!("key-{i}").into_bytes()).collect();
    let with_home = |h: u64| candidates.iter().filter(move |k| home(k) == h);
    let mut keys: Vec<Vec<u8>> = with_home(15).take(2).cloned().collect();
    keys.extend(with_home(0).take(1).cloned());
    let others: Vec<Vec<u8>> = candidates
        .iter()
        .filter(|k| !keys.contains(k))
        .take(5)
        .cloned()
        .collect();
    keys.extend(others);
    let storage = MemStorage::new(INDEX_DATA);
    let opts = KvSeqOptions {
        sbsize: 256,
        keyrepr: P2,
        valrepr: P4,
        fileincr: 0,
        clock: clock(),
        ..KvSeqOptions::default()
    };
    let mut kv = KvSeq::create(Box::new(storage.clone()), &opts).expect("create");
    let ptrs: Vec<KvPointer> = keys
        .iter()
        .map(|k| kv.append(k, b"value").expect("append"))
        .collect();
    kv.delete(ptrs[0]).expect("delete");
    kv.sync().expect("sync");
    drop(kv);
    let kv_len = storage.to_vec().len() as u64;
    let kv = KvSeq::open(Box::new(storage), false).expect("reopen");
    Indexed {
        kv,
        kv_len,
        keys,
        ptrs,
    }
}

fn build_hindex(ix: &Indexed, cellsz: u64) -> Vec<u8> {
    let storage = MemStorage::new("build");
    let opts = HIndexOptions {
        sbsize: 256,
        htsize: HTSIZE,
        cellsz,
        time: 1_700_000_000,
        ..HIndexOptions::default()
    };
    let mut index = HIndex::create(Box::new(storage.clone()), &opts).expect("create");
    for (key, ptr) in ix.keys.iter().zip(&ix.ptrs) {
        index.insert(key, *ptr, &ix.kv).expect("insert");
    }
    index.remove(&ix.keys[0], &ix.kv).expect("remove");
    index.sync(1_700_000_000).expect("sync");
    drop(index);
    storage.to_vec()
}

/// Everything the hindex read APIs return for one file.
#[derive(Clone, Debug, Default, PartialEq)]
struct HxView {
    htsize: u64,
    cellsz: u64,
    lookups: Vec<Option<Found>>,
    used: Vec<(u64, KvPointer)>,
    cells: Vec<Option<Cell>>,
    count: Option<(u64, u64)>,
}

/// The keys looked up: every key of the datafile (the deleted one too) and some absent ones.
fn probe_keys(ix: &Indexed) -> Vec<Vec<u8>> {
    let mut keys = ix.keys.clone();
    keys.extend((0..6).map(|i| format!("absent-{i}").into_bytes()));
    keys
}

fn observe_hx(name: &str, bytes: &[u8], ix: &Indexed) -> Seen<HxView> {
    observe_hx_in(Box::new(MemStorage::from_bytes(name, bytes.to_vec())), ix)
}

fn observe_hx_in(storage: Box<dyn Storage>, ix: &Indexed) -> Seen<HxView> {
    let mut seen = Seen::<HxView>::new();
    let path = storage.path().to_path_buf();
    let files = [
        (path.as_path(), storage.len().expect("length")),
        (Path::new(INDEX_DATA), ix.kv_len),
    ];
    let Some(index) = seen.take(HIndex::open(storage, false), &files) else {
        return seen;
    };
    seen.opened = true;
    let mut view = HxView {
        htsize: index.htsize(),
        cellsz: index.cellsz(),
        ..HxView::default()
    };
    for key in probe_keys(ix) {
        assert!(index.home(&key) < index.htsize());
        let found = seen.take(index.lookup(&key, &ix.kv), &files).flatten();
        view.lookups.push(found);
    }
    for item in index.used_cells() {
        if let Some(cell) = seen.take(item, &files) {
            view.used.push(cell);
        }
    }
    view.count = seen.take(index.count(), &files);
    view.cells = (0..index.htsize())
        .map(|c| seen.take(index.get(c), &files))
        .collect();
    seen.take(index.spot_check(&ix.kv), &files);
    for &(cell, ptr) in &view.used {
        seen.take(index.verify_cell(cell, ptr, &ix.kv), &files);
    }
    cross_check_cells(&index, &view, &mut seen);
    seen.view = view;
    seen
}

/// What a checker compares: ENTRIES and AENTRIES against a count of the cells.
fn cross_check_cells(index: &HIndex, view: &HxView, seen: &mut Seen<HxView>) {
    let Some((entries, live)) = view.count else {
        return;
    };
    let stored = |name: VarName| index.superblock().get(name).map(|v| v as u64);
    for (name, counted) in [(var::ENTRIES, entries), (var::AENTRIES, live)] {
        if stored(name).is_some_and(|n| n != counted) {
            seen.findings
                .push(format!("{name} {:?} but {counted} counted", stored(name)));
        }
    }
}

fn hx_subject(ix: &Arc<Indexed>, cellsz: u64) -> Subject<HxView> {
    let bytes = build_hindex(ix, cellsz);
    let name = format!("corrupt/cellsz{cellsz}.hindex");
    let (observe_name, ix) = (name.clone(), ix.clone());
    let observe: Observe<HxView> = Box::new(move |b| observe_hx(&observe_name, b, &ix));
    let classes = classes_with_superblock(bytes.len());
    let len = bytes.len();
    // Cells and pairs hold no payload: every byte is structure.
    let unreachable: Patch<HxView> = Box::new(|_, at, _| panic!("payload at {at}"));
    Subject::new(&name, bytes, classes, len, observe, unreachable, |_, _| {
        false
    })
}

#[test]
fn hindex_pristine_views_hold_what_was_written() {
    let ix = Arc::new(indexed());
    assert_eq!(home(&ix.keys[0]), 15);
    assert_eq!(home(&ix.keys[1]), 15);
    assert_eq!(home(&ix.keys[2]), 0);
    for cellsz in [1, 2] {
        let s = hx_subject(&ix, cellsz);
        let v = &s.original;
        assert_eq!(v.cells[15], Some(Cell::Deleted), "the removed key's cell");
        assert_eq!(v.lookups[0], None, "the removed key");
        assert_eq!(
            v.lookups[1],
            Some(Found {
                cell: 0,
                ptr: ix.ptrs[1]
            }),
            "wrapped past HTDEL"
        );
        assert_eq!(
            v.lookups[2],
            Some(Found {
                cell: 1,
                ptr: ix.ptrs[2]
            }),
            "pushed by the wrap"
        );
        assert_eq!(v.used.len(), ix.keys.len() - 1);
        assert_eq!(
            v.count,
            Some((ix.keys.len() as u64, ix.keys.len() as u64 - 1))
        );
        assert!(
            v.lookups[ix.keys.len()..].iter().all(Option::is_none),
            "absent keys"
        );
    }
}

#[test]
fn hindex_truncated_at_every_offset() {
    let ix = Arc::new(indexed());
    for cellsz in [1, 2] {
        hx_subject(&ix, cellsz).truncations();
    }
}

#[test]
fn hindex_flipped_bytes() {
    let ix = Arc::new(indexed());
    for cellsz in [1, 2] {
        let subject = hx_subject(&ix, cellsz);
        let tally = subject.flips(0x1d_0000 + cellsz, 3000);
        eprintln!("{}: {tally:?}", subject.name);
        subject.bursts(
            0xb1d_0000 + cellsz,
            500,
            wink_harness::fuzzing::hindex_lookup,
        );
    }
}

// ---- perm --------------------------------------------------------------------------------

/// Everything the perm read APIs return for one file, and what group makes of a copy.
#[derive(Clone, Debug, Default, PartialEq)]
struct PermView {
    len: u64,
    htsize: Option<u64>,
    pairs: Vec<Option<Pair>>,
    range: Option<Vec<Pair>>,
    tail: Option<Vec<Pair>>,
    grouped: Option<Vec<Pair>>,
    grouped_external: Option<Vec<Pair>>,
}

fn build_perm(ix: &Indexed, htsize: Option<u64>) -> Vec<u8> {
    let storage = MemStorage::new("build");
    let opts = PermOptions {
        sbsize: 256,
        htsize,
        fileincr: 0,
        ..PermOptions::default()
    };
    let mut perm = Perm::create(Box::new(storage.clone()), &opts).expect("create");
    for (key, ptr) in ix.keys.iter().zip(&ix.ptrs) {
        let hash = perm.hash_key(key);
        perm.append(Pair { ptr: *ptr, hash }).expect("append");
    }
    perm.sync().expect("sync");
    drop(perm);
    storage.to_vec()
}

fn observe_perm(name: &str, bytes: &[u8], ix: &Indexed) -> Seen<PermView> {
    observe_perm_in(
        Box::new(MemStorage::from_bytes(name, bytes.to_vec())),
        bytes,
        ix,
    )
}

fn observe_perm_in(storage: Box<dyn Storage>, bytes: &[u8], ix: &Indexed) -> Seen<PermView> {
    let mut seen = Seen::<PermView>::new();
    let path = storage.path().to_path_buf();
    let name = path.to_string_lossy().to_string();
    let files = [
        (path.as_path(), storage.len().expect("length")),
        (Path::new(INDEX_DATA), ix.kv_len),
    ];
    let Some(perm) = seen.take(Perm::open(storage, false), &files) else {
        return seen;
    };
    seen.opened = true;
    let mut view = PermView {
        len: perm.len(),
        htsize: perm.htsize(),
        ..PermView::default()
    };
    view.pairs = (0..perm.len())
        .map(|i| seen.take(perm.get(i), &files))
        .collect();
    assert!(
        matches!(perm.get(perm.len()), Err(Error::NotFound(_))),
        "a pair past PERMSIZE"
    );
    view.range = seen.take(perm.read_range(0, perm.len()), &files);
    view.tail = seen.take(perm.read_range(1, perm.len().saturating_sub(1)), &files);
    if let Some(pairs) = &view.range {
        cross_check_pairs(&perm, pairs, ix, &mut seen);
    }
    drop(perm);
    view.grouped = group_copy(&name, bytes, ix, None, &mut seen, &files);
    view.grouped_external = group_copy(&name, bytes, ix, Some(3), &mut seen, &files);
    seen.view = view;
    seen
}

/// What a checker compares: each pair's hash against its key's.
fn cross_check_pairs(perm: &Perm, pairs: &[Pair], ix: &Indexed, seen: &mut Seen<PermView>) {
    for pair in pairs {
        match ix.kv.read_key(pair.ptr) {
            Ok((_, key)) if perm.hash_key(&key) == pair.hash => {}
            Ok(_) => seen
                .findings
                .push(format!("pair {pair:?}: hash differs from its key's")),
            Err(e) => seen.findings.push(format!("pair {pair:?}: {e}")),
        }
    }
}

/// Groups a writable copy (ties by key, read from the datafile) and reads the result back.
fn group_copy(
    name: &str,
    bytes: &[u8],
    ix: &Indexed,
    run_pairs: Option<u64>,
    seen: &mut Seen<PermView>,
    files: &[(&Path, u64)],
) -> Option<Vec<Pair>> {
    let storage = MemStorage::from_bytes(name, bytes.to_vec());
    let mut perm = seen.take(Perm::open(Box::new(storage), true), files)?;
    if let Some(n) = run_pairs {
        perm.set_run_pairs(n);
    }
    let key = |p: &Pair| ix.kv.read_key(p.ptr).map(|(_, k)| k);
    seen.take(perm.group(|a, b| Ok(key(a)?.cmp(&key(b)?))), files)?;
    seen.take(perm.read_range(0, perm.len()), files)
}

fn perm_subject(ix: &Arc<Indexed>, htsize: Option<u64>) -> Subject<PermView> {
    let bytes = build_perm(ix, htsize);
    let name = format!("corrupt/htsize-{htsize:?}.perm");
    let (observe_name, ix) = (name.clone(), ix.clone());
    let observe: Observe<PermView> = Box::new(move |b| observe_perm(&observe_name, b, &ix));
    let classes = classes_with_superblock(bytes.len());
    let len = bytes.len();
    let unreachable: Patch<PermView> = Box::new(|_, at, _| panic!("payload at {at}"));
    Subject::new(&name, bytes, classes, len, observe, unreachable, |_, _| {
        false
    })
}

#[test]
fn perm_pristine_views_hold_what_was_written() {
    let ix = Arc::new(indexed());
    for htsize in [None, Some(HTSIZE)] {
        let s = perm_subject(&ix, htsize);
        let v = &s.original;
        let ptrs: Vec<KvPointer> = v
            .range
            .as_ref()
            .expect("pairs")
            .iter()
            .map(|p| p.ptr)
            .collect();
        assert_eq!(ptrs, ix.ptrs);
        let mut expected = v.range.clone().expect("pairs");
        expected.sort_by(|a, b| {
            (
                a.hash,
                &ix.keys[ix.ptrs.iter().position(|p| *p == a.ptr).unwrap()],
            )
                .cmp(&(
                    b.hash,
                    &ix.keys[ix.ptrs.iter().position(|p| *p == b.ptr).unwrap()],
                ))
        });
        assert_eq!(v.grouped.as_ref(), Some(&expected));
        assert_eq!(v.grouped_external.as_ref(), Some(&expected));
    }
}

#[test]
fn perm_truncated_at_every_offset() {
    let ix = Arc::new(indexed());
    for htsize in [None, Some(HTSIZE)] {
        perm_subject(&ix, htsize).truncations();
    }
}

#[test]
fn perm_flipped_bytes() {
    let ix = Arc::new(indexed());
    for (i, htsize) in [None, Some(HTSIZE)].into_iter().enumerate() {
        let subject = perm_subject(&ix, htsize);
        let tally = subject.flips(0x9e_0000 + i as u64, 3000);
        eprintln!("{}: {tally:?}", subject.name);
        subject.bursts(0xb9e_0000 + i as u64, 500, wink_harness::fuzzing::perm_read);
    }
}

// ---- real files --------------------------------------------------------------------------

/// The truncation contract again, through `FileStorage` on real files (pread, real lengths).
#[test]
fn truncated_real_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ix = Arc::new(indexed());
    let kv = kv_subject(&kv_shapes()[0]);
    let (_, ptrs) = build_kvseq(&kv_shapes()[0]);
    let hx = hx_subject(&ix, 2);
    let perm = perm_subject(&ix, None);
    let path = dir.path().join("cut");
    let cut = |bytes: &[u8], len: usize| -> Box<dyn Storage> {
        std::fs::write(&path, &bytes[..len]).expect("write");
        Box::new(FileStorage::open(&path, false).expect("open"))
    };
    for len in 0..kv.bytes.len() {
        let seen = observe_kv_in(cut(&kv.bytes, len), &ptrs);
        assert_eq!(seen.opened, len >= kv.logical_end, "kvseq cut to {len}");
        if seen.opened {
            assert_eq!(seen.view, kv.original, "kvseq cut to {len}");
        }
    }
    for len in 0..hx.bytes.len() {
        let seen = observe_hx_in(cut(&hx.bytes, len), &ix);
        assert_eq!(seen.opened, len >= hx.logical_end, "hindex cut to {len}");
        if seen.opened {
            assert_eq!(seen.view, hx.original, "hindex cut to {len}");
        }
    }
    for len in 0..perm.bytes.len() {
        let bytes = &perm.bytes[..len];
        let seen = observe_perm_in(cut(bytes, len), bytes, &ix);
        assert_eq!(seen.opened, len >= perm.logical_end, "perm cut to {len}");
    }
}

// ---- absurd headers ----------------------------------------------------------------------

fn patch_i64(bytes: &mut [u8], at: u64, value: i64) {
    bytes[at as usize..at as usize + 8].copy_from_slice(&value.to_be_bytes());
}

/// Where variable `name`'s value lies in a pristine file.
fn value_at(bytes: &[u8], name: VarName) -> u64 {
    let sb = Superblock::parse(Path::new("pristine"), bytes, bytes.len() as u64)
        .expect("pristine superblock");
    sb.value_offset(name).expect("variable present")
}

/// `r` must be corruption (or an unsupported feature) reported at `offset` of the file `name`.
fn expect_damage<T: Debug>(r: wink::Result<T>, name: &str, len: usize, offset: u64) {
    let e = match r {
        Err(e @ (Error::Corrupt { .. } | Error::Unsupported { .. })) => e,
        other => panic!("{name}: expected corruption at {offset}, got {other:?}"),
    };
    check_error(&e, &[(Path::new(name), len as u64)]);
    let (Error::Corrupt { offset: at, .. } | Error::Unsupported { offset: at, .. }) = e else {
        unreachable!("matched above");
    };
    assert_eq!(at, offset, "{name}: {e}");
}

fn open_kv(name: &str, bytes: &[u8]) -> wink::Result<KvSeq> {
    KvSeq::open(
        Box::new(MemStorage::from_bytes(name, bytes.to_vec())),
        false,
    )
}

#[test]
fn absurd_kvseq_lengths_are_rejected_without_allocating() {
    let shape = kv_shapes()
        .into_iter()
        .find(|s| s.valrepr == P8)
        .expect("a shape with 8-byte value lengths");
    let (bytes, ptrs) = build_kvseq(&shape);
    let layout = open_kv("x", &bytes)
        .expect("pristine")
        .layout(ptrs[4])
        .expect("layout");
    let length_at = layout.value_offset - P8.header_len();
    for absurd in [1i64 << 62, i64::MAX, -1, i64::MIN] {
        let mut b = bytes.clone();
        patch_i64(&mut b, length_at, absurd);
        let kv = open_kv("absurd.kvseq", &b).expect("the superblock is intact");
        expect_damage(kv.read(ptrs[4]), "absurd.kvseq", b.len(), length_at);
        expect_damage(kv.layout(ptrs[4]), "absurd.kvseq", b.len(), length_at);
        let walk: Vec<_> = kv.iter_entries(kv.first(), false).collect();
        assert_eq!(walk.len(), 5, "four entries, then the error");
        expect_damage(
            walk.into_iter().last().expect("an item"),
            "absurd.kvseq",
            b.len(),
            length_at,
        );
    }
    for (name, value) in [
        (var::FILESIZE, 1i64 << 62),
        (var::ALIGN, 1 << 40),
        (var::KEYREPR, 1 << 62),
        (var::VALREPR, -1),
    ] {
        let mut b = bytes.clone();
        let at = value_at(&b, name);
        patch_i64(&mut b, at, value);
        expect_damage(open_kv("absurd.kvseq", &b), "absurd.kvseq", b.len(), at);
    }
}

#[test]
fn absurd_superblock_sizes_are_rejected_without_allocating() {
    let ix = indexed();
    let (kv, _) = build_kvseq(&kv_shapes()[0]);
    for bytes in [kv, build_hindex(&ix, 2), build_perm(&ix, None)] {
        for sbsize in [
            1i64 << 30,
            1 << 62,
            i64::MAX,
            superblock::MAX_SBSIZE as i64 + 8,
        ] {
            let mut b = bytes.clone();
            patch_i64(&mut b, superblock::SBSIZE_VALUE_OFFSET, sbsize);
            let s = MemStorage::from_bytes("absurd", b.clone());
            expect_damage(
                Superblock::read(&s),
                "absurd",
                b.len(),
                superblock::SBSIZE_VALUE_OFFSET,
            );
        }
    }
}

#[test]
fn absurd_table_sizes_are_rejected_without_allocating() {
    let ix = indexed();
    let open = |b: &[u8], writable| {
        HIndex::open(
            Box::new(MemStorage::from_bytes("absurd.hindex", b.to_vec())),
            writable,
        )
    };
    for cellsz in [1, 2] {
        let bytes = build_hindex(&ix, cellsz);
        let cases = [
            (var::HTSIZE, 1i64 << 60),
            (var::HTSIZE, 1 << 40),
            (var::HTSIZE, i64::MAX),
            (var::CELLSZ, 1 << 40),
            (var::FILESIZE, 1 << 62),
            // Growth sized the new table from AENTRIES (fixed in eb98c0e).
            (var::ENTRIES, 1 << 35),
            (var::AENTRIES, 1 << 35),
            (var::AENTRIES, i64::MAX),
        ];
        for (name, value) in cases {
            let mut b = bytes.clone();
            let at = value_at(&b, name);
            patch_i64(&mut b, at, value);
            for writable in [false, true] {
                expect_damage(open(&b, writable), "absurd.hindex", b.len(), at);
            }
        }
    }
}

#[test]
fn absurd_perm_sizes_are_rejected_without_allocating() {
    let ix = indexed();
    for htsize in [None, Some(HTSIZE)] {
        let bytes = build_perm(&ix, htsize);
        let at = value_at(&bytes, var::PERMSIZE);
        for permsize in [1i64 << 62, 1 << 59, 1 << 40, i64::MAX, -1] {
            let mut b = bytes.clone();
            patch_i64(&mut b, at, permsize);
            for writable in [false, true] {
                let r = Perm::open(
                    Box::new(MemStorage::from_bytes("absurd.perm", b.clone())),
                    writable,
                );
                expect_damage(r, "absurd.perm", b.len(), at);
            }
        }
    }
}

/// A sparse file is as long as its header claims but costs nothing on disk: a key length of
/// 2^39 there passes every bounds check, and only the allocation stands between it and an abort.
#[test]
fn a_huge_key_in_a_sparse_file_is_an_error_not_an_abort() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("sparse.kvseq");
    let shape = kv_shapes()
        .into_iter()
        .find(|s| s.keyrepr == P8)
        .expect("a shape with 8-byte key lengths");
    let (mut bytes, ptrs) = build_kvseq(&shape);
    let filesize: u64 = 1 << 40;
    let filesize_at = value_at(&bytes, var::FILESIZE);
    patch_i64(&mut bytes, filesize_at, filesize as i64);
    let length_at = ptrs[0].0 + u64::from(shape.delflag);
    patch_i64(&mut bytes, length_at, 1 << 39);
    std::fs::write(&path, &bytes).expect("write");
    let file = FileStorage::open(&path, true).expect("open");
    file.set_len(filesize).expect("a sparse 1 TiB file");
    drop(file);
    let kv = KvSeq::open_path(&path, false).expect("the superblock is sane");
    let files = [(path.as_path(), filesize)];
    for r in [
        kv.read(ptrs[0]).map(|_| ()),
        kv.read_key(ptrs[0]).map(|_| ()),
    ] {
        check_error(
            &r.expect_err("a 512 GiB key cannot be read into memory"),
            &files,
        );
    }
    let first = kv.iter(kv.first(), false).next().expect("an item");
    check_error(&first.expect_err("nor walked over"), &files);
}

/// KEYREPR 4 and VALREPR 4 (keys and values of zero bytes) without KVDELFL make every entry zero
/// bytes long: appends vanished, and a walk over a FILESIZE past the first entry never advanced.
#[test]
fn zero_byte_entries_are_refused() {
    let zero = Repr::Fixed { len: 0 };
    let opts = |valrepr| KvSeqOptions {
        sbsize: 256,
        keyrepr: zero,
        valrepr,
        delflag: false,
        fileincr: 0,
        clock: clock(),
        ..KvSeqOptions::default()
    };
    let created = KvSeq::create(Box::new(MemStorage::new("zero.kvseq")), &opts(zero));
    assert!(matches!(created, Err(Error::Invalid(_))), "{created:?}");
    // The same header by hand: a file of one-byte values, its VALREPR then patched to 4.
    let storage = MemStorage::new("build");
    let mut kv =
        KvSeq::create(Box::new(storage.clone()), &opts(Repr::Fixed { len: 1 })).expect("create");
    kv.append(b"", b"x").expect("append");
    kv.sync().expect("sync");
    drop(kv);
    let mut bytes = storage.to_vec();
    let at = value_at(&bytes, var::VALREPR);
    patch_i64(&mut bytes, at, zero.code());
    match open_kv("zero.kvseq", &bytes) {
        Ok(kv) => assert!(
            kv.iter(kv.first(), false).take(bytes.len() + 1).count() <= bytes.len(),
            "the walk loops"
        ),
        Err(e) => {
            check_error(&e, &[(Path::new("zero.kvseq"), bytes.len() as u64)]);
            assert!(e.is_corruption(), "{e}");
        }
    }
}

/// Each format refuses the others' files, and a wrong magic, at the offsets the spec fixes.
#[test]
fn wrong_magic_or_format_is_named_at_its_offset() {
    use wink::format::superblock::Format;
    let ix = indexed();
    let (kv, _) = build_kvseq(&kv_shapes()[0]);
    let files = [
        (Format::KvSeq, kv),
        (Format::HIndex, build_hindex(&ix, 2)),
        (Format::Perm, build_perm(&ix, None)),
    ];
    let open = |format: Format, b: &[u8]| -> wink::Result<()> {
        let s = Box::new(MemStorage::from_bytes("wrong", b.to_vec()));
        match format {
            Format::KvSeq => KvSeq::open(s, false).map(drop),
            Format::HIndex => HIndex::open(s, false).map(drop),
            Format::Perm => Perm::open(s, false).map(drop),
        }
    };
    for (format, bytes) in &files {
        for (other, _) in &files {
            if other != format {
                expect_damage(
                    open(*other, bytes),
                    "wrong",
                    bytes.len(),
                    superblock::FORMAT_VALUE_OFFSET,
                );
            }
        }
        let mut b = bytes.clone();
        b[0] ^= 0x20;
        expect_damage(open(*format, &b), "wrong", b.len(), 0);
        let mut b = bytes.clone();
        b[superblock::FIRST_VAR as usize] = b'X';
        expect_damage(open(*format, &b), "wrong", b.len(), superblock::FIRST_VAR);
    }
}
