//! Any string, as an Envoy node id: the parser accepts an Istio id
//! (`TYPE~IP~POD.NAMESPACE~DOMAIN`) or refuses it with a message that stays
//! short however long the id (it reaches logs and grpc-message).
#![no_main]

use envoy_types::pb::envoy::config::core::v3::Node;
use libfuzzer_sys::fuzz_target;
use meshpush::model::Proxy;

fuzz_target!(|data: &[u8]| {
    let node = Node { id: String::from_utf8_lossy(data).into_owned(), ..Default::default() };
    match Proxy::from_node(&node) {
        Ok(proxy) => assert_eq!(&*proxy.id, node.id),
        Err(e) => {
            let message = e.to_string();
            assert!(message.len() <= 1024, "a {}-byte refusal for a {}-byte id", message.len(), node.id.len());
        }
    }
});
