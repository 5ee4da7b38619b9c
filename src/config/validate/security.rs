//! Checks for the `security.istio.io` kinds, following Istio's validation
//! (`pkg/config/validation`): what its webhook refuses is an Error here.

use super::Checker;
use crate::config::istio::{PEER_MTLS_MODES, PeerAuthentication};

pub(super) fn peer_authentication(check: &mut Checker, policy: &PeerAuthentication) {
    let spec = &policy.spec;
    if let Some(mode) = spec.mtls.as_ref().and_then(|m| m.mode.as_deref()) {
        check.one_of("spec.mtls.mode", mode, &PEER_MTLS_MODES);
    }
    if !spec.port_level_mtls.is_empty() && !spec.has_selector() {
        check.error(
            "spec.portLevelMtls",
            "needs spec.selector: a mesh-wide or namespace-wide PeerAuthentication cannot set modes per port \
             (the ports are each workload's own)",
        );
    }
    for (port, mtls) in &spec.port_level_mtls {
        let path = format!("spec.portLevelMtls.{port}");
        check.port(&path, *port);
        if let Some(mode) = mtls.mode.as_deref() {
            check.one_of(format!("{path}.mode"), mode, &PEER_MTLS_MODES);
        }
    }
}
