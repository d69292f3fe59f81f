#![no_main]
//! cargo-fuzz target `strategic`: see the entry point it calls.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    rkube_api::fuzz::strategic(data);
});
