//! The compiled core of iggy-spark: the per-row work of `pg_cdc`, into Arrow buffers, and of
//! `iggy_routed`'s JSON payloads.
//!
//! The reference is the pure-Python path; this crate is its hot paths compiled, and nothing
//! more:
//!
//! * [`pgoutput::Scanner`] takes, from one peek fetch, every pgoutput message the Python
//!   decoder's hot path takes (`postgres_cdc_source.decoding.pgoutput`) and stops at the first
//!   it does not, which the Python decoder then reads; it writes the JSON mode's images, or
//!   (`row_format=struct`) the fields of typed structs with [`typed::Fields`];
//! * [`copy::CopyRows`] turns the text of `COPY ... TO STDOUT` into the rows of a snapshot or
//!   backfill chunk, as `postgres_cdc_source.snapshot.reading` builds them in Python, reading
//!   them from psycopg's connection with its libpq ([`libpq::CopyOut`]);
//! * [`payloads::json_objects`] joins the sink's JSON payloads from their columns' JSON texts,
//!   as `iggy_spark.sink.json_payloads` joins them with Arrow.
//!
//! The first two write their rows' JSON with [`values::Relation`], byte for byte what the
//! Python path's converters and orjson write, into [`arrow::Strings`] columns that pyarrow
//! wraps without copying ([`arrow::View`]).

mod arrow;
mod copy;
mod libpq;
mod payloads;
mod pgoutput;
mod scan;
mod typed;
mod values;

use pyo3::prelude::*;

/// Bumped whenever the interface with `postgres_cdc_source.decoding.compiled` changes; the
/// Python side (`connector_common.compiled_core`) uses a core only of the interface it was
/// written for.
const INTERFACE: u32 = 6;

#[pymodule]
fn iggy_spark_core(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add("INTERFACE", INTERFACE)?;
    module.add("KINDS", values::KINDS)?;
    module.add("TYPED_KINDS", typed::TYPED_KINDS)?;
    module.add_class::<pgoutput::Scanner>()?;
    module.add_class::<pgoutput::Block>()?;
    module.add_class::<copy::CopyRows>()?;
    module.add_class::<copy::RowsBlock>()?;
    module.add_class::<arrow::View>()?;
    module.add_function(wrap_pyfunction!(payloads::json_objects, module)?)?;
    Ok(())
}
