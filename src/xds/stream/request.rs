//! What both protocols' requests have in common: the node a stream reads
//! from its first request ([`StreamNode`]), and why a request message could
//! not be read ([`RequestError`]).

use envoy_types::pb::envoy::config::core::v3::Node;
use prost::Message;

/// The parts of Envoy's `Node` meshpush reads (id, cluster, metadata; also
/// locality and user agent name, for the record). Envoy 1.40 sends 516
/// `extensions` and its build version in every node; prost skips those
/// fields here instead of building 60 KB of messages per stream.
#[derive(Clone, PartialEq, Message)]
pub struct StreamNode {
    /// `id` (field 1).
    #[prost(string, tag = "1")]
    pub id: String,
    /// `cluster` (field 2).
    #[prost(string, tag = "2")]
    pub cluster: String,
    /// `metadata` (field 3).
    #[prost(message, optional, tag = "3")]
    pub metadata: Option<envoy_types::pb::google::protobuf::Struct>,
    /// `locality` (field 4).
    #[prost(message, optional, tag = "4")]
    pub locality: Option<envoy_types::pb::envoy::config::core::v3::Locality>,
    /// `user_agent_name` (field 6).
    #[prost(string, tag = "6")]
    pub user_agent_name: String,
}

impl From<StreamNode> for Node {
    fn from(n: StreamNode) -> Node {
        Node {
            id: n.id,
            cluster: n.cluster,
            metadata: n.metadata,
            locality: n.locality,
            user_agent_name: n.user_agent_name,
            ..Default::default()
        }
    }
}

impl From<Node> for StreamNode {
    fn from(n: Node) -> StreamNode {
        StreamNode {
            id: n.id,
            cluster: n.cluster,
            metadata: n.metadata,
            locality: n.locality,
            user_agent_name: n.user_agent_name,
        }
    }
}

/// Why a request message could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// prost could not decode it (or a message inside it).
    #[error(transparent)]
    Decode(#[from] prost::DecodeError),
    /// A field is not what the protocol says it is.
    #[error("{0}")]
    Malformed(&'static str),
}
