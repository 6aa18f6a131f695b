//! The fuzz targets of `fuzz/` under `cargo test`: a few thousand seeded random inputs
//! each, so every run exercises them even where cargo-fuzz is not available.
//!
//! `FUSEWAY_FUZZ_ITERATIONS` (default 3000) sets the inputs per target and
//! `FUSEWAY_FUZZ_SEED` the seed (default fixed, so failures reproduce); a failure
//! prints the seed and the input index.

use fuseway_fuzz_inputs as targets;

use std::panic::{catch_unwind, AssertUnwindSafe};

use arbitrary::Unstructured;

fn iterations() -> usize {
    std::env::var("FUSEWAY_FUZZ_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000)
}

fn seed() -> u64 {
    std::env::var("FUSEWAY_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5eed_f00d)
}

/// Feed `target` `iterations()` random byte strings of up to 4 KiB.
fn run(name: &str, target: impl Fn(&[u8])) {
    run_n(name, iterations(), target)
}

/// Feed `target` `n` random byte strings of up to 4 KiB.
fn run_n(name: &str, n: usize, target: impl Fn(&[u8])) {
    let seed = seed();
    let mut rng =
        fastrand::Rng::with_seed(seed ^ fastrand::Rng::with_seed(name.len() as u64).u64(..));
    for i in 0..n {
        let len = rng.usize(0..=4096);
        let data: Vec<u8> = std::iter::repeat_with(|| rng.u8(..)).take(len).collect();
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| target(&data))) {
            eprintln!(
                "{name}: input {i} (FUSEWAY_FUZZ_SEED={seed}) panicked; bytes: {:02x?}",
                data
            );
            std::panic::resume_unwind(panic);
        }
    }
}

fn structured(f: fn(&mut Unstructured) -> arbitrary::Result<()>) -> impl Fn(&[u8]) {
    move |data| {
        let _ = f(&mut Unstructured::new(data));
    }
}

#[test]
fn fuzz_config_text() {
    run("config_text", targets::config_text);
    // Valid-looking text too: generated configs, serialised, then mutated by a byte.
    run("config_text (mutated)", |data| {
        let mut u = Unstructured::new(data);
        let Ok(()) = targets::config_structured(&mut Unstructured::new(data)) else {
            return;
        };
        let Ok(at) = u.arbitrary::<usize>() else {
            return;
        };
        let sample = r#"{ "Routes": { "r": { "ClusterId": "c", "Match": { "Path": "/api/{**rest}", "Hosts": ["a.example"] } } },
            "Clusters": { "c": { "Destinations": { "d": { "Address": "http://127.0.0.1:1/" } } } } }"#;
        let mut bytes = sample.as_bytes().to_vec();
        let at = at % bytes.len();
        bytes[at] = data.first().copied().unwrap_or(b'"');
        targets::config_text(&bytes);
    });
}

#[test]
fn fuzz_config_structured() {
    run("config_structured", structured(targets::config_structured));
}

#[test]
fn fuzz_routes() {
    run("routes", structured(targets::routes));
}

#[test]
fn fuzz_headers() {
    run("headers", structured(targets::headers));
}

// Crashes found by either runner, kept as regression tests (the input bytes and the
// target).

/// cargo-fuzz, `headers`: found in CI on 2026-11-30.
#[test]
fn regression_headers_crash_23e8f91d() {
    let data: &[u8] = &[
        83, 101, 116, 255, 255, 255, 99, 158, 90, 90, 54, 220, 162, 162, 73, 162, 162, 162, 162,
        162, 162, 7, 162, 162, 7, 0, 175, 175, 176, 175, 255, 250,
    ];
    let _ = targets::headers(&mut Unstructured::new(data));
}

/// cargo-fuzz, `headers`: `Connection: connection, upgrade` on an upgrade request.
#[test]
fn regression_headers_crash_dd9aa44f() {
    let data: &[u8] = &[
        224, 1, 0, 255, 178, 224, 82, 69, 82, 181, 181, 181, 181, 181, 181, 181, 181, 181, 181,
        181, 181, 181, 181, 181, 181, 181, 181, 181, 181, 181, 181, 181, 181, 181, 181, 181, 181,
        181, 181, 181, 181, 181, 181, 181, 181, 181, 181, 181, 181, 181, 181, 181, 181, 181, 181,
        181, 181, 181, 181, 181, 181, 181, 181, 181, 181, 181, 181, 181, 181, 181, 181, 181, 181,
        181, 181, 181, 181, 181, 181, 181, 181, 181, 181, 181, 181, 181, 181, 181, 181, 181, 181,
        181, 181, 181, 181, 181, 181, 101, 122, 101, 115, 5, 3,
    ];
    let _ = targets::headers(&mut Unstructured::new(data));
}

/// cargo-fuzz, `http2_responses`: trailers after a `304` (whose `content-length: 99`
/// describes no content), which the native client read and h2 refused.
#[test]
fn regression_http2_responses_crash_2560f0bb() {
    let data: &[u8] = &[
        255, 255, 255, 255, 152, 255, 255, 152, 18, 255, 255, 0, 10, 10, 45, 159, 18,
    ];
    targets::http2_responses(&mut Unstructured::new(data)).expect("a whole input");
}

/// cargo-fuzz, `chunked` (2026-12-06): `0\r\r…\r\n\n…`, a last-chunk line with bare CRs
/// (taken for whitespace) and a trailer section ended by a bare LF (an empty trailer
/// map, where `0\r\n\r\n` gives none); both are refused now.
#[test]
fn regression_chunked_crash_ed088f10() {
    let data: &[u8] = &[
        49, 49, 48, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13,
        13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 49, 13, 13, 10, 255, 10, 13, 255, 255, 255,
        255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
        255, 255, 255, 255,
    ];
    targets::chunked(&mut Unstructured::new(data)).expect("a whole input");
}

/// cargo-fuzz, `http2_engines` (2026-12-07): a CONNECT without `:authority`, which h2
/// passes (an empty URI) and the native engine resets (RFC 9113 §8.5): a listed
/// difference the target now allows for.
#[test]
fn regression_http2_engines_crash_fdd0a82c() {
    let data: &[u8] = &[
        37, 0, 3, 1, 243, 195, 44, 119, 0, 0, 0, 166, 0, 255, 255, 255, 255, 255, 255, 255, 255,
        255, 255, 27, 0, 32, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 29,
    ];
    targets::http2_engines(&mut Unstructured::new(data)).expect("a whole input");
}

/// cargo-fuzz, `http2_engines` (2026-12-07): an extended CONNECT (`:protocol
/// websocket`, `:scheme`, `:path`) without `:authority`, which both engines pass; the
/// difference above must not be taken to cover it.
#[test]
fn regression_http2_engines_crash_b9e6947b() {
    let data: &[u8] = &[
        22, 2, 3, 1, 243, 195, 44, 119, 0, 0, 0, 32, 0, 255, 255, 255, 255, 255, 255, 255, 255, 1,
        243, 195, 44, 119, 0, 255, 46, 60, 0, 0, 0, 255, 255, 255, 32, 255, 255, 255, 0, 255, 255,
        255, 32, 3, 1, 243, 195, 44, 119, 0, 0, 0, 32, 0, 255, 255, 255, 255, 255, 255, 255, 255,
        1, 243, 195, 44, 119, 0, 255, 46, 0, 0, 255, 255, 255, 32, 255, 255, 255, 255, 255, 255, 0,
        255, 255, 255, 255, 255, 0, 255, 255, 0, 29,
    ];
    targets::http2_engines(&mut Unstructured::new(data)).expect("a whole input");
}

/// cargo-fuzz, `http2_engines` (2026-12-07): a CONNECT (without `:protocol`) with DATA
/// on its stream, which the native engine passed as the request's body and h2 leaves
/// out of it (RFC 9110 §9.3.6: a CONNECT has no content; RFC 9113 §8.5: its DATA is a
/// tunnel's); the native engine leaves it out now.
#[test]
fn regression_http2_engines_crash_689bdf59() {
    let data: &[u8] = &[
        22, 2, 3, 1, 243, 195, 44, 119, 0, 0, 22, 2, 1, 3, 0, 40, 1, 0, 255, 0, 255, 154, 59, 154,
        59, 195, 44, 119, 0, 0, 122, 0, 255, 255, 255, 255, 190, 190, 190, 190, 190, 190, 190, 190,
        190, 190, 190, 190, 190, 190, 190, 190, 190, 190, 190, 190, 190, 190, 190, 190, 190, 190,
        190, 190, 190, 190, 190, 190, 190, 190, 190, 190, 190, 190, 190, 190, 190, 190, 190, 190,
        190, 190, 190, 190, 190, 190, 190, 190, 190, 190, 190, 190, 190, 190, 190, 190, 190, 190,
        190, 190, 190, 190, 190, 190, 190, 190, 190, 190, 190, 190, 190, 190, 190, 190, 190, 190,
        190, 190, 190, 190, 190, 190, 190, 190, 190, 190, 190, 190, 190, 190, 190, 190, 190, 190,
        190, 190, 190, 190, 190, 255, 0, 255, 255, 0, 29,
    ];
    targets::http2_engines(&mut Unstructured::new(data)).expect("a whole input");
}

/// cargo-fuzz, `http2_engines` (2026-12-07): a client's GOAWAY, then a new stream,
/// which h2 serves and the native engine (having answered with its own GOAWAY) does
/// not: a listed difference the target now allows for.
#[test]
fn regression_http2_engines_crash_b07a385b() {
    let data: &[u8] = &[
        252, 224, 195, 195, 195, 43, 1, 33, 68, 93, 43, 1, 33, 68, 93, 5, 5, 5, 5, 5, 5, 5, 5, 5,
        5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 171, 43, 253, 32, 171, 0, 0, 0, 139,
        43, 0, 0, 248, 0, 139, 43, 0, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5,
        5, 5, 139, 5, 5, 5, 5, 5, 5, 251, 242, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5,
        5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 171, 43, 253, 32, 171, 0, 0, 0, 139, 43, 0, 0, 248,
        0, 139, 43, 0, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 139, 5, 5,
        5, 5, 252, 1, 35, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 0, 0, 0, 0, 8, 1, 4, 0, 0, 181, 175,
    ];
    targets::http2_engines(&mut Unstructured::new(data)).expect("a whole input");
}

/// cargo-fuzz, `http2_engines` (2026-12-07): a GOAWAY of 5 bytes (too short for its
/// last stream and error code), which the native engine took for the client going
/// away and h2 for a FRAME_SIZE_ERROR (RFC 9113 §4.2, §6.8); the native engine
/// refuses it so too now.
#[test]
fn regression_http2_engines_crash_b51fba52() {
    let data: &[u8] = &[
        22, 9, 0, 40, 136, 255, 255, 255, 255, 255, 255, 255, 255, 255, 167, 2, 0, 9, 0, 40, 136,
        255, 255, 255, 255, 255, 255, 255, 255, 255, 167, 6,
    ];
    targets::http2_engines(&mut Unstructured::new(data)).expect("a whole input");
}

/// cargo-fuzz, `http2_engines` (2026-12-07): a client's PUSH_PROMISE on a stream
/// just reset (a repeated `:method`), which the native engine takes for a connection
/// error (RFC 9113 §8.4) and h2 ignores: a listed difference the target now allows for.
#[test]
fn regression_http2_engines_crash_026b18d5() {
    let data: &[u8] = &[
        81, 11, 43, 173, 68, 255, 255, 0, 255, 60, 255, 58, 255, 191, 255, 255, 7, 0, 165, 64, 66,
        15, 0, 181, 151, 151, 151, 151, 151, 151, 151, 151, 151, 151, 151, 151, 151, 151, 141, 141,
        141, 141, 141, 141, 141, 141, 141, 141, 141, 141, 141, 141, 141, 141, 141, 141, 141, 141,
        141, 141, 141, 141, 141, 141, 141, 141, 141, 173, 141, 141, 141, 141, 141, 141, 141, 141,
        141, 141, 141, 141, 151, 151, 178, 151, 151, 58, 50, 0, 0, 0, 28, 126, 199, 17, 233, 185,
        185, 185, 255, 7, 6, 255, 255, 255, 255, 255, 255, 255, 33, 0, 155, 240, 26, 191, 221, 175,
        0, 0, 0, 0, 0, 0, 0, 1, 1, 155, 155, 155, 28, 47, 223, 201, 255, 255, 154, 59, 22,
    ];
    targets::http2_engines(&mut Unstructured::new(data)).expect("a whole input");
}

/// cargo-fuzz, `http2_engines` (2026-12-07): a HEADERS without END_HEADERS whose first
/// fragment is already malformed, then HEADERS on another stream: a connection error
/// to the native engine (RFC 9113 §6.10), a reset stream to h2, which serves the next:
/// a listed difference the target now allows for.
#[test]
fn regression_http2_engines_crash_18d3a8f1() {
    let data: &[u8] = &[
        46, 149, 16, 0, 1, 145, 145, 145, 145, 187, 0, 0, 1, 83, 187, 187, 187, 145, 145, 145, 187,
        187, 187, 187, 187, 187, 187, 187, 187, 187, 187, 187, 187, 187, 187, 187, 187, 187, 187,
        187, 187, 187, 187, 187, 187, 187, 187, 187, 187, 187, 187, 187, 187, 187, 187, 145, 149,
        151, 151, 151, 151, 151, 151, 151, 151, 151, 151, 151, 151, 151, 151, 151, 135, 151, 151,
        151, 151, 151, 151, 151, 187, 187, 187, 187, 187, 187, 187, 187, 187, 187, 187, 187, 187,
        187, 187, 187, 187, 187, 187, 187, 187, 187, 187, 187, 151, 151, 151, 187, 187, 187, 187,
        187, 187, 187, 187, 187, 187, 187, 187, 187, 187, 187, 187, 187, 187, 187, 187, 187, 187,
        187, 187, 187, 187, 187, 187, 187, 187, 187, 187, 187, 187, 187, 187, 145, 149, 151, 151,
        151, 151, 151, 151, 151, 151, 151, 151, 151, 151, 151, 151, 151, 187, 187, 145, 149, 151,
        151, 151, 151, 151, 151, 151, 151, 151, 151, 151, 151, 151, 151, 151, 151, 151, 151, 151,
        151, 151, 151, 151, 187, 187, 187, 187, 187, 187, 187, 187, 187, 187, 187, 187, 187, 187,
        187, 187, 151, 151, 151, 151, 151, 151, 147, 151, 151, 151, 151, 151, 151, 151, 151, 0,
        149, 86, 86, 86, 34, 213, 143, 136, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86,
        86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86,
        86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86,
        86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86,
        86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86, 86,
        86, 86, 86, 86, 86, 86,
    ];
    targets::http2_engines(&mut Unstructured::new(data)).expect("a whole input");
}

#[test]
fn fuzz_http1_engines() {
    run("http1_engines", structured(targets::http1_engines));
}

#[test]
fn fuzz_http1_responses() {
    // Each input is two real exchanges over 127.0.0.1: a tenth of the others' count.
    let inputs = iterations() / 10;
    run_n(
        "http1_responses",
        inputs,
        structured(targets::http1_responses),
    );
}

#[test]
fn fuzz_pkcs12() {
    // The seeds are archives the target's mutations start from: each must load as it is.
    for (i, seed) in targets::PKCS12_SEEDS.iter().enumerate() {
        fuseway::server::tls_config_from_pkcs12(seed, "pw")
            .unwrap_or_else(|e| panic!("PKCS#12 seed {i}: {e}"));
    }
    run("pkcs12", structured(targets::pkcs12));
}

#[test]
fn fuzz_chunked() {
    run("chunked", structured(targets::chunked));
}

#[test]
fn fuzz_http2_engines() {
    run("http2_engines", structured(targets::http2_engines));
}

#[test]
fn fuzz_http2_responses() {
    run("http2_responses", structured(targets::http2_responses));
}

/// cargo-fuzz, `http2_engines` (2026-12-07, a random-seed run): a request whose DATA runs
/// past its `content-length`, then the client's GOAWAY, in one read: the native engine
/// hands the request on with its head (its body then fails), h2 resets the stream and,
/// the connection winding down, never gives it to hyper — a listed difference the
/// target now allows for.
#[test]
fn regression_http2_engines_crash_ff4e2e6f() {
    let data: &[u8] = &[
        218, 65, 19, 19, 19, 19, 19, 19, 19, 19, 19, 19, 19, 16, 19, 19, 19, 19, 19, 19, 173, 173,
        173, 173, 173, 182, 7, 7, 7, 6, 7, 7, 7, 7, 7, 91, 7, 7, 7, 7, 7, 7, 7, 7, 23, 18, 29, 187,
        187, 187, 187, 187, 187, 187, 187, 187, 187, 187, 187, 185, 187, 187, 187, 187, 187, 187,
        187, 187, 187, 187, 0, 0, 0, 0, 0, 0, 0, 17, 187, 187, 187, 187, 187, 187, 187, 187, 187,
        187, 187, 187, 0, 128, 3, 183, 187, 187, 187, 187, 187, 187, 53, 187, 187, 187, 185, 187,
        187, 187, 187, 187, 187, 187, 187, 187, 187, 187, 187, 187, 187, 187, 187, 1, 0, 0, 3, 187,
        187, 187, 187, 187, 187, 187, 187, 187, 187, 187, 187, 187, 187, 126, 187, 187, 187, 187,
        93, 0, 0, 0, 0, 8, 4, 0, 0, 181, 175, 43, 141, 0, 0, 0, 0, 255, 0, 7, 255,
    ];
    targets::http2_engines(&mut Unstructured::new(data)).expect("a whole input");
}

/// A CONNECT with a non-zero `content-length` (and a second, equal one), then an
/// `OPTIONS` on the next stream: hyper's server resets the CONNECT and stops serving
/// the connection without a GOAWAY, the native engine resets only its stream and
/// serves the `OPTIONS` — a listed difference, found by a random-seed run.
#[test]
fn regression_http2_engines_crash_b010df40() {
    let data: &[u8] = &[
        235, 235, 235, 235, 227, 235, 108, 108, 108, 108, 50, 215, 47, 47, 47, 47, 47, 47, 47, 254,
        254, 254, 254, 254, 254, 254, 254, 254, 254, 254, 254, 254, 254, 254, 254, 254, 254, 254,
        254, 254, 254, 254, 254, 254, 254, 254, 254, 254, 254, 254, 254, 254, 254, 254, 254, 254,
        254, 254, 254, 254, 254, 254, 254, 254, 254, 254, 254, 254, 254, 254, 254, 254, 254, 254,
        254, 254, 254, 254, 254, 254, 254, 254, 254, 254, 254, 254, 254, 254, 254, 254, 254, 254,
        254, 254, 254, 254, 254, 254, 254, 254, 254, 254, 254, 254, 254, 254, 254, 254, 254, 254,
        254, 254, 254, 254, 254, 254, 254, 254, 254, 254, 254, 254, 254, 254, 254, 254, 254, 254,
        47, 59, 47, 47, 47, 47, 47, 47, 47, 47, 47, 47, 47, 47, 47, 47, 47, 47, 65, 0, 0, 0, 226,
        0, 48, 0, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 254, 255, 255, 255, 255, 255,
        255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 47, 47, 47, 47, 47,
        255, 255, 255, 255, 255, 255, 255, 255, 255, 187, 4, 0, 0, 255, 255, 255, 255, 255, 255,
        255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
        255, 255, 255, 255, 255, 255, 255, 255, 255, 235, 255, 255, 255, 255, 255, 255, 255, 255,
        255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
        255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
        255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 120, 231,
        231, 231, 231, 231, 231, 228, 231, 231, 42, 231, 231, 231, 231, 231, 231, 231, 231, 231,
        231, 231, 231, 231, 231, 231, 231, 231, 231, 231, 231, 235, 0, 199, 231, 231, 231, 231,
        231, 231, 231, 231, 231, 231, 231, 231, 231, 231, 134, 24, 25,
    ];
    targets::http2_engines(&mut Unstructured::new(data)).expect("a whole input");
}
