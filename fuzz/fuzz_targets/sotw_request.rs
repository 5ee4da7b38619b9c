//! Any bytes, as a state-of-the-world request message: meshpush's own
//! reader must not panic, and where prost decodes the same bytes as a
//! `DiscoveryRequest`, it must read the same fields; the node it reads
//! goes through the node parser.
#![no_main]

use bytes::Bytes;
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
use libfuzzer_sys::fuzz_target;
use meshpush::model::Proxy;
use meshpush::xds::sotw::request::SotwRequest;
use prost::Message as _;

fuzz_target!(|data: &[u8]| {
    let message = Bytes::copy_from_slice(data);
    let read = SotwRequest::read(message.clone(), true);
    if let (Ok((ours, node)), Ok(prost)) = (&read, DiscoveryRequest::decode(data)) {
        assert_eq!(ours.type_url, prost.type_url);
        assert_eq!(ours.version_info, prost.version_info);
        assert_eq!(ours.response_nonce, prost.response_nonce);
        let names: Vec<&[u8]> = ours.resource_names.iter().collect();
        let expected: Vec<&[u8]> = prost.resource_names.iter().map(|n| n.as_bytes()).collect();
        assert_eq!(names, expected);
        assert_eq!(node.as_ref().map(|n| Node::from(n.clone()).id), prost.node.map(|n| n.id));
    }
    if let Ok((_, Some(node))) = read {
        let _ = Proxy::from_node(&Node::from(node));
    }
    let _ = SotwRequest::read(message, false);
});
