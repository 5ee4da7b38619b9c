//! examples/bookinfo is what its README says: every document parses and validates
//! without a problem, and the objects are the ones the end-to-end test relies on.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use meshpush::config::parse::parse_documents;

#[test]
fn bookinfo_example_parses_without_problems() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/bookinfo");
    let mut keys = BTreeSet::new();
    for entry in fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let parsed = parse_documents(&name, &fs::read_to_string(&path).unwrap());
        let problems: Vec<String> = parsed.problems.iter().map(ToString::to_string).collect();
        assert!(problems.is_empty(), "{name}:\n{}", problems.join("\n"));
        keys.extend(parsed.objects.iter().map(|(o, _)| o.key().to_string()));
    }
    let expected: BTreeSet<String> = [
        "Service default/productpage",
        "Service default/details",
        "Service default/reviews",
        "Service default/ratings",
        "Pod default/productpage-v1",
        "Pod default/details-v1",
        "Pod default/reviews-v1",
        "Pod default/reviews-v2",
        "Pod default/reviews-v3",
        "Pod default/ratings-v1",
        "Gateway default/bookinfo-gateway",
        "VirtualService default/bookinfo",
        "VirtualService default/reviews",
        "VirtualService default/ratings",
        "VirtualService default/details",
        "DestinationRule default/productpage",
        "DestinationRule default/reviews",
        "DestinationRule default/ratings",
        "DestinationRule default/details",
    ]
    .map(String::from)
    .into();
    assert_eq!(keys, expected);
}
