//! Route tables from generated match criteria, and requests routed against them.
#![no_main]

use fuseway_fuzz_inputs as targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = targets::routes(&mut arbitrary::Unstructured::new(data));
});
