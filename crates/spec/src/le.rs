//! Little-endian field codec shared by every wire structure in this crate.
//!
//! [`LeField`] reads and writes one field at a byte offset. The `wire_struct!` macro declares a
//! `#[repr(C)]` struct together with the offset of each field, asserts at compile time that the
//! declared offsets and total size match the Rust layout, and derives `from_bytes`/`to_bytes`
//! from the same offsets, so the parser cannot drift from the layout.

/// A fixed-size value stored little-endian in a device structure.
pub trait LeField: Sized {
    /// Encoded size in bytes; equal to `size_of::<Self>()` (checked by `wire_struct!`).
    const SIZE: usize;
    /// Decodes `Self` from the first [`Self::SIZE`] bytes of `b`.
    fn read_le(b: &[u8]) -> Self;
    /// Encodes `self` into the first [`Self::SIZE`] bytes of `out`.
    fn write_le(&self, out: &mut [u8]);
}

macro_rules! le_int {
    ($($t:ty),*) => {$(
        impl LeField for $t {
            const SIZE: usize = core::mem::size_of::<$t>();
            fn read_le(b: &[u8]) -> Self {
                let mut raw = [0u8; core::mem::size_of::<$t>()];
                raw.copy_from_slice(&b[..Self::SIZE]);
                <$t>::from_le_bytes(raw)
            }
            fn write_le(&self, out: &mut [u8]) {
                out[..Self::SIZE].copy_from_slice(&self.to_le_bytes());
            }
        }
    )*};
}
le_int!(u8, u16, u32, u64, u128);

impl<T: LeField, const N: usize> LeField for [T; N] {
    const SIZE: usize = T::SIZE * N;
    fn read_le(b: &[u8]) -> Self {
        core::array::from_fn(|i| T::read_le(&b[i * T::SIZE..]))
    }
    fn write_le(&self, out: &mut [u8]) {
        for (i, v) in self.iter().enumerate() {
            v.write_le(&mut out[i * T::SIZE..]);
        }
    }
}

/// Declares a `#[repr(C)]` wire structure: `field @ offset: Type` per field, then `; size N`.
///
/// Generates compile-time size/offset asserts, an [`LeField`] impl and inherent
/// `from_bytes(&[u8; N])` / `to_bytes() -> [u8; N]` methods.
macro_rules! wire_struct {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$fmeta:meta])* $field:ident @ $off:literal : $ty:ty ),* $(,)?
        }
        size $size:literal;
    ) => {
        $(#[$meta])*
        #[repr(C)]
        pub struct $name {
            $( $(#[$fmeta])* pub $field: $ty, )*
        }

        const _: () = {
            assert!(core::mem::size_of::<$name>() == $size);
            assert!(<$name as $crate::le::LeField>::SIZE == $size);
            $(
                assert!(core::mem::offset_of!($name, $field) == $off);
                assert!(core::mem::size_of::<$ty>() == <$ty as $crate::le::LeField>::SIZE);
            )*
        };

        impl $crate::le::LeField for $name {
            const SIZE: usize = $size;
            fn read_le(b: &[u8]) -> Self {
                Self { $( $field: <$ty as $crate::le::LeField>::read_le(&b[$off..]), )* }
            }
            fn write_le(&self, out: &mut [u8]) {
                $( $crate::le::LeField::write_le(&self.$field, &mut out[$off..]); )*
            }
        }

        impl $name {
            /// Size of the structure in bytes as laid out by the specification.
            pub const SIZE: usize = $size;

            /// Decodes the structure from its little-endian wire form.
            pub fn from_bytes(b: &[u8; $size]) -> Self {
                <Self as $crate::le::LeField>::read_le(b)
            }

            /// Encodes the structure into its little-endian wire form.
            pub fn to_bytes(&self) -> [u8; $size] {
                let mut out = [0u8; $size];
                $crate::le::LeField::write_le(self, &mut out);
                out
            }
        }
    };
}
