//! The same destination bytes through fuseway's native HTTP/1.1 client and hyper's:
//! the responses both read must agree, and the native client reads nothing hyper
//! refuses.
#![no_main]

use fuseway_fuzz_inputs as targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = targets::http1_responses(&mut arbitrary::Unstructured::new(data));
});
