//! Reading PEM certificates, and when they expire.

use std::path::Path;

use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

/// Every certificate in a PEM file; an error names the file.
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("cannot read certificates from {}: {e}", path.display()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("bad certificate in {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("no certificate in {}", path.display()));
    }
    Ok(certs)
}

/// When the first certificate of `path` expires (seconds since the Unix epoch), if readable.
pub fn expiry(path: &Path) -> Option<i64> {
    let first = load_certs(path).ok()?.into_iter().next()?;
    not_after(first.as_ref())
}

/// A certificate's notAfter (RFC 5280 4.1.2.5), in seconds since the Unix epoch.
///
/// Read by hand: it is the one field kroute needs from a certificate (for the expiry metric),
/// and an X.509 parser brought 14 crates (ASN.1 derive macros, a second `syn`) into every
/// build, a fifth of the first build's time. rustls verifies certificates itself; this only
/// reads the date, and anything it does not expect gives None.
fn not_after(der: &[u8]) -> Option<i64> {
    let (certificate, _) = der_item(der, SEQUENCE)?;
    let (mut tbs, _) = der_item(certificate, SEQUENCE)?;
    // version [0] EXPLICIT (absent in v1 certificates), serialNumber, signature, issuer.
    if tbs.first() == Some(&0xa0) {
        tbs = der_item(tbs, 0xa0)?.1;
    }
    for tag in [INTEGER, SEQUENCE, SEQUENCE] {
        tbs = der_item(tbs, tag)?.1;
    }
    let (validity, _) = der_item(tbs, SEQUENCE)?;
    let not_before_rest = der_item(validity, validity.first().copied()?)?.1;
    let tag = *not_before_rest.first()?;
    let (time, _) = der_item(not_before_rest, tag)?;
    match tag {
        UTC_TIME => der_time(time, true),
        GENERALIZED_TIME => der_time(time, false),
        _ => None,
    }
}

const INTEGER: u8 = 0x02;
const SEQUENCE: u8 = 0x30;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;

/// Splits one DER item with tag `tag` off `input`: (its contents, what follows it).
fn der_item(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (&first, rest) = input.split_first()?;
    if first != tag {
        return None;
    }
    let (&len, mut rest) = rest.split_first()?;
    let len = if len < 0x80 {
        usize::from(len)
    } else {
        let bytes = usize::from(len & 0x7f);
        if bytes == 0 || bytes > 4 || rest.len() < bytes {
            return None;
        }
        let (size, after) = rest.split_at(bytes);
        rest = after;
        size.iter().fold(0usize, |n, b| (n << 8) | usize::from(*b))
    };
    (rest.len() >= len).then(|| rest.split_at(len))
}

/// A DER time (always UTC, "Z"): UTCTime YYMMDDHHMMSSZ (years 1950-2049) or GeneralizedTime
/// YYYYMMDDHHMMSSZ; seconds since the Unix epoch.
fn der_time(text: &[u8], two_digit_year: bool) -> Option<i64> {
    let digits = text.strip_suffix(b"Z")?;
    if !digits.iter().all(u8::is_ascii_digit)
        || digits.len() != 12 + usize::from(!two_digit_year) * 2
    {
        return None;
    }
    let number = |at: usize, width: usize| {
        digits[at..at + width]
            .iter()
            .fold(0i64, |n, d| n * 10 + i64::from(d - b'0'))
    };
    let (year, at) = if two_digit_year {
        let yy = number(0, 2);
        (if yy >= 50 { 1900 + yy } else { 2000 + yy }, 2)
    } else {
        (number(0, 4), 4)
    };
    let (month, day) = (number(at, 2), number(at + 2, 2));
    let (hour, minute, second) = (number(at + 4, 2), number(at + 6, 2), number(at + 8, 2));
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    Some(days_from_civil(year, month, day) * 86_400 + hour * 3_600 + minute * 60 + second)
}

/// Days from 1970-01-01 to a proleptic Gregorian date (H. Hinnant's days_from_civil).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A certificate valid until `year`-03-04 05:06:07 UTC, made by rcgen.
    fn certificate_until(year: i32) -> Vec<u8> {
        let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
        params.not_after = rcgen::date_time_ymd(year, 3, 4)
            .replace_hour(5)
            .and_then(|t| t.replace_minute(6))
            .and_then(|t| t.replace_second(7))
            .unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn not_after_is_read_from_utc_and_generalized_times() {
        // 2030-03-04T05:06:07Z (UTCTime) and 2051-03-04T05:06:07Z (GeneralizedTime).
        assert_eq!(not_after(&certificate_until(2030)), Some(1_898_831_167));
        assert_eq!(not_after(&certificate_until(2051)), Some(2_561_519_167));
    }

    #[test]
    fn anything_unexpected_gives_none() {
        let der = certificate_until(2030);
        for cut in [0, 1, 2, 10, der.len() / 2, der.len() - 1] {
            // Truncated: the outer length no longer fits.
            assert_eq!(not_after(&der[..cut]), None, "cut at {cut}");
        }
        assert_eq!(not_after(b"not a certificate"), None);
        assert_eq!(der_time(b"300304050607", true), None, "no Z");
        assert_eq!(der_time(b"301304050607Z", true), None, "month 13");
        assert_eq!(der_time(b"3003040506a7Z", true), None);
    }

    #[test]
    fn days_are_counted_from_the_epoch() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(1969, 12, 31), -1);
    }
}
