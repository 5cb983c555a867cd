//! pgoutput's hot path: the messages the Python decoder's `events()` takes inline.
//!
//! [`Scanner::scan`] walks the rows of one peek fetch from a given index and takes every row the
//! Python hot path takes (an insert, or an update whose new tuple comes alone, of a table whose
//! Relation message it was given, every column sent) and every change of a table the filter
//! rejects; it stops at the first row it does not take, which the Python decoder then reads.
//! A row the Python hot path would give up on (an unchanged TOAST value, a width or length
//! mismatch, text that is not UTF-8, a value its converter rejects) ends the scan before it, so
//! the Python decoder reads it and gives the same row or the precise error.

use std::collections::{HashMap, HashSet};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use crate::arrow::{as_bytes, Strings, View};
use crate::typed::{take, Fields, TypedRelation};
use crate::values::Relation;

/// The rows one [`Scanner::scan`] took, as Arrow buffers.
#[pyclass(frozen, module = "iggy_spark_core")]
pub struct Block {
    lsn: Strings,
    seq: Vec<i32>,
    schema: Strings,
    table: Strings,
    op: Strings,
    key: Strings,
    after: Strings,
    /// `row_format=struct`: the fields' columns, in place of `key` and `after`.
    fields: Option<Fields>,
}

#[pymethods]
impl Block {
    fn __len__(&self) -> usize {
        self.seq.len()
    }

    /// `(column, buffers)` pairs: for the string columns `lsn`, `schema`, `table`, `op`,
    /// `key` and `after` `(offsets, data, validity or None, null count)`, for `seq` its int32
    /// values; with typed structs, `fields` ([`Fields::buffers`]) in place of `key`/`after`'s
    /// (then empty).
    fn buffers<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        let (this, py, owner) = (slf.get(), slf.py(), slf.as_any());
        let strings = [("lsn", &this.lsn), ("schema", &this.schema), ("table", &this.table),
                       ("op", &this.op), ("key", &this.key), ("after", &this.after)];
        let mut items: Vec<Bound<'py, PyAny>> = Vec::with_capacity(7);
        for (name, column) in strings {
            items.push((name, column.buffers(owner)?).into_pyobject(py)?.into_any());
        }
        let seq = View::of(owner, as_bytes(&this.seq))?;
        items.push(("seq", seq).into_pyobject(py)?.into_any());
        if let Some(fields) = &this.fields {
            items.push(("fields", fields.buffers(owner)?).into_pyobject(py)?.into_any());
        }
        PyTuple::new(py, items)
    }
}

impl Block {
    fn new(fields: Option<&(Vec<u8>, usize)>) -> Self {
        Block { lsn: Strings::new(), seq: Vec::new(), schema: Strings::new(),
                table: Strings::new(), op: Strings::new(), key: Strings::new(),
                after: Strings::new(),
                fields: fields.map(|(kinds, first_key)| Fields::new(kinds, *first_key)) }
    }
}

/// pgoutput's hot path for one peek session: the kept relations it may decode, the rejected
/// ones it may skip. The Python decoder tells it of each Relation message's verdict. A scanner
/// writes the JSON mode's images, or with `fields` the fields of typed structs.
#[pyclass(module = "iggy_spark_core")]
pub struct Scanner {
    relations: HashMap<u32, Relation>,
    typed: HashMap<u32, TypedRelation>,
    skipped: HashSet<u32>,
    dumps: Py<PyAny>,
    /// The kinds of the row struct's then the key struct's fields, and where the key's start.
    fields: Option<(Vec<u8>, usize)>,
}

#[pymethods]
impl Scanner {
    /// `dumps` is `orjson.dumps`, for the values the core hands to their Python converter;
    /// `fields`, for typed structs: the kind of each field of the row struct then of the key
    /// struct, and the index of the key struct's first.
    #[new]
    #[pyo3(signature = (dumps, fields=None))]
    fn new(dumps: Py<PyAny>, fields: Option<(Vec<u8>, usize)>) -> Self {
        Scanner { relations: HashMap::new(), typed: HashMap::new(), skipped: HashSet::new(),
                  dumps, fields }
    }

    /// Decode relation `relid`'s changes: its columns' names (`"name":` JSON-escaped), kinds
    /// and Python converters, and the indexes of its key columns.
    #[allow(clippy::too_many_arguments)]
    fn relation(&mut self, py: Python<'_>, relid: u32, schema: String, table: String,
                names: Vec<Vec<u8>>, kinds: Vec<u8>, converters: Vec<Py<PyAny>>,
                key: Vec<usize>) -> PyResult<()> {
        if self.fields.is_some() {
            return Err(PyValueError::new_err("relation: this scanner writes typed structs"));
        }
        let relation = Relation::new(schema, table, names, kinds, converters, key,
                                     self.dumps.clone_ref(py))?;
        self.skipped.remove(&relid);
        self.relations.insert(relid, relation);
        Ok(())
    }

    /// Decode relation `relid`'s changes into typed structs: each column's kind and converter,
    /// the column filling each field (row struct's, then key struct's; `None`: no column of
    /// this table), and whether the table has a replica identity.
    #[allow(clippy::too_many_arguments)]
    fn typed_relation(&mut self, relid: u32, schema: String, table: String, kinds: Vec<u8>,
                      converters: Vec<Py<PyAny>>, sources: Vec<Option<usize>>, keyed: bool)
                      -> PyResult<()> {
        let Some((fields, _)) = &self.fields else {
            return Err(PyValueError::new_err("typed_relation: this scanner writes JSON"));
        };
        let relation = TypedRelation::new(schema, table, kinds, converters, sources, keyed,
                                          fields)?;
        self.skipped.remove(&relid);
        self.typed.insert(relid, relation);
        Ok(())
    }

    /// Skip relation `relid`'s changes: the table filter rejects it.
    fn skip(&mut self, relid: u32) {
        self.relations.remove(&relid);
        self.typed.remove(&relid);
        self.skipped.insert(relid);
    }

    /// Leave relation `relid`'s changes to the Python decoder.
    fn forget(&mut self, relid: u32) {
        self.relations.remove(&relid);
        self.typed.remove(&relid);
        self.skipped.remove(&relid);
    }

    /// Take `rows[start:]` (`(lsn, xid, data)` tuples, inside a transaction) up to the first
    /// row this core does not take: `(index of that row or len(rows), next seq, block or
    /// None)`. `seq` is the transaction's next change number.
    fn scan<'py>(&self, py: Python<'py>, rows: &Bound<'py, PyList>, start: usize, mut seq: i64)
                 -> PyResult<(usize, i64, Option<Block>)> {
        let mut block: Option<Block> = None;
        let mut spans: Vec<(usize, usize)> = Vec::new();
        let count = rows.len();
        let mut index = start;
        while index < count {
            let row = rows.get_item(index)?;
            let Ok(row) = row.downcast::<PyTuple>() else { break };
            if row.len() != 3 {
                break;
            }
            let item = row.get_item(2)?;
            let Ok(payload) = item.downcast::<PyBytes>() else { break };
            let data = payload.as_bytes();
            if data.len() < 5 || !matches!(data[0], b'I' | b'U' | b'D') {
                break;
            }
            let relid = u32::from_be_bytes([data[1], data[2], data[3], data[4]]);
            if self.skipped.contains(&relid) {
                seq += 1;
                index += 1;
                continue;
            }
            if data[0] == b'D' || data.len() < 8 || data[5] != b'N' || seq > i32::MAX as i64 {
                break;
            }
            let Ok(lsn) = row.get_item(0)?.extract::<u64>() else { break };
            let out = block.get_or_insert_with(|| Block::new(self.fields.as_ref()));
            let mut values = Vec::new();
            let (schema, table) = if let Some(fields) = out.fields.as_mut() {
                let Some(relation) = self.typed.get(&relid) else { break };
                if !new_tuple(data, relation.width(), &mut values)
                    || !take(py, relation, &values, fields) {
                    break;
                }
                (&relation.schema, &relation.table)
            } else {
                let Some(relation) = self.relations.get(&relid) else { break };
                let marks = (out.after.data.len(), out.key.data.len());
                if out.after.full() || out.key.full()
                    || !new_tuple(data, relation.width(), &mut values)
                    || !relation.write_row(py, &values, &mut out.after.data, &mut spans)? {
                    break;
                }
                if relation.has_key() {
                    relation.write_key(&out.after.data, &spans, &mut out.key.data);
                }
                if !out.after.fits() || !out.key.fits() {
                    // past i32 offsets: the block ends before this row, which starts the next
                    // one (a row too large for any block is the Python path's to refuse)
                    out.after.data.truncate(marks.0);
                    out.key.data.truncate(marks.1);
                    break;
                }
                out.after.end(true);
                out.key.end(relation.has_key());
                (&relation.schema, &relation.table)
            };
            write_lsn(&mut out.lsn, lsn);
            out.seq.push(seq as i32);
            out.schema.push(schema.as_bytes());
            out.table.push(table.as_bytes());
            out.op.push(if data[0] == b'I' { b"insert" } else { b"update" });
            seq += 1;
            index += 1;
        }
        Ok((index, seq, block.filter(|b| !b.seq.is_empty())))
    }
}

/// The texts of the lone new tuple at byte 8 of `data`, if it has `width` columns, every one
/// sent as text or NULL, and ends where `data` does; `false` for anything else.
fn new_tuple<'a>(data: &'a [u8], width: usize, values: &mut Vec<Option<&'a str>>) -> bool {
    values.clear();
    if usize::from(u16::from_be_bytes([data[6], data[7]])) != width {
        return false;
    }
    let mut pos = 8;
    for _ in 0..width {
        match data.get(pos) {
            Some(b't') => {
                let Some(length) = data.get(pos + 1..pos + 5) else { return false };
                let start = pos + 5;
                let end = start + u32::from_be_bytes(length.try_into().unwrap()) as usize;
                let Some(text) = data.get(start..end) else { return false };
                let Ok(text) = std::str::from_utf8(text) else { return false };
                values.push(Some(text));
                pos = end;
            }
            Some(b'n') => {
                values.push(None);
                pos += 1;
            }
            _ => return false, // 'u' (an unchanged TOAST value) or garbage
        }
    }
    pos == data.len()
}

/// An LSN as Postgres prints it: `%X/%X`.
fn write_lsn(column: &mut Strings, lsn: u64) {
    use std::io::Write;
    write!(column.data, "{:X}/{:X}", lsn >> 32, lsn & 0xFFFF_FFFF).unwrap();
    column.end(true);
}
