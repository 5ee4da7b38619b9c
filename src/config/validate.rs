//! Validation (filled in below).
