#![no_main]
//! cargo-fuzz target `apply`: see the entry point it calls.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    rkube_api::fuzz::apply(data);
});
