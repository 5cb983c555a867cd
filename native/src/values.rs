//! Column texts as the JSON the Python path writes: its converters
//! (`postgres_cdc_source.rows.json.values`), then orjson.
//!
//! A value is written here when its text has the form Postgres's output function gives it (a
//! canonical integer, a float of at most 15 significant digits without exponent, hex `bytea`,
//! ASCII timestamps, ...), and otherwise handed to the column's own Python converter and to
//! `orjson.dumps`; a value the converter rejects is reported, never written.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::scan;

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

/// The kinds, in the order of `postgres_cdc_source.decoding.compiled`'s forms.
pub const KINDS: (u8, u8, u8, u8, u8, u8, u8, u8, u8) =
    (STR, INT, BOOL, FLOAT, JSON, BYTEA, TIMESTAMP, TIMESTAMPTZ, PYTHON);

/// One table's columns as the rows' JSON needs them.
pub struct Relation {
    pub schema: String,
    pub table: String,
    /// `"name":` of each column, JSON-escaped once.
    names: Vec<Vec<u8>>,
    kinds: Vec<u8>,
    converters: Vec<Py<PyAny>>,
    key: Vec<usize>,
    dumps: Py<PyAny>,
}

impl Relation {
    /// `names` are the columns' `"name":`, `kinds` how each is written, `converters` the Python
    /// ones (for the values written through them), `key` the key columns' indexes; `dumps` is
    /// `orjson.dumps`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(schema: String, table: String, names: Vec<Vec<u8>>, kinds: Vec<u8>,
               converters: Vec<Py<PyAny>>, key: Vec<usize>, dumps: Py<PyAny>)
               -> PyResult<Relation> {
        if names.len() != kinds.len() || names.len() != converters.len()
            || kinds.iter().any(|&k| k > PYTHON) || key.iter().any(|&k| k >= names.len()) {
            return Err(PyValueError::new_err("relation: columns, kinds and key do not agree"));
        }
        Ok(Relation { schema, table, names, kinds, converters, key, dumps })
    }

    pub fn width(&self) -> usize {
        self.kinds.len()
    }

    pub fn has_key(&self) -> bool {
        !self.key.is_empty()
    }

    /// Write `{"name":value,...}` of `values` (`None`: SQL NULL) to `out`, noting where each
    /// value's JSON lies in `spans`; `false`, with `out` as it was, if a converter rejects one.
    pub fn write_row<V: std::ops::Deref<Target = str>>(
        &self, py: Python<'_>, values: &[Option<V>], out: &mut Vec<u8>,
        spans: &mut Vec<(usize, usize)>,
    ) -> PyResult<bool> {
        let mark = out.len();
        spans.clear();
        out.push(b'{');
        for (i, value) in values.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(&self.names[i]);
            let from = out.len();
            match value {
                None => out.extend_from_slice(b"null"),
                Some(text) => {
                    if !self.write_value(py, i, text, out)? {
                        out.truncate(mark);
                        return Ok(false);
                    }
                }
            }
            spans.push((from, out.len()));
        }
        out.push(b'}');
        Ok(true)
    }

    /// Write the key object of the row whose values `spans` locates in `row` to `out`.
    pub fn write_key(&self, row: &[u8], spans: &[(usize, usize)], out: &mut Vec<u8>) {
        out.push(b'{');
        for (n, &i) in self.key.iter().enumerate() {
            if n > 0 {
                out.push(b',');
            }
            out.extend_from_slice(&self.names[i]);
            let (from, to) = spans[i];
            out.extend_from_slice(&row[from..to]);
        }
        out.push(b'}');
    }

    /// Write column `i`'s `text` as the Python converter and orjson would; `false` if the
    /// converter rejects it.
    fn write_value(&self, py: Python<'_>, i: usize, text: &str, out: &mut Vec<u8>)
                   -> PyResult<bool> {
        let written = match self.kinds[i] {
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
                    iso_string(out, text, "");
                }
                true
            },
            TIMESTAMPTZ => text.is_ascii() && {
                timestamptz(out, text);
                true
            },
            _ => false,
        };
        if written {
            return Ok(true);
        }
        // Python's converter, then orjson: the value's own rules, whatever its text
        let Ok(converted) = self.converters[i].call1(py, (text,)) else { return Ok(false) };
        match self.dumps.call1(py, (converted,)) {
            Ok(json) => {
                out.extend_from_slice(json.bind(py).downcast::<PyBytes>()?.as_bytes());
                Ok(true)
            }
            Err(_) => Ok(false),
        }
    }
}

/// `text` as a JSON string, escaped as orjson escapes: `"`, `\` and control characters.
pub fn json_string(out: &mut Vec<u8>, text: &str) {
    json_string_of_utf8(out, text.as_bytes());
}

/// The bytes that orjson escapes in a string: `"`, `\` and the control characters.
const ESCAPED: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = true;
        b += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table
};

/// [`json_string`] of bytes the caller knows are UTF-8: only ASCII bytes are ever escaped.
pub fn json_string_of_utf8(out: &mut Vec<u8>, bytes: &[u8]) {
    out.push(b'"');
    json_chars(out, bytes);
    out.push(b'"');
}

/// The inside of [`json_string_of_utf8`]: `bytes` escaped as orjson escapes them.
fn json_chars(out: &mut Vec<u8>, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut run = 0;
    while let Some(found) = first_escaped(&bytes[run..]) {
        let i = run + found;
        out.extend_from_slice(&bytes[run..i]);
        let b = bytes[i];
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            _ => out.extend_from_slice(&[b'\\', b'u', b'0', b'0', HEX[(b >> 4) as usize],
                                         HEX[(b & 15) as usize]]),
        }
        run = i + 1;
    }
    out.extend_from_slice(&bytes[run..]);
}

/// The index of the first byte of `bytes` that [`json_chars`] escapes.
fn first_escaped(bytes: &[u8]) -> Option<usize> {
    let at = scan::json_escaped(bytes);
    bytes[at..].iter().position(|&b| ESCAPED[b as usize]).map(|i| at + i)
}

/// `0|-?[1-9][0-9]*` of at most 18 digits: the text of an int2/int4/int8/oid, which
/// Python's `int` and orjson write back unchanged (`-0` they write as `0`).
pub fn canonical_int(text: &str) -> bool {
    let digits = text.strip_prefix('-').unwrap_or(text).as_bytes();
    !digits.is_empty() && digits.len() <= 18 && digits.iter().all(u8::is_ascii_digit)
        && (digits[0] != b'0' || text == "0")
}

/// float4/float8: `NaN` and the infinities as strings (JSON has no literal for them); any
/// other text of the form `-?D+(.D+)?(e[+-]?D+)?` read as the double Python's `float` reads
/// (both round correctly) and written as orjson writes a double. `false` for any other text,
/// or one out of a double's range.
fn float(out: &mut Vec<u8>, text: &str) -> bool {
    if matches!(text, "NaN" | "Infinity" | "-Infinity") {
        json_string(out, text);
        return true;
    }
    if !plain_float(text) {
        return false;
    }
    match text.parse::<f64>() {
        Ok(value) if value.is_finite() => {
            orjson_float(out, value);
            true
        }
        _ => false, // orjson writes an infinity as null: the converter's way, not this one
    }
}

/// Whether `text` is `-?D+(.D+)?([eE][+-]?D+)?`, ASCII digits `D`.
pub fn plain_float(text: &str) -> bool {
    fn digits(s: &[u8]) -> usize {
        s.iter().take_while(|b| b.is_ascii_digit()).count()
    }
    let bytes = text.strip_prefix('-').unwrap_or(text).as_bytes();
    let mut pos = digits(bytes);
    if pos == 0 {
        return false;
    }
    if bytes.get(pos) == Some(&b'.') {
        let fraction = digits(&bytes[pos + 1..]);
        if fraction == 0 {
            return false;
        }
        pos += 1 + fraction;
    }
    if matches!(bytes.get(pos), Some(b'e' | b'E')) {
        pos += 1;
        if matches!(bytes.get(pos), Some(b'+' | b'-')) {
            pos += 1;
        }
        let exponent = digits(&bytes[pos..]);
        if exponent == 0 {
            return false;
        }
        pos += exponent;
    }
    pos == bytes.len()
}

/// A finite double as orjson writes it: its shortest round-trip digits (Ryū's, which of two
/// as short and as close takes the even one, as orjson and Python's `repr` do, where Rust's own
/// formatting can take the other: `562949953421312.25` is `...312.2` here, `...312.3` there),
/// positional from 1e-5 to below 1e16 (`.0` after a whole number), else `d.ddde+X`/`d.ddde-X`.
fn orjson_float(out: &mut Vec<u8>, value: f64) {
    use std::io::Write;
    let (sign, digits, exponent) = shortest(value);
    out.extend_from_slice(sign.as_bytes());
    if !(-5..16).contains(&exponent) {
        let sign = if exponent < 0 { '-' } else { '+' };
        let (first, rest) = digits.split_at(1);
        let point = if rest.is_empty() { "" } else { "." };
        write!(out, "{first}{point}{rest}e{sign}{}", exponent.abs()).unwrap();
        return;
    }
    if exponent < 0 {
        out.extend_from_slice(b"0.");
        out.extend(std::iter::repeat_n(b'0', (-exponent - 1) as usize));
        out.extend_from_slice(digits.as_bytes());
        return;
    }
    let whole = exponent as usize + 1;
    if digits.len() <= whole {
        out.extend_from_slice(digits.as_bytes());
        out.extend(std::iter::repeat_n(b'0', whole - digits.len()));
        out.extend_from_slice(b".0");
    } else {
        out.extend_from_slice(&digits.as_bytes()[..whole]);
        out.push(b'.');
        out.extend_from_slice(&digits.as_bytes()[whole..]);
    }
}

/// A finite double's sign, shortest round-trip digits (no leading or trailing zeros; `"0"` for
/// zero) and decimal exponent: `value = 0.digits * 10^(exponent + 1)`, from Ryū's text of it
/// (`"-1.2345E-7"`, `"1E16"`, `"562949953421312.2"`, `"0.0"`).
fn shortest(value: f64) -> (&'static str, String, i32) {
    let mut buffer = ryu::Buffer::new();
    let text = buffer.format_finite(value);
    let (sign, text) = match text.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", text),
    };
    let (mantissa, power) = match text.split_once(['e', 'E']) {
        Some((mantissa, power)) => (mantissa, power.parse::<i32>().unwrap()),
        None => (text, 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let all = format!("{whole}{fraction}");
    let leading = all.bytes().take_while(|&b| b == b'0').count();
    let digits = all[leading..].trim_end_matches('0');
    if digits.is_empty() {
        return (sign, "0".to_string(), 0);
    }
    (sign, digits.to_string(), power + whole.len() as i32 - 1 - leading as i32)
}

/// `\x` + hex as base64 in a JSON string; `false` for any other text.
fn bytea(out: &mut Vec<u8>, text: &str) -> bool {
    const ALPHABET: &[u8; 64] =
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let Some(bytes) = hex_bytes(text) else { return false };
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

/// The bytes of a `bytea` in hex output (`\\x` then pairs of hex digits); `None` for any other
/// text (Python's `bytes.fromhex` also takes spaces: those values are the converter's).
pub fn hex_bytes(text: &str) -> Option<Vec<u8>> {
    let hex = text.strip_prefix("\\x")?.as_bytes();
    if hex.len() % 2 != 0 {
        return None;
    }
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    };
    hex.chunks_exact(2).map(|pair| Some(nibble(pair[0])? << 4 | nibble(pair[1])?)).collect()
}

/// The Python converter's ISO form of a timestamptz text (ASCII), as a JSON string.
fn timestamptz(out: &mut Vec<u8>, text: &str) {
    if let Some(stamp) = text.strip_suffix("+00") {
        return iso_string(out, stamp, "+00:00");
    }
    if text.ends_with(" BC") || !text.contains(' ') {
        return json_string(out, text);
    }
    // the offset's sign: the last '+' or '-' (a date's own '-' come before it)
    let sign = text.rfind(['+', '-']).map_or(-1, |at| at as isize);
    iso_string(out, text, if text.len() as isize - sign == 3 { ":00" } else { "" });
}

/// `text` with its first space as `T`, then `suffix`, as a JSON string: the converters'
/// `text.replace(" ", "T", 1) + suffix`, written without an intermediate string.
fn iso_string(out: &mut Vec<u8>, text: &str, suffix: &str) {
    out.push(b'"');
    match text.split_once(' ') {
        Some((date, time)) => {
            json_chars(out, date.as_bytes());
            out.push(b'T');
            json_chars(out, time.as_bytes());
        }
        None => json_chars(out, text.as_bytes()),
    }
    json_chars(out, suffix.as_bytes());
    out.push(b'"');
}
