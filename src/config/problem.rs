//! `Problem`: the one vocabulary every config check reports in — parsing,
//! validation of an object on its own, and cross-object references.
//!
//! A problem names where it is (file, document, object, field path), how
//! bad it is ([`Severity`]: an Error refuses the object, a Warning refuses
//! nothing) and what was wrong, and displays as one line a person can act on.

use std::fmt;

use serde::Serialize;

use super::{ConfigKey, SourceRef};

/// How bad a [`Problem`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The object (or document) is refused; a source keeps its previous version.
    Error,
    /// Worth knowing, nothing is refused.
    Warning,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        })
    }
}

/// One finding about a document or object, located as precisely as known.
///
/// Displays as one line:
/// `reviews.yaml doc 2: VirtualService default/reviews: spec.http[0].route[1].weight: -5 is negative`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// Error or warning.
    pub severity: Severity,
    /// The file and document.
    pub source: SourceRef,
    /// The object, when its kind and name could be read.
    pub object: Option<ConfigKey>,
    /// Field path inside the object (`spec.http[0].route[1].weight`); empty
    /// when the problem is about the document or object as a whole.
    pub path: String,
    /// What was wrong and why.
    pub message: String,
}

/// The message of a field meshpush reads but does not apply, with what
/// ignoring it means when that is not plain from its name. Parsing (fields
/// it does not model) and validation (values it does not act on) word it
/// alike, so an operator greps for one phrase.
pub fn not_supported(consequence: Option<&str>) -> String {
    match consequence {
        Some(consequence) => format!("not supported by meshpush yet, ignored: {consequence}"),
        None => "not supported by meshpush yet, ignored".to_string(),
    }
}

impl Problem {
    /// Whether the problem refuses the object.
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.source)?;
        if let Some(key) = &self.object {
            write!(f, "{key}: ")?;
        }
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.message)
    }
}
