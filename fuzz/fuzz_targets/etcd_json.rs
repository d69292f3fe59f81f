#![no_main]
//! cargo-fuzz target `etcd_json`: see the entry point it calls.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    rkube_etcd_api::fuzz::etcd_json(data);
});
