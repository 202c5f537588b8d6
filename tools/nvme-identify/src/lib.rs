//! The reports `nvme-identify` prints, as a library so the other tools print the same
//! fields under the same (nvme-cli 2.x) JSON keys: [`report`] (Identify Controller and
//! Namespace data, `id-ctrl` keys in [`report::IdCtrlFields`]) and [`health`] (the SMART /
//! Health Information and Error Information logs with `smart-log` / `error-log` keys), and
//! [`list`] (the controller list printed without a device, like `nvme list`).

pub mod health;
pub mod list;
pub mod report;
