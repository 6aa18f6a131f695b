//! The native HTTP/1.1 engine's chunked decoder, fed whole and in arbitrary pieces.
#![no_main]

use fuseway_fuzz_inputs as targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = targets::chunked(&mut arbitrary::Unstructured::new(data));
});
