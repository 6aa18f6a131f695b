//! fuseway's own HTTP/2 client against the h2 crate's, fed the same destination bytes.
#![no_main]

use fuseway_fuzz_inputs as targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = targets::http2_responses(&mut arbitrary::Unstructured::new(data));
});
