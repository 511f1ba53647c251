use super::*;

#[test]
fn the_filter_never_forgets_a_key_and_rarely_claims_one() {
    let mut filter = Filter::for_keys(10_000);
    for i in 0..10_000 {
        filter.insert(format!("order-{i}").as_bytes());
    }
    for i in 0..10_000 {
        assert!(
            filter.may_hold(KeyHash::of(format!("order-{i}").as_bytes())),
            "{i}"
        );
    }
    let claimed = (10_000..110_000)
        .filter(|i| filter.may_hold(KeyHash::of(format!("order-{i}").as_bytes())))
        .count();
    assert!(claimed < 2_000, "{claimed} of 100,000 absent keys claimed");
}

#[test]
fn an_index_names_the_run_that_may_hold_a_key_and_reads_back_as_written() {
    let mut builder = IndexBuilder::new(7, 4);
    for key in ["b", "d", "f", "h"] {
        builder.key(key.as_bytes());
    }
    builder.run(b"d", 100);
    builder.run(b"h", 50);
    let index = builder.finish();
    assert_eq!((index.id, index.keys, index.bytes), (7, 4, 150));
    assert_eq!(index.run_for(b"b", KeyHash::of(b"b")), Some(&b"d"[..]));
    assert_eq!(index.run_for(b"d", KeyHash::of(b"d")), Some(&b"d"[..]));
    assert_eq!(index.run_for(b"f", KeyHash::of(b"f")), Some(&b"h"[..]));
    assert_eq!(index.run_for(b"h", KeyHash::of(b"h")), Some(&b"h"[..]));
    let decoded = GenerationIndex::decode(&index.encode()).expect("decodes");
    assert_eq!(decoded, index);
    let bytes = index.encode();
    for cut in 0..bytes.len() {
        assert!(
            GenerationIndex::decode(&bytes[..cut]).is_err(),
            "cut at {cut}"
        );
    }
}

#[test]
fn the_live_list_reads_back_and_refuses_numbers_not_given_yet() {
    let list = LiveList {
        next_id: 9,
        ids: vec![0, 4, 8],
    };
    assert_eq!(LiveList::decode(&list.encode()), Ok(list));
    let bad = LiveList {
        next_id: 3,
        ids: vec![3],
    };
    assert!(LiveList::decode(&bad.encode()).is_err());
    assert!(LiveList::decode(&[0, 0, 1]).is_err());
}

#[test]
fn merges_keep_sizes_halving_and_the_count_logarithmic() {
    assert_eq!(plan_merge(&[]), None);
    assert_eq!(plan_merge(&[100]), None);
    assert_eq!(plan_merge(&[100, 10]), None);
    assert_eq!(plan_merge(&[100, 10, 10]), Some(1..3));
    assert_eq!(plan_merge(&[30, 10, 10]), Some(0..3));
    // Equal write-outs, merged as planned: the count stays near log2.
    let mut sizes: Vec<u64> = Vec::new();
    let mut written = 0u64;
    for _ in 0..10_000 {
        sizes.push(1);
        written += 1;
        while let Some(range) = plan_merge(&sizes) {
            let merged: u64 = sizes[range.clone()].iter().sum();
            written += merged;
            sizes.splice(range, [merged]);
        }
        assert!(sizes.len() <= 15, "{sizes:?}");
        assert!(sizes.windows(2).all(|w| w[0] > 2 * w[1]), "{sizes:?}");
    }
    // Each byte is rewritten about log2(10,000) times, not 10,000.
    assert!(written < 10_000 * 16, "{written}");
}

#[test]
fn past_the_limit_the_smallest_adjacent_pair_is_merged() {
    let sizes: Vec<u64> = (0..=MAX_GENERATIONS as u64)
        .map(|i| 1 << (40 - 2 * i))
        .collect();
    let range = plan_merge(&sizes).expect("a merge past the limit");
    assert_eq!(range, MAX_GENERATIONS - 1..MAX_GENERATIONS + 1);
}

fn source(entries: &[(&str, Option<&str>)]) -> std::vec::IntoIter<Result<Entry, String>> {
    entries
        .iter()
        .map(|(k, v)| Ok((k.as_bytes().to_vec(), v.map(|v| v.as_bytes().to_vec()))))
        .collect::<Vec<_>>()
        .into_iter()
}

fn merged(
    sources: Vec<std::vec::IntoIter<Result<Entry, String>>>,
    bottom: bool,
) -> Vec<(String, Option<String>)> {
    Merge::new(sources, bottom)
        .map(|entry| {
            let (k, v) = entry.expect("no error");
            (
                String::from_utf8(k).expect("utf8"),
                v.map(|v| String::from_utf8(v).expect("utf8")),
            )
        })
        .collect()
}

#[test]
fn a_merge_keeps_the_newest_value_of_each_key_in_order() {
    let newest = source(&[("b", Some("2")), ("d", None), ("e", Some("new"))]);
    let middle = source(&[("a", Some("1")), ("d", Some("old")), ("e", Some("mid"))]);
    let oldest = source(&[("c", Some("3")), ("e", Some("old")), ("f", None)]);
    let out = merged(vec![newest, middle, oldest], false);
    let want = [
        ("a", Some("1")),
        ("b", Some("2")),
        ("c", Some("3")),
        ("d", None),
        ("e", Some("new")),
        ("f", None),
    ];
    let want: Vec<(String, Option<String>)> = want
        .iter()
        .map(|(k, v)| (k.to_string(), v.map(str::to_string)))
        .collect();
    assert_eq!(out, want);
    let newest = source(&[("d", None)]);
    let oldest = source(&[("d", Some("old")), ("g", Some("7"))]);
    assert_eq!(
        merged(vec![newest, oldest], true),
        vec![("g".to_string(), Some("7".to_string()))],
        "at the bottom a deletion hides the key and then goes"
    );
}

#[test]
fn a_merge_stops_at_a_source_error() {
    let failing: std::vec::IntoIter<Result<Entry, String>> =
        vec![Ok((b"a".to_vec(), None)), Err("bad run".to_string())].into_iter();
    let out: Vec<_> = Merge::new(vec![failing, source(&[("b", Some("1"))])], false).collect();
    assert!(out.iter().any(Result::is_err));
}
