//! Typed values of the standard features for Get Features (§5.15) and Set Features (§5.27):
//! one type per feature with named fields (§5.27.1.x), the feature identifier as
//! [`FeatureId`], Get Features' Select field ([`Select`], §5.15 Figure 186) and what the
//! "supported capabilities" selection reports ([`FeatureCapabilities`], §5.15.2 Figure 188).
//!
//! Every value but the Timestamp lives in command dword 11 (Set) / completion dword 0 (Get);
//! the Timestamp (§5.27.1.10) is an 8-byte data buffer both ways.

use bitflags::bitflags;

use crate::opcode::feature as fid;

/// Get Features CDW10 bits 10:8: Select.
pub const SELECT_SHIFT: u32 = 8;
/// Get Features Select 11b: Supported Capabilities (completion dword 0 is
/// [`FeatureCapabilities`]).
pub const SELECT_SUPPORTED_CAPABILITIES: u32 = 0b11;
/// Set Features CDW10 bit 31: Save (keep the value across resets, if saveable).
pub const SET_FEATURES_SAVE: u32 = 1 << 31;
/// Bytes of the Timestamp feature's data structure (§5.27.1.10, Figure 339).
pub const TIMESTAMP_DATA_SIZE: usize = 8;
/// The Timestamp field is 48 bits of milliseconds since the Unix epoch.
pub const TIMESTAMP_MASK: u64 = (1 << 48) - 1;
/// Timestamp data byte 6 bit 0: Synch (the timestamp may have stopped meanwhile).
const TIMESTAMP_SYNCH: u8 = 1 << 0;
/// Timestamp data byte 6 bits 3:1: Timestamp Origin.
const TIMESTAMP_ORIGIN_SHIFT: u8 = 1;
/// Timestamp Origin field width mask.
const TIMESTAMP_ORIGIN_MASK: u8 = 0b111;
/// Byte of the Timestamp data holding Synch and Timestamp Origin.
const TIMESTAMP_ATTRIBUTES_BYTE: usize = 6;
/// Arbitration Burst 111b: no limit.
pub const ARBITRATION_BURST_UNLIMITED: u8 = 0b111;

const BYTE: u32 = 0xFF;
const WORD: u32 = 0xFFFF;

/// Get Features Select (CDW10 bits 10:8, §5.15 Figure 186) for a value; the Supported
/// Capabilities selection has its own call (it answers [`FeatureCapabilities`], not a value).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Select {
    /// 000b: the value in use now.
    Current = 0b00,
    /// 001b: the default value.
    Default = 0b01,
    /// 010b: the value saved across resets (the default if never saved).
    Saved = 0b10,
}

impl Select {
    /// The name nvme-cli prints for the selection.
    pub fn name(self) -> &'static str {
        match self {
            Select::Current => "Current",
            Select::Default => "Default",
            Select::Saved => "Saved",
        }
    }
}

bitflags! {
    /// Get Features with Select 11b: completion dword 0 (§5.15.2, Figure 188).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct FeatureCapabilities: u32 {
        /// Bit 0: the feature can be saved (Set Features Save).
        const SAVEABLE = 1 << 0;
        /// Bit 1: the feature is namespace specific.
        const NAMESPACE_SPECIFIC = 1 << 1;
        /// Bit 2: the feature is changeable.
        const CHANGEABLE = 1 << 2;
    }
}

/// The standard features this crate types (§5.27.1, Figure 317).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FeatureId {
    /// 01h Arbitration (§5.27.1.1).
    Arbitration = fid::ARBITRATION,
    /// 02h Power Management (§5.27.1.2).
    PowerManagement = fid::POWER_MANAGEMENT,
    /// 04h Temperature Threshold (§5.27.1.3).
    TemperatureThreshold = fid::TEMPERATURE_THRESHOLD,
    /// 05h Error Recovery (§5.27.1.4).
    ErrorRecovery = fid::ERROR_RECOVERY,
    /// 06h Volatile Write Cache (§5.27.1.4).
    VolatileWriteCache = fid::VOLATILE_WRITE_CACHE,
    /// 07h Number of Queues (§5.27.1.5).
    NumberOfQueues = fid::NUMBER_OF_QUEUES,
    /// 08h Interrupt Coalescing (§5.27.1.6).
    InterruptCoalescing = fid::INTERRUPT_COALESCING,
    /// 0Bh Asynchronous Event Configuration (§5.27.1.7).
    AsyncEventConfiguration = fid::ASYNC_EVENT_CONFIGURATION,
    /// 0Eh Timestamp (§5.27.1.10).
    Timestamp = fid::TIMESTAMP,
}

impl FeatureId {
    /// Every typed feature, in identifier order.
    pub const ALL: [FeatureId; 9] = [
        FeatureId::Arbitration,
        FeatureId::PowerManagement,
        FeatureId::TemperatureThreshold,
        FeatureId::ErrorRecovery,
        FeatureId::VolatileWriteCache,
        FeatureId::NumberOfQueues,
        FeatureId::InterruptCoalescing,
        FeatureId::AsyncEventConfiguration,
        FeatureId::Timestamp,
    ];

    /// The Feature Identifier byte.
    pub const fn fid(self) -> u8 {
        self as u8
    }

    /// The typed feature with identifier `fid`, if this crate types it.
    pub fn from_fid(fid: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.fid() == fid)
    }

    /// The feature's name, as nvme-cli prints it.
    pub fn name(self) -> &'static str {
        match self {
            FeatureId::Arbitration => "Arbitration",
            FeatureId::PowerManagement => "Power Management",
            FeatureId::TemperatureThreshold => "Temperature Threshold",
            FeatureId::ErrorRecovery => "Error Recovery",
            FeatureId::VolatileWriteCache => "Volatile Write Cache",
            FeatureId::NumberOfQueues => "Number of Queues",
            FeatureId::InterruptCoalescing => "Interrupt Coalescing",
            FeatureId::AsyncEventConfiguration => "Async Event Configuration",
            FeatureId::Timestamp => "Timestamp",
        }
    }

    /// Bytes of data the feature moves (Get: from the device; Set: to it); 0 = none.
    pub const fn data_len(self) -> usize {
        match self {
            FeatureId::Timestamp => TIMESTAMP_DATA_SIZE,
            _ => 0,
        }
    }
}

/// Arbitration (§5.27.1.1, Figure 318): dword 11.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Arbitration {
    /// Arbitration Burst (bits 2:0): 2^AB commands per round; 111b = no limit.
    pub burst: u8,
    /// Low Priority Weight (bits 15:8), 0's based.
    pub low_weight: u8,
    /// Medium Priority Weight (bits 23:16), 0's based.
    pub medium_weight: u8,
    /// High Priority Weight (bits 31:24), 0's based.
    pub high_weight: u8,
}

/// Power Management (§5.27.1.2, Figure 320): dword 11.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PowerManagement {
    /// Power State (bits 4:0).
    pub power_state: u8,
    /// Workload Hint (bits 7:5).
    pub workload_hint: u8,
}

/// Which temperature threshold (Temperature Threshold bits 21:20, THSEL).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ThresholdType {
    /// 00b: over-temperature threshold.
    #[default]
    Over = 0b00,
    /// 01b: under-temperature threshold.
    Under = 0b01,
}

/// Temperature Threshold (§5.27.1.3, Figure 322): dword 11. Get Features selects the
/// threshold by the same TMPSEL/THSEL fields in its dword 11.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TemperatureThreshold {
    /// Temperature Threshold (bits 15:0), Kelvin.
    pub kelvin: u16,
    /// Threshold Temperature Select (bits 19:16): 0 = Composite, 1..=8 = sensor N, Fh = all.
    pub sensor: u8,
    /// Threshold Type Select (bits 21:20).
    pub kind: ThresholdType,
}

/// Error Recovery (§5.27.1.4, Figure 324): dword 11.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ErrorRecovery {
    /// Time Limited Error Recovery (bits 15:0), 100 ms units; 0 = no limit.
    pub tler: u16,
    /// Deallocated or Unwritten Logical Block Error Enable (bit 16).
    pub dulbe: bool,
}

/// Number of Queues (§5.27.1.5, Figure 326): dword 11 (asked) and completion dword 0
/// (allocated); both counts 0's based.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct NumberOfQueues {
    /// Number of I/O Submission Queues (bits 15:0), 0's based.
    pub submission: u16,
    /// Number of I/O Completion Queues (bits 31:16), 0's based.
    pub completion: u16,
}

/// Interrupt Coalescing (§5.27.1.6, Figure 328): dword 11.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct InterruptCoalescing {
    /// Aggregation Threshold (bits 7:0), 0's based completion entries.
    pub threshold: u8,
    /// Aggregation Time (bits 15:8), 100 µs units.
    pub time: u8,
}

bitflags! {
    /// Asynchronous Event Configuration (§5.27.1.7, Figure 330): dword 11.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct AsyncEventConfig: u32 {
        /// Bits 7:0: SMART / Health Critical Warnings, one per Critical Warning bit.
        const SMART_CRITICAL_WARNINGS = 0xFF;
        /// Bit 8: Namespace Attribute Notices.
        const NAMESPACE_ATTRIBUTE = 1 << 8;
        /// Bit 9: Firmware Activation Notices.
        const FIRMWARE_ACTIVATION = 1 << 9;
        /// Bit 10: Telemetry Log Notices.
        const TELEMETRY_LOG = 1 << 10;
        /// Bit 11: Asymmetric Namespace Access Change Notices.
        const ANA_CHANGE = 1 << 11;
        /// Bit 12: Predictable Latency Event Aggregate Log Change Notices.
        const PREDICTABLE_LATENCY = 1 << 12;
        /// Bit 13: LBA Status Information Notices.
        const LBA_STATUS = 1 << 13;
        /// Bit 14: Endurance Group Event Aggregate Log Change Notices.
        const ENDURANCE_GROUP = 1 << 14;
        /// Bit 31: Discovery Log Page Change Notices (fabrics).
        const DISCOVERY_LOG = 1 << 31;
    }
}

/// Timestamp (§5.27.1.10, Figure 339): the 8-byte data structure.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Timestamp {
    /// Milliseconds since 1970-01-01 00:00 UTC (48 bits).
    pub millis: u64,
    /// Synch (byte 6 bit 0): the controller may have stopped counting since it was set.
    pub synch: bool,
    /// Timestamp Origin (byte 6 bits 3:1): 0 = since reset, 1 = set by the host.
    pub origin: u8,
}

impl Timestamp {
    /// Decodes the data structure.
    pub fn from_bytes(b: &[u8; TIMESTAMP_DATA_SIZE]) -> Self {
        let mut raw = [0u8; 8];
        raw[..6].copy_from_slice(&b[..6]);
        let attrs = b[TIMESTAMP_ATTRIBUTES_BYTE];
        Timestamp {
            millis: u64::from_le_bytes(raw) & TIMESTAMP_MASK,
            synch: attrs & TIMESTAMP_SYNCH != 0,
            origin: attrs >> TIMESTAMP_ORIGIN_SHIFT & TIMESTAMP_ORIGIN_MASK,
        }
    }

    /// Encodes the data structure (Set Features ignores byte 6).
    pub fn to_bytes(&self) -> [u8; TIMESTAMP_DATA_SIZE] {
        let mut b = [0u8; TIMESTAMP_DATA_SIZE];
        b[..6].copy_from_slice(&(self.millis & TIMESTAMP_MASK).to_le_bytes()[..6]);
        b[TIMESTAMP_ATTRIBUTES_BYTE] =
            u8::from(self.synch) | (self.origin & TIMESTAMP_ORIGIN_MASK) << TIMESTAMP_ORIGIN_SHIFT;
        b
    }
}

/// A typed feature value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Feature {
    /// 01h.
    Arbitration(Arbitration),
    /// 02h.
    PowerManagement(PowerManagement),
    /// 04h.
    TemperatureThreshold(TemperatureThreshold),
    /// 05h.
    ErrorRecovery(ErrorRecovery),
    /// 06h: Volatile Write Cache Enable (bit 0).
    VolatileWriteCache(bool),
    /// 07h.
    NumberOfQueues(NumberOfQueues),
    /// 08h.
    InterruptCoalescing(InterruptCoalescing),
    /// 0Bh.
    AsyncEventConfiguration(AsyncEventConfig),
    /// 0Eh.
    Timestamp(Timestamp),
}

impl Feature {
    /// Which feature this is.
    pub fn id(&self) -> FeatureId {
        match self {
            Feature::Arbitration(_) => FeatureId::Arbitration,
            Feature::PowerManagement(_) => FeatureId::PowerManagement,
            Feature::TemperatureThreshold(_) => FeatureId::TemperatureThreshold,
            Feature::ErrorRecovery(_) => FeatureId::ErrorRecovery,
            Feature::VolatileWriteCache(_) => FeatureId::VolatileWriteCache,
            Feature::NumberOfQueues(_) => FeatureId::NumberOfQueues,
            Feature::InterruptCoalescing(_) => FeatureId::InterruptCoalescing,
            Feature::AsyncEventConfiguration(_) => FeatureId::AsyncEventConfiguration,
            Feature::Timestamp(_) => FeatureId::Timestamp,
        }
    }

    /// Decodes feature `id` from its dword (completion dword 0 of Get Features, or dword 11
    /// of Set Features) and, for the Timestamp, its data (zeros when `data` is short).
    pub fn decode(id: FeatureId, dword: u32, data: &[u8]) -> Self {
        let byte = |shift: u32| (dword >> shift & BYTE) as u8;
        match id {
            FeatureId::Arbitration => Feature::Arbitration(Arbitration {
                burst: byte(0) & ARBITRATION_BURST_UNLIMITED,
                low_weight: byte(8),
                medium_weight: byte(16),
                high_weight: byte(24),
            }),
            FeatureId::PowerManagement => Feature::PowerManagement(PowerManagement {
                power_state: byte(0) & 0x1F,
                workload_hint: byte(5) & 0b111,
            }),
            FeatureId::TemperatureThreshold => {
                Feature::TemperatureThreshold(TemperatureThreshold {
                    kelvin: (dword & WORD) as u16,
                    sensor: byte(16) & 0xF,
                    kind: if byte(20) & 0b11 == ThresholdType::Under as u8 {
                        ThresholdType::Under
                    } else {
                        ThresholdType::Over
                    },
                })
            }
            FeatureId::ErrorRecovery => Feature::ErrorRecovery(ErrorRecovery {
                tler: (dword & WORD) as u16,
                dulbe: dword >> 16 & 1 != 0,
            }),
            FeatureId::VolatileWriteCache => Feature::VolatileWriteCache(dword & 1 != 0),
            FeatureId::NumberOfQueues => Feature::NumberOfQueues(NumberOfQueues {
                submission: (dword & WORD) as u16,
                completion: (dword >> 16) as u16,
            }),
            FeatureId::InterruptCoalescing => Feature::InterruptCoalescing(InterruptCoalescing {
                threshold: byte(0),
                time: byte(8),
            }),
            FeatureId::AsyncEventConfiguration => {
                Feature::AsyncEventConfiguration(AsyncEventConfig::from_bits_retain(dword))
            }
            FeatureId::Timestamp => {
                let mut raw = [0u8; TIMESTAMP_DATA_SIZE];
                let n = data.len().min(TIMESTAMP_DATA_SIZE);
                raw[..n].copy_from_slice(&data[..n]);
                Feature::Timestamp(Timestamp::from_bytes(&raw))
            }
        }
    }

    /// Dword 11 of Set Features for this value (0 for the Timestamp, which is data).
    pub fn dword(&self) -> u32 {
        match *self {
            Feature::Arbitration(a) => {
                u32::from(a.burst & ARBITRATION_BURST_UNLIMITED)
                    | u32::from(a.low_weight) << 8
                    | u32::from(a.medium_weight) << 16
                    | u32::from(a.high_weight) << 24
            }
            Feature::PowerManagement(p) => {
                u32::from(p.power_state & 0x1F) | u32::from(p.workload_hint & 0b111) << 5
            }
            Feature::TemperatureThreshold(t) => {
                u32::from(t.kelvin) | u32::from(t.sensor & 0xF) << 16 | (t.kind as u32) << 20
            }
            Feature::ErrorRecovery(e) => u32::from(e.tler) | u32::from(e.dulbe) << 16,
            Feature::VolatileWriteCache(on) => u32::from(on),
            Feature::NumberOfQueues(n) => u32::from(n.submission) | u32::from(n.completion) << 16,
            Feature::InterruptCoalescing(i) => u32::from(i.threshold) | u32::from(i.time) << 8,
            Feature::AsyncEventConfiguration(a) => a.bits(),
            Feature::Timestamp(_) => 0,
        }
    }

    /// The data Set Features sends for this value (the Timestamp's 8 bytes), if any.
    pub fn data(&self) -> Option<[u8; TIMESTAMP_DATA_SIZE]> {
        match self {
            Feature::Timestamp(t) => Some(t.to_bytes()),
            _ => None,
        }
    }

    /// The value as one number: the dword, or the Timestamp's milliseconds.
    pub fn raw(&self) -> u64 {
        match self {
            Feature::Timestamp(t) => t.millis,
            f => u64::from(f.dword()),
        }
    }

    /// The value from one number (as [`Feature::raw`]): a dword (refused above 32 bits),
    /// or for the Timestamp the milliseconds (refused above 48 bits).
    pub fn from_raw(id: FeatureId, value: u64) -> Option<Self> {
        match id {
            FeatureId::Timestamp => {
                (value <= TIMESTAMP_MASK).then_some(Feature::Timestamp(Timestamp {
                    millis: value,
                    ..Timestamp::default()
                }))
            }
            id => u32::try_from(value)
                .ok()
                .map(|dword| Feature::decode(id, dword, &[])),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dwords_round_trip_through_the_typed_values() {
        for id in FeatureId::ALL {
            assert_eq!(FeatureId::from_fid(id.fid()), Some(id));
            if id == FeatureId::Timestamp {
                continue;
            }
            let v = Feature::decode(id, 0x0000_0001, &[]);
            assert_eq!(v.id(), id);
            assert_eq!(v.dword(), 1, "{}", id.name());
        }
        assert_eq!(
            FeatureId::from_fid(0x03),
            None,
            "LBA Range Type is not typed"
        );
        let a = Feature::decode(FeatureId::Arbitration, 0x0403_0207, &[]);
        assert_eq!(
            a,
            Feature::Arbitration(Arbitration {
                burst: ARBITRATION_BURST_UNLIMITED,
                low_weight: 2,
                medium_weight: 3,
                high_weight: 4
            })
        );
        assert_eq!(a.dword(), 0x0403_0207);
        let t = Feature::decode(FeatureId::TemperatureThreshold, 0x0011_0157, &[]);
        let Feature::TemperatureThreshold(th) = t else {
            panic!()
        };
        assert_eq!(
            (th.kelvin, th.sensor, th.kind),
            (343, 1, ThresholdType::Under)
        );
        assert_eq!(t.dword(), 0x0011_0157);
        let e = Feature::decode(FeatureId::ErrorRecovery, 0x0001_0064, &[]);
        assert_eq!(
            e,
            Feature::ErrorRecovery(ErrorRecovery {
                tler: 100,
                dulbe: true
            })
        );
        let q = Feature::decode(FeatureId::NumberOfQueues, 0x003F_0007, &[]);
        assert_eq!(
            q,
            Feature::NumberOfQueues(NumberOfQueues {
                submission: 7,
                completion: 63
            })
        );
        let c = Feature::decode(FeatureId::InterruptCoalescing, 0x0A05, &[]);
        assert_eq!(
            c,
            Feature::InterruptCoalescing(InterruptCoalescing {
                threshold: 5,
                time: 10
            })
        );
        let aec = Feature::decode(FeatureId::AsyncEventConfiguration, 0x1FF, &[]);
        assert_eq!(
            aec,
            Feature::AsyncEventConfiguration(
                AsyncEventConfig::SMART_CRITICAL_WARNINGS | AsyncEventConfig::NAMESPACE_ATTRIBUTE
            )
        );
    }

    #[test]
    fn timestamp_data() {
        let t = Timestamp {
            millis: 0x0000_1234_5678_9ABC,
            synch: true,
            origin: 1,
        };
        let b = t.to_bytes();
        assert_eq!(b, [0xBC, 0x9A, 0x78, 0x56, 0x34, 0x12, 0b11, 0]);
        assert_eq!(Timestamp::from_bytes(&b), t);
        let f = Feature::from_raw(FeatureId::Timestamp, 5000).unwrap();
        assert_eq!(f.data().unwrap()[..2], [0x88, 0x13]);
        assert_eq!(f.raw(), 5000);
        assert_eq!(Feature::from_raw(FeatureId::Timestamp, 1 << 48), None);
        assert_eq!(
            Feature::from_raw(FeatureId::VolatileWriteCache, 1 << 32),
            None
        );
        assert_eq!(
            Feature::from_raw(FeatureId::VolatileWriteCache, 1),
            Some(Feature::VolatileWriteCache(true))
        );
    }
}
