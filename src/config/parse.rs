//! YAML parsing (filled in below).
