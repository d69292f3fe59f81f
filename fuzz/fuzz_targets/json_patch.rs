#![no_main]
//! cargo-fuzz target `json_patch`: see the entry point it calls.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    rkube_api::fuzz::json_patch(data);
});
