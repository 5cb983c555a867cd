//! Row images as the fields of typed structs (`row_format=struct`): one column per field of the
//! query's row struct and of its key struct, one entry per change.
//!
//! The Python path converts each value with its field's converter
//! (`postgres_cdc_source.rows.struct.images.image_converter`): `str`, `int`, a float, a boolean,
//! `bytea`'s bytes, or (arrays) a Python value. Here a value whose text has the form Postgres's
//! output function gives it is checked and kept as text (bytes for `bytea`, `t`/`f` for a
//! boolean), which Arrow casts to the field's type a column at a time; a value of the last kind
//! goes through its converter. A value the core does not take (an unusual text, a converter's
//! error) ends the block before its row, which the Python decoder then reads: the same row, or
//! the same error.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use crate::arrow::{Bits, Strings};
use crate::values::{hex_bytes, plain_float};

/// How a field's values are taken, as `postgres_cdc_source.decoding.compiled` names them.
const TEXT: u8 = 0;
const INT: u8 = 1;
const FLOAT: u8 = 2;
const BOOL: u8 = 3;
const BYTEA: u8 = 4;
const PYTHON: u8 = 5;

/// The kinds, in the order of `postgres_cdc_source.decoding.compiled`'s typed forms.
pub const TYPED_KINDS: (u8, u8, u8, u8, u8, u8) = (TEXT, INT, FLOAT, BOOL, BYTEA, PYTHON);

/// One field's column: texts (bytes for `bytea`), or the converter's Python values.
enum Column {
    Texts(Strings),
    Objects(Vec<Option<Py<PyAny>>>),
}

/// A value of a change, as its field's column takes it.
enum Cell<'a> {
    Null,
    Text(&'a [u8]),
    Bytes(Vec<u8>),
    Object(Py<PyAny>),
}

/// The fields' columns of a block's changes: the row struct's fields, then the key struct's
/// (from `first_key` on), and whether each change has a key.
pub struct Fields {
    columns: Vec<Column>,
    first_key: usize,
    keyed: Bits,
}

impl Fields {
    pub fn new(kinds: &[u8], first_key: usize) -> Fields {
        let columns = kinds.iter()
            .map(|&k| if k == PYTHON { Column::Objects(Vec::new()) }
                      else { Column::Texts(Strings::new()) })
            .collect();
        Fields { columns, first_key, keyed: Bits::default() }
    }

    /// Append one change of `relation` whose values are `cells`; `false`, with nothing
    /// appended, if a text column would pass Arrow's i32 offsets (the block ends before it).
    fn push(&mut self, py: Python<'_>, relation: &TypedRelation, cells: &[Cell<'_>]) -> bool {
        for (field, column) in self.columns.iter().enumerate() {
            if let (Column::Texts(texts), Some(i)) = (column, relation.sources[field]) {
                let size = match &cells[i] {
                    Cell::Text(text) => text.len(),
                    Cell::Bytes(bytes) => bytes.len(),
                    _ => 0,
                };
                if i32::try_from(texts.data.len() + size).is_err() {
                    return false;
                }
            }
        }
        for (field, column) in self.columns.iter_mut().enumerate() {
            let cell = relation.sources[field]
                .filter(|_| field < self.first_key || relation.keyed)
                .map(|i| &cells[i]);
            match (column, cell) {
                (Column::Texts(texts), Some(Cell::Text(text))) => texts.push(text),
                (Column::Texts(texts), Some(Cell::Bytes(bytes))) => texts.push(bytes),
                (Column::Texts(texts), _) => texts.end(false),
                (Column::Objects(objects), Some(Cell::Object(object))) => {
                    objects.push(Some(object.clone_ref(py)))
                }
                (Column::Objects(objects), _) => objects.push(None),
            }
        }
        self.keyed.push(relation.keyed);
        true
    }

    /// `(fields, keyed)`: each field's buffers, a text column's `(offsets, data, validity or
    /// None, null count)` or a list of Python values (`None`: null); `keyed` the key struct's
    /// `(validity or None, null count)`.
    /// Lent by `owner`, the frozen block holding these fields ([`crate::arrow::View::of`]).
    pub fn buffers<'py>(&self, owner: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyTuple>> {
        let py = owner.py();
        let mut fields: Vec<Bound<'py, PyAny>> = Vec::with_capacity(self.columns.len());
        for column in &self.columns {
            fields.push(match column {
                Column::Texts(texts) => texts.buffers(owner)?.into_pyobject(py)?.into_any(),
                Column::Objects(objects) => PyList::new(
                    py, objects.iter().map(|o| o.as_ref().map(|o| o.clone_ref(py))))?.into_any(),
            });
        }
        (PyTuple::new(py, fields)?, self.keyed.buffer(owner)?).into_pyobject(py)
    }
}

/// One table's columns as the query's structs take them.
pub struct TypedRelation {
    pub schema: String,
    pub table: String,
    kinds: Vec<u8>,
    converters: Vec<Py<PyAny>>,
    /// For each field (row struct's, then key struct's), the column that fills it, if any.
    sources: Vec<Option<usize>>,
    /// Whether the table has a replica identity: its changes' key struct is not null.
    keyed: bool,
}

impl TypedRelation {
    /// `kinds` and `converters` of each column, `sources` of each of `fields`'s fields
    /// (`fields.kinds`: a field's kind is its column's).
    pub fn new(schema: String, table: String, kinds: Vec<u8>, converters: Vec<Py<PyAny>>,
               sources: Vec<Option<usize>>, keyed: bool, fields: &[u8])
               -> PyResult<TypedRelation> {
        let agree = kinds.len() == converters.len() && sources.len() == fields.len()
            && kinds.iter().all(|&k| k <= PYTHON)
            && sources.iter().zip(fields).all(|(s, &f)| s.is_none_or(|i| kinds.get(i) == Some(&f)));
        if !agree {
            return Err(PyValueError::new_err("typed relation: columns and fields do not agree"));
        }
        Ok(TypedRelation { schema, table, kinds, converters, sources, keyed })
    }

    pub fn width(&self) -> usize {
        self.kinds.len()
    }

    /// Each value of a change as its field takes it; `None` if the core does not take one.
    fn cells<'a>(&self, py: Python<'_>, values: &[Option<&'a str>]) -> Option<Vec<Cell<'a>>> {
        let mut cells = Vec::with_capacity(values.len());
        for (i, value) in values.iter().enumerate() {
            let Some(text) = value else {
                cells.push(Cell::Null);
                continue;
            };
            cells.push(match self.kinds[i] {
                TEXT => Cell::Text(text.as_bytes()),
                INT if integer(text) => Cell::Text(text.as_bytes()),
                FLOAT if matches!(*text, "NaN" | "Infinity" | "-Infinity")
                    || (plain_float(text) && text.parse::<f64>().is_ok_and(f64::is_finite)) =>
                    Cell::Text(text.as_bytes()),
                BOOL => match *text {
                    "t" | "true" => Cell::Text(b"t"),
                    "f" | "false" => Cell::Text(b"f"),
                    _ => return None, // the converter's KeyError: the Python path names it
                },
                BYTEA => Cell::Bytes(hex_bytes(text)?),
                PYTHON => Cell::Object(self.converters[i].call1(py, (*text,)).ok()?),
                _ => return None,
            });
        }
        Some(cells)
    }
}

/// Take one change of `relation` (its lone new tuple's `values`) into `fields`; `false` if the
/// core does not take it, with nothing taken.
pub fn take(py: Python<'_>, relation: &TypedRelation, values: &[Option<&str>],
            fields: &mut Fields) -> bool {
    let Some(cells) = relation.cells(py, values) else { return false };
    fields.push(py, relation, &cells)
}

/// An integer as Postgres prints one (`0|-?[1-9][0-9]*`) that a bigint holds: Arrow's cast then
/// reads the value Python's `int` reads.
fn integer(text: &str) -> bool {
    let digits = text.strip_prefix('-').unwrap_or(text).as_bytes();
    !digits.is_empty() && digits.iter().all(u8::is_ascii_digit)
        && (digits[0] != b'0' || text == "0") && text.parse::<i64>().is_ok()
}
