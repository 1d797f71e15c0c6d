//! Command-line surgery shared by the backends: recognising a Python interpreter, quoting a
//! token for `sh -c`, finding a flag and injecting launch flags into a container's command
//! line (upstream's `injectFlagsIntoContainerCommand`).
//!
//! Flags are injected in one of three ways:
//! - the command is a Python interpreter and the flags need no shell (every `$(VAR)` in them is
//!   expanded by the kubelet): the flags are appended to the args, one word each;
//! - the command is a Python interpreter and the flags need a shell (an arithmetic expansion
//!   such as Grove's `$((GROVE_PCLQ_POD_INDEX + 1))`): the container runs
//!   `sh -c "exec <command> <args> <flags>"`, each command and arg word quoted ([`quote`]);
//! - any other command (a shell line such as `sh -c "python3 -m dynamo.sglang ..."`): the flags
//!   are inserted into the first arg that runs the backend's Python module, right after the
//!   word naming the module and before any shell operator (`|`, `&`, `;`); args that run no
//!   such module are left alone.

use std::sync::LazyLock;

use k8s_openapi::api::core::v1::Container;
use regex::Regex;

/// Whether `command` is a Python interpreter: `python`, `python3`, `python3.11`, ..., with or
/// without a directory.
pub fn is_python(command: &str) -> bool {
    let base = match command.rsplit_once('/') {
        Some((_, base)) => base,
        None => command,
    };
    let Some(version) = base.strip_prefix("python") else {
        return false;
    };
    let mut parts = version.split('.');
    let major = parts.next().unwrap_or_default();
    major.chars().all(|c| c.is_ascii_digit())
        && parts.all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
}

/// A word that survives `sh -c`: unchanged when it holds no blank, quote, backslash, brace,
/// bracket, `$`, backquote or `!`; else double-quoted with `\`, `"`, `$` and backquote escaped
/// and a single quote written `'"'"'` (so the line also survives an outer `'...'`).
pub fn quote(word: &str) -> String {
    const SPECIAL: &[char] = &[
        ' ', '\t', '\n', '\'', '"', '\\', '{', '}', '[', ']', '$', '`', '!',
    ];
    if !word.contains(SPECIAL) {
        return word.to_string();
    }
    let escaped = word
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('$', "\\$")
        .replace('`', "\\`")
        .replace('\'', "'\"'\"'");
    format!("\"{escaped}\"")
}

/// The words of `words`, each [`quote`]d, joined by blanks.
pub fn quote_all<'a>(words: impl IntoIterator<Item = &'a String>) -> String {
    words
        .into_iter()
        .map(|w| quote(w))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The blank-separated words of `words` (an arg `"--tp 8"` gives two).
pub fn split<'a>(words: impl IntoIterator<Item = &'a String>) -> Vec<String> {
    words
        .into_iter()
        .flat_map(|w| w.split_whitespace().map(str::to_string))
        .collect()
}

/// Whether `words` pass `flag value`: as two words, or inside one word as `flag value` or
/// `flag=value`.
pub fn has_arg(words: &[String], flag: &str, value: &str) -> bool {
    let joined = format!("{flag} {value}");
    let equals = format!("{flag}={value}");
    words.iter().enumerate().any(|(i, w)| {
        w.contains(&joined)
            || w.contains(&equals)
            || (w == flag && words.get(i + 1).is_some_and(|next| next == value))
    })
}

/// Whether the container's command line (command, then args) passes `flag value`, as written
/// or split at blanks.
pub fn command_line_has_arg(container: &Container, flag: &str, value: &str) -> bool {
    let line: Vec<String> = container
        .command
        .iter()
        .flatten()
        .chain(container.args.iter().flatten())
        .cloned()
        .collect();
    has_arg(&line, flag, value) || has_arg(&split(&line), flag, value)
}

/// Inject `flags` into the container's command line (see the module docs); `module` is the
/// backend's name as it appears in its Python module (`sglang`, `vllm`).
pub fn inject(container: &mut Container, flags: &str, needs_shell: bool, module: &str) {
    let python = container
        .command
        .as_ref()
        .and_then(|c| c.first())
        .is_some_and(|c| is_python(c));
    if python {
        if needs_shell {
            let mut line = quote_all(container.command.iter().flatten());
            let args = container.args.as_deref().unwrap_or_default();
            if !args.is_empty() {
                line = format!("{line} {}", quote_all(args));
            }
            container.command = Some(vec!["sh".into(), "-c".into()]);
            container.args = Some(vec![format!("exec {line} {flags}")]);
        } else {
            container
                .args
                .get_or_insert_with(Vec::new)
                .extend(flags.split_whitespace().map(str::to_string));
        }
        return;
    }
    for arg in container.args.iter_mut().flatten() {
        if let Some(injected) = inject_into_line(arg, flags, module) {
            *arg = injected;
            return;
        }
    }
}

/// `line` with `flags` after each `python… … <module>…` word run (up to the next blank or
/// shell operator); `None` when it runs no such module.
fn inject_into_line(line: &str, flags: &str, module: &str) -> Option<String> {
    static PATTERNS: LazyLock<[(&str, Regex); 3]> = LazyLock::new(|| {
        ["sglang", "vllm", "trtllm"].map(|m| {
            let pattern = format!(r"(python[0-9.]*\s+[^|&;]*{m}[^|&;]*?)(\s|$|[|&;])");
            (
                m,
                Regex::new(&pattern).expect("the injection pattern is valid"),
            )
        })
    });
    let (_, re) = PATTERNS.iter().find(|(m, _)| *m == module)?;
    let injected = re.replace_all(line, |caps: &regex::Captures<'_>| {
        format!("{} {flags}{}", &caps[1], &caps[2])
    });
    (injected != line).then(|| injected.into_owned())
}

#[cfg(test)]
#[path = "shell_tests.rs"]
mod tests;
