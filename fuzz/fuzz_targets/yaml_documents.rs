//! Any text, as a config file: `parse_documents` (YAML → Kubernetes
//! objects → validated config) must not panic, must keep each key once,
//! and every problem must name the file and stay bounded in size.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let parsed = meshpush::config::parse::parse_documents("fuzz.yaml", text);
    let mut keys = std::collections::HashSet::new();
    for (object, source) in &parsed.objects {
        assert!(keys.insert(object.key()), "a key accepted twice: {:?}", object.key());
        assert_eq!(&*source.file, "fuzz.yaml");
    }
    for problem in &parsed.problems {
        assert_eq!(&*problem.source.file, "fuzz.yaml");
        // A problem quotes at most a bounded part of the input.
        assert!(problem.message.len() <= 16 * 1024 + data.len().min(1024), "{} bytes", problem.message.len());
    }
});
