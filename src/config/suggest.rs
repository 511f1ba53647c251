//! Naming what was likely meant: the closest section or key to a typo.

/// `" (did you mean `x`?)"` for the name in `table` closest to `word`,
/// when one is close enough to be a typo; `""` otherwise.
pub(super) fn did_you_mean(word: &str, table: &toml::Table) -> String {
    let limit = (word.chars().count() / 3).max(1);
    table
        .keys()
        .map(|k| (edit_distance(word, k), k))
        .filter(|(d, _)| *d <= limit)
        .min()
        .map(|(_, k)| format!(" (did you mean `{k}`?)"))
        .unwrap_or_default()
}

/// Levenshtein distance over characters.
pub(super) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

pub(super) fn names(table: &toml::Table) -> String {
    table
        .keys()
        .map(|k| format!("`{k}`"))
        .collect::<Vec<_>>()
        .join(", ")
}
