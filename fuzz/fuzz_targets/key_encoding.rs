#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| inflight_testkit::fuzzing::key_encoding(data));
