//! Cron schedules as upstream's CronJob controller reads them: robfig/cron
//! v3's `ParseStandard` (five fields `minute hour day-of-month month
//! day-of-week`, the `@yearly` … `@hourly` and `@every <duration>`
//! descriptors, a `TZ=`/`CRON_TZ=` prefix) and its `Next`, walked in a
//! time zone from the IANA database (chrono-tz).
//!
//! Written here rather than taken from a cron crate: the maintained ones
//! (`croner`, `cron`) accept a wider dialect (seconds, years, `L`, `W`,
//! `#`) than kube-apiserver does and differ on the day rule (robfig ANDs
//! day-of-month and day-of-week when either starts with `*`), so schedules
//! upstream refuses would pass and some would fire on other days.

use chrono::{DateTime, Datelike, Duration, NaiveDate, Offset, TimeZone, Timelike, Utc};
use chrono_tz::Tz;

/// Set on a field written as `*` or `?` (robfig's `starBit`).
const STAR: u64 = 1 << 63;

/// A parsed schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Schedule {
    /// Five fields as bit sets, walked in `zone`.
    Spec {
        minute: u64,
        hour: u64,
        dom: u64,
        month: u64,
        dow: u64,
        zone: Tz,
    },
    /// `@every <duration>`: a fixed delay (whole seconds, at least one).
    Every(Duration),
}

struct Bounds {
    min: u32,
    max: u32,
    names: &'static [(&'static str, u32)],
}

const MINUTES: Bounds = Bounds {
    min: 0,
    max: 59,
    names: &[],
};
const HOURS: Bounds = Bounds {
    min: 0,
    max: 23,
    names: &[],
};
const DOM: Bounds = Bounds {
    min: 1,
    max: 31,
    names: &[],
};
const MONTHS: Bounds = Bounds {
    min: 1,
    max: 12,
    names: &[
        ("jan", 1),
        ("feb", 2),
        ("mar", 3),
        ("apr", 4),
        ("may", 5),
        ("jun", 6),
        ("jul", 7),
        ("aug", 8),
        ("sep", 9),
        ("oct", 10),
        ("nov", 11),
        ("dec", 12),
    ],
};
const DOW: Bounds = Bounds {
    min: 0,
    max: 6,
    names: &[
        ("sun", 0),
        ("mon", 1),
        ("tue", 2),
        ("wed", 3),
        ("thu", 4),
        ("fri", 5),
        ("sat", 6),
    ],
};

fn parse_int(s: &str) -> Result<u32, String> {
    let n: i64 = s.parse().map_err(|_| {
        format!("failed to parse int from {s}: strconv.Atoi: parsing {s:?}: invalid syntax")
    })?;
    if n < 0 {
        return Err(format!("negative number ({n}) not allowed: {s}"));
    }
    // Bounds are checked by the caller; anything this large is out of them.
    Ok(u32::try_from(n).unwrap_or(u32::MAX))
}

fn parse_value(s: &str, b: &Bounds) -> Result<u32, String> {
    let lower = s.to_ascii_lowercase();
    match b.names.iter().find(|(n, _)| *n == lower) {
        Some((_, v)) => Ok(*v),
        None => parse_int(s),
    }
}

/// One comma-separated part: `*`, `a`, `a-b`, each with an optional
/// `/step` (robfig's `getRange`).
fn range(expr: &str, b: &Bounds) -> Result<u64, String> {
    let range_and_step: Vec<&str> = expr.split('/').collect();
    let low_high: Vec<&str> = range_and_step[0].split('-').collect();
    let single = low_high.len() == 1;
    let (start, mut end, mut extra) = if low_high[0] == "*" || low_high[0] == "?" {
        (b.min, b.max, STAR)
    } else {
        let start = parse_value(low_high[0], b)?;
        let end = match low_high.len() {
            1 => start,
            2 => parse_value(low_high[1], b)?,
            _ => return Err(format!("too many hyphens: {expr}")),
        };
        (start, end, 0)
    };
    let step = match range_and_step.len() {
        1 => 1,
        2 => {
            let step = parse_int(range_and_step[1])?;
            // `N/step` means `N-max/step`.
            if single {
                end = b.max;
            }
            if step > 1 {
                extra = 0;
            }
            step
        }
        _ => return Err(format!("too many slashes: {expr}")),
    };
    if start < b.min {
        return Err(format!(
            "beginning of range ({start}) below minimum ({}): {expr}",
            b.min
        ));
    }
    if end > b.max {
        return Err(format!(
            "end of range ({end}) above maximum ({}): {expr}",
            b.max
        ));
    }
    if start > end {
        return Err(format!(
            "beginning of range ({start}) beyond end of range ({end}): {expr}"
        ));
    }
    if step == 0 {
        return Err(format!("step of range should be a positive number: {expr}"));
    }
    let mut bits = 0u64;
    let mut i = start;
    while i <= end {
        bits |= 1 << i;
        i += step;
    }
    Ok(bits | extra)
}

fn field(expr: &str, b: &Bounds) -> Result<u64, String> {
    expr.split(',')
        .try_fold(0u64, |bits, part| Ok(bits | range(part, b)?))
}

/// Go's `time.ParseDuration`, for `@every` (units ns … h, decimals).
fn go_duration(s: &str) -> Result<Duration, String> {
    let bad = || format!("time: invalid duration {s:?}");
    let (neg, mut rest) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    if rest == "0" {
        return Ok(Duration::zero());
    }
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("time: missing unit in duration {s:?}"))?;
        let n: f64 = rest[..num_len].parse().map_err(|_| bad())?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let nanos = match unit {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            "" => return Err(format!("time: missing unit in duration {s:?}")),
            _ => return Err(format!("time: unknown unit {unit:?} in duration {s:?}")),
        };
        total += n * nanos;
    }
    let total = if neg { -total } else { total };
    Ok(Duration::nanoseconds(total as i64))
}

/// Parses a schedule as `cron.ParseStandard` does; `zone` is where a
/// schedule without a `TZ=` prefix is walked (the CronJob's `timeZone`,
/// else UTC). The error is robfig's message.
pub fn parse(spec: &str, zone: Tz) -> Result<Schedule, String> {
    if spec.is_empty() {
        return Err("empty spec string".into());
    }
    let mut spec = spec;
    let mut zone = zone;
    if spec.starts_with("TZ=") || spec.starts_with("CRON_TZ=") {
        let eq = spec.find('=').unwrap_or(0);
        let space = spec.find(' ').unwrap_or(spec.len());
        let name = &spec[eq + 1..space];
        zone = name
            .parse()
            .map_err(|_| format!("provided bad location {name}: unknown time zone {name}"))?;
        spec = spec[space..].trim();
    }
    if let Some(d) = spec.strip_prefix('@') {
        let fields = |f: &str| parse(f, zone);
        return match d {
            "yearly" | "annually" => fields("0 0 1 1 *"),
            "monthly" => fields("0 0 1 * *"),
            "weekly" => fields("0 0 * * 0"),
            "daily" | "midnight" => fields("0 0 * * *"),
            "hourly" => fields("0 * * * *"),
            _ => match d.strip_prefix("every ") {
                Some(dur) => {
                    let d = go_duration(dur)
                        .map_err(|e| format!("failed to parse duration {spec}: {e}"))?;
                    // Whole seconds, at least one (robfig's `Every`).
                    let secs = d.num_seconds().max(1);
                    Ok(Schedule::Every(Duration::seconds(secs)))
                }
                None => Err(format!("unrecognized descriptor: {spec}")),
            },
        };
    }
    let fields: Vec<&str> = spec.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(format!(
            "expected exactly 5 fields, found {}: [{}]",
            fields.len(),
            fields.join(" ")
        ));
    }
    Ok(Schedule::Spec {
        minute: field(fields[0], &MINUTES)?,
        hour: field(fields[1], &HOURS)?,
        dom: field(fields[2], &DOM)?,
        month: field(fields[3], &MONTHS)?,
        dow: field(fields[4], &DOW)?,
        zone,
    })
}

fn has(bits: u64, v: u32) -> bool {
    bits & (1 << v) != 0
}

/// robfig's `dayMatches`: both must match when either field is a star,
/// else either.
fn day_matches(dom: u64, dow: u64, t: &DateTime<Tz>) -> bool {
    let d = has(dom, t.day());
    let w = has(dow, t.weekday().num_days_from_sunday());
    if dom & STAR != 0 || dow & STAR != 0 {
        d && w
    } else {
        d || w
    }
}

/// A local wall time in `zone`; a time in a gap (spring forward) lands
/// after the gap, as Go's `time.Date` does.
fn local(zone: Tz, date: NaiveDate, hour: u32, minute: u32) -> DateTime<Tz> {
    let naive = date.and_hms_opt(hour, minute, 0).unwrap_or_default();
    match zone.from_local_datetime(&naive).earliest() {
        Some(t) => t,
        None => {
            // In a gap: read it with the offset before the transition.
            let before = zone
                .from_local_datetime(&(naive - Duration::hours(3)))
                .earliest()
                .map(|t| t.offset().fix())
                .unwrap_or_else(|| chrono::FixedOffset::east_opt(0).expect("zero offset"));
            let utc = naive - Duration::seconds(i64::from(before.local_minus_utc()));
            zone.from_utc_datetime(&utc)
        }
    }
}

impl Schedule {
    /// The first activation strictly after `t` (robfig's `Next`), `None`
    /// when none comes within five years (`0 0 31 2 *`).
    pub fn next(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let (minute, hour, dom, month, dow, zone) = match self {
            Schedule::Every(d) => {
                let whole = t - Duration::nanoseconds(i64::from(t.nanosecond()));
                return Some(whole + *d);
            }
            Schedule::Spec {
                minute,
                hour,
                dom,
                month,
                dow,
                zone,
            } => (*minute, *hour, *dom, *month, *dow, *zone),
        };
        // The upcoming second, in the schedule's zone.
        let whole = t - Duration::nanoseconds(i64::from(t.nanosecond())) + Duration::seconds(1);
        let mut t = whole.with_timezone(&zone);
        let mut added = false;
        let year_limit = t.year() + 5;
        'wrap: loop {
            if t.year() > year_limit {
                return None;
            }
            while !has(month, t.month()) {
                if !added {
                    added = true;
                    t = local(zone, t.date_naive().with_day(1)?, 0, 0);
                }
                let (y, m) = if t.month() == 12 {
                    (t.year() + 1, 1)
                } else {
                    (t.year(), t.month() + 1)
                };
                t = local(zone, NaiveDate::from_ymd_opt(y, m, 1)?, 0, 0);
                if t.month() == 1 {
                    continue 'wrap;
                }
            }
            while !day_matches(dom, dow, &t) {
                if !added {
                    added = true;
                    t = local(zone, t.date_naive(), 0, 0);
                }
                t = local(zone, t.date_naive().succ_opt()?, 0, 0);
                if t.day() == 1 {
                    continue 'wrap;
                }
            }
            while !has(hour, t.hour()) {
                if !added {
                    added = true;
                    t = local(zone, t.date_naive(), t.hour(), 0);
                }
                t += Duration::hours(1);
                if t.hour() == 0 {
                    continue 'wrap;
                }
            }
            while !has(minute, t.minute()) {
                if !added {
                    added = true;
                    t -= Duration::seconds(i64::from(t.second()));
                }
                t += Duration::minutes(1);
                if t.minute() == 0 {
                    continue 'wrap;
                }
            }
            // Seconds: the standard parser's field is `0`, so the next
            // whole minute, with every field checked again.
            if t.second() != 0 {
                t += Duration::seconds(i64::from(60 - t.second()));
                continue 'wrap;
            }
            return Some(t.with_timezone(&Utc));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn next(spec: &str, from: &str) -> Option<String> {
        parse(spec, Tz::UTC)
            .unwrap()
            .next(at(from))
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
    }

    #[test]
    fn next_times() {
        // robfig's TestNext cases that a five-field schedule can express.
        let cases = [
            ("* * * * *", "2012-07-09T14:45:00Z", "2012-07-09T14:46:00Z"),
            (
                "*/15 * * * *",
                "2012-07-09T14:45:00Z",
                "2012-07-09T15:00:00Z",
            ),
            (
                "*/15 * * * *",
                "2012-07-09T14:59:59Z",
                "2012-07-09T15:00:00Z",
            ),
            ("0 * * * *", "2012-07-09T14:59:59Z", "2012-07-09T15:00:00Z"),
            ("0 0 * * *", "2012-07-09T23:59:59Z", "2012-07-10T00:00:00Z"),
            ("0 0 1 * *", "2012-07-09T00:00:00Z", "2012-08-01T00:00:00Z"),
            ("0 0 * 7 *", "2012-07-09T23:59:59Z", "2012-07-10T00:00:00Z"),
            (
                "0 0 * Jul *",
                "2012-07-31T23:59:59Z",
                "2013-07-01T00:00:00Z",
            ),
            // Leap year.
            (
                "0 0 29 Feb *",
                "2012-07-31T23:59:59Z",
                "2016-02-29T00:00:00Z",
            ),
            // Day of week: Sunday.
            ("0 0 * * 0", "2012-07-09T00:00:00Z", "2012-07-15T00:00:00Z"),
            (
                "0 0 * * sun",
                "2012-07-09T00:00:00Z",
                "2012-07-15T00:00:00Z",
            ),
            // Both restricted: either matches (Friday the 13th comes first).
            ("0 0 15 * 5", "2012-07-09T00:00:00Z", "2012-07-13T00:00:00Z"),
            // A stepped day-of-month is not a star: OR with the weekday.
            (
                "0 0 */10 * 0",
                "2012-07-09T00:00:00Z",
                "2012-07-11T00:00:00Z",
            ),
            ("@hourly", "2012-07-09T14:45:00Z", "2012-07-09T15:00:00Z"),
            ("@weekly", "2012-07-09T14:45:00Z", "2012-07-15T00:00:00Z"),
            (
                "@every 90s",
                "2012-07-09T14:45:00.5Z",
                "2012-07-09T14:46:30Z",
            ),
        ];
        for (spec, from, want) in cases {
            assert_eq!(
                next(spec, from).as_deref(),
                Some(want),
                "{spec} after {from}"
            );
        }
        // Never.
        assert_eq!(next("0 0 30 Feb *", "2012-07-09T00:00:00Z"), None);
    }

    #[test]
    fn time_zones() {
        let ny: Tz = "America/New_York".parse().unwrap();
        let s = parse("0 9 * * *", ny).unwrap();
        // 09:00 EST is 14:00 UTC in January, EDT's 13:00 UTC in July.
        assert_eq!(
            s.next(at("2024-01-10T12:00:00Z")),
            Some(at("2024-01-10T14:00:00Z"))
        );
        assert_eq!(
            s.next(at("2024-07-10T12:00:00Z")),
            Some(at("2024-07-10T13:00:00Z"))
        );
        // A prefix overrides the zone given.
        let s = parse("TZ=Asia/Tokyo 0 9 * * *", Tz::UTC).unwrap();
        assert_eq!(
            s.next(at("2024-01-10T12:00:00Z")),
            Some(at("2024-01-11T00:00:00Z"))
        );
        // Spring forward: 02:30 does not exist on 2024-03-10 in New York;
        // as robfig's walk (its "2012-03-11 … 0 30 2 11 Mar ?" case), that
        // day has no run and the next is 02:30 EDT the day after.
        let s = parse("30 2 * * *", ny).unwrap();
        assert_eq!(
            s.next(at("2024-03-10T05:00:00Z")),
            Some(at("2024-03-11T06:30:00Z"))
        );
        // Fall back: 01:30 happens twice on 2024-11-03; the first counts.
        let s = parse("30 1 * * *", ny).unwrap();
        assert_eq!(
            s.next(at("2024-11-03T04:00:00Z")),
            Some(at("2024-11-03T05:30:00Z"))
        );
        assert!(parse("TZ=Nowhere/City * * * * *", Tz::UTC).is_err());
    }

    #[test]
    fn errors() {
        let cases = [
            ("", "empty spec string"),
            ("* * * *", "expected exactly 5 fields, found 4: [* * * *]"),
            ("60 * * * *", "end of range (60) above maximum (59): 60"),
            ("* * 0 * *", "beginning of range (0) below minimum (1): 0"),
            ("* * * * 7", "end of range (7) above maximum (6): 7"),
            (
                "5-1 * * * *",
                "beginning of range (5) beyond end of range (1): 5-1",
            ),
            (
                "*/0 * * * *",
                "step of range should be a positive number: */0",
            ),
            ("1-2-3 * * * *", "too many hyphens: 1-2-3"),
            (
                "a * * * *",
                "failed to parse int from a: strconv.Atoi: parsing \"a\": invalid syntax",
            ),
            ("@fortnightly", "unrecognized descriptor: @fortnightly"),
        ];
        for (spec, want) in cases {
            assert_eq!(parse(spec, Tz::UTC).unwrap_err(), want, "{spec:?}");
        }
    }
}
