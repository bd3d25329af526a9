#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| tern::fuzzing::request_body(data));
