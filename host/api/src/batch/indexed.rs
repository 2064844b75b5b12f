//! Indexed Jobs (upstream's `indexed_job_utils.go`): completion indexes
//! as ordered intervals and their compressed text
//! (`status.completedIndexes`, `"1,3-5,7"`), a pod's index
//! (`batch.kubernetes.io/job-completion-index`), the indexes still to
//! start, and which active pods repeat or overflow an index.

use super::{COMPLETION_INDEX, remove_order};
use serde_json::Value;

/// Sorted, disjoint, non-adjacent closed intervals of indexes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Intervals(pub Vec<(u32, u32)>);

impl Intervals {
    /// Parses `status.completedIndexes`, dropping indexes at or beyond
    /// `completions` (upstream's `parseIndexesFromString`); bad parts are
    /// skipped.
    pub fn parse(s: &str, completions: u32) -> Intervals {
        let mut out: Vec<(u32, u32)> = Vec::new();
        if s.is_empty() {
            return Intervals(out);
        }
        for part in s.split(',') {
            let mut limits = part.split('-');
            let Some(Ok(first)) = limits.next().map(str::parse::<u32>) else {
                continue;
            };
            if first >= completions {
                break;
            }
            let last = match limits.next() {
                None => first,
                Some(l) => match l.parse::<u32>() {
                    Ok(l) => l.min(completions - 1),
                    Err(_) => continue,
                },
            };
            match out.last_mut() {
                Some(prev) if prev.1 + 1 == first => prev.1 = last,
                _ => out.push((first, last)),
            }
        }
        Intervals(out)
    }

    /// How many indexes.
    pub fn total(&self) -> u32 {
        self.0.iter().map(|(f, l)| l - f + 1).sum()
    }

    pub fn has(&self, ix: u32) -> bool {
        self.0.iter().any(|(f, l)| (*f..=*l).contains(&ix))
    }

    /// This set and `other`'s, merged.
    pub fn merge(&self, other: &Intervals) -> Intervals {
        let mut all: Vec<(u32, u32)> = self.0.iter().chain(&other.0).copied().collect();
        all.sort_unstable();
        let mut out: Vec<(u32, u32)> = Vec::with_capacity(all.len());
        for (f, l) in all {
            match out.last_mut() {
                Some(prev) if f <= prev.1.saturating_add(1) => prev.1 = prev.1.max(l),
                _ => out.push((f, l)),
            }
        }
        Intervals(out)
    }

    /// This set with `indexes` added.
    pub fn with(&self, indexes: &[u32]) -> Intervals {
        self.merge(&Intervals(indexes.iter().map(|i| (*i, *i)).collect()))
    }
}

impl std::fmt::Display for Intervals {
    /// Upstream's compressed form: two neighbours are listed (`1,2`), three
    /// or more make a range (`1-3`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (first, last)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{first}")?;
            if last > first {
                let sep = if *last == first + 1 { "," } else { "-" };
                write!(f, "{sep}{last}")?;
            }
        }
        Ok(())
    }
}

/// A pod's completion index, from its annotation; `None` when absent or
/// not a non-negative number.
pub fn completion_index(pod: &Value) -> Option<u32> {
    pod["metadata"]["annotations"][COMPLETION_INDEX]
        .as_str()
        .and_then(|s| s.parse().ok())
}

/// The first `count` indexes below `completions` that are neither
/// succeeded nor held by an active pod (`firstPendingIndexes`).
pub fn first_pending(
    succeeded: &Intervals,
    active: &[&Value],
    count: usize,
    completions: u32,
) -> Vec<u32> {
    let mut out = Vec::new();
    if count == 0 {
        return out;
    }
    let mut held: Vec<u32> = active.iter().filter_map(|p| completion_index(p)).collect();
    held.sort_unstable();
    let busy = succeeded.with(&held);
    let mut candidate = 0u32;
    for (first, last) in &busy.0 {
        while candidate < completions && out.len() < count && candidate < *first {
            out.push(candidate);
            candidate += 1;
        }
        candidate = candidate.max(last + 1);
    }
    while candidate < completions && out.len() < count {
        out.push(candidate);
        candidate += 1;
    }
    out
}

/// Which active pods must go for an Indexed Job: those without a valid
/// index or with one at or beyond `completions`, and all but the most
/// advanced pod of a repeated index (`appendDuplicatedIndexPodsForRemoval`).
/// Returns positions into `pods` to remove and to keep.
pub fn duplicates_for_removal(pods: &[&Value], completions: u32) -> (Vec<usize>, Vec<usize>) {
    let mut order: Vec<usize> = (0..pods.len()).collect();
    // Unknown indexes first.
    order.sort_by_key(|&i| completion_index(pods[i]).map_or(-1, i64::from));
    let (mut rm, mut keep) = (Vec::new(), Vec::new());
    let mut group: Vec<usize> = Vec::new();
    let mut group_ix: Option<Option<u32>> = None;
    let mut flush = |group: &mut Vec<usize>, ix: Option<u32>, rm: &mut Vec<usize>| {
        if group.is_empty() {
            return;
        }
        match ix {
            None => rm.append(group),
            Some(_) => {
                let mut sorted: Vec<usize> = std::mem::take(group);
                sorted.sort_by(|a, b| remove_order(pods[*a], pods[*b]));
                let last = sorted.pop().expect("non-empty group");
                rm.extend(sorted);
                keep.push(last);
            }
        }
    };
    for i in order {
        let ix = completion_index(pods[i]);
        if ix.is_some_and(|ix| ix >= completions) {
            rm.push(i);
            continue;
        }
        if group_ix != Some(ix) {
            if let Some(prev) = group_ix {
                flush(&mut group, prev, &mut rm);
            }
            group_ix = Some(ix);
        }
        group.push(i);
    }
    if let Some(prev) = group_ix {
        flush(&mut group, prev, &mut rm);
    }
    (rm, keep)
}

/// `generateName` of an indexed pod: `<job>-<index>-`, the job name cut so
/// that the prefix stays within 58 characters (`podGenerateNameWithIndex`).
pub fn generate_name(job: &str, index: u32) -> String {
    let appendix = format!("-{index}-");
    let max = 58usize;
    if job.len() + appendix.len() > max {
        let cut = max.saturating_sub(appendix.len()).min(job.len());
        format!("{}{appendix}", &job[..cut])
    } else {
        format!("{job}{appendix}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parse_and_print() {
        // upstream's TestParseIndexesFromString and TestIntervalsString.
        let cases = [
            ("", 3, ""),
            ("0,1,2", 3, "0-2"),
            ("0-2", 3, "0-2"),
            ("1,3-5,7", 10, "1,3-5,7"),
            ("1,3-5,7", 5, "1,3,4"),
            ("0-10", 5, "0-4"),
            ("x,2", 5, "2"),
            ("1,2", 5, "1,2"),
            ("5-7", 5, ""),
        ];
        for (input, completions, want) in cases {
            let got = Intervals::parse(input, completions);
            assert_eq!(got.to_string(), want, "{input:?} / {completions}");
        }
        let iv = Intervals::parse("1,3-5,7", 10);
        assert_eq!(iv.total(), 5);
        assert!(iv.has(4) && !iv.has(2));
        assert_eq!(iv.with(&[0, 2, 6, 9]).to_string(), "0-7,9");
        assert_eq!(iv.with(&[8]).to_string(), "1,3-5,7,8");
    }

    fn pod(ix: Option<u32>, phase: &str) -> Value {
        let mut p = json!({"metadata": {"name": format!("p{ix:?}"), "annotations": {}}, "status": {"phase": phase}});
        if let Some(ix) = ix {
            p["metadata"]["annotations"][COMPLETION_INDEX] = json!(ix.to_string());
        }
        p
    }

    #[test]
    fn pending_indexes() {
        let succeeded = Intervals::parse("0,3", 10);
        let (a, b) = (pod(Some(1), "Running"), pod(Some(4), "Pending"));
        let active = [&a, &b];
        assert_eq!(first_pending(&succeeded, &active, 3, 10), vec![2, 5, 6]);
        assert_eq!(first_pending(&succeeded, &active, 3, 6), vec![2, 5]);
        assert_eq!(first_pending(&Intervals::default(), &[], 2, 5), vec![0, 1]);
        assert!(first_pending(&succeeded, &active, 0, 10).is_empty());
    }

    #[test]
    fn duplicates() {
        let pods = [
            pod(Some(0), "Running"),
            pod(None, "Running"),
            pod(Some(0), "Pending"),
            pod(Some(7), "Running"),
            pod(Some(1), "Running"),
        ];
        let refs: Vec<&Value> = pods.iter().collect();
        let (mut rm, mut keep) = duplicates_for_removal(&refs, 5);
        rm.sort();
        keep.sort();
        // The pending duplicate of 0, the pod without index, index 7 >= 5.
        assert_eq!(rm, vec![1, 2, 3]);
        assert_eq!(keep, vec![0, 4]);
    }

    #[test]
    fn names() {
        assert_eq!(generate_name("pi", 3), "pi-3-");
        let long = "a".repeat(60);
        let name = generate_name(&long, 12);
        assert_eq!(name.len(), 58);
        assert!(name.ends_with("a-12-"));
    }
}
