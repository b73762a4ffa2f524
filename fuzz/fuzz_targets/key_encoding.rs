#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| inflight_core::fuzzing::key_encoding(data));
