//! Simulated Envoys for meshpush: see `main.rs` and the modules below.
