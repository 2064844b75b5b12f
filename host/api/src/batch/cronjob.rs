//! A CronJob's schedule arithmetic (upstream's `cronjob/utils.go` and the
//! pure parts of `cronjob_controllerv2.go`): the schedule with its
//! `timeZone`, the most recent unmet schedule time and how many were
//! missed, when to look again, `startingDeadlineSeconds`, the Job made for
//! a time (named `<cronjob>-<minutes since the epoch>`, with the
//! `batch.kubernetes.io/cronjob-scheduled-timestamp` annotation), which
//! finished Jobs the history limits remove, and the checks kube-apiserver
//! makes of `schedule` and `timeZone`.

use super::cron::{self, Schedule};
use super::{stamp, time};
use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use serde_json::{Value, json};
use std::time::Duration;

/// The annotation with the time a CronJob's Job was scheduled for.
pub const SCHEDULED_TIMESTAMP: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";

/// Added to each wait for the next schedule (`nextScheduleDelta`).
pub const NEXT_SCHEDULE_DELTA: Duration = Duration::from_millis(100);

/// The CronJob's `timeZone`, UTC without one; the error is Go's
/// `LoadLocation` message.
pub fn zone(cj: &Value) -> Result<Tz, String> {
    match cj["spec"]["timeZone"].as_str() {
        None => Ok(Tz::UTC),
        Some(name) => name
            .parse()
            .map_err(|_| format!("unknown time zone {name}")),
    }
}

/// The schedule text as upstream's `formatSchedule` hands it to the
/// parser, and whether it carries `TZ`/`CRON_TZ` beside a `timeZone`
/// (upstream's `UnsupportedSchedule` warning event).
pub fn format_schedule(cj: &Value) -> (String, bool) {
    let schedule = cj["spec"]["schedule"].as_str().unwrap_or_default();
    match cj["spec"]["timeZone"].as_str() {
        Some(_) if schedule.contains("TZ") => (schedule.to_string(), true),
        Some(tz) => (format!("TZ={tz} {schedule}"), false),
        None => (schedule.to_string(), false),
    }
}

/// The parsed schedule.
pub fn schedule(cj: &Value) -> Result<Schedule, String> {
    cron::parse(&format_schedule(cj).0, Tz::UTC)
}

/// How many schedule times were missed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missed {
    None,
    Few,
    /// More than 100 (upstream's `TooManyMissedTimes` warning).
    Many,
}

fn creation(cj: &Value) -> DateTime<Utc> {
    cj["metadata"]["creationTimestamp"]
        .as_str()
        .and_then(time)
        .unwrap_or_default()
}

fn last_schedule(cj: &Value) -> Option<DateTime<Utc>> {
    cj["status"]["lastScheduleTime"].as_str().and_then(time)
}

/// Upstream's `mostRecentScheduleTime`: the time counted from (the last
/// schedule time or the creation, moved up to `now - startingDeadlineSeconds`
/// when `with_deadline`), the most recent schedule time not after `now`
/// (`None` when the next one is still to come), and how many were missed.
/// An error when the schedule never fires twice (`0 0 31 2 *`).
pub fn most_recent(
    cj: &Value,
    now: DateTime<Utc>,
    sched: &Schedule,
    with_deadline: bool,
) -> (DateTime<Utc>, Option<DateTime<Utc>>, Missed, Option<String>) {
    let mut earliest = last_schedule(cj).unwrap_or_else(|| creation(cj));
    if with_deadline && let Some(secs) = cj["spec"]["startingDeadlineSeconds"].as_i64() {
        let deadline = now - chrono::Duration::seconds(secs);
        if deadline > earliest {
            earliest = deadline;
        }
    }
    let never = || {
        (
            earliest,
            None,
            Missed::None,
            Some("time difference between two schedules is less than 1 second".to_string()),
        )
    };
    let Some(t1) = sched.next(earliest) else {
        return never();
    };
    if now < t1 {
        return (earliest, None, Missed::None, None);
    }
    let Some(t2) = sched.next(t1) else {
        return never();
    };
    if now < t2 {
        return (earliest, Some(t1), Missed::None, None);
    }
    let between = (t2 - t1).num_milliseconds().saturating_add(500) / 1000;
    if between < 1 {
        return never();
    }
    let elapsed = (now - t1).num_seconds();
    let missed = elapsed / between + 1;
    // Start one interval before the estimate and walk the schedule, so
    // irregular schedules (`30 6-16/4 * * 1-5`) land on a real time.
    let mut most_recent = None;
    let start = t1 + chrono::Duration::seconds((missed - 2) * between);
    let mut t = sched.next(start);
    while let Some(at) = t.filter(|at| *at <= now) {
        most_recent = Some(at);
        t = sched.next(at);
    }
    let how = if missed > 100 {
        Missed::Many
    } else if missed > 0 {
        Missed::Few
    } else {
        Missed::None
    };
    (earliest, most_recent, how, None)
}

/// How long until the next schedule time, plus [`NEXT_SCHEDULE_DELTA`]
/// (`nextScheduleTimeDuration`).
pub fn next_delay(cj: &Value, now: DateTime<Utc>, sched: &Schedule) -> Duration {
    let (earliest, recent, missed, err) = most_recent(cj, now, sched, false);
    let from = match (err, recent) {
        (Some(_), _) => now,
        (None, Some(t)) => t,
        (None, None) if missed == Missed::None => earliest,
        (None, None) => now,
    };
    match sched.next(from) {
        Some(next) => (next - now).to_std().unwrap_or_default() + NEXT_SCHEDULE_DELTA,
        // Never again: look once a day in case the spec changes.
        None => Duration::from_secs(24 * 3600),
    }
}

/// The schedule time to start a Job for now, if any (`nextScheduleTime`),
/// with how many were missed and the error of a schedule that never fires.
pub fn next_time(
    cj: &Value,
    now: DateTime<Utc>,
    sched: &Schedule,
) -> (Option<DateTime<Utc>>, Missed, Option<String>) {
    let (_, recent, missed, err) = most_recent(cj, now, sched, true);
    match recent {
        Some(t) if t <= now => (Some(t), missed, err),
        _ => (None, missed, err),
    }
}

/// Whether `scheduled` is past `startingDeadlineSeconds`.
pub fn too_late(cj: &Value, scheduled: DateTime<Utc>, now: DateTime<Utc>) -> bool {
    cj["spec"]["startingDeadlineSeconds"]
        .as_i64()
        .is_some_and(|secs| scheduled + chrono::Duration::seconds(secs) < now)
}

/// The name of the Job for `scheduled`: `<cronjob>-<minutes since epoch>`.
pub fn job_name(cj: &Value, scheduled: DateTime<Utc>) -> String {
    format!(
        "{}-{}",
        cj["metadata"]["name"].as_str().unwrap_or_default(),
        scheduled.timestamp().div_euclid(60)
    )
}

/// The Job for `scheduled` (`getJobFromTemplate2`): the template's labels,
/// annotations and spec, the scheduled time (in the CronJob's zone, RFC
/// 3339) as an annotation, the CronJob as controlling owner.
pub fn job_from_template(cj: &Value, scheduled: DateTime<Utc>) -> Value {
    let template = &cj["spec"]["jobTemplate"];
    let mut metadata = json!({
        "name": job_name(cj, scheduled),
        "namespace": cj["metadata"]["namespace"],
        "ownerReferences": [{
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "name": cj["metadata"]["name"],
            "uid": cj["metadata"]["uid"],
            "controller": true,
            "blockOwnerDeletion": true,
        }],
    });
    if let Some(l) = template["metadata"]["labels"].as_object() {
        metadata["labels"] = Value::Object(l.clone());
    }
    let mut annotations = template["metadata"]["annotations"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let zone = zone(cj).unwrap_or(Tz::UTC);
    annotations.insert(
        SCHEDULED_TIMESTAMP.into(),
        json!(
            scheduled
                .with_timezone(&zone)
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        ),
    );
    metadata["annotations"] = Value::Object(annotations);
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": template["spec"],
    })
}

/// Of finished Jobs, the ones beyond `limit`, oldest first by
/// `status.startTime` (then name; without a start time last), as
/// `removeOldestJobs` deletes them. Returns positions into `jobs`.
pub fn beyond_history(jobs: &[&Value], limit: usize) -> Vec<usize> {
    if jobs.len() <= limit {
        return Vec::new();
    }
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by(|&a, &b| {
        let start = |i: usize| jobs[i]["status"]["startTime"].as_str().and_then(time);
        let name = |i: usize| jobs[i]["metadata"]["name"].as_str().unwrap_or_default();
        match (start(a), start(b)) {
            (Some(x), Some(y)) => x.cmp(&y).then_with(|| name(a).cmp(name(b))),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => name(a).cmp(name(b)),
        }
    });
    order.truncate(jobs.len() - limit);
    order
}

/// `lastScheduleTime` as written.
pub fn schedule_stamp(t: DateTime<Utc>) -> String {
    stamp(t)
}

/// kube-apiserver's checks of `spec.schedule` and `spec.timeZone`
/// (`validateScheduleFormat`, `validateTimeZone`): `(field, message)`.
pub fn validate(spec: &Value) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    let schedule = spec["schedule"].as_str();
    let tz = spec["timeZone"].as_str();
    if let Some(tz) = tz {
        let bad_part = tz.split('/').any(|p| {
            p == "."
                || p == ".."
                || p.starts_with('-')
                || p.is_empty()
                || p.len() > 14
                || !p
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '+'))
        });
        if tz.is_empty() {
            out.push((
                "spec.timeZone",
                "timeZone must be nil or non-empty string".into(),
            ));
        } else if bad_part {
            out.push(("spec.timeZone", format!("unknown time zone {tz}")));
        } else if tz.eq_ignore_ascii_case("local") {
            out.push((
                "spec.timeZone",
                "timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones".into(),
            ));
        } else if tz.parse::<Tz>().is_err() {
            out.push(("spec.timeZone", format!("unknown time zone {tz}")));
        }
    }
    match schedule {
        None | Some("") => out.push(("spec.schedule", String::new())),
        Some(s) => {
            if s.contains("TZ") {
                let msg = if tz.is_some() {
                    "cannot use both timeZone field and TZ or CRON_TZ in schedule"
                } else {
                    "cannot use TZ or CRON_TZ in schedule, use timeZone field instead"
                };
                out.push(("spec.schedule", msg.into()));
            } else if let Err(e) = cron::parse(s, Tz::UTC) {
                out.push(("spec.schedule", e));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        time(s).unwrap()
    }

    fn cj(schedule: &str, created: &str, last: Option<&str>, deadline: Option<i64>) -> Value {
        json!({
            "metadata": {"name": "hello", "namespace": "ns", "uid": "u", "creationTimestamp": created},
            "spec": {"schedule": schedule, "startingDeadlineSeconds": deadline},
            "status": {"lastScheduleTime": last},
        })
    }

    #[test]
    fn most_recent_schedule_times() {
        // upstream's TestMostRecentScheduleTime, hourly at :00.
        let s = |c: &Value| schedule(c).unwrap();
        // Created at 10:30, now 10:59: nothing yet.
        let c = cj("0 * * * *", "2016-05-19T10:30:00Z", None, None);
        let (_, t, m, e) = most_recent(&c, at("2016-05-19T10:59:00Z"), &s(&c), false);
        assert_eq!((t, m, e), (None, Missed::None, None));
        // Now 11:01: 11:00 is due.
        let (_, t, m, _) = most_recent(&c, at("2016-05-19T11:01:00Z"), &s(&c), false);
        assert_eq!((t, m), (Some(at("2016-05-19T11:00:00Z")), Missed::None));
        // Last scheduled 11:00, now 14:05: three missed, most recent 14:00.
        let c = cj(
            "0 * * * *",
            "2016-05-19T10:30:00Z",
            Some("2016-05-19T11:00:00Z"),
            None,
        );
        let (_, t, m, _) = most_recent(&c, at("2016-05-19T14:05:00Z"), &s(&c), false);
        assert_eq!((t, m), (Some(at("2016-05-19T14:00:00Z")), Missed::Few));
        // Hundreds missed.
        let (_, t, m, _) = most_recent(&c, at("2016-06-30T14:05:00Z"), &s(&c), false);
        assert_eq!((t, m), (Some(at("2016-06-30T14:00:00Z")), Missed::Many));
        // A deadline moves the earliest time up: the 12:00 slot is past it.
        let c = cj(
            "0 * * * *",
            "2016-05-19T10:30:00Z",
            Some("2016-05-19T11:00:00Z"),
            Some(600),
        );
        let (earliest, t, _, _) = most_recent(&c, at("2016-05-19T14:05:00Z"), &s(&c), true);
        assert_eq!(earliest, at("2016-05-19T13:55:00Z"));
        assert_eq!(t, Some(at("2016-05-19T14:00:00Z")));
        // An irregular schedule lands on a real time.
        let c = cj("30 6-16/4 * * 1-5", "2024-01-01T00:00:00Z", None, None);
        let (_, t, _, _) = most_recent(&c, at("2024-01-03T12:00:00Z"), &s(&c), false);
        assert_eq!(t, Some(at("2024-01-03T10:30:00Z")));
        // Never twice.
        let c = cj("0 0 31 2 *", "2024-01-01T00:00:00Z", None, None);
        let (_, t, _, e) = most_recent(&c, at("2024-03-01T00:00:00Z"), &s(&c), false);
        assert!(t.is_none() && e.is_some());
    }

    #[test]
    fn next_delays_and_deadlines() {
        let c = cj(
            "*/5 * * * *",
            "2024-01-01T00:00:00Z",
            Some("2024-01-01T00:05:00Z"),
            Some(30),
        );
        let s = schedule(&c).unwrap();
        assert_eq!(
            next_delay(&c, at("2024-01-01T00:07:00Z"), &s),
            Duration::from_secs(180) + NEXT_SCHEDULE_DELTA
        );
        assert_eq!(next_time(&c, at("2024-01-01T00:07:00Z"), &s).0, None);
        assert_eq!(
            next_time(&c, at("2024-01-01T00:10:10Z"), &s).0,
            Some(at("2024-01-01T00:10:00Z"))
        );
        assert!(!too_late(
            &c,
            at("2024-01-01T00:10:00Z"),
            at("2024-01-01T00:10:20Z")
        ));
        assert!(too_late(
            &c,
            at("2024-01-01T00:10:00Z"),
            at("2024-01-01T00:10:40Z")
        ));
    }

    #[test]
    fn jobs_from_templates() {
        let mut c = cj("0 9 * * *", "2024-01-01T00:00:00Z", None, None);
        c["spec"]["timeZone"] = json!("Asia/Tokyo");
        c["spec"]["jobTemplate"] =
            json!({"metadata": {"labels": {"a": "b"}}, "spec": {"template": {}}});
        let (text, warn) = format_schedule(&c);
        assert_eq!((text.as_str(), warn), ("TZ=Asia/Tokyo 0 9 * * *", false));
        let t = schedule(&c)
            .unwrap()
            .next(at("2024-01-01T12:00:00Z"))
            .unwrap();
        assert_eq!(t, at("2024-01-02T00:00:00Z"));
        let job = job_from_template(&c, t);
        assert_eq!(
            job["metadata"]["name"],
            format!("hello-{}", t.timestamp() / 60)
        );
        assert_eq!(
            job["metadata"]["annotations"][SCHEDULED_TIMESTAMP],
            "2024-01-02T09:00:00+09:00"
        );
        assert_eq!(job["metadata"]["labels"]["a"], "b");
        assert_eq!(job["metadata"]["ownerReferences"][0]["kind"], "CronJob");
    }

    #[test]
    fn history() {
        let j = |name: &str, start: Option<&str>| json!({"metadata": {"name": name}, "status": {"startTime": start}});
        let jobs = [
            j("c", Some("2024-01-01T00:03:00Z")),
            j("a", Some("2024-01-01T00:01:00Z")),
            j("n", None),
            j("b", Some("2024-01-01T00:02:00Z")),
        ];
        let refs: Vec<&Value> = jobs.iter().collect();
        assert_eq!(beyond_history(&refs, 2), vec![1, 3]);
        assert!(beyond_history(&refs, 4).is_empty());
        assert_eq!(beyond_history(&refs, 0).len(), 4);
    }

    #[test]
    fn validation() {
        let v = |s: Value| validate(&s).into_iter().map(|(_, m)| m).collect::<Vec<_>>();
        assert!(v(json!({"schedule": "*/1 * * * *"})).is_empty());
        assert!(v(json!({"schedule": "0 9 * * *", "timeZone": "Europe/Paris"})).is_empty());
        assert_eq!(
            v(json!({"schedule": "0 9 * * *", "timeZone": "Mars/Olympus"})),
            vec!["unknown time zone Mars/Olympus"]
        );
        assert_eq!(
            v(json!({"schedule": "0 9 * * *", "timeZone": "../etc"})),
            vec!["unknown time zone ../etc"]
        );
        assert_eq!(
            v(json!({"schedule": "TZ=UTC 0 9 * * *", "timeZone": "UTC"})),
            vec!["cannot use both timeZone field and TZ or CRON_TZ in schedule"]
        );
        assert_eq!(
            v(json!({"schedule": "61 * * * *"})),
            vec!["end of range (61) above maximum (59): 61"]
        );
    }
}
