//! The native HTTP/2 engine against hyper's, fed the same client bytes.
#![no_main]

use fuseway_fuzz_inputs as targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = targets::http2_engines(&mut arbitrary::Unstructured::new(data));
});
