#![no_main]
//! cargo-fuzz target `continue_token`: see the entry point it calls.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    rkube_api::fuzz::continue_token(data);
});
