//! Arrow columns being filled, handed to Python as bytes that pyarrow wraps.

use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// A column stops growing at this many bytes, far inside Arrow's i32 offsets.
pub const COLUMN_BYTES: usize = 1 << 30;

/// An Arrow string column: i32 offsets, UTF-8 data, a validity bitmap.
#[derive(Default)]
pub struct Strings {
    offsets: Vec<i32>,
    pub data: Vec<u8>,
    validity: Vec<u8>,
    nulls: usize,
    len: usize,
}

/// `(offsets, data, validity or None, null count)` of a string column.
pub type StringBuffers<'py> =
    (Bound<'py, PyBytes>, Bound<'py, PyBytes>, Option<Bound<'py, PyBytes>>, usize);

impl Strings {
    pub fn new() -> Self {
        Strings { offsets: vec![0], ..Default::default() }
    }

    pub fn push(&mut self, text: &[u8]) {
        self.data.extend_from_slice(text);
        self.end(true);
    }

    /// Close the value written straight into `data` since the last one (`false`: a null);
    /// the caller has made sure the data [`Strings::fits`].
    pub fn end(&mut self, valid: bool) {
        self.offsets.push(i32::try_from(self.data.len()).expect("checked by fits()"));
        if self.len.is_multiple_of(8) {
            self.validity.push(0);
        }
        if valid {
            *self.validity.last_mut().unwrap() |= 1 << (self.len % 8);
        } else {
            self.nulls += 1;
        }
        self.len += 1;
    }

    pub fn full(&self) -> bool {
        self.data.len() > COLUMN_BYTES
    }

    /// Whether the data written so far can be closed as a value: Arrow's offsets are i32.
    pub fn fits(&self) -> bool {
        i32::try_from(self.data.len()).is_ok()
    }

    pub fn buffers<'py>(&self, py: Python<'py>) -> StringBuffers<'py> {
        let validity = (self.nulls > 0).then(|| PyBytes::new(py, &self.validity));
        (PyBytes::new(py, as_bytes(&self.offsets)), PyBytes::new(py, &self.data), validity,
         self.nulls)
    }
}

pub fn as_bytes(values: &[i32]) -> &[u8] {
    // SAFETY: i32 has no padding and any alignment of u8 is valid; Arrow's buffers are
    // little-endian, as is every platform this is built for.
    unsafe { std::slice::from_raw_parts(values.as_ptr() as *const u8, values.len() * 4) }
}
