//! `DeltaRequest`: a `DeltaDiscoveryRequest` as a stream reads it.
//!
//! Decoded by prost, without the node after a stream's first request, and
//! with the message's buffer given back to the pool at once: a delta
//! request keeps no part of it.

use bytes::Bytes;
use prost::Message;

use crate::xds::stream::buffers;
use crate::xds::stream::request::{RequestError, StreamNode};

/// A `DeltaDiscoveryRequest` as a stream reads it, without the node (see
/// [`DeltaRequest::read`]); resource locators (fields 8, 9) are skipped.
#[derive(Clone, PartialEq, Message)]
pub struct DeltaRequest {
    /// `type_url` (field 2).
    #[prost(string, tag = "2")]
    pub type_url: String,
    /// `resource_names_subscribe` (field 3).
    #[prost(string, repeated, tag = "3")]
    pub resource_names_subscribe: Vec<String>,
    /// `resource_names_unsubscribe` (field 4).
    #[prost(string, repeated, tag = "4")]
    pub resource_names_unsubscribe: Vec<String>,
    /// `initial_resource_versions` (field 5).
    #[prost(map = "string, string", tag = "5")]
    pub initial_resource_versions: std::collections::HashMap<String, String>,
    /// `response_nonce` (field 6).
    #[prost(string, tag = "6")]
    pub response_nonce: String,
    /// `error_detail` (field 7).
    #[prost(message, optional, tag = "7")]
    pub error_detail: Option<envoy_types::pb::google::rpc::Status>,
}

/// The node (field 1) of a `DeltaDiscoveryRequest`, every other field skipped.
#[derive(Clone, PartialEq, Message)]
struct DeltaNode {
    #[prost(message, optional, tag = "1")]
    node: Option<StreamNode>,
}

impl DeltaRequest {
    /// Reads an encoded `DeltaDiscoveryRequest`, and its node only
    /// `with_node` (prost skips it otherwise, as every field of the other
    /// read).
    pub fn read(message: Bytes, with_node: bool) -> Result<(DeltaRequest, Option<StreamNode>), RequestError> {
        let node = if with_node { DeltaNode::decode(message.clone())?.node } else { None };
        let request = DeltaRequest::decode(message.clone())?;
        buffers::recycle(message);
        Ok((request, node))
    }
}

impl From<envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest> for DeltaRequest {
    fn from(r: envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest) -> Self {
        DeltaRequest {
            type_url: r.type_url,
            resource_names_subscribe: r.resource_names_subscribe,
            resource_names_unsubscribe: r.resource_names_unsubscribe,
            initial_resource_versions: r.initial_resource_versions,
            response_nonce: r.response_nonce,
            error_detail: r.error_detail,
        }
    }
}

#[cfg(test)]
mod tests {
    use envoy_types::pb::envoy::config::core::v3::Node;

    use super::*;

    #[test]
    fn delta_requests_read_the_node_only_when_asked() {
        use envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest;
        let full = DeltaDiscoveryRequest {
            node: Some(Node { id: "router~10.0.0.1~gw.ns~ns.svc.cluster.local".into(), ..Default::default() }),
            type_url: "type.googleapis.com/envoy.config.cluster.v3.Cluster".into(),
            resource_names_subscribe: vec!["a".into()],
            resource_names_unsubscribe: vec!["b".into()],
            initial_resource_versions: [("a".to_string(), "1".to_string())].into(),
            response_nonce: "7".into(),
            ..Default::default()
        };
        let wire = Bytes::from(full.encode_to_vec());
        let (first, node) = DeltaRequest::read(wire.clone(), true).unwrap();
        assert_eq!(first, DeltaRequest::from(full.clone()));
        assert_eq!(node.map(|n| n.id), full.node.map(|n| n.id));
        let (later, node) = DeltaRequest::read(wire, false).unwrap();
        assert_eq!(later, first);
        assert!(node.is_none());
    }
}
