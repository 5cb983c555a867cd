//! Byte searches eight bytes at a time: most of a row's text holds none of the few bytes the
//! hot loops stop at (a tab, a backslash, a quote, a control character), so they skip whole
//! words of it.
//!
//! The tests are the classic exact ones (a zero byte: `(w - 0x01..) & !w & 0x80..`; a byte
//! below `n` for `n <= 128`), which never miss a byte; the caller finds which byte it was.

const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);

/// Whether a byte of `word` is below `n` (`n <= 128`).
#[inline]
fn has_below(word: u64, n: u8) -> bool {
    word.wrapping_sub(ONES * u64::from(n)) & !word & HIGHS != 0
}

/// Whether a byte of `word` is `byte`.
#[inline]
fn has(word: u64, byte: u8) -> bool {
    has_below(word ^ (ONES * u64::from(byte)), 1)
}

/// The start of the first eight-byte word of `bytes[from..]` that may hold a byte for which
/// `hit` is true of the word (or the start of the last, shorter, part).
#[inline]
fn clean_words(bytes: &[u8], mut from: usize, hit: impl Fn(u64) -> bool) -> usize {
    while let Some(chunk) = bytes.get(from..from + 8) {
        if hit(u64::from_ne_bytes(chunk.try_into().unwrap())) {
            break;
        }
        from += 8;
    }
    from
}

/// From `from`, where a tab or a backslash may be: whole words before it skipped.
pub fn tab_or_backslash(bytes: &[u8], from: usize) -> usize {
    clean_words(bytes, from, |w| has(w, b'\t') || has(w, b'\\'))
}

/// From 0, where a byte JSON escapes (a control character, `"` or `\`) may be.
pub fn json_escaped(bytes: &[u8]) -> usize {
    clean_words(bytes, 0, |w| has_below(w, 0x20) || has(w, b'"') || has(w, b'\\'))
}
