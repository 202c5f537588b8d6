//! dd-style operands (`if=`, `of=`, `bs=`, `count=`, `skip=`, `seek=`), parsed and validated
//! into a [`Transfer`]: exactly one side is an NVMe namespace (`nvme:NSID`), the other a file or
//! standard input/output (`-`, or the operand left out).

use std::path::PathBuf;

use crate::copy::DMA_BUDGET_BYTES;

/// Block size when `bs=` is not given, as in dd.
pub const DEFAULT_BLOCK_SIZE: usize = 512;
/// Prefix of an operand value naming a namespace of the controller.
const NVME_PREFIX: &str = "nvme:";
/// The largest byte offset a transfer may reach: files are addressed with a signed 64-bit
/// `off_t`, and no namespace is anywhere near this size.
pub const MAX_BYTE_OFFSET: u64 = i64::MAX as u64;
/// Operand value naming standard input or output.
const STDIO: &str = "-";
/// Multipliers of the size suffixes (binary units, as in dd's `K`/`M`/`G`).
const SUFFIXES: [(char, u64); 4] = [
    ('k', 1 << 10),
    ('K', 1 << 10),
    ('M', 1 << 20),
    ('G', 1 << 30),
];

/// One side of the copy that is not the namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stream {
    /// Standard input (as the source) or standard output (as the destination).
    Stdio,
    /// A file or device path.
    Path(PathBuf),
}

/// Which way the data flows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Direction {
    /// `if=nvme:NSID`: read the namespace into `to`.
    FromNvme { nsid: u32, to: Stream },
    /// `of=nvme:NSID`: write `from` to the namespace.
    ToNvme { from: Stream, nsid: u32 },
}

/// A validated set of operands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transfer {
    /// Source and destination.
    pub direction: Direction,
    /// Bytes per record (`bs=`), > 0.
    pub bs: usize,
    /// Records to copy (`count=`); `None`: until the end of the input.
    pub count: Option<u64>,
    /// Records of the input to skip (`skip=`).
    pub skip: u64,
    /// Records of the output to skip (`seek=`).
    pub seek: u64,
}

/// Operands that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OperandError {
    /// Not of the form KEY=VALUE.
    #[error(
        "operand `{operand}` is not KEY=VALUE (e.g. if=nvme:1, of=out.bin, bs=4k, count=8); \
         quote a transport id given to --device: --device 'trtype:PCIe traddr:0000:00:04.0'"
    )]
    Malformed { operand: String },
    /// A key dd-style operands do not have.
    #[error("unknown operand `{key}=`: use if=, of=, bs=, count=, skip= or seek=")]
    UnknownKey { key: String },
    /// The same key twice.
    #[error("operand `{key}=` is given more than once")]
    Duplicate { key: String },
    /// A number that does not parse or overflows.
    #[error("{key}={value} is not a number: use digits with an optional k, K, M or G suffix (binary units), e.g. {key}=4k")]
    BadNumber { key: String, value: String },
    /// `bs=0`.
    #[error("bs=0 is not a valid block size: give a positive size such as bs=4k")]
    ZeroBlockSize,
    /// `bs=` larger than the DMA memory one record may take.
    #[error(
        "bs={value} needs a DMA buffer of {value} bytes per record, more than nvme-dd's limit of \
         {limit} bytes ({limit_mib} MiB): use bs={limit_mib}M or less, and scale count=, skip= \
         and seek= (which count records of bs bytes) to match"
    )]
    BlockSizeOverBudget {
        value: u64,
        limit: usize,
        limit_mib: usize,
    },
    /// `skip`/`seek` (or where `count` records after them end) in bytes does not fit in a
    /// 64-bit file offset.
    #[error(
        "{what} with bs={bs} overflows a 64-bit byte offset (the largest is {max}): \
         use smaller values or a smaller bs="
    )]
    OffsetOverflow { what: String, bs: usize, max: u64 },
    /// `nvme:` followed by something other than a namespace id >= 1.
    #[error("`{value}` does not name a namespace: write nvme:NSID with NSID >= 1, e.g. nvme:1")]
    BadNamespace { value: String },
    /// Neither side is a namespace.
    #[error("one of if= and of= must be a namespace (nvme:NSID), e.g. if=nvme:1 of=out.bin")]
    NoNamespace,
    /// Both sides are namespaces.
    #[error(
        "only one of if= and of= may be a namespace: copying between namespaces is not supported"
    )]
    TwoNamespaces,
}

/// An operand value for `if=`/`of=`.
enum Endpoint {
    Nvme(u32),
    Stream(Stream),
}

fn endpoint(value: &str) -> Result<Endpoint, OperandError> {
    if let Some(nsid) = value.strip_prefix(NVME_PREFIX) {
        return match nsid.parse::<u32>() {
            Ok(n) if n >= 1 => Ok(Endpoint::Nvme(n)),
            _ => Err(OperandError::BadNamespace {
                value: value.to_owned(),
            }),
        };
    }
    Ok(Endpoint::Stream(if value == STDIO {
        Stream::Stdio
    } else {
        Stream::Path(PathBuf::from(value))
    }))
}

/// Parses a count or size: decimal digits with an optional `k`/`K` (KiB), `M` (MiB) or `G`
/// (GiB) suffix. `key` names the operand in the error.
pub fn parse_number(key: &str, value: &str) -> Result<u64, OperandError> {
    let bad = || OperandError::BadNumber {
        key: key.to_owned(),
        value: value.to_owned(),
    };
    let (digits, multiplier) = match value.chars().last() {
        Some(c) => match SUFFIXES.iter().find(|&&(s, _)| s == c) {
            Some(&(_, m)) => (&value[..value.len() - c.len_utf8()], m),
            None => (value, 1),
        },
        None => return Err(bad()),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(multiplier))
        .ok_or_else(bad)
}

/// Parses dd-style operands.
pub fn parse_operands<I, S>(operands: I) -> Result<Transfer, OperandError>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let (mut input, mut output, mut bs, mut count, mut skip, mut seek) =
        (None, None, None, None, None, None);
    for operand in operands {
        let operand = operand.as_ref();
        let (key, value) = operand
            .split_once('=')
            .ok_or_else(|| OperandError::Malformed {
                operand: operand.to_owned(),
            })?;
        let duplicate = || OperandError::Duplicate {
            key: key.to_owned(),
        };
        let fresh = match key {
            "if" => input.replace(endpoint(value)?).is_none(),
            "of" => output.replace(endpoint(value)?).is_none(),
            "bs" => bs.replace(parse_number(key, value)?).is_none(),
            "count" => count.replace(parse_number(key, value)?).is_none(),
            "skip" => skip.replace(parse_number(key, value)?).is_none(),
            "seek" => seek.replace(parse_number(key, value)?).is_none(),
            _ => {
                return Err(OperandError::UnknownKey {
                    key: key.to_owned(),
                })
            }
        };
        if !fresh {
            return Err(duplicate());
        }
    }
    let input = input.unwrap_or(Endpoint::Stream(Stream::Stdio));
    let output = output.unwrap_or(Endpoint::Stream(Stream::Stdio));
    let direction = match (input, output) {
        (Endpoint::Nvme(_), Endpoint::Nvme(_)) => return Err(OperandError::TwoNamespaces),
        (Endpoint::Stream(_), Endpoint::Stream(_)) => return Err(OperandError::NoNamespace),
        (Endpoint::Nvme(nsid), Endpoint::Stream(to)) => Direction::FromNvme { nsid, to },
        (Endpoint::Stream(from), Endpoint::Nvme(nsid)) => Direction::ToNvme { from, nsid },
    };
    let bs = match bs {
        None => DEFAULT_BLOCK_SIZE,
        Some(0) => return Err(OperandError::ZeroBlockSize),
        Some(n) if n > DMA_BUDGET_BYTES as u64 => {
            return Err(OperandError::BlockSizeOverBudget {
                value: n,
                limit: DMA_BUDGET_BYTES,
                limit_mib: DMA_BUDGET_BYTES >> 20,
            })
        }
        // At most DMA_BUDGET_BYTES, so it fits in usize.
        Some(n) => n as usize,
    };
    let (skip, seek) = (skip.unwrap_or(0), seek.unwrap_or(0));
    // Both ends of both sides must be representable byte offsets.
    for (key, records) in [("skip", skip), ("seek", seek)] {
        byte_offset(&format!("{key}={records}"), records, bs)?;
        if let Some(count) = count {
            let end = records.checked_add(count);
            let what = || format!("{key}={records} plus count={count}");
            match end {
                Some(end) => byte_offset(&what(), end, bs)?,
                None => return Err(offset_overflow(what(), bs)),
            };
        }
    }
    Ok(Transfer {
        direction,
        bs,
        count,
        skip,
        seek,
    })
}

fn offset_overflow(what: String, bs: usize) -> OperandError {
    OperandError::OffsetOverflow {
        what,
        bs,
        max: MAX_BYTE_OFFSET,
    }
}

/// `records * bs` as a byte offset, at most [`MAX_BYTE_OFFSET`]; `what` (e.g. `seek=5`) names
/// the records in the error.
pub fn byte_offset(what: &str, records: u64, bs: usize) -> Result<u64, OperandError> {
    records
        .checked_mul(bs as u64)
        .filter(|&bytes| bytes <= MAX_BYTE_OFFSET)
        .ok_or_else(|| offset_overflow(what.to_owned(), bs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_with_suffixes() {
        assert_eq!(parse_number("bs", "512"), Ok(512));
        assert_eq!(parse_number("bs", "4k"), Ok(4096));
        assert_eq!(parse_number("bs", "4K"), Ok(4096));
        assert_eq!(parse_number("bs", "2M"), Ok(2 << 20));
        assert_eq!(parse_number("bs", "1G"), Ok(1 << 30));
        assert_eq!(parse_number("count", "0"), Ok(0));
        for bad in ["", "k", "-1", "1.5k", "4 k", "4kb", "4m", "0x10", "１"] {
            assert!(
                matches!(parse_number("bs", bad), Err(OperandError::BadNumber { .. })),
                "{bad:?} should be rejected"
            );
        }
        assert!(parse_number("bs", "18446744073709551615").is_ok());
        assert!(
            parse_number("bs", "18446744073709551615k").is_err(),
            "overflow is an error"
        );
    }

    #[test]
    fn read_from_namespace() {
        let t = parse_operands(["if=nvme:2", "of=/tmp/out", "bs=8k", "count=3", "skip=5"]).unwrap();
        assert_eq!(
            t.direction,
            Direction::FromNvme {
                nsid: 2,
                to: Stream::Path("/tmp/out".into())
            }
        );
        assert_eq!((t.bs, t.count, t.skip, t.seek), (8192, Some(3), 5, 0));
    }

    #[test]
    fn write_to_namespace_with_defaults() {
        let t = parse_operands(["of=nvme:1", "seek=7"]).unwrap();
        assert_eq!(
            t.direction,
            Direction::ToNvme {
                from: Stream::Stdio,
                nsid: 1
            }
        );
        assert_eq!(
            (t.bs, t.count, t.skip, t.seek),
            (DEFAULT_BLOCK_SIZE, None, 0, 7)
        );
        let t = parse_operands(["if=-", "of=nvme:1"]).unwrap();
        assert_eq!(
            t.direction,
            Direction::ToNvme {
                from: Stream::Stdio,
                nsid: 1
            }
        );
        let t = parse_operands(["if=nvme:1", "of=-"]).unwrap();
        assert_eq!(
            t.direction,
            Direction::FromNvme {
                nsid: 1,
                to: Stream::Stdio
            }
        );
    }

    #[test]
    fn bad_operands() {
        let err = |ops: &[&str]| parse_operands(ops.iter().copied()).unwrap_err();
        assert_eq!(err(&["if=a", "of=b"]), OperandError::NoNamespace);
        assert_eq!(err(&[]), OperandError::NoNamespace);
        assert_eq!(
            err(&["if=nvme:1", "of=nvme:2"]),
            OperandError::TwoNamespaces
        );
        assert!(matches!(
            err(&["if=nvme:0"]),
            OperandError::BadNamespace { .. }
        ));
        assert!(matches!(
            err(&["if=nvme:"]),
            OperandError::BadNamespace { .. }
        ));
        assert!(matches!(
            err(&["if=nvme:x"]),
            OperandError::BadNamespace { .. }
        ));
        assert!(matches!(
            err(&["if=nvme:1", "ibs=4k"]),
            OperandError::UnknownKey { .. }
        ));
        assert!(matches!(
            err(&["if=nvme:1", "count"]),
            OperandError::Malformed { .. }
        ));
        assert!(matches!(
            err(&["if=nvme:1", "bs=1", "bs=2"]),
            OperandError::Duplicate { .. }
        ));
        assert!(matches!(
            err(&["if=nvme:1", "count=x"]),
            OperandError::BadNumber { .. }
        ));
        assert_eq!(err(&["if=nvme:1", "bs=0"]), OperandError::ZeroBlockSize);
    }

    #[test]
    fn offsets_that_overflow_64_bits_are_refused() {
        // 2^62 records of 4 KiB: the byte offset wraps (to 0 in release builds).
        let err = parse_operands(["if=nvme:1", "of=out", "bs=4k", "seek=4611686018427387904"])
            .unwrap_err();
        assert!(
            matches!(&err, OperandError::OffsetOverflow { what, bs: 4096, .. } if what == "seek=4611686018427387904"),
            "{err:?}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains("seek=4611686018427387904 with bs=4096 overflows a 64-bit byte offset"),
            "{msg}"
        );
        assert!(matches!(
            parse_operands(["of=nvme:1", "skip=18446744073709551615"]),
            Err(OperandError::OffsetOverflow { .. })
        ));
        // Past off_t (2^63 - 1) without wrapping u64.
        assert!(matches!(
            parse_operands(["if=nvme:1", "bs=1k", "seek=9007199254740992"]),
            Err(OperandError::OffsetOverflow { .. })
        ));
        // Where count records after seek/skip end.
        let err =
            parse_operands(["if=nvme:1", "bs=4k", "seek=1", "count=2251799813685247"]).unwrap_err();
        assert!(
            err.to_string()
                .contains("seek=1 plus count=2251799813685247"),
            "{err}"
        );
        assert!(matches!(
            parse_operands(["if=nvme:1", "skip=1", "count=18446744073709551615"]),
            Err(OperandError::OffsetOverflow { .. })
        ));
        // The largest offsets that fit are accepted.
        assert!(parse_operands(["if=nvme:1", "bs=1k", "seek=9007199254740991"]).is_ok());
        assert!(parse_operands(["if=nvme:1", "bs=1k", "count=9007199254740991"]).is_ok());
    }

    #[test]
    fn block_sizes_beyond_the_dma_budget_are_refused() {
        let err = parse_operands(["if=nvme:1", "of=out", "bs=4G"]).unwrap_err();
        assert_eq!(
            err,
            OperandError::BlockSizeOverBudget {
                value: 4 << 30,
                limit: DMA_BUDGET_BYTES,
                limit_mib: 256
            }
        );
        let msg = err.to_string();
        assert!(
            msg.contains("limit of 268435456 bytes") && msg.contains("bs=256M"),
            "{msg}"
        );
        assert!(matches!(
            parse_operands(["if=nvme:1", "bs=18446744073709551615"]),
            Err(OperandError::BlockSizeOverBudget { .. })
        ));
        assert_eq!(
            parse_operands(["if=nvme:1", "bs=256M"]).unwrap().bs,
            256 << 20
        );
    }

    #[test]
    fn messages_name_the_operand() {
        let msg = parse_operands(["if=nvme:1", "skip=ten"])
            .unwrap_err()
            .to_string();
        assert!(msg.contains("skip=ten"), "{msg}");
    }
}

/// Property tests (issue 10, "Fuzzing"): any operand list is parsed or refused without a
/// panic, and every valid transfer written out as operands parses back to itself.
/// `PROPTEST_CASES` sets the number of cases (default 256); a long run is
/// `PROPTEST_CASES=100000 cargo test -p nvme-dd --release operands::fuzz`.
#[cfg(test)]
mod fuzz {
    use super::*;
    use proptest::prelude::*;

    /// Strings built from operand pieces, so every branch of the parser is reached often.
    fn operand_like() -> impl Strategy<Value = String> {
        let piece = prop_oneof![
            prop::sample::select(vec![
                "if", "of", "bs", "count", "skip", "seek", "ibs", "=", "nvme:", "-", "k", "K", "M",
                "G", "m", "0", "1", "é", " ", ":",
            ])
            .prop_map(str::to_owned),
            "[0-9]{1,20}",
            any::<u64>().prop_map(|n| n.to_string()),
            any::<String>(),
        ];
        prop::collection::vec(piece, 0..6).prop_map(|v| v.concat())
    }

    /// A number written the way a user may: plain, or with a suffix when it divides evenly.
    fn spelled(n: u64) -> impl Strategy<Value = String> {
        let mut forms = vec![n.to_string()];
        for (suffix, m) in SUFFIXES {
            if n % m == 0 && n != 0 {
                forms.push(format!("{}{suffix}", n / m));
            }
        }
        prop::sample::select(forms)
    }

    fn stream() -> impl Strategy<Value = Stream> {
        prop_oneof![
            Just(Stream::Stdio),
            "[^\\x00]{0,12}".prop_map(|p| {
                // A path spelled like a namespace or stdin is written as ./PATH.
                let p = if p.starts_with(NVME_PREFIX) || p == STDIO {
                    format!("./{p}")
                } else {
                    p
                };
                Stream::Path(PathBuf::from(p))
            }),
        ]
    }

    /// A valid transfer: block size within the DMA budget, offsets within `MAX_BYTE_OFFSET`.
    fn transfer() -> impl Strategy<Value = Transfer> {
        let direction = prop_oneof![
            (1u32.., stream()).prop_map(|(nsid, to)| Direction::FromNvme { nsid, to }),
            (stream(), 1u32..).prop_map(|(from, nsid)| Direction::ToNvme { from, nsid }),
        ];
        let bs = prop_oneof![
            (0u32..=18).prop_map(|shift| 512usize << shift),
            1usize..=DMA_BUDGET_BYTES,
        ];
        // Records up to `max`, small values as often as large ones.
        let records = |max: u64| prop_oneof![0..=max.min(16), 0..=max];
        (direction, bs)
            .prop_flat_map(move |(direction, bs)| {
                let max_records = MAX_BYTE_OFFSET / bs as u64;
                (
                    Just(direction),
                    Just(bs),
                    prop::option::of(records(max_records)),
                )
            })
            .prop_flat_map(move |(direction, bs, count)| {
                // Both skip + count and seek + count stay within the byte-offset limit.
                let room = MAX_BYTE_OFFSET / bs as u64 - count.unwrap_or(0);
                (records(room), records(room)).prop_map(move |(skip, seek)| Transfer {
                    direction: direction.clone(),
                    bs,
                    count,
                    skip,
                    seek,
                })
            })
    }

    fn endpoint_text(e: Result<u32, &Stream>) -> String {
        match e {
            Ok(nsid) => format!("{NVME_PREFIX}{nsid}"),
            Err(Stream::Stdio) => STDIO.to_owned(),
            Err(Stream::Path(p)) => p.to_str().expect("generated as UTF-8").to_owned(),
        }
    }

    /// The operands of `t` (defaults optionally left out), numbers spelled in any valid way,
    /// in any order.
    fn operands_of(t: Transfer) -> impl Strategy<Value = Vec<String>> {
        let (input, output) = match &t.direction {
            Direction::FromNvme { nsid, to } => (Ok(*nsid), Err(to)),
            Direction::ToNvme { from, nsid } => (Err(from), Ok(*nsid)),
        };
        let (input, output) = (endpoint_text(input), endpoint_text(output));
        let optional = |text: String, default: bool| {
            prop_oneof![Just(Some(text.clone())), Just((!default).then_some(text))]
        };
        (
            optional(format!("if={input}"), input == STDIO),
            optional(format!("of={output}"), output == STDIO),
            spelled(t.bs as u64).prop_flat_map(move |bs| {
                let text = format!("bs={bs}");
                prop_oneof![
                    Just(Some(text.clone())),
                    Just((t.bs != DEFAULT_BLOCK_SIZE).then_some(text))
                ]
            }),
            match t.count {
                Some(n) => spelled(n).prop_map(|s| Some(format!("count={s}"))).boxed(),
                None => Just(None).boxed(),
            },
            spelled(t.skip).prop_map(|s| format!("skip={s}")),
            spelled(t.seek).prop_map(|s| format!("seek={s}")),
            any::<bool>(),
            any::<bool>(),
        )
            .prop_flat_map(move |(i, o, bs, count, skip, seek, with_skip, with_seek)| {
                let mut ops: Vec<String> = [i, o, bs, count].into_iter().flatten().collect();
                if with_skip || t.skip != 0 {
                    ops.push(skip);
                }
                if with_seek || t.seek != 0 {
                    ops.push(seek);
                }
                Just(ops).prop_shuffle()
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        #[test]
        fn any_number_text_parses_or_is_refused(s in operand_like()) {
            if let Ok(n) = parse_number("bs", &s) {
                // Only digits and an optional suffix get here, and the value is exact.
                let (digits, m) = match SUFFIXES.iter().find(|(c, _)| s.ends_with(*c)) {
                    Some(&(c, m)) => (&s[..s.len() - c.len_utf8()], m),
                    None => (&s[..], 1),
                };
                prop_assert!(digits.bytes().all(|b| b.is_ascii_digit()), "{:?}", s);
                prop_assert_eq!(Some(n), digits.parse::<u64>().ok().and_then(|d| d.checked_mul(m)));
            }
        }

        #[test]
        fn any_operands_parse_or_are_refused(ops in prop::collection::vec(operand_like(), 0..8)) {
            match parse_operands(&ops) {
                Ok(t) => {
                    prop_assert!(t.bs >= 1 && t.bs <= DMA_BUDGET_BYTES);
                    for start in [t.skip, t.seek] {
                        let end = start.checked_add(t.count.unwrap_or(0)).unwrap();
                        prop_assert!(byte_offset("end", end, t.bs).is_ok());
                    }
                }
                Err(e) => prop_assert!(!e.to_string().is_empty()),
            }
        }

        #[test]
        fn valid_operands_round_trip(
            (t, ops) in transfer().prop_flat_map(|t| (Just(t.clone()), operands_of(t)))
        ) {
            prop_assert_eq!(parse_operands(&ops), Ok(t), "{:?}", ops);
        }

        #[test]
        fn spelled_numbers_round_trip(n: u64, suffix in 0usize..=SUFFIXES.len()) {
            match SUFFIXES.get(suffix) {
                None => prop_assert_eq!(parse_number("count", &n.to_string()), Ok(n)),
                Some(&(c, m)) => {
                    let r = parse_number("count", &format!("{n}{c}"));
                    match n.checked_mul(m) {
                        Some(v) => prop_assert_eq!(r, Ok(v)),
                        None => {
                            let is_bad_number = matches!(r, Err(OperandError::BadNumber { .. }));
                            prop_assert!(is_bad_number);
                        }
                    }
                }
            }
        }
    }
}
