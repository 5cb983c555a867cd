//! Arrow columns being filled, lent to Python as buffers that pyarrow wraps without a copy.

use std::ffi::{c_int, c_void};

use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;

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

    /// `(bitmap or None when every bit is set, unset count)`, as pyarrow takes a validity;
    /// the bitmap lent by `owner`, which holds these bits ([`View::of`]).
    pub fn buffer<'py>(&self, owner: &Bound<'py, PyAny>)
                       -> PyResult<(Option<Bound<'py, View>>, usize)> {
        let bitmap = if self.unset > 0 { Some(View::of(owner, &self.bytes)?) } else { None };
        Ok((bitmap, self.unset))
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
    (Bound<'py, View>, Bound<'py, View>, Option<Bound<'py, View>>, usize);

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

    /// The column's buffers, lent by `owner`, which holds this column ([`View::of`]).
    pub fn buffers<'py>(&self, owner: &Bound<'py, PyAny>) -> PyResult<StringBuffers<'py>> {
        let (validity, nulls) = self.validity.buffer(owner)?;
        Ok((View::of(owner, as_bytes(&self.offsets))?, View::of(owner, &self.data)?, validity,
            nulls))
    }
}

/// Bytes of a frozen object's column lent to Python through the buffer protocol (read-only),
/// so that `pyarrow.py_buffer` wraps them where they are: the view keeps its owner alive, and a
/// frozen object's columns never change or move.
#[pyclass(frozen, module = "iggy_spark_core")]
pub struct View {
    _owner: Py<PyAny>,
    address: usize,
    len: usize,
}

impl View {
    /// A view of `bytes`, which must be a column of `owner`, a frozen pyclass (by every caller
    /// here: a block's own columns, built before it was handed to Python).
    pub fn of<'py>(owner: &Bound<'py, PyAny>, bytes: &[u8]) -> PyResult<Bound<'py, View>> {
        Bound::new(owner.py(), View { _owner: owner.clone().unbind(),
                                      address: bytes.as_ptr() as usize, len: bytes.len() })
    }
}

#[pymethods]
impl View {
    fn __len__(&self) -> usize {
        self.len
    }

    /// # Safety
    /// Called by Python with a `Py_buffer` to fill, as the buffer protocol says.
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut ffi::Py_buffer, flags: c_int)
                            -> PyResult<()> {
        if view.is_null() {
            return Err(PyBufferError::new_err("no Py_buffer to fill"));
        }
        let this = slf.get();
        // SAFETY: the bytes live as long as the owner this view holds; read-only (a writable
        // request is refused by PyBuffer_FillInfo itself)
        let filled = unsafe {
            ffi::PyBuffer_FillInfo(view, slf.as_ptr(), this.address as *mut c_void,
                                   this.len as ffi::Py_ssize_t, 1, flags)
        };
        if filled == -1 {
            return Err(PyErr::fetch(slf.py()));
        }
        Ok(())
    }

    /// # Safety
    /// Called by Python when a view made by `__getbuffer__` is released: nothing to undo.
    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}
}

pub fn as_bytes(values: &[i32]) -> &[u8] {
    // SAFETY: i32 has no padding and any alignment of u8 is valid; Arrow's buffers are
    // little-endian, as is every platform this is built for.
    unsafe { std::slice::from_raw_parts(values.as_ptr() as *const u8, values.len() * 4) }
}
