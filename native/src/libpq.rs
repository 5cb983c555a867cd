//! The rows of a `COPY ... TO STDOUT` read straight from libpq, a protocol message each, without
//! a Python object per row.
//!
//! psycopg reads COPY through libpq's `PQgetCopyData`, which returns one row per call; through
//! Python that is about as costly as turning the row into its JSON in this core. Here the
//! connection psycopg opened (its `PGconn *`, psycopg's documented `pgconn_ptr`) is read with
//! the same libpq's `PQgetCopyData` and `PQfreemem`, whose addresses the Python side
//! (`postgres_cdc_source.snapshot.libpq`) takes from the libpq psycopg itself loaded, and the
//! rows are handed back joined, with the GIL released while they arrive. Starting the COPY and
//! taking its result stay with psycopg, so its errors are psycopg's own.

use std::ffi::{c_char, c_int, c_void};

use pyo3::prelude::*;
use pyo3::types::PyBytes;

type GetCopyData = unsafe extern "C" fn(*mut c_void, *mut *mut c_char, c_int) -> c_int;
type FreeMem = unsafe extern "C" fn(*mut c_void);

/// Up to `max_rows` rows of the COPY out in progress on `conn`, joined: `(data, state)`, where
/// `state` is 0 when more may follow, -1 when the COPY ended (its result waits for
/// `PQgetResult`) and -2 when libpq failed (`PQerrorMessage` says why).
///
/// `conn` must be a live `PGconn *` in the COPY out state that nothing else uses during the
/// call, and `get_copy_data` and `freemem` the addresses of `PQgetCopyData` and `PQfreemem` of
/// the libpq that made it: the Python side checks both before it calls.
#[pyfunction]
pub fn copy_rows(py: Python<'_>, conn: usize, get_copy_data: usize, freemem: usize,
                 max_rows: usize) -> PyResult<(Py<PyBytes>, i32)> {
    // SAFETY: the caller's contract above: the addresses are libpq's functions of these types
    let get: GetCopyData = unsafe { std::mem::transmute::<usize, GetCopyData>(get_copy_data) };
    let free: FreeMem = unsafe { std::mem::transmute::<usize, FreeMem>(freemem) };
    let (data, state) = py.detach(|| {
        let mut data: Vec<u8> = Vec::new();
        let mut rows = 0;
        while rows < max_rows {
            let mut buffer: *mut c_char = std::ptr::null_mut();
            // blocking (async = 0): the worker has nothing else to do until a row arrives
            let size = unsafe { get(conn as *mut c_void, &mut buffer, 0) };
            if size < 0 {
                return (data, size.max(-2));
            }
            // SAFETY: libpq returned `size` bytes at `buffer`, to be freed with PQfreemem
            unsafe {
                data.extend_from_slice(std::slice::from_raw_parts(buffer as *const u8,
                                                                  size as usize));
                free(buffer as *mut c_void);
            }
            rows += 1;
        }
        (data, 0)
    });
    Ok((PyBytes::new(py, &data).unbind(), state))
}
