//! The sink's JSON payloads: each row's object joined from its columns' JSON texts.
//!
//! `iggy_spark.sink.json_payloads` turns every payload column into an Arrow array of its
//! values' JSON texts, column by column (Arrow formats numbers, dates and timestamps; orjson
//! the values Arrow cannot); which text a value gets is decided there and only there. What is
//! left is per row, and is all this does: for every row, the opening of each column
//! (`{"name":` or `,"name":`) and its text (or, for a column of strings, the string as orjson
//! writes it: quoted, with its escapes), `null` for a null, then `}`: one `bytes` object per
//! row, where Arrow's join and `to_pylist` took most of a payload's cost.

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use crate::values::json_string_of_utf8;

/// One payload column, as `json_objects` takes it: its opening, whether its texts are strings
/// (each written as a JSON string) rather than JSON, and the buffers of a large_string array
/// (validity or `None`, i64 offsets, data or `None`) with the array's offset into them.
/// pyarrow's buffers say they hold `i8`s (format `b`).
type Column = (Vec<u8>, bool, Option<PyBuffer<i8>>, PyBuffer<i8>, Option<PyBuffer<i8>>, usize);

/// A column's buffers, checked to hold `rows` values from `offset`.
struct Texts<'a> {
    opening: &'a [u8],
    strings: bool,
    validity: Option<&'a [u8]>,
    offsets: &'a [u8],
    data: &'a [u8],
    offset: usize,
}

impl<'a> Texts<'a> {
    fn new(column: &'a Column, rows: usize) -> PyResult<Self> {
        let (opening, strings, validity, offsets, data, offset) = column;
        let texts = Texts {
            opening,
            strings: *strings,
            validity: validity.as_ref().map(bytes_of).transpose()?,
            offsets: bytes_of(offsets)?,
            data: data.as_ref().map(bytes_of).transpose()?.unwrap_or(&[]),
            offset: *offset,
        };
        let ends = texts.offset.checked_add(rows).and_then(|n| n.checked_add(1));
        if ends.and_then(|n| n.checked_mul(8)).is_none_or(|n| n > texts.offsets.len())
            || texts.validity.is_some_and(|v| (texts.offset + rows).div_ceil(8) > v.len())
        {
            return Err(texts.refused("its buffers hold fewer rows than asked"));
        }
        if texts.strings {
            // Checked once for the column's rows: each string then only needs to start and
            // end on a character's boundary to be UTF-8 too.
            let start = texts.offset_at(texts.offset);
            let end = texts.offset_at(texts.offset + rows);
            let valid = texts.span(start, end).is_some_and(|all| std::str::from_utf8(all).is_ok());
            if !valid {
                return Err(texts.refused("its strings are not UTF-8"));
            }
        }
        Ok(texts)
    }

    /// Row `row`'s text, `None` for a null.
    fn text(&self, row: usize) -> PyResult<Option<&'a [u8]>> {
        let at = self.offset + row;
        if self.validity.is_some_and(|bits| bits[at / 8] & (1 << (at % 8)) == 0) {
            return Ok(None);
        }
        let (start, end) = (self.offset_at(at), self.offset_at(at + 1));
        match self.span(start, end) {
            Some(text) if !self.strings || (boundary(self.data, start) && boundary(self.data, end))
                => Ok(Some(text)),
            Some(_) => Err(self.refused("its strings are not UTF-8")),
            None => Err(self.refused("its offsets point outside its data")),
        }
    }

    /// The error for a column whose buffers are not what Arrow's are (pyarrow's never are
    /// such): `ValueError` naming the column by its opening.
    fn refused(&self, why: &str) -> PyErr {
        let opening = String::from_utf8_lossy(self.opening);
        let name = opening.trim_start_matches(['{', ',']).trim_end_matches(':');
        PyValueError::new_err(format!("the payload column {name}: {why}"))
    }

    fn offset_at(&self, index: usize) -> i64 {
        let bytes: [u8; 8] = self.offsets[index * 8..index * 8 + 8].try_into().expect("8 bytes");
        i64::from_le_bytes(bytes)
    }

    fn span(&self, start: i64, end: i64) -> Option<&'a [u8]> {
        self.data.get(usize::try_from(start).ok()?..usize::try_from(end).ok()?)
    }
}

/// Whether `at` (within `data` or at its end) is where a UTF-8 character starts.
fn boundary(data: &[u8], at: i64) -> bool {
    data.get(at as usize).is_none_or(|&b| !(0x80..0xc0).contains(&b))
}

/// A buffer's bytes; pyarrow's buffers are contiguous and outlive the call, which holds them.
fn bytes_of(buffer: &PyBuffer<i8>) -> PyResult<&[u8]> {
    if !buffer.is_c_contiguous() {
        return Err(PyValueError::new_err("a column's buffer is not contiguous"));
    }
    // SAFETY: a contiguous buffer of `len_bytes` bytes, held (so neither freed nor moved) for
    // as long as the `PyBuffer` the slice borrows from; nothing writes to it meanwhile, as
    // the GIL is held throughout.
    Ok(unsafe { std::slice::from_raw_parts(buffer.buf_ptr() as *const u8, buffer.len_bytes()) })
}

/// Every row's JSON object, as `bytes`: for each column its opening and its text (a string
/// column's as a JSON string), `null` for a null, then `}`. Buffers that are not a
/// large_string array's (too short, offsets outside the data, strings that are not UTF-8)
/// are refused with `ValueError`, and no payload is returned.
#[pyfunction]
pub fn json_objects<'py>(py: Python<'py>, columns: Vec<Column>, rows: usize)
                         -> PyResult<Bound<'py, PyList>> {
    let columns = columns.iter().map(|c| Texts::new(c, rows)).collect::<PyResult<Vec<_>>>()?;
    let mut object = Vec::new();
    let mut objects = Vec::with_capacity(rows);
    for row in 0..rows {
        object.clear();
        for column in &columns {
            object.extend_from_slice(column.opening);
            match column.text(row)? {
                None => object.extend_from_slice(b"null"),
                Some(text) if column.strings => json_string_of_utf8(&mut object, text),
                Some(text) => object.extend_from_slice(text),
            }
        }
        object.push(b'}');
        objects.push(PyBytes::new(py, &object));
    }
    PyList::new(py, objects)
}
