//! The same client bytes through fuseway's native HTTP/1.1 engine and hyper's: the
//! requests both hand over must agree, and the native engine accepts no first request
//! that hyper refuses.
#![no_main]

use fuseway_fuzz_inputs as targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = targets::http1_engines(&mut arbitrary::Unstructured::new(data));
});
