#![no_main]

use std::sync::OnceLock;
use std::time::Instant;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // One arbitrary starting instant; only differences from it matter.
    static START: OnceLock<Instant> = OnceLock::new();
    inflight_testkit::fuzzing::sentinel_replies(data, *START.get_or_init(Instant::now));
});
