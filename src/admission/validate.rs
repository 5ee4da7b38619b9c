//! `POST /validate`: an Istio or Gateway API object checked as `meshpush
//! validate` checks a file (the same parser and validation), before the
//! API server stores it. What validation calls an error refuses the
//! object, every error named with its field path; its warnings (a field
//! meshpush does not apply, one Istio removed) go back as the review's
//! warnings, which `kubectl` prints. Deletes, and kinds meshpush does not
//! read, are allowed.

use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};

use crate::config::Problem;
use crate::config::parse::parse_documents;

/// Answers one validation request.
pub fn review(request: &AdmissionRequest<DynamicObject>) -> AdmissionResponse {
    let response = AdmissionResponse::from(request);
    if !matches!(request.operation, Operation::Create | Operation::Update) {
        return response;
    }
    let Some(object) = &request.object else {
        return response.deny("the review holds no object");
    };
    let text = match serde_yaml_ng::to_string(object) {
        Ok(text) => text,
        Err(e) => return response.deny(format!("cannot decode configuration: {e}")),
    };
    let parsed = parse_documents("admission", &text);
    let (errors, warnings): (Vec<&Problem>, Vec<&Problem>) = parsed.problems.iter().partition(|p| p.is_error());
    if !errors.is_empty() {
        let reasons: Vec<String> = errors.iter().map(|p| reason(p)).collect();
        return response.deny(format!("configuration is invalid: {}", reasons.join("; ")));
    }
    let mut response = response;
    if !warnings.is_empty() {
        response.warnings = Some(warnings.iter().map(|p| reason(p)).collect());
    }
    response
}

/// A problem without its source (the review is the source): the object,
/// the field path, what is wrong.
fn reason(problem: &Problem) -> String {
    let mut out = String::new();
    if let Some(key) = &problem.object {
        out.push_str(&format!("{key}: "));
    }
    if !problem.path.is_empty() {
        out.push_str(&format!("{}: ", problem.path));
    }
    out.push_str(&problem.message);
    out
}
