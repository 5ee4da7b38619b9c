//! Any string, as the bearer token of a certificate request, against a CA
//! that verifies tokens with a JWKS: a token its key did not sign is never
//! accepted, and the refusal stays short and never repeats the token (it
//! reaches the caller's status and the CA's log).
//!
//! Every token ends with [`MARKER`] (base64url characters, so it lengthens
//! the signature and leaves the header and claims as the fuzzer wrote
//! them): a refusal that quotes the token, or its end, quotes the marker.
//! Checking for the token itself would flag a token that happens to be
//! words of the refusal.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use meshpush::ca::Authenticators;

/// What every token ends with.
const MARKER: &str = "Q7vXk2Lm9PzR4tWc";

/// The CA's authenticators: a JWKS of a key made for this process.
fn authenticators() -> &'static Authenticators {
    static AUTHN: OnceLock<Authenticators> = OnceLock::new();
    AUTHN.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("meshpush-fuzz-jwks-{}", std::process::id()));
        let (_, jwks) = meshpush::cli::jwt::keygen(&dir).expect("a key set");
        Authenticators::new("cluster.local").with_jwks(&jwks).expect("the key set reads back")
    })
}

fuzz_target!(|data: &[u8]| {
    let token = format!("{}{MARKER}", String::from_utf8_lossy(data));
    let header = format!("Bearer {token}");
    let outcome = futures::executor::block_on(authenticators().authenticate(&[], Some(&header)));
    let refusal = match outcome {
        Ok(ids) => panic!("a token nobody signed was accepted as {ids:?}"),
        Err(e) => e.to_string(),
    };
    assert!(refusal.len() <= 1024, "a {}-byte refusal for a {}-byte token", refusal.len(), token.len());
    assert!(!refusal.contains(MARKER), "the refusal repeats the token: {refusal}");
});
