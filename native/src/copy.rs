//! The rows of a snapshot or backfill chunk from the text of `COPY (SELECT ...) TO STDOUT`.
//!
//! The chunk's query selects the table's columns, then its chunk key's; COPY's text format
//! sends each value as its type's output text (tab-separated, `\N` for NULL, backslash escapes),
//! which is what the Python path's converters read from a cursor. [`CopyRows::rows`] turns whole
//! lines of it into the `key`, `after` and `id` columns `postgres_cdc_source.snapshot.reading`
//! builds from the same texts, and stops at a row a converter rejects, handing its texts back so
//! that the Python path raises the error naming the column.

use std::borrow::Cow;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::arrow::Strings;
use crate::values::{json_string, Relation};

/// The `key`, `after` and `id` columns of the rows one [`CopyRows::rows`] call took.
#[pyclass(frozen, module = "iggy_spark_core")]
pub struct RowsBlock {
    key: Strings,
    after: Strings,
    id: Strings,
    rows: usize,
}

#[pymethods]
impl RowsBlock {
    fn __len__(&self) -> usize {
        self.rows
    }

    /// `(column, (offsets, data, validity or None, null count))` for `key`, `after`, `id`.
    fn buffers<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let items = [("key", &self.key), ("after", &self.after), ("id", &self.id)];
        let mut out: Vec<Bound<'py, PyAny>> = Vec::with_capacity(3);
        for (name, column) in items {
            out.push((name, column.buffers(py)).into_pyobject(py)?.into_any());
        }
        PyTuple::new(py, out)
    }
}

/// One chunk's table: its columns (as [`Relation`]), how many chunk key columns follow them in
/// each line, and the text every row's `id` starts with.
#[pyclass(module = "iggy_spark_core")]
pub struct CopyRows {
    relation: Relation,
    extra: usize,
    id_prefix: Vec<u8>,
}

#[pymethods]
impl CopyRows {
    /// The table's columns as [`crate::pgoutput::Scanner::relation`] takes them, the number of
    /// chunk key columns after them, and `id_prefix`: `<point>:read:["schema","table"` (each
    /// row's chunk key texts follow as JSON strings, then `]`).
    #[new]
    #[allow(clippy::too_many_arguments)]
    fn new(dumps: Py<PyAny>, schema: String, table: String, names: Vec<Vec<u8>>,
           kinds: Vec<u8>, converters: Vec<Py<PyAny>>, key: Vec<usize>, extra: usize,
           id_prefix: Vec<u8>) -> PyResult<Self> {
        let relation = Relation::new(schema, table, names, kinds, converters, key, dumps)?;
        Ok(CopyRows { relation, extra, id_prefix })
    }

    /// The rows of `data`, whole lines of COPY's text format: `(block, None)`, or at the first
    /// row a converter rejects `(block of the rows before it, that row's texts)`.
    fn rows(&self, py: Python<'_>, data: &[u8])
            -> PyResult<(RowsBlock, Option<Vec<Option<String>>>)> {
        let mut block = RowsBlock { key: Strings::new(), after: Strings::new(),
                                    id: Strings::new(), rows: 0 };
        let width = self.relation.width();
        let mut fields: Vec<Option<Cow<'_, str>>> = Vec::with_capacity(width + self.extra);
        let mut spans: Vec<(usize, usize)> = Vec::with_capacity(width);
        let lines = data.strip_suffix(b"\n").unwrap_or(data);
        if lines.is_empty() {
            return Ok((block, None));
        }
        for line in lines.split(|&b| b == b'\n') {
            fields.clear();
            for field in line.split(|&b| b == b'\t') {
                fields.push(unescaped(field)?);
            }
            if fields.len() != width + self.extra {
                return Err(PyValueError::new_err(format!(
                    "COPY row of {} fields, expected {}", fields.len(), width + self.extra)));
            }
            let values: Vec<Option<&str>> = fields[..width].iter().map(|f| f.as_deref()).collect();
            if !self.relation.write_row(py, &values, &mut block.after.data, &mut spans)? {
                let texts = fields.iter().map(|f| f.as_ref().map(|t| t.to_string())).collect();
                return Ok((block, Some(texts)));
            }
            if self.relation.has_key() {
                self.relation.write_key(&block.after.data, &spans, &mut block.key.data);
            }
            let id = &mut block.id.data;
            id.extend_from_slice(&self.id_prefix);
            for field in &fields[width..] {
                id.push(b',');
                match field {
                    Some(text) => json_string(id, text),
                    None => id.extend_from_slice(b"null"),
                }
            }
            id.push(b']');
            if !block.after.fits() || !block.key.fits() || !block.id.fits() {
                return Err(PyValueError::new_err(
                    "a fetch of a chunk's rows is over 2 GiB of JSON: lower fetch_rows"));
            }
            block.after.end(true);
            block.key.end(self.relation.has_key());
            block.id.end(true);
            block.rows += 1;
        }
        Ok((block, None))
    }
}

/// One field of COPY's text format: `None` for `\N`, else its text with the escapes undone.
fn unescaped(field: &[u8]) -> PyResult<Option<Cow<'_, str>>> {
    if field == b"\\N" {
        return Ok(None);
    }
    let text = if field.contains(&b'\\') {
        let mut out = Vec::with_capacity(field.len());
        let mut i = 0;
        while i < field.len() {
            let b = field[i];
            i += 1;
            if b != b'\\' || i == field.len() {
                out.push(b);
                continue;
            }
            let c = field[i];
            i += 1;
            match c {
                b'b' => out.push(8),
                b'f' => out.push(12),
                b'n' => out.push(b'\n'),
                b'r' => out.push(b'\r'),
                b't' => out.push(b'\t'),
                b'v' => out.push(11),
                b'0'..=b'7' => {
                    let mut value = u32::from(c - b'0');
                    for _ in 0..2 {
                        match field.get(i) {
                            Some(&d @ b'0'..=b'7') => {
                                value = value * 8 + u32::from(d - b'0');
                                i += 1;
                            }
                            _ => break,
                        }
                    }
                    out.push(value as u8);
                }
                b'x' if field.get(i).is_some_and(u8::is_ascii_hexdigit) => {
                    let mut value = 0u32;
                    for _ in 0..2 {
                        match field.get(i) {
                            Some(&d) if d.is_ascii_hexdigit() => {
                                value = value * 16 + (d as char).to_digit(16).unwrap();
                                i += 1;
                            }
                            _ => break,
                        }
                    }
                    out.push(value as u8);
                }
                other => out.push(other),
            }
        }
        Cow::Owned(String::from_utf8(out).map_err(|_| not_utf8())?)
    } else {
        Cow::Borrowed(std::str::from_utf8(field).map_err(|_| not_utf8())?)
    };
    Ok(Some(text))
}

fn not_utf8() -> PyErr {
    PyValueError::new_err("COPY sent text that is not UTF-8 (the session's client_encoding)")
}
