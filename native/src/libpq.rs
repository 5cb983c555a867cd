//! The rows of a `COPY ... TO STDOUT` read straight from libpq, a protocol message each, without
//! a Python object per row.
//!
//! psycopg reads COPY through libpq's `PQgetCopyData`, which returns one row per call; through
//! Python that is about as costly as turning the row into its JSON in this core. Here the
//! connection psycopg opened (its `PGconn *`, psycopg's documented `pgconn_ptr`) is read with
//! the same libpq's `PQgetCopyData` and `PQfreemem`, whose addresses the Python side
//! (`postgres_cdc_source.snapshot.libpq`) takes from the libpq psycopg itself loaded. Starting
//! the COPY and taking its result stay with psycopg, so its errors are psycopg's own.

use std::ffi::{c_char, c_int, c_void};

type GetCopyData = unsafe extern "C" fn(*mut c_void, *mut *mut c_char, c_int) -> c_int;
type FreeMem = unsafe extern "C" fn(*mut c_void);

/// Where the rows come from: a `PGconn *` in the COPY out state and its libpq's
/// `PQgetCopyData` and `PQfreemem`.
#[derive(Clone, Copy)]
pub struct CopyOut {
    conn: usize,
    get: GetCopyData,
    free: FreeMem,
}

impl CopyOut {
    /// # Safety
    /// `conn` must be a live `PGconn *` in the COPY out state that nothing else uses while it
    /// is read, and `get_copy_data` and `freemem` the addresses of `PQgetCopyData` and
    /// `PQfreemem` of the libpq that made it: the Python side checks both before it calls.
    pub unsafe fn new(conn: usize, get_copy_data: usize, freemem: usize) -> CopyOut {
        // SAFETY: the caller's contract: the addresses are libpq's functions of these types
        let get = unsafe { std::mem::transmute::<usize, GetCopyData>(get_copy_data) };
        let free = unsafe { std::mem::transmute::<usize, FreeMem>(freemem) };
        CopyOut { conn, get, free }
    }

    /// Up to `max_rows` rows, each as libpq allocated it (freed when the [`Rows`] are dropped),
    /// and the state after them: 0 when more may follow, -1 when the COPY ended (its result
    /// waits for `PQgetResult`) and -2 when libpq failed (`PQerrorMessage` says why).
    pub fn fetch(self, max_rows: usize) -> (Rows, i32) {
        let mut rows = Rows { rows: Vec::with_capacity(max_rows.min(1 << 16)), free: self.free };
        while rows.rows.len() < max_rows {
            let mut buffer: *mut c_char = std::ptr::null_mut();
            // blocking (async = 0): the worker has nothing else to do until a row arrives
            let size = unsafe { (self.get)(self.conn as *mut c_void, &mut buffer, 0) };
            if size < 0 {
                return (rows, size.max(-2));
            }
            rows.rows.push((buffer as usize, size as usize));
        }
        (rows, 0)
    }
}

/// Rows libpq returned, each freed with its `PQfreemem` on drop.
pub struct Rows {
    rows: Vec<(usize, usize)>,
    free: FreeMem,
}

impl Rows {
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> {
        // SAFETY: libpq returned `size` bytes at `buffer`, alive until freed in `drop`
        self.rows.iter().map(|&(buffer, size)| unsafe {
            std::slice::from_raw_parts(buffer as *const u8, size)
        })
    }
}

impl Drop for Rows {
    fn drop(&mut self) {
        for &(buffer, _) in &self.rows {
            // SAFETY: each buffer came from PQgetCopyData and is freed once, here
            unsafe { (self.free)(buffer as *mut c_void) };
        }
    }
}
