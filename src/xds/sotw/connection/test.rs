//! `Connection`'s own rules, driven directly: ACKs, stale nonces, NACKs,
//! reconnects (the same rules over gRPC: `tests/protocol/ads_protocol.rs`).

use std::time::Instant;

use envoy_types::pb::envoy::service::discovery::v3::DiscoveryResponse;
use prost::Message;

use super::*;
use crate::resource::TypeSet;
use crate::testing::bookinfo::{self, engine};
use crate::xds::stream::bodies::BodyCache;
use crate::xds::stream::body::FRAME_HEADER_LEN;

fn connection(id: u64) -> Connection {
    Connection::new(id, Arc::new(bookinfo::productpage()))
}

fn request(t: TypeUrl, version: &str, nonce: &str) -> SotwRequest {
    SotwRequest {
        version_info: version.into(),
        type_url: t.as_str().into(),
        response_nonce: nonce.into(),
        ..Default::default()
    }
}

fn decoded(r: &OutgoingResponse) -> DiscoveryResponse {
    let mut wire = r.body[FRAME_HEADER_LEN..].to_vec();
    wire.extend_from_slice(&r.tail());
    DiscoveryResponse::decode(&wire[..]).expect("a DiscoveryResponse")
}

#[tokio::test]
async fn an_ack_is_recorded_and_not_answered_and_a_stale_nonce_is_ignored() {
    let (engine, bodies) = (engine().await, BodyCache::new());
    let ctx = engine.snapshot();
    let view = Published { ctx: &ctx, cache: engine.cache(), bodies: &bodies };
    let mut conn = connection(1);
    let sent = conn.on_request(&view, &request(TypeUrl::Cluster, "", ""));
    let sent = decoded(&sent[0]);
    assert!(!conn.core.answered(), "a response is out");
    assert!(conn.on_request(&view, &request(TypeUrl::Cluster, "", "00000099")).is_empty());
    assert_eq!(conn.core.counts.stale, 1, "a nonce that was never sent is stale");
    assert!(conn.on_request(&view, &request(TypeUrl::Cluster, &sent.version_info, &sent.nonce)).is_empty());
    let w = &conn.core.watches[TypeUrl::Cluster.index()];
    assert_eq!(
        (w.nonce_acked.map(|n| n.to_string()), w.version_acked.as_deref()),
        (Some(sent.nonce), Some(&*sent.version_info))
    );
    assert!(
        Arc::ptr_eq(w.version_acked.as_ref().unwrap(), w.version_sent.as_ref().unwrap()),
        "an ACK of the version sent shares its text"
    );
    assert_eq!(conn.core.counts.acks, 1);
    assert!(conn.core.answered());
}

#[tokio::test]
async fn a_nack_is_recorded_and_the_rejected_content_is_not_sent_again() {
    let (engine, bodies) = (engine().await, BodyCache::new());
    let ctx = engine.snapshot();
    let view = Published { ctx: &ctx, cache: engine.cache(), bodies: &bodies };
    let mut conn = connection(1);
    let sent = decoded(&conn.on_request(&view, &request(TypeUrl::Cluster, "", ""))[0]);
    let mut nack = request(TypeUrl::Cluster, "", &sent.nonce);
    nack.error_detail = Some(envoy_types::pb::google::rpc::Status { code: 13, message: "no".into(), details: vec![] });
    assert!(conn.on_request(&view, &nack).is_empty(), "a NACK is not answered with the same content");
    let w = &conn.core.watches[TypeUrl::Cluster.index()];
    assert_eq!(w.last_nack.as_ref().and_then(|n| n.nonce).map(|n| n.to_string()), Some(sent.nonce));
    assert!(conn.core.answered(), "a NACK answers the response");
    let push = PendingPush {
        full: true,
        hosts: Default::default(),
        types: TypeSet::of(&[TypeUrl::Cluster]),
        rescope: false,
        first_change: Instant::now(),
    };
    assert!(conn.on_push(&view, &push).is_empty(), "a push that changes nothing does not resend what was rejected");
}

#[tokio::test]
async fn a_huge_nack_message_is_kept_bounded() {
    let (engine, bodies) = (engine().await, BodyCache::new());
    let ctx = engine.snapshot();
    let view = Published { ctx: &ctx, cache: engine.cache(), bodies: &bodies };
    let mut conn = connection(1);
    let sent = decoded(&conn.on_request(&view, &request(TypeUrl::Cluster, "", ""))[0]);
    let mut nack = request(TypeUrl::Cluster, "", &sent.nonce);
    let message = format!("bad\n{}", "y".repeat(1 << 20));
    nack.error_detail = Some(envoy_types::pb::google::rpc::Status { code: 13, message, details: vec![] });
    conn.on_request(&view, &nack);
    let recorded = &conn.core.watches[TypeUrl::Cluster.index()].last_nack.as_ref().unwrap().message;
    assert!(recorded.len() < crate::text::MAX_SHOWN + 32, "{} bytes kept", recorded.len());
    assert!(recorded.starts_with("bad\\ny"), "{recorded}");
}

#[tokio::test]
async fn a_stream_that_reconnects_holding_the_current_version_is_sent_nothing() {
    let (engine, bodies) = (engine().await, BodyCache::new());
    let ctx = engine.snapshot();
    let view = Published { ctx: &ctx, cache: engine.cache(), bodies: &bodies };
    let version = decoded(&connection(1).on_request(&view, &request(TypeUrl::Cluster, "", ""))[0]).version_info;
    let mut again = connection(2);
    assert!(again.on_request(&view, &request(TypeUrl::Cluster, &version, "")).is_empty());
    let w = &again.core.watches[TypeUrl::Cluster.index()];
    assert_eq!(w.version_sent.as_deref(), Some(version.as_str()), "it counts as sent and ACKed");
    let mut old = connection(3);
    assert_eq!(old.on_request(&view, &request(TypeUrl::Cluster, "0000000000000000", "")).len(), 1);
}

#[tokio::test]
async fn streams_watching_one_list_share_what_they_were_sent_of_it() {
    let (engine, bodies) = (engine().await, BodyCache::new());
    let ctx = engine.snapshot();
    let view = Published { ctx: &ctx, cache: engine.cache(), bodies: &bodies };
    let names: Vec<String> =
        ["details", "ratings", "reviews"].map(|s| format!("outbound|9080||{s}.default.svc.cluster.local")).into();
    let mut eds = request(TypeUrl::Endpoint, "", "");
    eds.resource_names = names.clone().into();
    let (mut a, mut b) = (connection(1), connection(2));
    for conn in [&mut a, &mut b] {
        let sent = decoded(&conn.on_request(&view, &eds)[0]);
        assert_eq!(sent.resources.len(), names.len(), "an assignment for each watched cluster");
        let held = &conn.sent[TypeUrl::Endpoint.index()];
        assert_eq!((held.changes(), held.holds_any()), (0, true));
    }
    let (a_base, b_base) =
        (a.sent[TypeUrl::Endpoint.index()].base().unwrap(), b.sent[TypeUrl::Endpoint.index()].base().unwrap());
    assert!(Arc::ptr_eq(a_base, b_base), "one resolution for both, no copy of it in either stream");
    assert_eq!(a_base.resources.len(), names.len());
}
