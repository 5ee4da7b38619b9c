//! Certificates for unit tests, made fresh by `rcgen` (a dev-dependency:
//! this module exists in the crate's own unit tests only).

/// A self-signed CA: its certificate PEM, and the issuer to sign with.
pub fn ca(name: &str) -> (String, rcgen::CertifiedIssuer<'static, rcgen::KeyPair>) {
    let key = rcgen::KeyPair::generate().expect("a CA key");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.distinguished_name.push(rcgen::DnType::CommonName, name);
    let issuer = rcgen::CertifiedIssuer::self_signed(params, key).expect("the CA certificate");
    (AsRef::<rcgen::Certificate>::as_ref(&issuer).pem(), issuer)
}

/// A leaf certificate for `hosts` signed by `issuer`: `(certificate PEM, key PEM)`.
pub fn leaf(issuer: &rcgen::CertifiedIssuer<'static, rcgen::KeyPair>, hosts: &[&str]) -> (String, String) {
    let key = rcgen::KeyPair::generate().expect("a key");
    let params =
        rcgen::CertificateParams::new(hosts.iter().map(|h| h.to_string()).collect::<Vec<_>>()).expect("parameters");
    let cert = params.signed_by(&key, issuer).expect("the certificate");
    (cert.pem(), key.serialize_pem())
}

/// A `kubernetes.io/tls` Secret's YAML (with `ca.crt` when `ca` is given).
pub fn tls_secret(namespace: &str, name: &str, cert: &str, key: &str, ca: Option<&str>) -> String {
    let field = |k: &str, v: &str| format!("  {k}: |\n{}", v.lines().map(|l| format!("    {l}\n")).collect::<String>());
    let mut out = format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: {namespace}}}\ntype: kubernetes.io/tls\nstringData:\n"
    );
    out.push_str(&field("tls.crt", cert));
    out.push_str(&field("tls.key", key));
    if let Some(ca) = ca {
        out.push_str(&field("ca.crt", ca));
    }
    out
}
