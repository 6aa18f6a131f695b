//! A TLS listener's PKCS#12 (PFX) certificate file: seeds with bytes changed, cut or added.
#![no_main]

use fuseway_fuzz_inputs as targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = targets::pkcs12(&mut arbitrary::Unstructured::new(data));
});
