//! Kubernetes quantities in canonical form, as `resource.Quantity` marshals them.
//!
//! The value is kept exactly in nano units (rounded up to a nano, as Kubernetes rounds). The
//! format follows the suffix written: binary (`Ki` … `Ei`), decimal SI (`n` … `E`, or none) or
//! decimal exponent (`e3`). Canonical decimal forms move factors of ten into a suffix whose
//! exponent is a multiple of three (`1000` → `1k`, `0.5` → `500m`); canonical binary forms use
//! the largest power of 1024 that divides the value exactly, and values below 1024 or not whole
//! are written as decimal SI (`0.5Ki` → `512`). A string that does not parse is kept as it is
//! (the apiserver refuses such a quantity for the types that carry one).

const NANO: i128 = 1_000_000_000;

#[derive(Clone, Copy, PartialEq)]
enum Format {
    BinarySi,
    DecimalSi,
    DecimalExponent,
}

/// The canonical form of `s`.
pub fn canonical(s: &str) -> String {
    let s = s.trim();
    match parse(s) {
        Some(_) if verbatim(s) => s.to_string(),
        Some((nanos, format)) => format_nanos(nanos, format),
        None => s.to_string(),
    }
}

/// Whether Kubernetes keeps the string as written: its parser caches the input when it looks
/// canonical (for decimal forms, a digit string without leading zeros or a trailing `000` at an
/// exponent that is a multiple of three; for binary forms, a whole number not divisible by 8),
/// and marshals the cached string back. That is how `1E3` or `01` survive unchanged.
fn verbatim(s: &str) -> bool {
    if s == "0" {
        return true;
    }
    let rest = s.strip_prefix(['-', '+']).unwrap_or(s);
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(end);
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    let whole = whole.trim_start_matches('0');
    let num = if whole.is_empty() { "0" } else { whole };
    let digits = num.len() + frac.len();
    let binary = |exp: i32| {
        let precision = 15 - num.len() as i32 - exp * 3 / 10 - 1;
        frac.is_empty() && precision >= 0 && num.parse::<i64>().is_ok_and(|v| v & 7 != 0)
    };
    let exp10 = match suffix {
        "Ki" => return binary(10),
        "Mi" => return binary(20),
        "Gi" => return binary(30),
        "Ti" => return binary(40),
        "Pi" => return binary(50),
        "Ei" => return binary(60),
        "n" => -9,
        "u" => -6,
        "m" => -3,
        "" => 0,
        "k" => 3,
        "M" => 6,
        "G" => 9,
        "T" => 12,
        "P" => 15,
        "E" => 18,
        other => match other
            .strip_prefix(['e', 'E'])
            .and_then(|e| e.parse::<i32>().ok())
        {
            Some(e) => e,
            None => return false,
        },
    };
    let scale = exp10 - frac.len() as i32;
    let shifted = format!("{num}{frac}");
    digits <= 18
        && scale >= -9
        && scale % 3 == 0
        && !shifted.ends_with("000")
        && !shifted.starts_with('0')
}

fn parse(s: &str) -> Option<(i128, Format)> {
    let (negative, rest) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(end);
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && frac.is_empty() || frac.contains('.') {
        return None;
    }
    let digits: i128 = format!("{whole}{frac}").parse().ok()?;
    let scale = i32::try_from(frac.len()).ok()?;
    let (format, base2, exp10) = match suffix {
        "Ki" => (Format::BinarySi, 10, 0),
        "Mi" => (Format::BinarySi, 20, 0),
        "Gi" => (Format::BinarySi, 30, 0),
        "Ti" => (Format::BinarySi, 40, 0),
        "Pi" => (Format::BinarySi, 50, 0),
        "Ei" => (Format::BinarySi, 60, 0),
        "n" => (Format::DecimalSi, 0, -9),
        "u" => (Format::DecimalSi, 0, -6),
        "m" => (Format::DecimalSi, 0, -3),
        "" => (Format::DecimalSi, 0, 0),
        "k" => (Format::DecimalSi, 0, 3),
        "M" => (Format::DecimalSi, 0, 6),
        "G" => (Format::DecimalSi, 0, 9),
        "T" => (Format::DecimalSi, 0, 12),
        "P" => (Format::DecimalSi, 0, 15),
        "E" => (Format::DecimalSi, 0, 18),
        other => {
            let exp = other.strip_prefix(['e', 'E'])?;
            (Format::DecimalExponent, 0, exp.parse::<i32>().ok()?)
        }
    };
    // value = digits × 2^base2 × 10^(exp10 - scale); in nanos: × 10^9.
    let mut numerator = digits.checked_mul(1i128.checked_shl(base2)?)?;
    let mut denominator: i128 = 1;
    let shift = exp10 - scale + 9;
    if shift >= 0 {
        numerator = numerator.checked_mul(10i128.checked_pow(shift.unsigned_abs())?)?;
    } else {
        denominator = 10i128.checked_pow(shift.unsigned_abs())?;
    }
    let mut nanos = numerator / denominator;
    if numerator % denominator != 0 {
        nanos += 1;
    }
    Some((if negative { -nanos } else { nanos }, format))
}

fn format_nanos(nanos: i128, mut format: Format) -> String {
    if nanos == 0 {
        return "0".to_string();
    }
    let sign = if nanos < 0 { "-" } else { "" };
    let magnitude = nanos.abs();
    if format == Format::BinarySi {
        if magnitude < 1024 * NANO || magnitude % NANO != 0 {
            format = Format::DecimalSi;
        } else {
            let mut units = magnitude / NANO;
            let mut exp = 0;
            while exp < 6 && units % 1024 == 0 {
                units /= 1024;
                exp += 1;
            }
            let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][exp];
            return format!("{sign}{units}{suffix}");
        }
    }
    let mut mantissa = magnitude;
    let mut exp: i32 = -9;
    while mantissa % 10 == 0 {
        mantissa /= 10;
        exp += 1;
    }
    while exp.rem_euclid(3) != 0 {
        mantissa *= 10;
        exp -= 1;
    }
    let suffix = match (format, exp) {
        (Format::DecimalSi, -9) => "n".to_string(),
        (Format::DecimalSi, -6) => "u".to_string(),
        (Format::DecimalSi, -3) => "m".to_string(),
        (_, 0) => String::new(),
        (Format::DecimalSi, 3) => "k".to_string(),
        (Format::DecimalSi, 6) => "M".to_string(),
        (Format::DecimalSi, 9) => "G".to_string(),
        (Format::DecimalSi, 12) => "T".to_string(),
        (Format::DecimalSi, 15) => "P".to_string(),
        (Format::DecimalSi, 18) => "E".to_string(),
        (_, e) => format!("e{e}"),
    };
    format!("{sign}{mantissa}{suffix}")
}
