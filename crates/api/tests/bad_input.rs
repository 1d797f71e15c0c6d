//! The bad-input corpus (`tests/bad-input/*.yaml`), garde layer: cases marked `garde` are
//! reported with exactly the header's field, rule and message; schema and CEL cases are not
//! claimed by garde (the apiserver stops them first; see `apiserver.rs` for that side), except
//! those marked `garde-too: <rule>`, which validation repeats with that rule.

mod common;

use common::{bad_input_cases, garde_layer};

#[test]
fn corpus_is_large_enough_and_covers_every_layer() {
    let cases = bad_input_cases();
    assert!(cases.len() >= 30, "{} cases", cases.len());
    for layer in ["schema", "cel", "garde"] {
        assert!(cases.iter().any(|c| c.layer == layer), "no {layer} case");
    }
    for c in &cases {
        assert!(
            ["schema", "cel", "garde"].contains(&c.layer.as_str()),
            "{}: layer {}",
            c.file,
            c.layer
        );
        assert_eq!(
            c.rule.is_some(),
            c.layer == "garde",
            "{}: rule header iff garde",
            c.file
        );
        assert!(
            c.garde_too.is_none() || c.layer != "garde",
            "{}: garde-too only on schema and CEL cases",
            c.file
        );
    }
}

#[test]
fn garde_cases_report_the_exact_field_rule_and_message() {
    for c in bad_input_cases().iter().filter(|c| c.layer == "garde") {
        // Earlier documents (the object before an update) are valid.
        for doc in &c.docs[..c.docs.len() - 1] {
            assert_eq!(
                garde_layer(doc).unwrap(),
                Ok(()),
                "{}: first document",
                c.file
            );
        }
        let err = garde_layer(c.input())
            .unwrap_or_else(|e| panic!("{}: does not decode: {e}", c.file))
            .expect_err(&c.file);
        let v = err
            .violations
            .iter()
            .find(|v| v.field == c.field)
            .unwrap_or_else(|| panic!("{}: no violation at {} in {err}", c.file, c.field));
        assert_eq!(Some(v.rule.code()), c.rule.as_deref(), "{}", c.file);
        assert_eq!(v.message, c.expect, "{}", c.file);
        assert!(
            err.to_string()
                .contains(&format!("{}: {}", c.field, c.expect)),
            "{}: {err}",
            c.file
        );
    }
}

#[test]
fn schema_and_cel_cases_are_not_claimed_by_garde() {
    for c in bad_input_cases().iter().filter(|c| c.layer != "garde") {
        match garde_layer(c.input()) {
            // Wrong types do not even decode.
            Err(_) => assert_eq!(
                c.layer, "schema",
                "{}: only schema cases fail to decode",
                c.file
            ),
            // Validation repeats the rule: it reports exactly that rule there.
            Ok(result) if c.garde_too.is_some() => {
                let e = result.expect_err(&c.file);
                let rules: Vec<&str> = e
                    .violations
                    .iter()
                    .filter(|v| v.field == c.field)
                    .map(|v| v.rule.code())
                    .collect();
                assert_eq!(rules, [c.garde_too.as_deref().unwrap()], "{}: {e}", c.file);
            }
            Ok(result) => {
                if let Err(e) = result {
                    assert!(
                        !e.violations.iter().any(|v| v.field == c.field),
                        "{}: garde claims {}: {e}",
                        c.file,
                        c.field
                    );
                }
            }
        }
    }
}
