//! A small set of values keyed by their type, read back by type on a hot path: the
//! slots in which fuseway's state keeps what each stage compiled or keeps (see
//! `fuseway::state`).
//!
//! `std::any::Any::downcast_ref` checks the value's type through its vtable on every
//! read. Here the type id is recorded once, when a value goes in (from the value
//! itself), so a read is a scan of a few inline ids and a cast: no allocation, no
//! virtual call. The first four values are stored inline.
//!
//! ```
//! use fuseway_type_slots::TypeSlots;
//!
//! let mut slots = TypeSlots::default();
//! slots.insert(7u32);
//! slots.insert(String::from("seven"));
//! assert_eq!(slots.get::<u32>(), Some(&7));
//! assert_eq!(slots.get::<String>().map(String::as_str), Some("seven"));
//! assert_eq!(slots.get::<u64>(), None);
//! slots.insert(8u32);
//! assert_eq!(slots.get::<u32>(), Some(&8), "one value per type");
//! ```

use std::any::{Any, TypeId};
use std::fmt;

use smallvec::SmallVec;

/// A type-erased value, as [`TypeSlots::insert_boxed`] takes it.
pub type AnyValue = Box<dyn Any + Send + Sync>;

struct Slot {
    /// The type of `value`, taken from the value itself when it was inserted.
    id: TypeId,
    value: AnyValue,
}

/// Values keyed by their type, one per type (see the [crate](crate) documentation).
#[derive(Default)]
pub struct TypeSlots(SmallVec<[Slot; 4]>);

impl TypeSlots {
    /// The value of type `T`, if there is one.
    #[inline]
    pub fn get<T: Any>(&self) -> Option<&T> {
        let id = TypeId::of::<T>();
        let slot = self.0.iter().find(|slot| slot.id == id)?;
        let value: *const (dyn Any + Send + Sync) = &*slot.value;
        // SAFETY: `slot.id` is the type id of the value `slot.value` points to (both set
        // together in `insert_boxed`, from the value), and it equals `T`'s: the value is
        // a `T`. The reference lives as long as `&self`, which owns the box.
        Some(unsafe { &*value.cast::<T>() })
    }

    /// The value of type `id` as `Any`, if there is one.
    pub fn get_any(&self, id: TypeId) -> Option<&(dyn Any + Send + Sync)> {
        self.0
            .iter()
            .find(|slot| slot.id == id)
            .map(|slot| &*slot.value)
    }

    /// Keep `value`, replacing the value of its type if there is one.
    pub fn insert<T: Any + Send + Sync>(&mut self, value: T) {
        self.insert_boxed(Box::new(value));
    }

    /// Keep a boxed value, replacing the value of its type if there is one.
    pub fn insert_boxed(&mut self, value: AnyValue) {
        // The value's own type (a virtual call, once per value).
        let id = (*value).type_id();
        self.0.retain(|slot| slot.id != id);
        self.0.push(Slot { id, value });
    }

    /// How many values it holds.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for TypeSlots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} typed values", self.0.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_boxed_value_is_found_under_its_own_type() {
        let mut slots = TypeSlots::default();
        slots.insert_boxed(Box::new(5u8));
        slots.insert_boxed(Box::new(vec![1u16, 2]));
        assert_eq!(slots.get::<u8>(), Some(&5));
        assert_eq!(slots.get::<Vec<u16>>(), Some(&vec![1, 2]));
        assert!(slots.get::<u16>().is_none());
        assert_eq!(slots.len(), 2);
        assert!(slots
            .get_any(TypeId::of::<u8>())
            .is_some_and(|v| v.is::<u8>()));
    }

    #[test]
    fn more_than_four_values_spill_and_stay_found() {
        let mut slots = TypeSlots::default();
        slots.insert(1u8);
        slots.insert(2u16);
        slots.insert(3u32);
        slots.insert(4u64);
        slots.insert(5u128);
        slots.insert(6i8);
        assert_eq!(
            (
                slots.get::<u8>(),
                slots.get::<u64>(),
                slots.get::<u128>(),
                slots.get::<i8>()
            ),
            (Some(&1), Some(&4), Some(&5), Some(&6))
        );
    }
}
