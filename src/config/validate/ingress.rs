//! Checks on Ingress and IngressClass, as the API server's validation makes
//! them, and the fields Istio's ingress controller does not apply.

use super::{Checker, is_dns1123_label, is_dns1123_subdomain};
use crate::config::ingress::{Ingress, IngressBackend, IngressClass};

pub(super) fn ingress(check: &mut Checker, ingress: &Ingress) {
    let spec = &ingress.spec;
    if let Some(backend) = &spec.default_backend {
        backend_ref(check, "spec.defaultBackend", backend);
        check.warning(
            "spec.defaultBackend",
            "is ignored, as Istio's ingress controller ignores it: route every host with a VirtualService instead",
        );
    }
    for (i, tls) in spec.tls.iter().enumerate() {
        for (j, h) in tls.hosts.iter().enumerate() {
            host(check, format!("spec.tls[{i}].hosts[{j}]"), h);
        }
        if tls.secret_name.as_deref().is_none_or(str::is_empty) {
            check.warning(
                format!("spec.tls[{i}].secretName"),
                "is missing: the entry is ignored, as Istio ignores it (no certificate to serve)",
            );
        }
    }
    if spec.rules.is_empty() && spec.default_backend.is_none() {
        check.error("spec", "has neither rules nor a defaultBackend");
    }
    for (i, rule) in spec.rules.iter().enumerate() {
        let path = format!("spec.rules[{i}]");
        if let Some(h) = &rule.host {
            host(check, format!("{path}.host"), h);
        }
        let Some(http) = &rule.http else {
            check.warning(format!("{path}.http"), "is missing: the rule routes nothing, as in Istio");
            continue;
        };
        if http.paths.is_empty() {
            check.error(format!("{path}.http.paths"), "is required");
        }
        for (j, p) in http.paths.iter().enumerate() {
            let at = format!("{path}.http.paths[{j}]");
            check.one_of(format!("{at}.pathType"), &p.path_type, &["Exact", "Prefix", "ImplementationSpecific"]);
            if let Some(value) = &p.path
                && p.path_type != "ImplementationSpecific"
                && !value.starts_with('/')
            {
                check.error(format!("{at}.path"), format!("{value:?} must be an absolute path (start with /)"));
            }
            backend_ref(check, &format!("{at}.backend"), &p.backend);
        }
    }
}

fn backend_ref(check: &mut Checker, path: &str, backend: &IngressBackend) {
    match (&backend.service, &backend.resource) {
        (Some(_), Some(_)) => check.error(path, "sets both service and resource"),
        (None, None) => check.error(path, "needs a service (or a resource)"),
        (None, Some(_)) => check.unsupported(
            format!("{path}.resource"),
            Some("Istio's ingress controller routes to Services only: the path routes nothing"),
        ),
        (Some(service), None) => {
            if !is_dns1123_label(&service.name) {
                check.error(format!("{path}.service.name"), format!("{:?} is not a Service name", service.name));
            }
            match (&service.port.name, service.port.number) {
                (Some(_), Some(_)) => check.error(format!("{path}.service.port"), "sets both name and number"),
                (None, None) => check.error(format!("{path}.service.port"), "needs a name or a number"),
                (None, Some(n)) => check.port(format!("{path}.service.port.number"), n),
                (Some(_), None) => {}
            }
        }
    }
}

fn host(check: &mut Checker, path: String, value: &str) {
    let name = value.strip_prefix("*.").unwrap_or(value);
    if value.parse::<std::net::IpAddr>().is_ok() || !is_dns1123_subdomain(name) {
        check.error(path, format!("{value:?} is not a host: a lower-case DNS name, optionally prefixed by *."));
    }
}

pub(super) fn ingress_class(check: &mut Checker, class: &IngressClass) {
    if class.spec.controller.is_empty() {
        check.error("spec.controller", "is required");
    }
}
