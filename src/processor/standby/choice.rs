//! Which member keeps which partition warm: a pure function of the group's
//! assignment, so every member works it out alike from the same reading.

use std::collections::BTreeSet;

/// The partitions `me` keeps as standbys: for each assigned partition, the
/// `replicas` members that follow its owner in member-id order (wrapping
/// round), never the owner itself. With ownership balanced, so are the
/// standbys (each member keeps about `replicas` times its own share); a
/// partition no member owns (mid-rebalance) has no standby until it has an
/// owner. With `replicas` at least the number of other members, every
/// member keeps every partition it does not own.
pub(crate) fn standbys_of(
    me: &str,
    assignments: &[(String, Vec<i32>)],
    replicas: usize,
) -> BTreeSet<i32> {
    let mut members: Vec<&str> = assignments.iter().map(|(id, _)| id.as_str()).collect();
    members.sort_unstable();
    members.dedup();
    let Some(mine) = members.iter().position(|m| *m == me) else {
        return BTreeSet::new();
    };
    let count = members.len();
    let replicas = replicas.min(count.saturating_sub(1));
    let mut out = BTreeSet::new();
    for (owner, partitions) in assignments {
        let Some(at) = members.iter().position(|m| m == owner) else {
            continue;
        };
        // How far after the owner `me` comes, in the ring of members.
        let distance = (mine + count - at) % count;
        if distance >= 1 && distance <= replicas {
            out.extend(partitions.iter().copied());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(members: &[(&str, &[i32])]) -> Vec<(String, Vec<i32>)> {
        members
            .iter()
            .map(|(id, ps)| (id.to_string(), ps.to_vec()))
            .collect()
    }

    fn set(ps: &[i32]) -> BTreeSet<i32> {
        ps.iter().copied().collect()
    }

    #[test]
    fn each_partition_is_kept_by_the_members_after_its_owner() {
        let g = group(&[("b", &[2]), ("a", &[0, 1]), ("c", &[3])]);
        assert_eq!(standbys_of("a", &g, 1), set(&[3]));
        assert_eq!(standbys_of("b", &g, 1), set(&[0, 1]));
        assert_eq!(standbys_of("c", &g, 1), set(&[2]));
        // Two replicas among three members: everything a member does not own.
        assert_eq!(standbys_of("a", &g, 2), set(&[2, 3]));
        assert_eq!(standbys_of("b", &g, 2), set(&[0, 1, 3]));
        assert_eq!(standbys_of("c", &g, 2), set(&[0, 1, 2]));
    }

    #[test]
    fn never_its_own_partitions_and_never_more_replicas_than_other_members() {
        let g = group(&[("a", &[0, 1]), ("b", &[2, 3])]);
        for replicas in [1, 2, 5] {
            assert_eq!(standbys_of("a", &g, replicas), set(&[2, 3]));
            assert_eq!(standbys_of("b", &g, replicas), set(&[0, 1]));
        }
        assert!(standbys_of("a", &g, 0).is_empty());
        let alone = group(&[("a", &[0, 1, 2, 3])]);
        assert!(standbys_of("a", &alone, 3).is_empty());
    }

    #[test]
    fn a_member_not_in_the_reading_keeps_nothing() {
        let g = group(&[("a", &[0]), ("b", &[1])]);
        assert!(standbys_of("z", &g, 1).is_empty());
    }

    #[test]
    fn every_partition_has_its_replicas_when_members_suffice() {
        let g = group(&[("m1", &[0, 4]), ("m2", &[1, 5]), ("m3", &[2]), ("m4", &[3])]);
        for replicas in 1..=3 {
            for partition in 0..6 {
                let keepers = ["m1", "m2", "m3", "m4"]
                    .iter()
                    .filter(|m| standbys_of(m, &g, replicas).contains(&partition))
                    .count();
                assert_eq!(
                    keepers, replicas,
                    "partition {partition}, {replicas} replicas"
                );
            }
        }
    }
}
