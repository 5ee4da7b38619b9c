//! Host names: resolving short names, and Istio's wildcard matching.

use std::sync::Arc;

/// A fully qualified host name (`reviews.default.svc.cluster.local`), interned by `Arc`.
pub type Hostname = Arc<str>;

/// The cluster domain suffix Kubernetes services live under.
pub const CLUSTER_DOMAIN: &str = "svc.cluster.local";

/// The FQDN of a Kubernetes service.
pub fn service_fqdn(name: &str, namespace: &str) -> Hostname {
    format!("{name}.{namespace}.{CLUSTER_DOMAIN}").into()
}

/// Resolves a host as written in a rule of `namespace` to an FQDN, as Istio
/// does (`ResolveShortnameToFQDN`): a name without a dot is a service in the
/// rule's namespace; anything with a dot (`httpbin.org`, `reviews.prod`,
/// `*.example.com`), `*` and IP addresses are kept as written. So
/// `reviews.prod` names no Kubernetes service: Istio's rules write
/// `reviews.prod.svc.cluster.local` for that.
pub fn resolve(host: &str, namespace: &str) -> Hostname {
    if host == "*" || host.contains('.') || host.parse::<std::net::IpAddr>().is_ok() {
        return host.into();
    }
    service_fqdn(host, namespace)
}

/// Whether `pattern` (an FQDN or a `*.suffix` / `*` wildcard) matches `host`.
pub fn matches(pattern: &str, host: &str) -> bool {
    if pattern == "*" {
        return true;
    }
    if let Some(suffix) = pattern.strip_prefix('*') {
        // `*.example.com` matches `a.example.com` and also a wildcard host
        // that is at least as specific (`*.b.example.com`).
        return host.ends_with(suffix) && host.len() > suffix.len();
    }
    pattern == host
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_resolve_in_the_rule_namespace() {
        assert_eq!(&*resolve("reviews", "default"), "reviews.default.svc.cluster.local");
        assert_eq!(&*resolve("api.example.com", "default"), "api.example.com");
        // A name with a dot is kept as written, two labels too (Istio's rule).
        assert_eq!(&*resolve("httpbin.org", "default"), "httpbin.org");
        assert_eq!(&*resolve("reviews.prod", "default"), "reviews.prod");
        assert_eq!(&*resolve("fd00::1", "default"), "fd00::1");
        assert_eq!(&*resolve("*", "default"), "*");
        assert_eq!(&*resolve("*.example.com", "default"), "*.example.com");
    }

    #[test]
    fn services_live_under_the_mesh_config_s_domain_suffix() {
        // The cluster-local defaults (`config::mesh::cluster_local`) name hosts under it.
        assert_eq!(CLUSTER_DOMAIN, format!("svc.{}", crate::config::mesh::cluster_local::DOMAIN_SUFFIX));
    }

    #[test]
    fn wildcards_match_subdomains_only() {
        assert!(matches("*.example.com", "api.example.com"));
        assert!(!matches("*.example.com", "example.com"));
        assert!(matches("*", "anything"));
        assert!(!matches("a.example.com", "b.example.com"));
    }
}
