//! Nexmark timestamps: UTC `YYYY-MM-DD HH:MM:SS.mmm`, to and from epoch milliseconds.

/// Days since 1970-01-01 of a civil date (proleptic Gregorian; Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Parses `YYYY-MM-DD HH:MM:SS[.mmm]` (UTC) into epoch milliseconds.
pub fn parse(text: &str) -> Option<i64> {
    let bytes = text.as_bytes();
    if bytes.len() < 19
        || bytes[4] != b'-'
        || bytes[7] != b'-'
        || bytes[10] != b' '
        || bytes[13] != b':'
        || bytes[16] != b':'
    {
        return None;
    }
    let number = |from: usize, to: usize| -> Option<i64> {
        let part = text.get(from..to)?;
        if !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        part.parse().ok()
    };
    let (year, month, day) = (number(0, 4)?, number(5, 7)?, number(8, 10)?);
    let (hour, minute, second) = (number(11, 13)?, number(14, 16)?, number(17, 19)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let millis = match &text[19..] {
        "" => 0,
        fraction if fraction.starts_with('.') && (2..=4).contains(&fraction.len()) => {
            let digits = &fraction[1..];
            let value = number(20, 20 + digits.len())?;
            value * 10i64.pow(3 - digits.len() as u32)
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    Some(((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + millis)
}

/// Formats epoch milliseconds as `YYYY-MM-DD HH:MM:SS.mmm` (UTC).
pub fn format(millis: i64) -> String {
    let days = millis.div_euclid(86_400_000);
    let in_day = millis.rem_euclid(86_400_000);
    let (year, month, day) = streamwork::core::time::civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}.{:03}",
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1000 % 60,
        in_day % 1000
    )
}

/// Milliseconds in a day.
pub const DAY: i64 = 86_400_000;

/// The UTC day of epoch milliseconds, as days since 1970-01-01.
#[inline]
pub fn day_number(millis: i64) -> i64 {
    millis.div_euclid(DAY)
}

/// The minute of the UTC day of epoch milliseconds, 0 to 1439.
#[inline]
pub fn minute_of_day(millis: i64) -> u16 {
    (millis.rem_euclid(DAY) / 60_000) as u16
}

/// The hour of the UTC day of epoch milliseconds, 0 to 23.
#[inline]
pub fn hour_of_day(millis: i64) -> u8 {
    (millis.rem_euclid(DAY) / 3_600_000) as u8
}

/// A day number as `YYYY-MM-DD`.
pub fn format_day(day: i64) -> String {
    let (year, month, day) = streamwork::core::time::civil_from_days(day);
    format!("{year:04}-{month:02}-{day:02}")
}

/// A minute of the day as `HH:MM`.
pub fn format_minute(minute: u16) -> String {
    format!("{:02}:{:02}", minute / 60, minute % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        for text in [
            "1970-01-01 00:00:00.000",
            "2024-01-01 00:00:00.123",
            "2000-02-29 23:59:59.999",
            "1969-12-31 23:59:59.500",
        ] {
            assert_eq!(format(parse(text).unwrap()), text);
        }
        assert_eq!(parse("1970-01-01 00:00:01.5"), Some(1500));
        assert_eq!(parse("2024-01-01 00:00:00.123"), Some(1_704_067_200_123));
    }

    #[test]
    fn calendar_fields() {
        let t = parse("2024-03-05 19:07:59.999").unwrap();
        assert_eq!(format_day(day_number(t)), "2024-03-05");
        assert_eq!(format_minute(minute_of_day(t)), "19:07");
        assert_eq!(hour_of_day(t), 19);
        let before = parse("1969-12-31 23:59:59.999").unwrap();
        assert_eq!(format_day(day_number(before)), "1969-12-31");
        assert_eq!(format_minute(minute_of_day(before)), "23:59");
    }

    #[test]
    fn rejects_garbage() {
        for text in [
            "",
            "2024-13-01 00:00:00.000",
            "2024-01-01T00:00:00.000",
            "2024-01-01 00:00:00,000",
            "abcd-01-01 00:00:00.000",
        ] {
            assert_eq!(parse(text), None, "{text}");
        }
    }
}
