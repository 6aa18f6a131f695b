//! Read and write buffers, and header maps, lent to connections while they have a
//! message in hand.
//!
//! A keep-alive connection spends most of its life waiting for its next request. nginx
//! keeps only a small header buffer per idle connection and takes large buffers while
//! a message needs them; here an idle connection holds none: it tries its read first
//! with a buffer taken from its worker thread's pool (no allocation once the pool is
//! warm) and gives the buffer back when there was nothing to read. The same for the
//! write buffer once a response has been flushed. A buffer still shared with a
//! message's views (header values, body chunks not yet dropped) is not given back:
//! the connection keeps it and reuses its memory once the views are gone.
//!
//! Header maps: a map, once its head is written (a response's to the client, a
//! request's to the destination), is kept for a later head's fields (Kestrel's reuse
//! of per-message objects), so a head read costs no allocation when the pool has one
//! large enough. Requests and responses have pools of their own, and a map keeps its
//! names (its values are dropped): the next response of a destination, or the next
//! request of a client, mostly has the same fields, whose names are then reused as
//! they are (`head::fields`).

use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::pin::pin;
use std::task::{Context, Poll};

use bytes::BytesMut;
use http::{HeaderMap, HeaderValue};
use tokio::io::{AsyncRead, AsyncReadExt};

/// Size of a read buffer (and the free space a read is given).
pub(crate) const READ_SIZE: usize = 8 * 1024;
/// The fields a pooled header map has room for at least.
const ROOM: usize = 6;
/// Buffers of each kind a thread keeps for its connections; more are freed.
const KEEP: usize = 256;
/// The largest read buffer a thread keeps: what one grows to under the default limits
/// (a 64 KiB head, HTTP/2 frames of 16 KiB), so that steady traffic finds its buffers
/// in the pool and a frame of megabytes leaves none of that size behind.
const READ_KEPT_MAX: usize = 64 * 1024;

thread_local! {
    static READ: RefCell<Vec<BytesMut>> = const { RefCell::new(Vec::new()) };
    static WRITE: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
    static REQUEST_HEADERS: RefCell<Vec<HeaderMap>> = const { RefCell::new(Vec::new()) };
    static RESPONSE_HEADERS: RefCell<Vec<HeaderMap>> = const { RefCell::new(Vec::new()) };
}

/// Whose heads a header map holds: each kind has its own pool, so that a map comes
/// back with the names of a head like the one it is taken for.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Heads {
    /// Requests (read from clients, written to destinations).
    Requests,
    /// Responses (read from destinations, written to clients).
    Responses,
}

impl Heads {
    fn pool<R>(self, f: impl FnOnce(&mut Vec<HeaderMap>) -> R) -> R {
        let pool = match self {
            Heads::Requests => &REQUEST_HEADERS,
            Heads::Responses => &RESPONSE_HEADERS,
        };
        pool.with(|p| f(&mut p.borrow_mut()))
    }

    /// A header map with room for `fields` (and at least [`ROOM`]): a pooled one when
    /// there is one, holding the names of the last head it held (with empty values),
    /// else a new empty one. A map of the other kind serves when this kind's pool is
    /// empty: requests whose maps are not given back (sent on by HTTP/2, or answered
    /// by the proxy) still read into the maps of their responses.
    pub(crate) fn take(self, fields: usize) -> HeaderMap {
        let other = match self {
            Heads::Requests => Heads::Responses,
            Heads::Responses => Heads::Requests,
        };
        let mut map = self
            .pool(Vec::pop)
            .or_else(|| other.pool(Vec::pop))
            .unwrap_or_default();
        // Room for that many whatever the names held (cleared, if the head's differ).
        // Room is counted in names: a map may hold more values than that (an HTTP/2
        // destination's twenty cookies), which `len` counts.
        let room = fields.max(ROOM);
        if map.capacity() < room {
            map.reserve(room - map.keys_len());
        }
        map
    }

    /// Keep `map` for a later head: its values are dropped (they may share a read
    /// buffer, which could not be reused in place while they live), its names kept.
    /// Maps with less room than [`ROOM`] are not kept (taken, they would grow).
    pub(crate) fn release(self, mut map: HeaderMap) {
        if map.capacity() < ROOM {
            return;
        }
        for value in map.values_mut() {
            *value = HeaderValue::from_static("");
        }
        self.pool(|pool| {
            if pool.len() < KEEP {
                pool.push(map);
            }
        });
    }
}

/// `*slot = map`, where `slot` holds the empty map `Request::new`, `Response::new` or
/// `mem::take` left (http builds a message only around a map of its own): that map is
/// forgotten rather than dropped. One with no capacity owns no memory
/// (`HeaderMap::new` does not allocate), so nothing leaks, and its drop glue (~60
/// instructions) is not run. A map with capacity is dropped as usual.
#[inline]
pub(crate) fn put_map(slot: &mut HeaderMap, map: HeaderMap) {
    let old = std::mem::replace(slot, map);
    if old.capacity() == 0 {
        std::mem::forget(old);
    }
}

/// A read buffer with room for a read: `buf` itself when it has room, else a pooled
/// or new one (keeping `buf`'s bytes).
#[inline(always)]
pub(crate) fn ready_to_read(buf: &mut BytesMut) {
    if buf.capacity() - buf.len() < 1024 {
        give_room(buf);
    }
}

#[inline(never)]
fn give_room(buf: &mut BytesMut) {
    if buf.capacity() == 0 {
        if let Some(pooled) = READ.with(|p| p.borrow_mut().pop()) {
            *buf = pooled;
            return;
        }
    }
    buf.reserve(READ_SIZE);
}

/// Read from `io` into `buf` (given room first, see [`ready_to_read`]): the bytes read,
/// 0 at the end of the stream.
#[inline]
pub(crate) fn poll_read<R: AsyncRead + Unpin>(
    io: &mut R,
    buf: &mut BytesMut,
    cx: &mut Context<'_>,
) -> Poll<io::Result<usize>> {
    ready_to_read(buf);
    pin!(io.read_buf(buf)).poll(cx)
}

/// Give an empty read buffer back to the pool (leaving `buf` without memory) if nothing
/// else shares its memory. One still shared (a body chunk on its way) stays where it
/// is: once the views are gone, its memory is reused in place. One that grew past
/// [`READ_KEPT_MAX`] (a head or an HTTP/2 frame past the default limits: `MaxFrameSize`
/// goes up to 16 MiB) is freed, not kept.
pub(crate) fn release_read(buf: &mut BytesMut) {
    if !buf.is_empty() || buf.capacity() == 0 || !buf.try_reclaim(READ_SIZE) {
        return;
    }
    let taken = std::mem::take(buf);
    if taken.capacity() > READ_KEPT_MAX {
        return;
    }
    READ.with(|p| {
        let mut pool = p.borrow_mut();
        if pool.len() < KEEP {
            pool.push(taken);
        }
    });
}

/// A write buffer for a response head: `buf` itself when it has memory, else a pooled
/// one.
pub(crate) fn ready_to_write(buf: &mut Vec<u8>) {
    if buf.capacity() == 0 {
        if let Some(pooled) = WRITE.with(|p| p.borrow_mut().pop()) {
            *buf = pooled;
        }
    }
}

/// Give a flushed (empty) write buffer back to the pool.
pub(crate) fn release_write(buf: &mut Vec<u8>) {
    if !buf.is_empty() || buf.capacity() == 0 {
        return;
    }
    let taken = std::mem::take(buf);
    // One that grew for a large body is not kept as it is.
    if taken.capacity() > 4 * READ_SIZE {
        return;
    }
    WRITE.with(|p| {
        let mut pool = p.borrow_mut();
        if pool.len() < KEEP {
            pool.push(taken);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An idle connection's read buffer goes back to the thread's pool, unless it grew
    /// past what the default limits need: then it is freed.
    #[test]
    fn large_read_buffers_are_freed_not_pooled() {
        let pooled = || READ.with(|p| p.borrow().len());
        let before = pooled();
        let mut small = BytesMut::with_capacity(READ_SIZE);
        release_read(&mut small);
        assert_eq!((small.capacity(), pooled()), (0, before + 1));
        let mut large = BytesMut::with_capacity(1 << 20);
        release_read(&mut large);
        assert_eq!((large.capacity(), pooled()), (0, before + 1));
    }
}
