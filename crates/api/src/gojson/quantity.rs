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
    let Some(parts) = Parts::split(s) else {
        return s.to_string();
    };
    match parts.nanos() {
        Some(nanos) if !parts.verbatim() => format_nanos(nanos, parts.format),
        _ => s.to_string(),
    }
}

/// A quantity string taken apart: sign, digits before and after the point, and what its suffix
/// means.
struct Parts<'a> {
    negative: bool,
    whole: &'a str,
    frac: &'a str,
    format: Format,
    /// The suffix's power of two (binary suffixes) and power of ten (the others).
    base2: u32,
    exp10: i32,
}

impl<'a> Parts<'a> {
    fn split(s: &'a str) -> Option<Self> {
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
        Some(Parts {
            negative,
            whole,
            frac,
            format,
            base2,
            exp10,
        })
    }

    /// The value in nano units, rounded up to a whole nano; `None` when it does not fit.
    fn nanos(&self) -> Option<i128> {
        let digits: i128 = format!("{}{}", self.whole, self.frac).parse().ok()?;
        let scale = i32::try_from(self.frac.len()).ok()?;
        // value = digits × 2^base2 × 10^(exp10 - scale); in nanos: × 10^9.
        let mut numerator = digits.checked_mul(1i128.checked_shl(self.base2)?)?;
        let mut denominator: i128 = 1;
        let shift = self.exp10 - scale + 9;
        if shift >= 0 {
            numerator = numerator.checked_mul(10i128.checked_pow(shift.unsigned_abs())?)?;
        } else {
            denominator = 10i128.checked_pow(shift.unsigned_abs())?;
        }
        let mut nanos = numerator / denominator;
        if numerator % denominator != 0 {
            nanos += 1;
        }
        Some(if self.negative { -nanos } else { nanos })
    }

    /// Whether Kubernetes keeps the string as written: its parser caches the input when it
    /// looks canonical (for decimal forms, a digit string without leading zeros or a trailing
    /// `000` at an exponent that is a multiple of three; for binary forms, a whole number not
    /// divisible by 8), and marshals the cached string back. That is how `1E3` or `01` survive
    /// unchanged.
    fn verbatim(&self) -> bool {
        let whole = self.whole.trim_start_matches('0');
        let num = if whole.is_empty() { "0" } else { whole };
        if self.format == Format::BinarySi {
            let precision = 15 - num.len() as i32 - self.base2 as i32 * 3 / 10 - 1;
            return self.frac.is_empty()
                && precision >= 0
                && num.parse::<i64>().is_ok_and(|v| v & 7 != 0);
        }
        let scale = self.exp10 - self.frac.len() as i32;
        let shifted = format!("{num}{}", self.frac);
        num.len() + self.frac.len() <= 18
            && scale >= -9
            && scale % 3 == 0
            && !shifted.ends_with("000")
            && !shifted.starts_with('0')
    }
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
