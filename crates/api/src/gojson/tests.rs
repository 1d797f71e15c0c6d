use super::*;
use crate::DynamoGraphDeployment;

/// Rows of a tab-separated vector file (comments start with `#`).
fn rows(text: &str) -> impl Iterator<Item = (&str, &str)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split_once('\t').expect("two columns"))
}

#[test]
fn quantities_marshal_as_kubernetes_marshals_them() {
    let mut wrong = Vec::new();
    for (input, expected) in rows(include_str!("quantities.tsv")) {
        let got = encode("quantity", &Value::String(input.to_string()));
        if got != expected {
            wrong.push(format!("{input}: got {got}, Go writes {expected}"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn strings_are_escaped_as_go_escapes_them() {
    let cases = [
        ("plain", r#""plain""#),
        ("a<b>&c", r#""a\u003cb\u003e\u0026c""#),
        ("q\"b\\", r#""q\"b\\""#),
        ("\n\r\t\u{8}\u{c}\u{1}", r#""\n\r\t\b\f\u0001""#),
        ("\u{2028}\u{2029}é", r#""\u2028\u2029é""#),
    ];
    for (input, expected) in cases {
        assert_eq!(encode("string", &Value::String(input.into())), expected);
    }
}

#[test]
fn zero_values_and_options_follow_go() {
    // containers has no omitempty (nil slice: null); resources is a struct (never omitted);
    // creationTimestamp is omitzero; unknown keys are dropped.
    let template = serde_json::json!({
        "metadata": {"labels": {"b": "2", "a": "1"}, "unknown": 1},
        "spec": {}
    });
    assert_eq!(
        encode("struct:PodTemplateSpec", &template),
        r#"{"metadata":{"labels":{"a":"1","b":"2"}},"spec":{"containers":null}}"#
    );
    let container =
        serde_json::json!({"name": "main", "env": [], "ports": [{"containerPort": 80}]});
    assert_eq!(
        encode("struct:Container", &container),
        r#"{"name":"main","ports":[{"containerPort":80}],"resources":{}}"#
    );
}

/// Every podTemplate of the test-data graphs, read through our types as the controllers read
/// it, marshals to the bytes Go writes for it.
#[test]
fn pod_templates_marshal_as_go_marshals_them() {
    let mut seen = 0;
    let mut wrong = Vec::new();
    for (key, digest) in rows(include_str!("pod_templates.tsv")) {
        let (file, component) = key.split_once('#').expect("file#component");
        let text = testkit::testdata::read(file);
        let graph = serde_yaml::Deserializer::from_str(&text)
            .filter_map(|doc| serde_yaml::Value::deserialize(doc).ok())
            .filter(|v| v["kind"] == "DynamoGraphDeployment")
            .find_map(|v| serde_yaml::from_value::<DynamoGraphDeployment>(v).ok())
            .unwrap_or_else(|| panic!("{file}: no v1beta1 graph"));
        let template = graph
            .spec
            .components
            .iter()
            .find(|c| c.name == component)
            .and_then(|c| c.pod_template.as_ref())
            .unwrap_or_else(|| panic!("{key}: no podTemplate"));
        let encoded = encode(
            "struct:PodTemplateSpec",
            &serde_json::to_value(template).unwrap(),
        );
        let got = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(encoded.as_bytes()));
        seen += 1;
        if got != digest {
            wrong.push(format!("{key}: {encoded}"));
        }
    }
    assert!(seen > 60, "only {seen} vectors");
    assert!(
        wrong.is_empty(),
        "{} of {seen} differ from Go:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}
