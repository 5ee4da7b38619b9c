//! Any bytes, as a delta request message: meshpush's reader must not
//! panic, and where prost decodes the same bytes as a
//! `DeltaDiscoveryRequest`, it must read the same fields.
#![no_main]

use bytes::Bytes;
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest;
use libfuzzer_sys::fuzz_target;
use meshpush::model::Proxy;
use meshpush::xds::delta::request::DeltaRequest;
use prost::Message as _;

fuzz_target!(|data: &[u8]| {
    let message = Bytes::copy_from_slice(data);
    let read = DeltaRequest::read(message.clone(), true);
    if let (Ok((ours, node)), Ok(prost)) = (&read, DeltaDiscoveryRequest::decode(data)) {
        assert_eq!(ours.type_url, prost.type_url);
        assert_eq!(ours.resource_names_subscribe, prost.resource_names_subscribe);
        assert_eq!(ours.resource_names_unsubscribe, prost.resource_names_unsubscribe);
        assert_eq!(ours.initial_resource_versions, prost.initial_resource_versions);
        assert_eq!(ours.response_nonce, prost.response_nonce);
        assert_eq!(node.as_ref().map(|n| Node::from(n.clone()).id), prost.node.map(|n| n.id));
    }
    if let Ok((_, Some(node))) = read {
        let _ = Proxy::from_node(&Node::from(node));
    }
    let _ = DeltaRequest::read(message, false);
});
