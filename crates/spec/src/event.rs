//! Asynchronous events (NVMe Base 2.0 §5.2): what an Asynchronous Event Request's completion
//! dword 0 reports, and the Asynchronous Event Configuration feature (§5.27.1.7) that
//! chooses which events the controller sends.

/// Bits 2:0 of an AER completion's dword 0: the Asynchronous Event Type.
const TYPE_MASK: u32 = 0b111;
/// Bits 15:8: Asynchronous Event Information.
const INFO_SHIFT: u32 = 8;
/// Bits 23:16: Log Page Identifier to read (which also clears the event).
const LOG_PAGE_SHIFT: u32 = 16;

/// The kind of an asynchronous event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AsyncEventType {
    /// 0h: an error not tied to a command (Error Information log, 01h).
    ErrorStatus,
    /// 1h: SMART / Health status (a critical warning, SMART log 02h).
    SmartHealth,
    /// 2h: a notice (namespace attribute changed, firmware activation starting, ...).
    Notice,
    /// 3h: immediate.
    Immediate,
    /// 6h: I/O command set specific.
    IoCommandSetSpecific,
    /// 7h: vendor specific.
    VendorSpecific,
    /// A reserved value.
    Reserved(u8),
}

/// Asynchronous Event Type codes (completion dword 0 bits 2:0).
pub mod event_type {
    /// Error status.
    pub const ERROR_STATUS: u8 = 0x0;
    /// SMART / Health status.
    pub const SMART_HEALTH: u8 = 0x1;
    /// Notice.
    pub const NOTICE: u8 = 0x2;
    /// Immediate.
    pub const IMMEDIATE: u8 = 0x3;
    /// I/O command set specific status.
    pub const IO_COMMAND_SET_SPECIFIC: u8 = 0x6;
    /// Vendor specific.
    pub const VENDOR_SPECIFIC: u8 = 0x7;
}

impl AsyncEventType {
    fn from_bits(bits: u8) -> Self {
        match bits {
            event_type::ERROR_STATUS => Self::ErrorStatus,
            event_type::SMART_HEALTH => Self::SmartHealth,
            event_type::NOTICE => Self::Notice,
            event_type::IMMEDIATE => Self::Immediate,
            event_type::IO_COMMAND_SET_SPECIFIC => Self::IoCommandSetSpecific,
            event_type::VENDOR_SPECIFIC => Self::VendorSpecific,
            other => Self::Reserved(other),
        }
    }
}

/// Notice information values (event type 2h).
pub mod notice {
    /// Namespace Attribute Changed: read the Changed Namespace List (log 04h).
    pub const NAMESPACE_ATTRIBUTE_CHANGED: u8 = 0x00;
    /// Firmware Activation Starting.
    pub const FIRMWARE_ACTIVATION_STARTING: u8 = 0x01;
    /// Telemetry Log Changed.
    pub const TELEMETRY_LOG_CHANGED: u8 = 0x02;
}

/// One asynchronous event, decoded from an AER completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AsyncEvent {
    /// Event type.
    pub event_type: AsyncEventType,
    /// Event information (meaning depends on the type; see [`notice`]).
    pub info: u8,
    /// Log page that describes the event; reading it (without Retain Asynchronous Event)
    /// re-arms events of this type.
    pub log_page: u8,
}

impl AsyncEvent {
    /// Whether this is the Namespace Attribute Changed notice (the active namespace list or
    /// a namespace's Identify data changed; the Changed Namespace List names which).
    pub fn is_namespace_change(&self) -> bool {
        self.event_type == AsyncEventType::Notice
            && self.info == notice::NAMESPACE_ATTRIBUTE_CHANGED
    }

    /// Decodes completion dword 0 of an Asynchronous Event Request.
    pub fn from_dw0(dw0: u32) -> Self {
        Self {
            event_type: AsyncEventType::from_bits((dw0 & TYPE_MASK) as u8),
            info: (dw0 >> INFO_SHIFT) as u8,
            log_page: (dw0 >> LOG_PAGE_SHIFT) as u8,
        }
    }
}

/// Asynchronous Event Configuration (Set Features 0Bh) dword 11: SMART / Health critical
/// warnings (bits 7:0, one per Critical Warning bit).
pub const AEC_SMART_CRITICAL_WARNINGS: u32 = 0xFF;
/// Dword 11 bit 8: Namespace Attribute Notices.
pub const AEC_NAMESPACE_ATTRIBUTE_NOTICES: u32 = 1 << 8;
/// Dword 11 bit 9: Firmware Activation Notices.
pub const AEC_FIRMWARE_ACTIVATION_NOTICES: u32 = 1 << 9;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_completion_dword_0() {
        let e = AsyncEvent::from_dw0(0x0004_0002);
        assert_eq!(e.event_type, AsyncEventType::Notice);
        assert_eq!(e.info, notice::NAMESPACE_ATTRIBUTE_CHANGED);
        assert_eq!(e.log_page, 0x04);
        let e = AsyncEvent::from_dw0(0x0002_0101);
        assert_eq!(e.event_type, AsyncEventType::SmartHealth);
        assert_eq!((e.info, e.log_page), (1, 2));
        assert_eq!(
            AsyncEvent::from_dw0(5).event_type,
            AsyncEventType::Reserved(5)
        );
        assert_eq!(AsyncEvent::from_dw0(u32::MAX).log_page, 0xFF);
    }
}
