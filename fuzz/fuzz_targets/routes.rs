//! Route tables from generated match criteria, and requests routed against them.
#![no_main]

#[path = "../targets.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = targets::routes(&mut arbitrary::Unstructured::new(data));
});
