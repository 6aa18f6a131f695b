//! The forwarder's header rules and route transforms on generated headers.
#![no_main]

use fuseway_fuzz_inputs as targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = targets::headers(&mut arbitrary::Unstructured::new(data));
});
