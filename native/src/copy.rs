//! The rows of a snapshot or backfill chunk from the text of `COPY (SELECT ...) TO STDOUT`.
//!
//! The chunk's query selects the table's columns, then its chunk key's; COPY's text format
//! sends each value as its type's output text (tab-separated, `\N` for NULL, backslash escapes),
//! which is what the Python path's converters read from a cursor. [`CopyRows::rows`] turns whole
//! lines of it into the `key`, `after` and `id` columns `postgres_cdc_source.snapshot.reading`
//! builds from the same texts, and stops at a row a converter rejects, handing its texts back so
//! that the Python path raises the error naming the column.

use std::borrow::Cow;
use std::sync::atomic::{AtomicUsize, Ordering};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::arrow::Strings;
use crate::libpq::CopyOut;
use crate::scan;
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
    fn buffers<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        let this = slf.get();
        let items = [("key", &this.key), ("after", &this.after), ("id", &this.id)];
        let mut out: Vec<Bound<'py, PyAny>> = Vec::with_capacity(3);
        for (name, column) in items {
            out.push((name, column.buffers(slf.as_any())?).into_pyobject(slf.py())?.into_any());
        }
        PyTuple::new(slf.py(), out)
    }
}

/// A row's texts (`None`: SQL NULL), handed back when a converter rejects one of them.
type Texts = Vec<Option<String>>;

/// One chunk's table: its columns (as [`Relation`]), how many chunk key columns follow them in
/// each line, and the text every row's `id` starts with.
#[pyclass(module = "iggy_spark_core")]
pub struct CopyRows {
    relation: Relation,
    extra: usize,
    id_prefix: Vec<u8>,
    /// The last block's rows and its columns' bytes: the next one's room, made at once.
    last: [AtomicUsize; 4],
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
        Ok(CopyRows { relation, extra, id_prefix, last: Default::default() })
    }

    /// The rows of `data`, whole lines of COPY's text format: `(block, None)`, or at the first
    /// row a converter rejects `(block of the rows before it, that row's texts)`.
    fn rows(&self, py: Python<'_>, data: &[u8])
            -> PyResult<(RowsBlock, Option<Texts>)> {
        let lines = data.strip_suffix(b"\n").unwrap_or(data);
        let lines = (!lines.is_empty()).then(|| lines.split(|&b| b == b'\n'));
        self.block(py, lines.into_iter().flatten())
    }

    /// Up to `max_rows` rows of the COPY out in progress on the `PGconn *` `conn`, read with
    /// its libpq's `PQgetCopyData` and `PQfreemem` (at `get_copy_data` and `freemem`), the GIL
    /// released while they arrive: [`CopyRows::rows`] of them, and the state after them (0:
    /// more may follow, -1: the COPY ended, -2: libpq failed).
    ///
    /// The Python side (`postgres_cdc_source.snapshot.libpq`) checks that the addresses are
    /// those of the libpq that made `conn`, and that nothing else uses it meanwhile.
    fn read(&self, py: Python<'_>, conn: usize, get_copy_data: usize, freemem: usize,
            max_rows: usize) -> PyResult<(RowsBlock, Option<Texts>, i32)> {
        // SAFETY: the caller's contract above
        let source = unsafe { CopyOut::new(conn, get_copy_data, freemem) };
        let (rows, state) = py.detach(|| source.fetch(max_rows));
        // each message is one row, its line's newline included
        let (block, failed) = self.block(
            py, rows.iter().map(|row| row.strip_suffix(b"\n").unwrap_or(row)))?;
        Ok((block, failed, state))
    }
}

impl CopyRows {
    /// The rows of `lines`, each one line of COPY's text format without its newline.
    fn block<'a>(&self, py: Python<'_>, lines: impl Iterator<Item = &'a [u8]>)
                 -> PyResult<(RowsBlock, Option<Texts>)> {
        let last = |i: usize| self.last[i].load(Ordering::Relaxed);
        let rows = last(0);
        let mut block = RowsBlock { key: Strings::with_capacity(rows, last(1)),
                                    after: Strings::with_capacity(rows, last(2)),
                                    id: Strings::with_capacity(rows, last(3)), rows: 0 };
        let result = self.fill(py, lines, &mut block);
        for (i, size) in [block.rows, block.key.data.len(), block.after.data.len(),
                          block.id.data.len()].into_iter().enumerate() {
            self.last[i].store(size, Ordering::Relaxed);
        }
        Ok((block, result?))
    }

    /// [`CopyRows::block`]'s rows written into `block`: `None`, or the texts of the row a
    /// converter rejected (not written).
    fn fill<'a>(&self, py: Python<'_>, lines: impl Iterator<Item = &'a [u8]>,
                block: &mut RowsBlock) -> PyResult<Option<Texts>> {
        let width = self.relation.width();
        let mut fields: Vec<Option<Cow<'a, str>>> = Vec::with_capacity(width + self.extra);
        let mut spans: Vec<(usize, usize)> = Vec::with_capacity(width);
        for line in lines {
            fields.clear();
            let line = std::str::from_utf8(line).map_err(|_| not_utf8())?;
            split_fields(line, &mut fields)?;
            if fields.len() != width + self.extra {
                return Err(PyValueError::new_err(format!(
                    "COPY row of {} fields, expected {}", fields.len(), width + self.extra)));
            }
            if !self.relation.write_row(py, &fields[..width], &mut block.after.data, &mut spans)? {
                let texts = fields.iter().map(|f| f.as_ref().map(|t| t.to_string())).collect();
                return Ok(Some(texts));
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
        Ok(None)
    }
}

/// The fields of one line of COPY's text format, in one pass over its bytes: each `None` for
/// `\\N`, else its text, with the escapes undone where it has any.
fn split_fields<'a>(line: &'a str, fields: &mut Vec<Option<Cow<'a, str>>>) -> PyResult<()> {
    let bytes = line.as_bytes();
    let mut start = 0;
    let mut escaped = false;
    let mut i = scan::tab_or_backslash(bytes, 0);
    while i < bytes.len() {
        match bytes[i] {
            b'\t' => {
                fields.push(field(&line[start..i], escaped)?);
                start = i + 1;
                escaped = false;
                i = scan::tab_or_backslash(bytes, start);
                continue;
            }
            b'\\' => {
                escaped = true;
                i = scan::tab_or_backslash(bytes, i + 1);
                continue;
            }
            _ => i += 1,
        }
    }
    fields.push(field(&line[start..], escaped)?);
    Ok(())
}

/// One field of COPY's text format; `escaped` if it has a backslash.
fn field(text: &str, escaped: bool) -> PyResult<Option<Cow<'_, str>>> {
    match (escaped, text) {
        (false, _) => Ok(Some(Cow::Borrowed(text))),
        (true, "\\N") => Ok(None),
        (true, _) => unescaped(text.as_bytes()).map(Some),
    }
}

/// A field's text with its escapes undone (an octal or hex escape can make bytes that are not
/// UTF-8: an error).
fn unescaped(field: &[u8]) -> PyResult<Cow<'static, str>> {
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
    Ok(Cow::Owned(String::from_utf8(out).map_err(|_| not_utf8())?))
}

fn not_utf8() -> PyErr {
    PyValueError::new_err("COPY sent text that is not UTF-8 (the session's client_encoding)")
}
