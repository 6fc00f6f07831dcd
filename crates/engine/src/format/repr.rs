//! Key and value representations in a kvseq (KEYREPR / VALREPR).
//!
//! | REPR      | layout                                   | data length                |
//! |-----------|------------------------------------------|----------------------------|
//! | 0         | int8 length, bytes                       | 0..=127                    |
//! | 1         | int16 length, bytes                      | 0..=32767                  |
//! | 2         | int32 length, bytes                      | 0..=2^31−1                 |
//! | 3         | int64 length, bytes                      | 0..=2^63−1                 |
//! | 4..=259   | exactly REPR−4 bytes                     | REPR−4                     |
//! | 260..=514 | uint8 N, N bytes, REPR−259−N zero bytes  | 0..=REPR−259               |
//!
//! A negative length, or a padded N above REPR−259, is corrupt; other REPR values are unsupported.

/// How one key or value is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Repr {
    /// REPR 0..=3: a signed big-endian length of `width` bytes (1, 2, 4 or 8), then the data.
    Prefixed {
        /// Bytes of the length: 1, 2, 4 or 8.
        width: u8,
    },
    /// REPR 4..=259: exactly `len` bytes.
    Fixed {
        /// The data's length, bytes (REPR − 4).
        len: u16,
    },
    /// REPR 260..=514: one length byte, the data, zero padding up to `max` data bytes.
    Padded {
        /// The most data bytes a slot holds (REPR − 259).
        max: u16,
    },
}

/// Why a length header could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReprError {
    /// A prefixed length below zero.
    NegativeLength(i64),
    /// A padded length above the slot.
    PaddedTooLong {
        /// The length byte found.
        len: u8,
        /// The slot's most data bytes.
        max: u16,
    },
}

impl Repr {
    /// The representation for a KEYREPR/VALREPR value, if supported.
    pub fn from_code(code: i64) -> Option<Repr> {
        match code {
            0 => Some(Repr::Prefixed { width: 1 }),
            1 => Some(Repr::Prefixed { width: 2 }),
            2 => Some(Repr::Prefixed { width: 4 }),
            3 => Some(Repr::Prefixed { width: 8 }),
            4..=259 => Some(Repr::Fixed {
                len: (code - 4) as u16,
            }),
            260..=514 => Some(Repr::Padded {
                max: (code - 259) as u16,
            }),
            _ => None,
        }
    }

    /// The KEYREPR/VALREPR value.
    pub fn code(self) -> i64 {
        match self {
            Repr::Prefixed { width: 1 } => 0,
            Repr::Prefixed { width: 2 } => 1,
            Repr::Prefixed { width: 4 } => 2,
            Repr::Prefixed { .. } => 3,
            Repr::Fixed { len } => 4 + i64::from(len),
            Repr::Padded { max } => 259 + i64::from(max),
        }
    }

    /// Bytes before the data: the length field.
    pub fn header_len(self) -> u64 {
        match self {
            Repr::Prefixed { width } => u64::from(width),
            Repr::Fixed { .. } => 0,
            Repr::Padded { .. } => 1,
        }
    }

    /// The longest data this representation holds.
    pub fn max_len(self) -> u64 {
        match self {
            Repr::Prefixed { width } => (1u64 << (u32::from(width) * 8 - 1)) - 1,
            Repr::Fixed { len } => u64::from(len),
            Repr::Padded { max } => u64::from(max),
        }
    }

    /// Encoded size of `len` data bytes, or `None` when this representation cannot hold them.
    pub fn encoded_len(self, len: u64) -> Option<u64> {
        match self {
            Repr::Fixed { len: fixed } if len != u64::from(fixed) => None,
            _ if len > self.max_len() => None,
            Repr::Padded { max } => Some(1 + u64::from(max)),
            _ => Some(self.header_len() + len),
        }
    }

    /// Bytes after the data: zero padding (padded representations only).
    pub fn padding(self, len: u64) -> u64 {
        match self {
            Repr::Padded { max } => u64::from(max).saturating_sub(len),
            _ => 0,
        }
    }

    /// Appends the length header for `len` data bytes (`len` already checked with
    /// [`Repr::encoded_len`]).
    pub fn encode_header(self, len: u64, out: &mut Vec<u8>) {
        match self {
            Repr::Prefixed { width } => {
                let bytes = len.to_be_bytes();
                out.extend_from_slice(&bytes[8 - usize::from(width)..]);
            }
            Repr::Fixed { .. } => {}
            Repr::Padded { .. } => out.push(len as u8),
        }
    }

    /// Decodes the data length from exactly [`Repr::header_len`] bytes.
    pub fn decode_header(self, header: &[u8]) -> Result<u64, ReprError> {
        match self {
            Repr::Prefixed { width } => {
                let width = usize::from(width);
                let mut raw = [0u8; 8];
                raw[8 - width..].copy_from_slice(&header[..width]);
                // Sign-extend from the field's width.
                let shift = 64 - 8 * width as u32;
                let value = (i64::from_be_bytes(raw) << shift) >> shift;
                u64::try_from(value).map_err(|_| ReprError::NegativeLength(value))
            }
            Repr::Fixed { len } => Ok(u64::from(len)),
            Repr::Padded { max } => {
                let len = header[0];
                if u16::from(len) > max {
                    Err(ReprError::PaddedTooLong { len, max })
                } else {
                    Ok(u64::from(len))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_roundtrip_at_every_boundary() {
        for code in [0, 1, 2, 3, 4, 5, 259, 260, 261, 514] {
            let r = Repr::from_code(code).unwrap();
            assert_eq!(r.code(), code);
        }
        for code in [-1, 515, i64::MAX] {
            assert!(Repr::from_code(code).is_none());
        }
        assert_eq!(Repr::from_code(4).unwrap().max_len(), 0);
        assert_eq!(Repr::from_code(259).unwrap().max_len(), 255);
        assert_eq!(Repr::from_code(260).unwrap().max_len(), 1);
        assert_eq!(Repr::from_code(514).unwrap().max_len(), 255);
    }

    #[test]
    fn prefixed_limits_and_sign() {
        let r = Repr::Prefixed { width: 1 };
        assert_eq!(r.max_len(), 127);
        assert_eq!(r.encoded_len(127), Some(128));
        assert_eq!(r.encoded_len(128), None);
        assert_eq!(
            r.decode_header(&[0x80]),
            Err(ReprError::NegativeLength(-128))
        );
        assert_eq!(Repr::Prefixed { width: 2 }.max_len(), 32767);
        assert_eq!(Repr::Prefixed { width: 8 }.max_len(), i64::MAX as u64);
        let mut out = Vec::new();
        Repr::Prefixed { width: 2 }.encode_header(300, &mut out);
        assert_eq!(out, [0x01, 0x2c]);
        assert_eq!(Repr::Prefixed { width: 2 }.decode_header(&out), Ok(300));
    }

    #[test]
    fn fixed_and_padded() {
        let f = Repr::Fixed { len: 8 };
        assert_eq!(f.encoded_len(8), Some(8));
        assert_eq!(f.encoded_len(7), None);
        let p = Repr::Padded { max: 41 };
        assert_eq!(p.encoded_len(0), Some(42));
        assert_eq!(p.encoded_len(41), Some(42));
        assert_eq!(p.encoded_len(42), None);
        assert_eq!(p.padding(3), 38);
        assert_eq!(
            p.decode_header(&[42]),
            Err(ReprError::PaddedTooLong { len: 42, max: 41 })
        );
    }
}
