//! [`Kept`]: a value in a box that its thread keeps for the next value of its type.
//!
//! A value that rides in every request's future or response (which move by value
//! through the stages, each move a copy of the whole) is cheaper as a pointer to a box;
//! a box taken from and given back to its thread's own list costs no allocation once
//! the thread is warm.

use std::cell::RefCell;
use std::ops::{Deref, DerefMut};
use std::thread::LocalKey;

/// The boxes each thread keeps for a type (its `thread_local!` list, see [`Kept`]).
pub(crate) type Boxes<T> = RefCell<Vec<Box<Option<T>>>>;

/// A type whose values are [`Kept`] in boxes: its threads' lists of emptied boxes.
pub(crate) trait KeptBoxes: Sized + 'static {
    /// Most boxes a thread keeps; more are freed.
    const KEEP: usize;

    /// This thread's list.
    fn boxes() -> &'static LocalKey<Boxes<Self>>;
}

/// Implement [`KeptBoxes`] for a type: its threads keep up to `keep` emptied boxes.
///
/// ```ignore
/// kept_boxes!(Upstream, 256);
/// ```
macro_rules! kept_boxes {
    ($type:ty, $keep:expr) => {
        impl $crate::kept::KeptBoxes for $type {
            const KEEP: usize = $keep;

            fn boxes() -> &'static ::std::thread::LocalKey<$crate::kept::Boxes<Self>> {
                ::std::thread_local! {
                    static BOXES: $crate::kept::Boxes<$type> =
                        const { ::std::cell::RefCell::new(::std::vec::Vec::new()) };
                }
                &BOXES
            }
        }
    };
}
pub(crate) use kept_boxes;

/// A `T` in a box taken from its thread's list (or allocated when the list is empty)
/// and given back, emptied, when dropped: on the thread that drops it, so a value
/// dropped on another thread feeds that thread's list. The value is dropped first, as
/// it would be unboxed, and a kept box holds nothing of it.
pub(crate) struct Kept<T: KeptBoxes>(Option<Box<Option<T>>>);

impl<T: KeptBoxes> Kept<T> {
    pub(crate) fn new(value: T) -> Self {
        let mut boxed = T::boxes()
            .try_with(|boxes| boxes.borrow_mut().pop())
            .ok()
            .flatten()
            .unwrap_or_else(|| Box::new(None));
        *boxed = Some(value);
        Kept(Some(boxed))
    }
}

impl<T: KeptBoxes> Deref for Kept<T> {
    type Target = T;

    fn deref(&self) -> &T {
        self.0
            .as_deref()
            .and_then(Option::as_ref)
            .expect("set until dropped")
    }
}

impl<T: KeptBoxes> DerefMut for Kept<T> {
    fn deref_mut(&mut self) -> &mut T {
        self.0
            .as_deref_mut()
            .and_then(Option::as_mut)
            .expect("set until dropped")
    }
}

impl<T: KeptBoxes> Drop for Kept<T> {
    fn drop(&mut self) {
        let Some(mut boxed) = self.0.take() else {
            return;
        };
        *boxed = None;
        // `try_with`: a value dropped while its thread's locals are torn down.
        let _ = T::boxes().try_with(|boxes| {
            let mut boxes = boxes.borrow_mut();
            if boxes.len() < T::KEEP {
                boxes.push(boxed);
            }
        });
    }
}

impl<T: KeptBoxes + std::fmt::Debug> std::fmt::Debug for Kept<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Value(String);

    kept_boxes!(Value, 1);

    #[test]
    fn a_box_is_kept_by_its_thread_emptied_and_reused_up_to_the_limit() {
        let first = Kept::new(Value("a".into()));
        let at = std::ptr::from_ref::<Value>(&first) as usize;
        let other = Kept::new(Value("b".into()));
        drop(first);
        // Kept, and holding nothing of its value.
        Value::boxes().with(|b| assert!(b.borrow().len() == 1 && b.borrow()[0].is_none()));
        // Over the limit: freed.
        drop(other);
        Value::boxes().with(|b| assert_eq!(b.borrow().len(), 1));
        let mut second = Kept::new(Value("c".into()));
        assert_eq!(
            std::ptr::from_ref::<Value>(&second) as usize,
            at,
            "the same box"
        );
        let value: &mut Value = &mut second;
        value.0.push('d');
        assert_eq!(
            second.0.as_deref().and_then(Option::as_ref).unwrap().0,
            "cd"
        );
        Value::boxes().with(|b| assert!(b.borrow().is_empty()));
    }
}
