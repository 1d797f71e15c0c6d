use super::*;

/// Upstream's `TestIsPythonCommand` (29 cases).
#[test]
fn python_commands() {
    let cases = [
        ("python", true),
        ("python3", true),
        ("python2", true),
        ("python3.11", true),
        ("python2.7", true),
        ("python3.12.1", true),
        ("/usr/bin/python", true),
        ("/usr/bin/python3", true),
        ("/usr/bin/python3.8", true),
        ("/usr/bin/python2.7", true),
        ("/opt/python/bin/python3.11", true),
        ("/usr/local/bin/python3.12.1", true),
        ("/home/user/.pyenv/shims/python3.9", true), // path inside the container
        ("./python3", true),
        ("../bin/python", true),
        ("bin/python3.10", true),
        ("java", false),
        ("sh", false),
        ("node", false),
        ("python-config", false),
        ("/usr/bin/python-config", false),
        ("", false),
        ("python ", false),
        ("/usr/bin/python ", false),
        ("pythonx", false),
        ("/usr/bin/pythonx", false),
        ("/usr/bin/", false),
        ("python/", false),
        ("/usr/bin/python/", false),
    ];
    for (command, want) in cases {
        assert_eq!(is_python(command), want, "{command:?}");
    }
}

/// Upstream's `TestShellQuoteForBashC` (8 cases).
#[test]
fn quoting_for_sh_c() {
    let cases = [
        (
            "Simple flag - no quoting needed",
            "--model-path",
            "--model-path",
        ),
        (
            "Simple path - no quoting needed",
            "/usr/bin/python3",
            "/usr/bin/python3",
        ),
        ("Empty string - no quoting needed", "", ""),
        (
            "JSON override-engine-args (primary use case)",
            r#"{"load_format": "DUMMY", "tensor_parallel_size": 8}"#,
            r#""{\"load_format\": \"DUMMY\", \"tensor_parallel_size\": 8}""#,
        ),
        (
            "String with dollar sign is escaped",
            "$HOME/path",
            r#""\$HOME/path""#,
        ),
        (
            "String with backtick is escaped",
            "hello `world`",
            "\"hello \\`world\\`\"",
        ),
        (
            "Backslash is escaped first to avoid double-escaping",
            r"path\to\file",
            r#""path\\to\\file""#,
        ),
        (
            "Single quote breaks out of outer bash -c context",
            "it's",
            r#""it'"'"'s""#,
        ),
    ];
    for (name, word, want) in cases {
        assert_eq!(quote(word), want, "{name}");
    }
}

/// Finding `flag value` in a command line, as the wait-for-leader decision does.
#[test]
fn flag_value_pairs() {
    let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert!(has_arg(&words(&["--x", "mp"]), "--x", "mp"));
    assert!(has_arg(&words(&["--x=mp"]), "--x", "mp"));
    assert!(has_arg(&words(&["exec python3 --x mp"]), "--x", "mp"));
    assert!(!has_arg(&words(&["--x", "ray"]), "--x", "mp"));
    assert!(!has_arg(&words(&["--x"]), "--x", "mp"));
    let spaced = Container {
        command: Some(words(&[
            "sh",
            "-c",
            "exec python3 -m dynamo.vllm --x    mp",
        ])),
        ..Default::default()
    };
    assert!(command_line_has_arg(&spaced, "--x", "mp"));
}
