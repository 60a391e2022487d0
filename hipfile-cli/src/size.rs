//! Byte counts on the command line: `4096`, `4K`, `256M`, `256MB`, `256MiB`, `1g`, `2T`.
//!
//! Every unit is a binary multiple (K = 1024, M = 1024², G = 1024³, T = 1024⁴), whether it is
//! written `K`, `KB` or `KiB`: the sizes the tool takes are buffer and file sizes, which are
//! counted in powers of two, and `dd`, `fio` and `truncate` read `K`/`M`/`G` the same way.
//! Units are case-insensitive and may follow the number after blanks (`256 MiB`); a trailing `B`
//! alone means bytes. Zero, fractions, signs, unknown units and counts past `usize` are refused
//! with a message that says which of these it was.

/// What every refusal ends with: the forms that are accepted.
const ACCEPTED: &str = "a whole number of bytes, optionally followed by K, M, G or T (multiples \
                        of 1024, also written KB or KiB), e.g. 4096, 4K, 256MiB, 8G";

/// Parse a byte count (see the module docs); it must be more than zero.
pub fn parse_size(text: &str) -> Result<usize, String> {
    let t = text.trim();
    if t.is_empty() {
        return Err(format!("no size given: expected {ACCEPTED}"));
    }
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    if digits.is_empty() {
        return Err(format!(
            "{text:?} is not a size: it does not start with a digit; expected {ACCEPTED}"
        ));
    }
    let unit = unit.trim_start();
    let shift = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => {
            return Err(format!(
                "{text:?} is not a size: unknown unit {unit:?}; expected {ACCEPTED}"
            ))
        }
    };
    let too_large = || format!("{text:?} is too large: at most {} bytes", usize::MAX);
    // `digits` is only ASCII digits, so the parse fails only by overflowing.
    let n: usize = digits.parse().map_err(|_| too_large())?;
    let bytes = n.checked_mul(1usize << shift).ok_or_else(too_large)?;
    if bytes == 0 {
        return Err(format!(
            "{text:?} is zero bytes: the size must be more than 0"
        ));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_bytes_parse_as_they_are() {
        assert_eq!(parse_size("7"), Ok(7));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size(" 4097 "), Ok(4097));
        assert_eq!(parse_size("12B"), Ok(12));
        assert_eq!(parse_size("12b"), Ok(12));
    }

    #[test]
    fn each_unit_is_a_binary_multiple_in_every_spelling_and_case() {
        for (unit, shift) in [("k", 10), ("m", 20), ("g", 30), ("t", 40)] {
            let upper = unit.to_ascii_uppercase();
            for spelling in [
                unit.to_string(),
                upper.clone(),
                format!("{upper}B"),
                format!("{unit}b"),
                format!("{upper}iB"),
                format!("{unit}ib"),
                format!("{upper}IB"),
                format!(" {upper}iB"),
            ] {
                assert_eq!(
                    parse_size(&format!("3{spelling}")),
                    Ok(3usize << shift),
                    "3{spelling}"
                );
            }
        }
        assert_eq!(parse_size("256M"), Ok(256 << 20));
        assert_eq!(parse_size("256MB"), Ok(256 << 20));
        assert_eq!(parse_size("256MiB"), Ok(256 << 20));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert_eq!(parse_size("4KiB"), Ok(4096));
        assert_eq!(parse_size("256 MiB"), Ok(256 << 20));
    }

    #[test]
    fn empty_input_says_no_size_was_given() {
        for text in ["", "   "] {
            let e = parse_size(text).unwrap_err();
            assert!(e.starts_with("no size given"), "{e}");
            assert!(e.contains("256MiB"), "the accepted forms are listed: {e}");
        }
    }

    #[test]
    fn garbage_is_refused_and_named() {
        for text in ["X", "K", "-4K", "+4K", ".5G", "ten", "M4"] {
            let e = parse_size(text).unwrap_err();
            assert!(e.contains("does not start with a digit"), "{text}: {e}");
        }
        for (text, unit) in [
            ("3X", "X"),
            ("4KK", "KK"),
            ("4Kb5", "Kb5"),
            ("4 K iB", "K iB"),
            ("2P", "P"),
            ("1.5G", ".5G"),
            ("0x10", "x10"),
        ] {
            let e = parse_size(text).unwrap_err();
            assert!(e.contains(&format!("unknown unit {unit:?}")), "{text}: {e}");
        }
    }

    #[test]
    fn zero_is_refused_in_any_unit() {
        for text in ["0", "0K", "000MiB"] {
            let e = parse_size(text).unwrap_err();
            assert!(e.contains("zero bytes"), "{text}: {e}");
        }
    }

    #[test]
    fn counts_past_usize_are_refused_not_wrapped() {
        let max = usize::MAX.to_string();
        assert_eq!(parse_size(&max), Ok(usize::MAX));
        for text in [
            format!("{max}0"),
            "99999999999999999999999".to_string(),
            format!("{}K", usize::MAX / 1024 + 1),
            "16777216T".to_string(),
        ] {
            let e = parse_size(&text).unwrap_err();
            assert!(e.contains("too large"), "{text}: {e}");
        }
        assert_eq!(parse_size("16777215T"), Ok(16_777_215usize << 40));
    }
}
