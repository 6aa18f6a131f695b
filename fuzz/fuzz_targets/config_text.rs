//! Config text (JSON and TOML) through parsing, validation and state building.
#![no_main]

use fuseway_fuzz_inputs as targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::config_text(data));
