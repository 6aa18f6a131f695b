//! Generated, mostly valid configurations through the loader, validation and reloads.
#![no_main]

use fuseway_fuzz_inputs as targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = targets::config_structured(&mut arbitrary::Unstructured::new(data));
});
