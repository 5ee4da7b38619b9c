use axum::http::{HeaderMap, HeaderValue, StatusCode};

use super::AppProbers;
use crate::testing::certs;

/// An app on 127.0.0.1: `/ready` answers 200 with the `x-kubelet` header
/// it was sent, `/moved` a redirect, anything else 503 with a long body.
async fn app() -> axum::Router {
    axum::Router::new()
        .route(
            "/ready",
            axum::routing::get(|headers: HeaderMap| async move {
                let seen = headers.get("x-kubelet").and_then(|v| v.to_str().ok()).unwrap_or("none").to_string();
                let host = headers.get("host").and_then(|v| v.to_str().ok()).unwrap_or("none").to_string();
                (StatusCode::OK, format!("kubelet={seen} host={host}"))
            }),
        )
        .route("/moved", axum::routing::get(|| async { (StatusCode::FOUND, [("location", "/elsewhere")], "") }))
        .fallback(|| async { (StatusCode::SERVICE_UNAVAILABLE, "x".repeat(20_000)) })
}

async fn serve_http() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let app = app().await;
    tokio::spawn(async move { axum::serve(listener, app).await });
    port
}

/// The same app over TLS, with a certificate no one trusts.
async fn serve_https() -> u16 {
    let (_, ca) = certs::ca("untrusted app CA");
    let (cert, key) = certs::leaf(&ca, &["app.example"]);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    crate::testing::https::serve(listener, &cert, &key, app().await);
    port
}

/// A gRPC health service; its reporter sets what it answers.
async fn serve_grpc() -> (u16, tonic_health::server::HealthReporter) {
    let (reporter, service) = tonic_health::server::health_reporter();
    reporter.set_service_status("shop.Cart", tonic_health::ServingStatus::Serving).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    tokio::spawn(tonic::transport::Server::builder().add_service(service).serve_with_incoming(incoming));
    (port, reporter)
}

fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[tokio::test]
async fn each_kind_of_probe_answers_as_the_kubelet_would_have_seen_the_app() {
    let (http, https) = (serve_http().await, serve_https().await);
    let (grpc, reporter) = serve_grpc().await;
    let closed = closed_port();
    let text = format!(
        "{{\"/app-health/web/readyz\": {{\"httpGet\": {{\"path\": \"ready\", \"port\": {http}}}, \"timeoutSeconds\": 2}},\
         \"/app-health/web/livez\": {{\"httpGet\": {{\"path\": \"/broken\", \"port\": {http}}}}},\
         \"/app-health/web/startupz\": {{\"httpGet\": {{\"path\": \"/moved\", \"port\": {http}}}}},\
         \"/app-health/tls/readyz\": {{\"httpGet\": {{\"path\": \"/ready\", \"port\": {https}, \"scheme\": \"HTTPS\"}}}},\
         \"/app-health/db/livez\": {{\"tcpSocket\": {{\"port\": {http}}}}},\
         \"/app-lifecycle/db/prestopz\": {{\"tcpSocket\": {{\"port\": {closed}}}}},\
         \"/app-health/cart/readyz\": {{\"grpc\": {{\"port\": {grpc}, \"service\": \"shop.Cart\"}}}}}}"
    );
    let probers = AppProbers::parse(&text, "127.0.0.1").unwrap();
    assert_eq!(probers.len(), 7);
    let mut kubelet = HeaderMap::new();
    kubelet.insert("x-kubelet", HeaderValue::from_static("probe/1.34"));
    kubelet.insert("host", HeaderValue::from_static("10.0.0.9:15020"));

    let (status, body) = probers.probe("/app-health/web/readyz", &kubelet).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body,
        format!("kubelet=probe/1.34 host=127.0.0.1:{http}"),
        "the kubelet's headers go on, the host is the app's"
    );
    let (status, body) = probers.probe("/app-health/web/livez", &kubelet).await;
    assert_eq!((status, body.len()), (StatusCode::SERVICE_UNAVAILABLE, 10 * 1024), "the app's status, its body capped");
    assert_eq!(probers.probe("/app-health/web/startupz", &kubelet).await.0, StatusCode::OK, "a redirect is success");
    let (status, body) = probers.probe("/app-health/tls/readyz", &kubelet).await;
    assert_eq!(status, StatusCode::OK, "HTTPS without verifying the app's certificate: {body}");
    assert_eq!(probers.probe("/app-health/db/livez", &kubelet).await.0, StatusCode::OK);
    assert_eq!(probers.probe("/app-lifecycle/db/prestopz", &kubelet).await.0, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(probers.probe("/app-health/cart/readyz", &kubelet).await.0, StatusCode::OK);
    reporter.set_service_status("shop.Cart", tonic_health::ServingStatus::NotServing).await;
    let (status, body) = probers.probe("/app-health/cart/readyz", &kubelet).await;
    assert_eq!((status, body.as_str()), (StatusCode::INTERNAL_SERVER_ERROR, "the service is NOT_SERVING\n"));
    let (status, body) = probers.probe("/app-health/nobody/readyz", &kubelet).await;
    assert_eq!((status, body.as_str()), (StatusCode::BAD_REQUEST, "no probe at /app-health/nobody/readyz\n"));
}

#[tokio::test]
async fn a_probe_that_outlives_its_timeout_fails() {
    // A listener that accepts and never answers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((tcp, _)) = listener.accept().await {
            held.push(tcp);
        }
    });
    let text = format!("{{\"/app-health/slow/readyz\": {{\"httpGet\": {{\"port\": {port}}}, \"timeoutSeconds\": 1}}}}");
    let probers = AppProbers::parse(&text, "127.0.0.1").unwrap();
    let (status, body) = probers.probe("/app-health/slow/readyz", &HeaderMap::new()).await;
    assert_eq!((status, body.as_str()), (StatusCode::INTERNAL_SERVER_ERROR, "probe timed out after 1s\n"));
}

#[test]
fn malformed_probers_stop_the_agent_naming_the_path() {
    let cases = [
        ("{\"/healthz\": {\"tcpSocket\": {\"port\": 1}}}", "not an /app-health/ or /app-lifecycle/ path"),
        ("{\"/app-health/a/readyz\": {\"tcpSocket\": {\"port\": 1}, \"grpc\": {\"port\": 2}}}", "exactly one of"),
        ("{\"/app-health/a/readyz\": {\"httpGet\": {\"port\": \"http\"}}}", "not Istio's JSON"),
        ("{\"/app-health/a/readyz\": {\"httpGet\": {\"port\": 1, \"scheme\": \"FTP\"}}}", "neither HTTP nor HTTPS"),
        ("[]", "not Istio's JSON"),
    ];
    for (text, want) in cases {
        let err = AppProbers::parse(text, "10.0.0.1").unwrap_err();
        assert!(err.contains(want), "{text}: {err}");
    }
    assert!(AppProbers::parse("{}", "::1").unwrap().is_empty());
}
