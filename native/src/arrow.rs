//! Arrow columns being filled, handed to Python as bytes that pyarrow wraps.

use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// A column stops growing at this many bytes, far inside Arrow's i32 offsets.
pub const COLUMN_BYTES: usize = 1 << 30;

/// An Arrow validity bitmap being filled: one bit per value, set for a valid one.
#[derive(Default)]
pub struct Bits {
    bytes: Vec<u8>,
    len: usize,
    unset: usize,
}

impl Bits {
    pub fn push(&mut self, set: bool) {
        if self.len.is_multiple_of(8) {
            self.bytes.push(0);
        }
        if set {
            *self.bytes.last_mut().unwrap() |= 1 << (self.len % 8);
        } else {
            self.unset += 1;
        }
        self.len += 1;
    }

    /// `(bitmap or None when every bit is set, unset count)`, as pyarrow takes a validity.
    pub fn buffer<'py>(&self, py: Python<'py>) -> (Option<Bound<'py, PyBytes>>, usize) {
        ((self.unset > 0).then(|| PyBytes::new(py, &self.bytes)), self.unset)
    }
}

/// An Arrow string (or binary) column: i32 offsets, the data, a validity bitmap.
#[derive(Default)]
pub struct Strings {
    offsets: Vec<i32>,
    pub data: Vec<u8>,
    validity: Bits,
}

/// `(offsets, data, validity or None, null count)` of a string column.
pub type StringBuffers<'py> =
    (Bound<'py, PyBytes>, Bound<'py, PyBytes>, Option<Bound<'py, PyBytes>>, usize);

impl Strings {
    pub fn new() -> Self {
        Self::with_capacity(0, 0)
    }

    /// Room for `values` values of `bytes` bytes in all, so that filling it copies nothing.
    pub fn with_capacity(values: usize, bytes: usize) -> Self {
        let mut offsets = Vec::with_capacity(values + 1);
        offsets.push(0);
        Strings { offsets, data: Vec::with_capacity(bytes), validity: Bits::default() }
    }

    pub fn push(&mut self, text: &[u8]) {
        self.data.extend_from_slice(text);
        self.end(true);
    }

    /// Close the value written straight into `data` since the last one (`false`: a null);
    /// the caller has made sure the data [`Strings::fits`].
    pub fn end(&mut self, valid: bool) {
        self.offsets.push(i32::try_from(self.data.len()).expect("checked by fits()"));
        self.validity.push(valid);
    }

    pub fn full(&self) -> bool {
        self.data.len() > COLUMN_BYTES
    }

    /// Whether the data written so far can be closed as a value: Arrow's offsets are i32.
    pub fn fits(&self) -> bool {
        i32::try_from(self.data.len()).is_ok()
    }

    pub fn buffers<'py>(&self, py: Python<'py>) -> StringBuffers<'py> {
        let (validity, nulls) = self.validity.buffer(py);
        (PyBytes::new(py, as_bytes(&self.offsets)), PyBytes::new(py, &self.data), validity, nulls)
    }
}

pub fn as_bytes(values: &[i32]) -> &[u8] {
    // SAFETY: i32 has no padding and any alignment of u8 is valid; Arrow's buffers are
    // little-endian, as is every platform this is built for.
    unsafe { std::slice::from_raw_parts(values.as_ptr() as *const u8, values.len() * 4) }
}
