use super::*;

fn graph(yaml: &str) -> DynamoGraphDeployment {
    serde_yaml::from_str(yaml).expect("graph parses")
}

/// Upstream's golden value (`TestComputeDGDWorkersSpecHashDeterministic`): one worker with a
/// `main` container, image and one env var.
#[test]
fn equals_upstream_golden_value() {
    let g = graph(
        r#"
apiVersion: nvidia.com/v1beta1
kind: DynamoGraphDeployment
metadata: {name: test}
spec:
  components:
    - name: worker
      type: worker
      podTemplate:
        spec:
          containers:
            - name: main
              image: worker:latest
              env: [{name: FOO, value: bar}]
"#,
    );
    assert_eq!(worker_hash(&g), "2bc34b39");
}

/// The v1beta1 graphs of the test data, keyed by file (and name when a file has several).
fn test_data_graphs() -> Vec<(String, DynamoGraphDeployment)> {
    use serde::Deserialize;
    let mut out = Vec::new();
    for folder in ["v1beta1", "upstream-examples"] {
        for path in testkit::testdata::yaml_files(folder) {
            let text = std::fs::read_to_string(&path).expect("readable");
            let file = format!("{folder}/{}", path.file_name().unwrap().to_string_lossy());
            for doc in serde_yaml::Deserializer::from_str(&text) {
                let Ok(value) = serde_yaml::Value::deserialize(doc) else {
                    continue;
                };
                if value["kind"] != "DynamoGraphDeployment"
                    || value["apiVersion"] != "nvidia.com/v1beta1"
                {
                    continue;
                }
                let g: DynamoGraphDeployment = serde_yaml::from_value(value).expect("graph parses");
                out.push((
                    format!("{file}#{}", g.metadata.name.clone().unwrap_or_default()),
                    g,
                ));
            }
        }
    }
    out
}

/// Prints the input lines of `worker_hashes.tsv` for `go run ./xtask/golayout vectors`: each
/// graph as our types read it (with their defaults), so the vectors test the hash alone.
#[test]
#[ignore = "generates vector inputs"]
fn print_vector_inputs() {
    for (key, g) in test_data_graphs() {
        println!("g {key} {}", serde_json::to_string(&g).unwrap());
    }
}

/// Every v1beta1 graph of the test data hashes to what upstream's Go code computes for it.
#[test]
fn test_data_graphs_hash_as_upstream() {
    let expected: std::collections::BTreeMap<&str, &str> = include_str!("worker_hashes.tsv")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split_once('\t').expect("two columns"))
        .collect();
    let graphs = test_data_graphs();
    assert_eq!(graphs.len(), expected.len(), "a vector per graph");
    let wrong: Vec<String> = graphs
        .iter()
        .filter_map(|(key, g)| {
            let got = worker_hash(g);
            (expected.get(key.as_str()) != Some(&got.as_str()))
                .then(|| format!("{key}: {got}, upstream {:?}", expected.get(key.as_str())))
        })
        .collect();
    assert!(wrong.is_empty(), "{wrong:#?}");
}
