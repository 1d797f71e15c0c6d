//! State-machine transition tables as the docs print them (Markdown), one rendering for every
//! machine: a row per transition, columns `from`, `step`, `to`, `when`.

/// The Markdown table of `rows`, each `(from, step, to, when)`: the `from` cell is `any` when
/// `from` is every phase (`all`), else the phases' names (`name`) joined by commas.
pub fn transitions<'a, P: Copy + PartialEq + 'a>(
    rows: impl IntoIterator<Item = (&'a [P], String, String, &'a str)>,
    all: &[P],
    name: impl Fn(P) -> &'static str,
) -> String {
    let mut out = String::from("| from | step | to | when |\n| --- | --- | --- | --- |\n");
    for (from, step, to, when) in rows {
        let from = if from == all {
            "any".to_string()
        } else {
            from.iter().map(|p| name(*p)).collect::<Vec<_>>().join(", ")
        };
        out.push_str(&format!("| {from} | {step} | {to} | {when} |\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_per_transition_and_any_for_every_phase() {
        let all = [1, 2, 3];
        let name = |p: i32| ["zero", "one", "two", "three"][p as usize];
        let rows = [
            (&all[..], "Start".to_string(), "two".to_string(), "always"),
            (&[1, 3][..], "Stop".to_string(), "one".to_string(), "then"),
        ];
        assert_eq!(
            transitions(rows, &all, name),
            "| from | step | to | when |\n| --- | --- | --- | --- |\n\
             | any | Start | two | always |\n\
             | one, three | Stop | one | then |\n"
        );
    }
}
