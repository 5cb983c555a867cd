//! The compiled core of iggy-spark: the per-change work of `pg_cdc`'s pgoutput reader.
//!
//! The reference is the pure-Python decoder (`postgres_cdc_source.decoding.pgoutput`); this
//! module is its hot path compiled, and nothing more. [`Scanner::scan`] walks the rows of one
//! peek fetch from a given index and takes every row the Python hot path takes (an insert, or an
//! update whose new tuple comes alone, of a table whose Relation message it was given, every
//! column sent) and every change of a table the filter rejects; it stops at the first row it
//! does not take, which the Python decoder then reads. What it took comes back as one
//! [`Block`]: Arrow string and int32 buffers of the rows `pg_cdc` emits (LSN text, `seq`,
//! schema, table, op, key and after JSON), which pyarrow wraps without copying.
//!
//! The JSON is byte for byte what the Python path writes (its converters, then orjson): each
//! value is written here when its text has the form Postgres's output function gives it (a
//! canonical integer, a float of at most 15 significant digits without exponent, hex `bytea`,
//! ASCII timestamps, ...), and otherwise handed to the column's own Python converter and to
//! `orjson.dumps`. A row the Python hot path would give up on (an unchanged TOAST value, a
//! width or length mismatch, text that is not UTF-8, a value its converter rejects) ends the
//! scan before it, so the Python decoder reads it and gives the same row or the precise error.

use std::collections::{HashMap, HashSet};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

/// What the Python side passes for each column: how its text becomes JSON.
const STR: u8 = 0;
const INT: u8 = 1;
const BOOL: u8 = 2;
const FLOAT: u8 = 3;
const JSON: u8 = 4;
const BYTEA: u8 = 5;
const TIMESTAMP: u8 = 6;
const TIMESTAMPTZ: u8 = 7;
const PYTHON: u8 = 8;

/// Bumped whenever the interface with `postgres_cdc_source.decoding.compiled` changes; the
/// Python side uses a core only of the interface it was written for.
const INTERFACE: u32 = 1;

/// A block stops growing at this many bytes of one column, far inside Arrow's i32 offsets.
const BLOCK_BYTES: usize = 1 << 30;

struct Relation {
    schema: String,
    table: String,
    /// `"name":` of each column, JSON-escaped once.
    names: Vec<Vec<u8>>,
    kinds: Vec<u8>,
    converters: Vec<Py<PyAny>>,
    key: Vec<usize>,
}

/// An Arrow string column being filled: i32 offsets, UTF-8 data, an optional validity bitmap.
#[derive(Default)]
struct Strings {
    offsets: Vec<i32>,
    data: Vec<u8>,
    validity: Vec<u8>,
    nulls: usize,
    len: usize,
}

impl Strings {
    fn new() -> Self {
        Strings { offsets: vec![0], ..Default::default() }
    }

    fn valid(&mut self, valid: bool) {
        if self.len % 8 == 0 {
            self.validity.push(0);
        }
        if valid {
            *self.validity.last_mut().unwrap() |= 1 << (self.len % 8);
        } else {
            self.nulls += 1;
        }
        self.len += 1;
    }

    fn push(&mut self, text: &[u8]) {
        self.data.extend_from_slice(text);
        self.end(true);
    }

    /// Close the value written straight into `data` since the last offset.
    fn end(&mut self, valid: bool) {
        self.offsets.push(self.data.len() as i32);
        self.valid(valid);
    }

    fn buffers<'py>(&self, py: Python<'py>) -> (Bound<'py, PyBytes>, Bound<'py, PyBytes>,
                                                   Option<Bound<'py, PyBytes>>, usize) {
        let validity = (self.nulls > 0).then(|| PyBytes::new(py, &self.validity));
        (PyBytes::new(py, as_bytes(&self.offsets)), PyBytes::new(py, &self.data), validity,
         self.nulls)
    }
}

fn as_bytes(values: &[i32]) -> &[u8] {
    // SAFETY: i32 has no padding and any alignment of u8 is valid; Arrow's buffers are
    // little-endian, as is every platform this is built for.
    unsafe { std::slice::from_raw_parts(values.as_ptr() as *const u8, values.len() * 4) }
}

/// The rows one [`Scanner::scan`] took, as Arrow buffers.
#[pyclass(frozen, module = "iggy_spark_core")]
struct Block {
    lsn: Strings,
    seq: Vec<i32>,
    schema: Strings,
    table: Strings,
    op: Strings,
    key: Strings,
    after: Strings,
}

#[pymethods]
impl Block {
    fn __len__(&self) -> usize {
        self.seq.len()
    }

    /// `{column: (offsets, data, validity or None, null count)}` for the string columns
    /// `lsn`, `schema`, `table`, `op`, `key` and `after`, and `seq`'s int32 values as bytes.
    fn buffers<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let strings = [("lsn", &self.lsn), ("schema", &self.schema), ("table", &self.table),
                       ("op", &self.op), ("key", &self.key), ("after", &self.after)];
        let mut items: Vec<Bound<'py, PyAny>> = Vec::with_capacity(7);
        for (name, column) in strings {
            items.push((name, column.buffers(py)).into_pyobject(py)?.into_any());
        }
        items.push(("seq", PyBytes::new(py, as_bytes(&self.seq))).into_pyobject(py)?.into_any());
        PyTuple::new(py, items)
    }
}

impl Block {
    fn new() -> Self {
        Block { lsn: Strings::new(), seq: Vec::new(), schema: Strings::new(),
                table: Strings::new(), op: Strings::new(), key: Strings::new(),
                after: Strings::new() }
    }

    fn full(&self) -> bool {
        self.after.data.len() > BLOCK_BYTES || self.key.data.len() > BLOCK_BYTES
    }
}

/// pgoutput's hot path for one peek session: the kept relations it may decode, the rejected
/// ones it may skip. The Python decoder tells it of each Relation message's verdict.
#[pyclass(module = "iggy_spark_core")]
struct Scanner {
    relations: HashMap<u32, Relation>,
    skipped: HashSet<u32>,
    dumps: Py<PyAny>,
}

#[pymethods]
impl Scanner {
    /// `dumps` is `orjson.dumps`, for the values the core hands to their Python converter.
    #[new]
    fn new(dumps: Py<PyAny>) -> Self {
        Scanner { relations: HashMap::new(), skipped: HashSet::new(), dumps }
    }

    /// Decode relation `relid`'s changes: its columns' names (`"name":` JSON-escaped), kinds
    /// and Python converters, and the indexes of its key columns.
    fn relation(&mut self, relid: u32, schema: String, table: String, names: Vec<Vec<u8>>,
                kinds: Vec<u8>, converters: Vec<Py<PyAny>>, key: Vec<usize>) -> PyResult<()> {
        if names.len() != kinds.len() || names.len() != converters.len()
            || kinds.iter().any(|&k| k > PYTHON) || key.iter().any(|&k| k >= names.len()) {
            return Err(PyValueError::new_err("relation: columns, kinds and key do not agree"));
        }
        self.skipped.remove(&relid);
        self.relations.insert(relid, Relation { schema, table, names, kinds, converters, key });
        Ok(())
    }

    /// Skip relation `relid`'s changes: the table filter rejects it.
    fn skip(&mut self, relid: u32) {
        self.relations.remove(&relid);
        self.skipped.insert(relid);
    }

    /// Leave relation `relid`'s changes to the Python decoder.
    fn forget(&mut self, relid: u32) {
        self.relations.remove(&relid);
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
            let Some(relation) = self.relations.get(&relid) else { break };
            let Ok(lsn) = row.get_item(0)?.extract::<u64>() else { break };
            let out = block.get_or_insert_with(Block::new);
            if out.full() || !self.decode(py, relation, data, out, &mut spans)? {
                break;
            }
            write_lsn(&mut out.lsn, lsn);
            out.seq.push(seq as i32);
            out.schema.push(relation.schema.as_bytes());
            out.table.push(relation.table.as_bytes());
            out.op.push(if data[0] == b'I' { b"insert" } else { b"update" });
            seq += 1;
            index += 1;
        }
        Ok((index, seq, block.filter(|b| !b.seq.is_empty())))
    }
}

impl Scanner {
    /// Write the row of `data` (a lone new tuple at byte 8) into `out`'s `after` and `key`;
    /// `false`, with nothing written, for a row the Python decoder must read.
    fn decode(&self, py: Python<'_>, relation: &Relation, data: &[u8], out: &mut Block,
              spans: &mut Vec<(usize, usize)>) -> PyResult<bool> {
        let mark = out.after.data.len();
        if self.write_row(py, relation, data, &mut out.after.data, spans)? {
            out.after.end(true);
            let key = &mut out.key;
            if relation.key.is_empty() {
                key.end(false);
            } else {
                key.data.push(b'{');
                for (n, &i) in relation.key.iter().enumerate() {
                    if n > 0 {
                        key.data.push(b',');
                    }
                    key.data.extend_from_slice(&relation.names[i]);
                    let (from, to) = spans[i];
                    key.data.extend_from_slice(&out.after.data[from..to]);
                }
                key.data.push(b'}');
                key.end(true);
            }
            Ok(true)
        } else {
            out.after.data.truncate(mark);
            Ok(false)
        }
    }

    fn write_row(&self, py: Python<'_>, relation: &Relation, data: &[u8], out: &mut Vec<u8>,
                 spans: &mut Vec<(usize, usize)>) -> PyResult<bool> {
        let columns = relation.kinds.len();
        if usize::from(u16::from_be_bytes([data[6], data[7]])) != columns {
            return Ok(false);
        }
        spans.clear();
        out.push(b'{');
        let mut pos = 8;
        for i in 0..columns {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(&relation.names[i]);
            let Some(&kind) = data.get(pos) else { return Ok(false) };
            let from = out.len();
            match kind {
                b't' => {
                    let Some(length) = data.get(pos + 1..pos + 5) else { return Ok(false) };
                    let start = pos + 5;
                    let end = start + u32::from_be_bytes(length.try_into().unwrap()) as usize;
                    let Some(text) = data.get(start..end) else { return Ok(false) };
                    let Ok(text) = std::str::from_utf8(text) else { return Ok(false) };
                    if !self.write_value(py, relation, i, text, out)? {
                        return Ok(false);
                    }
                    pos = end;
                }
                b'n' => {
                    out.extend_from_slice(b"null");
                    pos += 1;
                }
                _ => return Ok(false), // 'u' (an unchanged TOAST value) or garbage
            }
            spans.push((from, out.len()));
        }
        out.push(b'}');
        Ok(pos == data.len())
    }

    /// Write column `i`'s `text` as the Python converter and orjson would; `false` if the
    /// converter rejects it.
    fn write_value(&self, py: Python<'_>, relation: &Relation, i: usize, text: &str,
                   out: &mut Vec<u8>) -> PyResult<bool> {
        let written = match relation.kinds[i] {
            STR => {
                json_string(out, text);
                true
            }
            INT => canonical_int(text) && {
                out.extend_from_slice(text.as_bytes());
                true
            },
            BOOL => {
                match text {
                    "t" | "true" => out.extend_from_slice(b"true"),
                    "f" | "false" => out.extend_from_slice(b"false"),
                    _ => return Ok(false), // the converter's KeyError: the Python path names it
                }
                true
            }
            FLOAT => float(out, text),
            JSON => {
                out.extend_from_slice(text.as_bytes());
                true
            }
            BYTEA => return Ok(bytea(out, text)),
            TIMESTAMP => text.is_ascii() && {
                if text.ends_with(" BC") {
                    json_string(out, text);
                } else {
                    json_string(out, &text.replacen(' ', "T", 1));
                }
                true
            },
            TIMESTAMPTZ => text.is_ascii() && {
                json_string(out, &timestamptz(text));
                true
            },
            _ => false,
        };
        if written {
            return Ok(true);
        }
        // Python's converter, then orjson: the value's own rules, whatever its text
        let converted = match relation.converters[i].call1(py, (text,)) {
            Ok(value) => value,
            Err(_) => return Ok(false),
        };
        match self.dumps.call1(py, (converted,)) {
            Ok(json) => {
                out.extend_from_slice(json.bind(py).downcast::<PyBytes>()?.as_bytes());
                Ok(true)
            }
            Err(_) => Ok(false),
        }
    }
}

/// An LSN as Postgres prints it: `%X/%X`.
fn write_lsn(column: &mut Strings, lsn: u64) {
    use std::io::Write;
    write!(column.data, "{:X}/{:X}", lsn >> 32, lsn & 0xFFFF_FFFF).unwrap();
    column.end(true);
}

/// `text` as a JSON string, escaped as orjson escapes: `"`, `\` and control characters.
fn json_string(out: &mut Vec<u8>, text: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = text.as_bytes();
    let mut run = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0x00..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[run..i]);
        if escape.is_empty() {
            out.extend_from_slice(&[b'\\', b'u', b'0', b'0', HEX[(b >> 4) as usize],
                                    HEX[(b & 15) as usize]]);
        } else {
            out.extend_from_slice(escape);
        }
        run = i + 1;
    }
    out.extend_from_slice(&bytes[run..]);
    out.push(b'"');
}

/// `0|-?[1-9][0-9]*` of at most 18 digits: the text of an int2/int4/int8/oid, which
/// Python's `int` and orjson write back unchanged (`-0` they write as `0`).
fn canonical_int(text: &str) -> bool {
    let digits = text.strip_prefix('-').unwrap_or(text).as_bytes();
    !digits.is_empty() && digits.len() <= 18 && digits.iter().all(u8::is_ascii_digit)
        && (digits[0] != b'0' || text == "0")
}

/// float4/float8: `NaN` and the infinities as strings; a plain decimal of at most 15
/// significant digits, at least 1e-4 in size, without trailing zeros, which orjson writes back
/// as its digits (`.0` added to a whole number): with 15 digits or fewer a decimal is the
/// shortest text of the double it reads as. `false` for any other text.
fn float(out: &mut Vec<u8>, text: &str) -> bool {
    if matches!(text, "NaN" | "Infinity" | "-Infinity") {
        json_string(out, text);
        return true;
    }
    let unsigned = text.strip_prefix('-').unwrap_or(text);
    let (whole, fraction) = match unsigned.split_once('.') {
        Some((w, f)) => (w, Some(f)),
        None => (unsigned, None),
    };
    let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !all_digits(whole) || (whole.len() > 1 && whole.starts_with('0')) {
        return false;
    }
    let significant = match fraction {
        None => whole.len(),
        Some(f) => {
            if !all_digits(f) || f.ends_with('0') {
                return false;
            }
            if whole == "0" {
                let zeros = f.len() - f.trim_start_matches('0').len();
                if zeros > 3 {
                    return false;
                }
                f.len() - zeros
            } else {
                whole.len() + f.len()
            }
        }
    };
    if significant > 15 {
        return false;
    }
    out.extend_from_slice(text.as_bytes());
    if fraction.is_none() {
        out.extend_from_slice(b".0");
    }
    true
}

/// `\x` + hex as base64 in a JSON string; `false` for any other text.
fn bytea(out: &mut Vec<u8>, text: &str) -> bool {
    const ALPHABET: &[u8; 64] =
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let Some(hex) = text.strip_prefix("\\x") else { return false };
    let hex = hex.as_bytes();
    if hex.len() % 2 != 0 {
        return false;
    }
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    };
    let mut bytes = Vec::with_capacity(hex.len() / 2);
    for pair in hex.chunks_exact(2) {
        let (Some(high), Some(low)) = (nibble(pair[0]), nibble(pair[1])) else { return false };
        bytes.push(high << 4 | low);
    }
    out.push(b'"');
    for chunk in bytes.chunks(3) {
        let n = chunk.len();
        let b = [chunk[0], if n > 1 { chunk[1] } else { 0 }, if n > 2 { chunk[2] } else { 0 }];
        let sextets = [b[0] >> 2, (b[0] & 3) << 4 | b[1] >> 4, (b[1] & 15) << 2 | b[2] >> 6,
                       b[2] & 63];
        for (j, &s) in sextets.iter().enumerate() {
            out.push(if j <= n { ALPHABET[s as usize] } else { b'=' });
        }
    }
    out.push(b'"');
    true
}

/// The Python converter's ISO form of a timestamptz text (ASCII).
fn timestamptz(text: &str) -> String {
    if let Some(stamp) = text.strip_suffix("+00") {
        return stamp.replacen(' ', "T", 1) + "+00:00";
    }
    if text.ends_with(" BC") || !text.contains(' ') {
        return text.to_string();
    }
    let stamp = text.replacen(' ', "T", 1);
    let sign = match (stamp.rfind('+'), stamp.rfind('-')) {
        (None, None) => -1,
        (a, b) => a.max(b).unwrap() as isize,
    };
    if stamp.len() as isize - sign == 3 {
        stamp + ":00"
    } else {
        stamp
    }
}

#[pymodule]
fn iggy_spark_core(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add("INTERFACE", INTERFACE)?;
    module.add("KINDS", (STR, INT, BOOL, FLOAT, JSON, BYTEA, TIMESTAMP, TIMESTAMPTZ, PYTHON))?;
    module.add_class::<Scanner>()?;
    module.add_class::<Block>()?;
    Ok(())
}
