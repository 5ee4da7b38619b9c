//! An AdmissionReview over HTTP, read and answered as istiod's webhooks
//! read and answer them:
//! - the body is at most 6 MiB (Kubernetes' own request limit), else 400;
//!   an empty body is a 400 too;
//! - `Content-Type` must be `application/json`, else 415;
//! - a body that is not a v1 AdmissionReview with a request is answered 200
//!   with `allowed: false` and the reason (no uid: the API server counts the
//!   call as failed and its `failurePolicy` decides);
//! - the answer carries the request's `uid`, and its `apiVersion` and
//!   `kind`; a patch is base64, as Kubernetes encodes bytes in JSON.
//!
//! Every error text that quotes the client is bounded.

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};

use crate::text::Shown;

/// The largest body read (Kubernetes' `MaxRequestBodyBytes`, as Istio's).
pub const MAX_BODY: usize = 6 * 1024 * 1024;

/// The request of a review, or the HTTP answer to give instead.
pub fn read(headers: &HeaderMap, body: &Bytes) -> Result<AdmissionRequest<DynamicObject>, Box<Response>> {
    if body.is_empty() {
        return Err(Box::new((StatusCode::BAD_REQUEST, "no body found\n").into_response()));
    }
    if body.len() > MAX_BODY {
        let why = format!("the body is larger than the limit of {MAX_BODY} bytes\n");
        return Err(Box::new((StatusCode::BAD_REQUEST, why).into_response()));
    }
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    if content_type != "application/json" {
        let shown = Shown(content_type).to_string();
        let why = format!("invalid Content-Type {shown:?}, want \"application/json\"\n");
        return Err(Box::new((StatusCode::UNSUPPORTED_MEDIA_TYPE, why).into_response()));
    }
    let review: AdmissionReview<DynamicObject> = match serde_json::from_slice(body) {
        Ok(review) => review,
        Err(e) => return Err(Box::new(answer(AdmissionResponse::invalid(format!("could not decode body: {e}"))))),
    };
    if review.types.api_version != "admission.k8s.io/v1" || review.types.kind != "AdmissionReview" {
        let why = format!(
            "could not decode body: {}/{} is not an admission.k8s.io/v1 AdmissionReview",
            Shown(&review.types.api_version),
            Shown(&review.types.kind)
        );
        return Err(Box::new(answer(AdmissionResponse::invalid(why))));
    }
    review
        .try_into()
        .map_err(|_| Box::new(answer(AdmissionResponse::invalid("could not decode body: it holds no request"))))
}

/// The HTTP answer carrying `response`. Its patch goes out as Kubernetes
/// writes a byte string in JSON, base64 (kube-core would write an array of
/// numbers).
pub fn answer(response: AdmissionResponse) -> Response {
    use base64::Engine as _;
    let patch = response.patch.clone();
    let mut review = serde_json::to_value(response.into_review()).expect("a review serializes");
    if let Some(patch) = patch {
        review["response"]["patch"] = base64::engine::general_purpose::STANDARD.encode(patch).into();
    }
    axum::Json(review).into_response()
}
