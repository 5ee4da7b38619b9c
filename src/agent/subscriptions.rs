//! What Envoy has asked for and holds on its ADS stream to the agent, so a
//! new stream to meshpush can pick up where the last one ended.
//!
//! The agent keeps Envoy's stream open across meshpush restarts: when the
//! upstream stream ends, the agent opens another and restores Envoy's
//! subscriptions on it, as Envoy itself does on a new stream. For State of
//! the World that is, per type, the names last requested and the version
//! last accepted; for delta, the names subscribed (and whether the type is
//! wildcard) and the version of every resource Envoy holds, as
//! `initial_resource_versions`. The first request of every upstream stream
//! carries the node (Envoy sends it only on its first message).
//!
//! Nonces belong to one upstream stream. The agent tags each nonce it
//! passes down with the stream's number (`7/<nonce>`), and untags Envoy's
//! answers: an answer to this stream's response goes up with the server's
//! nonce; an answer to a response of an earlier stream means nothing to the
//! new server, and goes up — with no nonce — only when it changes the
//! subscriptions (what it asks for is already in the restoring requests
//! otherwise).
//!
//! Invariant: [`Subscriptions::replay`] asks for exactly what Envoy would
//! ask for if it opened the stream itself now.

use std::collections::{BTreeMap, BTreeSet};

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};

/// One protocol's record of an Envoy stream (State of the World or delta).
pub trait Subscriptions: Default + Send + 'static {
    /// What Envoy sends.
    type Request: Clone + Send + 'static;
    /// What meshpush answers.
    type Response: Send + 'static;

    /// Records `request` from Envoy; what to send on upstream stream
    /// `session`, if anything.
    fn on_request(&mut self, request: Self::Request, session: u64) -> Option<Self::Request>;

    /// The requests that restore every subscription on a new upstream
    /// stream, the node on the first.
    fn replay(&self) -> Vec<Self::Request>;

    /// Records `response` of upstream stream `session`; it as Envoy is to
    /// get it.
    fn on_response(&mut self, response: Self::Response, session: u64) -> Self::Response;

    /// Whether Envoy has asked for nothing yet.
    fn is_empty(&self) -> bool;

    /// Forgets what belonged to the upstream stream that ended.
    fn end_session(&mut self);
}

/// The nonce Envoy is given for `nonce` of upstream stream `session`.
fn tag(session: u64, nonce: &str) -> String {
    format!("{session}/{nonce}")
}

/// What an Envoy nonce answers: a response of upstream stream `session`
/// (the server's nonce), of an earlier one, or none.
#[derive(Debug, PartialEq, Eq)]
enum Answer<'a> {
    /// No nonce: a new request.
    Fresh,
    /// A response of this upstream stream, by the server's nonce.
    Current(&'a str),
    /// A response of an earlier upstream stream (or a nonce the agent
    /// never gave).
    Earlier,
}

fn answer(nonce: &str, session: u64) -> Answer<'_> {
    if nonce.is_empty() {
        return Answer::Fresh;
    }
    match nonce.split_once('/') {
        Some((s, inner)) if s.parse() == Ok(session) => Answer::Current(inner),
        _ => Answer::Earlier,
    }
}

/// State of the World: per type, in the order Envoy first asked.
#[derive(Debug, Default)]
pub struct Sotw {
    node: Option<Node>,
    types: Vec<(String, SotwType)>,
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct SotwType {
    names: Vec<String>,
    version: String,
}

impl Sotw {
    fn entry(&mut self, type_url: &str) -> &mut SotwType {
        let at = match self.types.iter().position(|(t, _)| t == type_url) {
            Some(at) => at,
            None => {
                self.types.push((type_url.to_string(), SotwType::default()));
                self.types.len() - 1
            }
        };
        &mut self.types[at].1
    }
}

impl Subscriptions for Sotw {
    type Request = DiscoveryRequest;
    type Response = DiscoveryResponse;

    fn on_request(&mut self, mut request: DiscoveryRequest, session: u64) -> Option<DiscoveryRequest> {
        if self.node.is_none() {
            self.node = request.node.clone();
        }
        let state = self.entry(&request.type_url);
        let before = std::mem::replace(&mut state.names, request.resource_names.clone());
        state.version = request.version_info.clone();
        match answer(&request.response_nonce, session) {
            Answer::Fresh => Some(request),
            Answer::Current(inner) => {
                request.response_nonce = inner.to_string();
                Some(request)
            }
            Answer::Earlier if before != request.resource_names => {
                request.response_nonce.clear();
                request.error_detail = None;
                Some(request)
            }
            Answer::Earlier => None,
        }
    }

    fn replay(&self) -> Vec<DiscoveryRequest> {
        let mut out: Vec<DiscoveryRequest> = self
            .types
            .iter()
            .map(|(type_url, state)| DiscoveryRequest {
                type_url: type_url.clone(),
                resource_names: state.names.clone(),
                version_info: state.version.clone(),
                ..Default::default()
            })
            .collect();
        if let Some(first) = out.first_mut() {
            first.node = self.node.clone();
        }
        out
    }

    fn on_response(&mut self, mut response: DiscoveryResponse, session: u64) -> DiscoveryResponse {
        response.nonce = tag(session, &response.nonce);
        response
    }

    fn is_empty(&self) -> bool {
        self.types.is_empty()
    }

    fn end_session(&mut self) {}
}

/// Most unACKed delta responses remembered per type; past it they are
/// forgotten (what Envoy holds is then known less well, and the next stream
/// may be sent resources Envoy already has: harmless).
const MAX_PENDING: usize = 1024;

/// Delta: per type, in the order Envoy first asked.
#[derive(Debug, Default)]
pub struct Delta {
    node: Option<Node>,
    types: Vec<(String, DeltaType)>,
}

#[derive(Debug, Default)]
struct DeltaType {
    /// Subscribed to every resource of the type.
    wildcard: bool,
    /// Names subscribed besides (or instead of) the wildcard.
    names: BTreeSet<String>,
    /// What Envoy holds: name → version.
    held: BTreeMap<String, String>,
    /// Responses of the current upstream stream not yet ACKed, by the
    /// server's nonce: what each adds and removes.
    pending: BTreeMap<String, Vec<(String, Option<String>)>>,
}

impl Delta {
    fn entry(&mut self, type_url: &str) -> (&mut DeltaType, bool) {
        let (at, new) = match self.types.iter().position(|(t, _)| t == type_url) {
            Some(at) => (at, false),
            None => {
                self.types.push((type_url.to_string(), DeltaType::default()));
                (self.types.len() - 1, true)
            }
        };
        (&mut self.types[at].1, new)
    }
}

impl Subscriptions for Delta {
    type Request = DeltaDiscoveryRequest;
    type Response = DeltaDiscoveryResponse;

    fn on_request(&mut self, mut request: DeltaDiscoveryRequest, session: u64) -> Option<DeltaDiscoveryRequest> {
        if self.node.is_none() {
            self.node = request.node.clone();
        }
        let (state, new) = self.entry(&request.type_url);
        if new {
            // An empty first subscription is the legacy wildcard.
            state.wildcard = request.resource_names_subscribe.is_empty();
            state.held = request.initial_resource_versions.clone().into_iter().collect();
        }
        for name in &request.resource_names_subscribe {
            if name == "*" {
                state.wildcard = true;
            } else {
                state.names.insert(name.clone());
            }
        }
        for name in &request.resource_names_unsubscribe {
            if name == "*" {
                state.wildcard = false;
            } else {
                state.names.remove(name);
                state.held.remove(name);
            }
        }
        let changes_subscriptions =
            !request.resource_names_subscribe.is_empty() || !request.resource_names_unsubscribe.is_empty();
        match answer(&request.response_nonce, session) {
            Answer::Fresh => Some(request),
            Answer::Current(inner) => {
                let inner = inner.to_string();
                if let Some(changes) = state.pending.remove(&inner)
                    && request.error_detail.is_none()
                {
                    for (name, version) in changes {
                        match version {
                            Some(version) => state.held.insert(name, version),
                            None => state.held.remove(&name),
                        };
                    }
                }
                request.response_nonce = inner;
                Some(request)
            }
            Answer::Earlier if changes_subscriptions => {
                request.response_nonce.clear();
                request.error_detail = None;
                Some(request)
            }
            Answer::Earlier => None,
        }
    }

    fn replay(&self) -> Vec<DeltaDiscoveryRequest> {
        let mut out: Vec<DeltaDiscoveryRequest> = self
            .types
            .iter()
            .map(|(type_url, state)| {
                let mut subscribe: Vec<String> = state.names.iter().cloned().collect();
                // A wildcard with names besides must say so; alone, an empty
                // list says it (as Envoy's own first request does).
                if state.wildcard && !subscribe.is_empty() {
                    subscribe.insert(0, "*".to_string());
                }
                DeltaDiscoveryRequest {
                    type_url: type_url.clone(),
                    resource_names_subscribe: subscribe,
                    initial_resource_versions: state.held.clone().into_iter().collect(),
                    ..Default::default()
                }
            })
            .collect();
        if let Some(first) = out.first_mut() {
            first.node = self.node.clone();
        }
        out
    }

    fn on_response(&mut self, mut response: DeltaDiscoveryResponse, session: u64) -> DeltaDiscoveryResponse {
        let (state, _) = self.entry(&response.type_url);
        if !response.nonce.is_empty() {
            // Envoy ACKs every delta response; a bound all the same.
            if state.pending.len() >= MAX_PENDING {
                state.pending.clear();
            }
            let mut changes: Vec<(String, Option<String>)> =
                response.resources.iter().map(|r| (r.name.clone(), Some(r.version.clone()))).collect();
            changes.extend(response.removed_resources.iter().map(|n| (n.clone(), None)));
            changes.extend(response.removed_resource_names.iter().map(|n| (n.name.clone(), None)));
            state.pending.insert(response.nonce.clone(), changes);
        }
        response.nonce = tag(session, &response.nonce);
        response
    }

    fn is_empty(&self) -> bool {
        self.types.is_empty()
    }

    fn end_session(&mut self) {
        for (_, state) in &mut self.types {
            state.pending.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::service::discovery::v3::Resource;

    const CDS: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
    const EDS: &str = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";

    fn node() -> Node {
        Node { id: "sidecar~10.0.0.1~sleep-1.default~default.svc.cluster.local".into(), ..Default::default() }
    }

    fn sotw(type_url: &str, names: &[&str], version: &str, nonce: &str) -> DiscoveryRequest {
        DiscoveryRequest {
            type_url: type_url.into(),
            resource_names: names.iter().map(|n| n.to_string()).collect(),
            version_info: version.into(),
            response_nonce: nonce.into(),
            ..Default::default()
        }
    }

    #[test]
    fn sotw_answers_go_up_with_the_servers_nonce_and_a_new_stream_restores_every_type() {
        let mut subs = Sotw::default();
        assert!(subs.is_empty());
        let first = DiscoveryRequest { node: Some(node()), ..sotw(CDS, &[], "", "") };
        assert_eq!(subs.on_request(first.clone(), 1), Some(first));
        let response = subs.on_response(DiscoveryResponse { nonce: "a".into(), ..Default::default() }, 1);
        assert_eq!(response.nonce, "1/a");
        // The ACK goes up with the server's own nonce.
        let up = subs.on_request(sotw(CDS, &[], "v1", "1/a"), 1).unwrap();
        assert_eq!((up.response_nonce.as_str(), up.version_info.as_str()), ("a", "v1"));
        subs.on_request(sotw(EDS, &["outbound|80||a", "outbound|80||b"], "", ""), 1);

        // Stream 2 restores both types, in order, the node on the first only.
        let replay = subs.replay();
        assert_eq!(replay.len(), 2);
        assert_eq!((replay[0].type_url.as_str(), replay[0].version_info.as_str()), (CDS, "v1"));
        assert_eq!(replay[0].node, Some(node()));
        assert!(replay.iter().all(|r| r.response_nonce.is_empty()));
        assert_eq!(replay[1].resource_names, ["outbound|80||a", "outbound|80||b"]);
        assert_eq!(replay[1].node, None);

        // An answer to stream 1's response means nothing to stream 2's
        // server: dropped when it asks for the same names, sent without the
        // nonce when it asks for others.
        assert_eq!(subs.on_request(sotw(EDS, &["outbound|80||a", "outbound|80||b"], "", "1/x"), 2), None);
        let changed = subs.on_request(sotw(EDS, &["outbound|80||a"], "", "1/x"), 2).unwrap();
        assert_eq!(changed.response_nonce, "");
        assert_eq!(subs.replay()[1].resource_names, ["outbound|80||a"]);
        // A nonce the agent never gave counts as an earlier stream's.
        assert_eq!(subs.on_request(sotw(EDS, &["outbound|80||a"], "", "nonsense"), 2), None);
    }

    fn delta(type_url: &str, subscribe: &[&str], unsubscribe: &[&str], nonce: &str) -> DeltaDiscoveryRequest {
        DeltaDiscoveryRequest {
            type_url: type_url.into(),
            resource_names_subscribe: subscribe.iter().map(|n| n.to_string()).collect(),
            resource_names_unsubscribe: unsubscribe.iter().map(|n| n.to_string()).collect(),
            response_nonce: nonce.into(),
            ..Default::default()
        }
    }

    fn delta_response(
        type_url: &str,
        nonce: &str,
        resources: &[(&str, &str)],
        removed: &[&str],
    ) -> DeltaDiscoveryResponse {
        DeltaDiscoveryResponse {
            type_url: type_url.into(),
            nonce: nonce.into(),
            resources: resources
                .iter()
                .map(|(name, version)| Resource {
                    name: name.to_string(),
                    version: version.to_string(),
                    ..Default::default()
                })
                .collect(),
            removed_resources: removed.iter().map(|n| n.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn delta_restores_subscriptions_and_the_versions_envoy_acked() {
        let mut subs = Delta::default();
        let first = DeltaDiscoveryRequest { node: Some(node()), ..delta(CDS, &[], &[], "") };
        assert!(subs.on_request(first, 1).is_some());
        let down = subs.on_response(delta_response(CDS, "n1", &[("a", "1"), ("b", "1")], &[]), 1);
        assert_eq!(down.nonce, "1/n1");
        // Not ACKed yet: Envoy does not hold them.
        assert!(subs.replay()[0].initial_resource_versions.is_empty());
        let ack = subs.on_request(delta(CDS, &[], &[], "1/n1"), 1).unwrap();
        assert_eq!(ack.response_nonce, "n1");
        // A NACKed response changes nothing Envoy holds.
        subs.on_response(delta_response(CDS, "n2", &[("a", "2")], &["b"]), 1);
        let nack = DeltaDiscoveryRequest {
            error_detail: Some(envoy_types::pb::google::rpc::Status { message: "bad".into(), ..Default::default() }),
            ..delta(CDS, &[], &[], "1/n2")
        };
        subs.on_request(nack, 1);
        // An accepted one removes and updates.
        subs.on_response(delta_response(CDS, "n3", &[("c", "1")], &["b"]), 1);
        subs.on_request(delta(CDS, &[], &[], "1/n3"), 1);
        subs.on_request(delta(EDS, &["x", "y"], &[], ""), 1);
        subs.on_request(delta(EDS, &[], &["y"], ""), 1);
        subs.end_session();

        let replay = subs.replay();
        assert_eq!(replay[0].node, Some(node()));
        assert!(replay[0].resource_names_subscribe.is_empty(), "a legacy wildcard stays one");
        let held: BTreeMap<_, _> = replay[0].initial_resource_versions.clone().into_iter().collect();
        assert_eq!(held, BTreeMap::from([("a".to_string(), "1".to_string()), ("c".to_string(), "1".to_string())]));
        assert_eq!(replay[1].resource_names_subscribe, ["x"]);
        assert_eq!(replay[1].node, None);

        // A wildcard with names besides says "*".
        subs.on_request(delta(CDS, &["extra"], &[], ""), 2);
        assert_eq!(subs.replay()[0].resource_names_subscribe, ["*", "extra"]);
        // An earlier stream's ACK without subscription changes is dropped;
        // with changes it goes up, without its nonce.
        assert_eq!(subs.on_request(delta(EDS, &[], &[], "1/n9"), 2), None);
        let up = subs.on_request(delta(EDS, &["z"], &[], "1/n9"), 2).unwrap();
        assert_eq!(up.response_nonce, "");
    }
}
