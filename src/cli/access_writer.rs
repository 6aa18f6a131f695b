//! The binary's access-log writer: a `tracing` layer that formats each
//! `fuseway::access` record itself (its fields are known: no generic field
//! formatting) straight into its thread's own batch, which a thread of its own writes
//! out when it fills or every [`FLUSH_EVERY`]. A worker's cost per record is the
//! formatting and the lock of its own batch (taken by the writer only to swap it out):
//! no lock or buffer shared between workers, never a system call. Records of one thread
//! are written in the order they ended; threads' batches follow one another. When the
//! writer falls behind by [`MAX_BATCH`] bytes of a thread, that thread's records are
//! dropped (and the drops logged) rather than the thread kept waiting.

use std::io::Write;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tracing::field::{Field, Visit};
use tracing_subscriber::layer::Context;

use super::logging::LogFormat;
use crate::http1::decimal;

/// The batches are written out at least this often while they have records.
pub(crate) const FLUSH_EVERY: Duration = Duration::from_millis(200);

/// A thread's batch this large wakes the writer at once.
const FLUSH_AT: usize = 64 * 1024;

/// What a batch keeps: room for what gathers between the wake-up at [`FLUSH_AT`] and
/// the swap, so that it is not grown under load.
const BATCH_CAPACITY: usize = 4 * FLUSH_AT;

/// Past this many bytes waiting in a thread's batch, its records are dropped.
pub(crate) const MAX_BATCH: usize = 4 * 1024 * 1024;

struct Shared {
    /// Every logging thread's batch.
    batches: Mutex<Vec<Arc<Mutex<Batch>>>>,
    /// Whether the writer has been asked to write (a batch filled, or the log closes).
    wake: Mutex<Wake>,
    woken: Condvar,
}

#[derive(Default)]
struct Wake {
    asked: bool,
    closed: bool,
}

/// A thread's records, as the sink takes them: bytes (what is written in them is text,
/// and bytes spare each number and stamp a check that it is).
#[derive(Default)]
struct Batch {
    text: Vec<u8>,
    dropped: u64,
}

/// The layer that formats access records into the batches.
pub(crate) struct AccessLayer {
    shared: Arc<Shared>,
    format: LogFormat,
    /// The keys of the first record's call site — the access log's —, as written.
    keys: std::sync::OnceLock<Keys>,
}

/// Each field's key of a call site as a record writes it (` name=`, or `,"name":` in
/// JSON): one append a field, where writing it afresh takes three (seventeen fields a
/// request).
struct Keys {
    callsite: tracing::callsite::Identifier,
    written: Vec<Box<[u8]>>,
}

impl Keys {
    fn of(meta: &tracing::Metadata<'_>, json: bool) -> Keys {
        let written = meta
            .fields()
            .iter()
            .map(|field| {
                let mut key = Vec::new();
                Fields::write_key(&mut key, field.name(), json);
                key.into_boxed_slice()
            })
            .collect();
        Keys {
            callsite: meta.callsite(),
            written,
        }
    }
}

/// Writes the last batches and stops the writer thread when dropped.
pub(crate) struct Flusher {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// A layer formatting records as `format` and the thread writing them to `sink`.
pub(crate) fn access_log(
    format: LogFormat,
    sink: Box<dyn Write + Send>,
) -> std::io::Result<(AccessLayer, Flusher)> {
    let shared = Arc::new(Shared {
        batches: Mutex::default(),
        wake: Mutex::default(),
        woken: Condvar::new(),
    });
    let writer = shared.clone();
    let thread = std::thread::Builder::new()
        .name("fuseway-access-log".into())
        .spawn(move || write_batches(&writer, sink))?;
    Ok((
        AccessLayer {
            shared: shared.clone(),
            format,
            keys: std::sync::OnceLock::new(),
        },
        Flusher {
            shared,
            thread: Some(thread),
        },
    ))
}

fn write_batches(shared: &Shared, mut sink: Box<dyn Write + Send>) {
    let mut spare = Vec::with_capacity(BATCH_CAPACITY);
    loop {
        let closed = {
            // Until a batch fills, or the interval ends, or the log closes.
            let deadline = std::time::Instant::now() + FLUSH_EVERY;
            let mut wake = shared.wake.lock().unwrap_or_else(|e| e.into_inner());
            while !wake.asked && !wake.closed {
                let now = std::time::Instant::now();
                if now >= deadline {
                    break;
                }
                wake = shared
                    .woken
                    .wait_timeout(wake, deadline - now)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
            wake.asked = false;
            wake.closed
        };
        let mut dropped = 0;
        let batches = shared
            .batches
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        for batch in &batches {
            {
                let mut batch = batch.lock().unwrap_or_else(|e| e.into_inner());
                std::mem::swap(&mut batch.text, &mut spare);
                dropped += std::mem::take(&mut batch.dropped);
            }
            if !spare.is_empty() {
                if let Err(e) = sink.write_all(&spare) {
                    tracing::warn!(error = %e, "cannot write the access log");
                }
                spare.clear();
                // Keep a batch's worth, not a burst's.
                spare.shrink_to(BATCH_CAPACITY);
            }
        }
        if let Err(e) = sink.flush() {
            tracing::warn!(error = %e, "cannot write the access log");
        }
        drop(batches);
        // The batches of threads that have ended (only this list holds them), now empty.
        shared
            .batches
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|batch| Arc::strong_count(batch) > 1);
        if dropped > 0 {
            tracing::warn!(
                dropped,
                "access log records dropped: the writer fell behind the traffic"
            );
        }
        if closed {
            return;
        }
    }
}

impl Drop for Flusher {
    fn drop(&mut self) {
        self.shared
            .wake
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .closed = true;
        self.shared.woken.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A thread's batch, and the writer it belongs to.
type Mine = Option<(std::sync::Weak<Shared>, Arc<Mutex<Batch>>)>;

thread_local! {
    static BATCH: std::cell::RefCell<Mine> = const { std::cell::RefCell::new(None) };
    static STAMP: std::cell::Cell<Stamp> = const { std::cell::Cell::new(Stamp { second: u64::MAX, text: [0; 27] }) };
}

/// The last second's timestamp text, kept per thread: within a second only the
/// microseconds are written anew.
#[derive(Clone, Copy)]
struct Stamp {
    second: u64,
    text: [u8; 27],
}

/// `at` as [`timestamp`] writes it, the second's part taken from this thread's
/// [`Stamp`] when it is the same second.
fn cached_timestamp(at: SystemTime, out: &mut [u8; 27]) -> &[u8] {
    let since = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    STAMP.with(|cached| {
        let mut stamp = cached.get();
        if since.as_secs() != stamp.second {
            timestamp(at, &mut stamp.text);
            stamp.second = since.as_secs();
            cached.set(stamp);
        }
        *out = stamp.text;
    });
    // `YYYY-MM-DDTHH:MM:SS.` then six digits and `Z`.
    let mut micros = since.subsec_micros();
    for i in (20..26).rev() {
        out[i] = b'0' + (micros % 10) as u8;
        micros /= 10;
    }
    &out[..]
}

impl AccessLayer {
    /// `f` on this thread's batch of this layer's writer (made and listed at the
    /// thread's first record).
    fn with_batch(&self, f: impl FnOnce(&Mutex<Batch>)) {
        BATCH.with(|mine| {
            let Ok(mut mine) = mine.try_borrow_mut() else {
                return;
            };
            match &*mine {
                Some((shared, batch)) if std::ptr::eq(shared.as_ptr(), &*self.shared) => f(batch),
                _ => {
                    let batch = Arc::new(Mutex::new(Batch {
                        text: Vec::with_capacity(BATCH_CAPACITY),
                        dropped: 0,
                    }));
                    self.shared
                        .batches
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(batch.clone());
                    f(&batch);
                    *mine = Some((Arc::downgrade(&self.shared), batch));
                }
            }
        });
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for AccessLayer {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        self.with_batch(|batch| {
            let mut batch = batch.lock().unwrap_or_else(|e| e.into_inner());
            let start = batch.text.len();
            let line = &mut batch.text;
            let json = self.format == LogFormat::Json;
            let mut stamp = [0u8; 27];
            let stamp = cached_timestamp(SystemTime::now(), &mut stamp);
            let meta = event.metadata();
            let target = meta.target();
            if json {
                for part in [
                    br#"{"timestamp":""#,
                    stamp,
                    br#"","level":"INFO","target":""#,
                    target.as_bytes(),
                    b"\"",
                ] {
                    line.extend_from_slice(part);
                }
            } else {
                for part in [stamp, b"  INFO ", target.as_bytes(), b": request"] {
                    line.extend_from_slice(part);
                }
            }
            let keys = self.keys.get_or_init(|| Keys::of(meta, json));
            let keys = (keys.callsite == meta.callsite()).then_some(&keys.written[..]);
            event.record(&mut Fields { line, json, keys });
            line.extend_from_slice(if json { b"}\n" } else { b"\n" });
            if line.len() > MAX_BATCH {
                line.truncate(start);
                batch.dropped += 1;
            } else if line.len() >= FLUSH_AT && start < FLUSH_AT {
                // Crossed the mark: wake the writer (once per batch).
                drop(batch);
                self.shared
                    .wake
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .asked = true;
                self.shared.woken.notify_one();
            }
        });
    }
}

/// Appends each field of a record to the line.
struct Fields<'a> {
    line: &'a mut Vec<u8>,
    json: bool,
    /// The record's call site's [`Keys`], when they were kept.
    keys: Option<&'a [Box<[u8]>]>,
}

impl Fields<'_> {
    // No `write!` on this path: `fmt`'s machinery cost more than the rest of a
    // record's formatting (measured with `perf` under the e2e load).
    fn key(&mut self, field: &Field) {
        match self.keys.and_then(|keys| keys.get(field.index())) {
            Some(key) => self.line.extend_from_slice(key),
            None => Self::write_key(self.line, field.name(), self.json),
        }
    }

    fn write_key(line: &mut Vec<u8>, name: &str, json: bool) {
        let (before, after) = if json { (",\"", "\":") } else { (" ", "=") };
        for part in [before, name, after] {
            line.extend_from_slice(part.as_bytes());
        }
    }

    fn number(&mut self, value: u64) {
        self.line.extend_from_slice(decimal(value, &mut [0; 20]));
    }

    fn text(&mut self, value: &str) {
        if self.json {
            json_string(self.line, value);
        } else if needs_quotes(value.as_bytes()) {
            let _ = write!(self.line, "{value:?}");
        } else {
            self.line.extend_from_slice(value.as_bytes());
        }
    }
}

/// Whether a text value must be quoted (and escaped) to stay one token.
fn needs_quotes(value: &[u8]) -> bool {
    value.is_empty() || value.iter().any(|&b| QUOTED[usize::from(b)])
}

/// The bytes that make a text value need quotes: controls, space, `"`, `\`, DEL and
/// every byte of a non-ASCII character (a table: one look-up a byte, where four
/// comparisons cost twice as much on a record's hundred bytes of text).
const QUOTED: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = b <= 0x20 || b == b'"' as usize || b == b'\\' as usize || b >= 0x7f;
        b += 1;
    }
    table
};

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.key(field);
        self.text(value);
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.key(field);
        self.number(value);
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.key(field);
        if value < 0 {
            self.line.push(b'-');
        }
        self.number(value.unsigned_abs());
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.key(field);
        // Durations in milliseconds with microseconds: integer formatting, cheaper than
        // a float's.
        if (0.0..1e12).contains(&value) {
            let micros = (value * 1000.0).round() as u64;
            self.number(micros / 1000);
            self.line.push(b'.');
            // Three digits, zero-padded: those of 1xyz after its leading 1.
            self.line
                .extend_from_slice(&decimal(1000 + micros % 1000, &mut [0; 20])[1..]);
        } else {
            let _ = write!(self.line, "{value}");
        }
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.key(field);
        let value: &[u8] = if value { b"true" } else { b"false" };
        self.line.extend_from_slice(value);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        // The message is the text format's fixed word ("request"), written above.
        if field.name() == "message" {
            if self.json {
                self.line.extend_from_slice(br#","message":"request""#);
            }
            return;
        }
        self.key(field);
        // Display values (`client`, `request_id`) come through `Debug` as themselves:
        // written in place, and written again quoted in the rare case they must be.
        let start = self.line.len();
        let _ = write!(self.line, "{value:?}");
        let written = &self.line[start..];
        let plain = if self.json {
            !json_escaped(written)
        } else {
            !needs_quotes(written)
        };
        if plain {
            if self.json {
                self.line.insert(start, b'"');
                self.line.push(b'"');
            }
        } else {
            // `Debug` wrote text.
            let value = String::from_utf8_lossy(&self.line.split_off(start)).into_owned();
            self.text(&value);
        }
    }
}

/// Whether `bytes` hold a byte a JSON string escapes (a control, `"`, `\`).
fn json_escaped(bytes: &[u8]) -> bool {
    bytes.iter().any(|&b| b < 0x20 || b == b'"' || b == b'\\')
}

/// `value` as a JSON string.
fn json_string(out: &mut Vec<u8>, value: &str) {
    out.push(b'"');
    let bytes = value.as_bytes();
    if !json_escaped(bytes) {
        out.extend_from_slice(bytes);
        out.push(b'"');
        return;
    }
    // Escapes are ASCII: the other bytes (UTF-8 sequences included) go as they are.
    for &b in bytes {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b if b < 0x20 => {
                let _ = write!(out, "\\u{:04x}", b);
            }
            b => out.push(b),
        }
    }
    out.push(b'"');
}

/// `at` as RFC 3339 in UTC with microseconds (`2026-12-02T17:46:47.151453Z`).
fn timestamp(at: SystemTime, out: &mut [u8; 27]) -> &str {
    let since = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Days to a civil date (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let mut cursor = std::io::Cursor::new(&mut out[..]);
    let _ = write!(
        cursor,
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        since.subsec_micros()
    );
    let n = cursor.position() as usize;
    std::str::from_utf8(&out[..n]).unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339_utc() {
        let mut out = [0u8; 27];
        assert_eq!(
            timestamp(UNIX_EPOCH, &mut out),
            "1970-01-01T00:00:00.000000Z"
        );
        // 2026-12-02T17:46:47.151453Z
        let at = UNIX_EPOCH + Duration::new(1_796_233_607, 151_453_000);
        assert_eq!(timestamp(at, &mut out), "2026-12-02T17:46:47.151453Z");
        // A leap day.
        let at = UNIX_EPOCH + Duration::from_secs(951_782_400);
        assert_eq!(timestamp(at, &mut out), "2000-02-29T00:00:00.000000Z");
    }

    #[test]
    fn the_cached_second_is_reused_and_renewed() {
        let stamp = |at: Duration| {
            let mut out = [0u8; 27];
            String::from_utf8(cached_timestamp(UNIX_EPOCH + at, &mut out).to_vec()).unwrap()
        };
        assert_eq!(
            stamp(Duration::new(1_796_233_607, 151_453_000)),
            "2026-12-02T17:46:47.151453Z"
        );
        assert_eq!(
            stamp(Duration::new(1_796_233_607, 999_999_000)),
            "2026-12-02T17:46:47.999999Z"
        );
        assert_eq!(
            stamp(Duration::new(1_796_233_608, 7_000)),
            "2026-12-02T17:46:48.000007Z"
        );
    }

    /// A sink that takes nothing until it is let go (a reader that stopped reading).
    struct Stuck(std::sync::mpsc::Receiver<()>);

    impl Write for Stuck {
        fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
            let _ = self.0.recv();
            Ok(data.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A writer stuck on its sink never holds up the threads that log: past
    /// [`MAX_BATCH`] their records are counted as dropped, and what was kept is written
    /// once the sink moves again.
    #[test]
    fn a_stuck_sink_drops_records_instead_of_blocking() {
        use tracing_subscriber::layer::SubscriberExt;
        let (release, stuck) = std::sync::mpsc::channel();
        let (layer, flusher) = access_log(LogFormat::Text, Box::new(Stuck(stuck))).unwrap();
        let shared = layer.shared.clone();
        let subscriber = tracing_subscriber::registry().with(layer);
        // Far more than MAX_BATCH of records (each over 100 bytes).
        let records = 2 * MAX_BATCH / 100;
        tracing::subscriber::with_default(subscriber, || {
            for i in 0..records {
                tracing::info!(target: "fuseway::access", status = 200u64, path = "/a/long/enough/path/for/the/record", i, "request");
            }
        });
        let dropped: u64 = shared
            .batches
            .lock()
            .unwrap()
            .iter()
            .map(|b| b.lock().unwrap().dropped)
            .sum();
        assert!(dropped > 0, "nothing dropped of {records}");
        // Let the sink go: the writer finishes and the flusher returns.
        drop(release);
        drop(flusher);
    }

    /// Each thread logs into a batch of its own: all of them are written, every
    /// thread's records in the order they were logged, within the interval while the
    /// log runs and at the end when it closes.
    #[test]
    fn every_threads_records_are_written_in_order() {
        use tracing_subscriber::layer::SubscriberExt;
        let kept = crate::testing::SharedBuffer::default();
        let (layer, flusher) = access_log(LogFormat::Text, Box::new(kept.clone())).unwrap();
        let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(layer));
        let log = |thread: u64, records: u64| {
            let dispatch = dispatch.clone();
            std::thread::spawn(move || {
                tracing::dispatcher::with_default(&dispatch, || {
                    for i in 0..records {
                        tracing::info!(target: "fuseway::access", thread, i, "request");
                    }
                })
            })
        };
        let lines = |kept: &crate::testing::SharedBuffer| {
            kept.text().lines().map(str::to_owned).collect::<Vec<_>>()
        };
        for thread in [log(0, 100), log(1, 100)] {
            thread.join().unwrap();
        }
        // Written by the interval, without a full batch or the end.
        let deadline = std::time::Instant::now() + 10 * FLUSH_EVERY;
        while lines(&kept).len() < 200 {
            assert!(std::time::Instant::now() < deadline, "{:?}", lines(&kept));
            std::thread::sleep(FLUSH_EVERY / 4);
        }
        log(2, 10).join().unwrap();
        drop(flusher);
        let lines = lines(&kept);
        assert_eq!(lines.len(), 210, "{lines:?}");
        for thread in 0..3 {
            let order: Vec<u64> = lines
                .iter()
                .filter(|l| l.contains(&format!(" thread={thread} ")))
                .map(|l| l.rsplit_once("i=").unwrap().1.parse().unwrap())
                .collect();
            let expected: Vec<u64> = (0..if thread == 2 { 10 } else { 100 }).collect();
            assert_eq!(order, expected, "thread {thread}");
        }
    }

    /// Milliseconds with three decimals, zero-padded; numbers as they are.
    #[test]
    fn durations_and_numbers_are_written_as_decimals() {
        use tracing_subscriber::layer::SubscriberExt;
        let kept = crate::testing::SharedBuffer::default();
        let (layer, flusher) = access_log(LogFormat::Text, Box::new(kept.clone())).unwrap();
        tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), || {
            tracing::info!(target: "fuseway::access", a = 1.005f64, b = 0.3f64, c = 12.0f64, n = 404u64, i = -7i64, "request");
            // Another call site: its keys are written afresh (the first one's are kept).
            tracing::info!(target: "fuseway::access", z = true, n = 5u64, "request");
        });
        drop(flusher);
        let text = kept.text();
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].ends_with(" a=1.005 b=0.300 c=12.000 n=404 i=-7"),
            "{text}"
        );
        assert!(lines[1].ends_with(": request z=true n=5"), "{text}");
    }

    #[test]
    fn json_strings_are_escaped() {
        let mut out = Vec::new();
        json_string(&mut out, "a\"b\\c\nd é");
        assert_eq!(String::from_utf8(out).unwrap(), r#""a\"b\\c\u000ad é""#);
    }
}
