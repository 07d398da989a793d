//! Typed messages and reductions: a handler whose messages carry a value of one type, sends
//! that do not compile with another, and reductions generic over numbers and tuples of them.
//!
//! The byte API ([`Pe::register`], [`Pe::send`], [`Pe::reduce`]) stays underneath: a typed
//! handler is a byte handler that decodes its payload, and a typed send encodes straight into
//! the message it sends (one pass, no intermediate buffer). How a type goes on the wire is
//! its *codec*, a type parameter of the handler's [`Typed`] handle:
//!
//! | codec | the handler gets | a send takes | wire |
//! |---|---|---|---|
//! | [`Pod<T>`] | `T` | `&T` | its bytes as in memory (`T: bytemuck::Pod`) |
//! | [`Pods<T>`] | `Vec<T>` | `&[T]` | the elements' bytes as in memory, back to back |
//! | [`Elems<T>`] | `Vec<T>` | `&[T]` | each [`Elem`] little-endian, back to back: what reductions carry |
//! | [`Serde<T>`] | `T` | `&T` | postcard (`T: Serialize + DeserializeOwned`): strings, maps, enums |
//!
//! `Pod` and `Pods` copy memory as it is, so every process of a job must share byte order
//! (every host this runs on is little-endian); `Elems` and `Serde` are explicit about it.
//!
//! ```
//! use converse::typed::{Pod, Serde, Sum, Elems, ReduceTo};
//! #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
//! #[repr(C)]
//! struct Point { x: f64, y: f64 }
//!
//! # fn program(pe: &mut converse::Pe) {
//! let at = pe.register_typed::<Pod<Point>, _>("at", |pe, p: Point| {
//!     println!("PE {} is at {}, {}", pe.my_pe(), p.x, p.y);
//! });
//! let total = pe.register_typed::<Elems<(u64, f64)>, _>("total", |pe, v| {
//!     println!("{} PEs, sum {}", v[0].0, v[0].1);
//!     pe.exit(0);
//! });
//! pe.send_typed(0, at, &Point { x: 1.0, y: 2.0 });
//! // (count, value) summed component-wise over every PE, to PE 0.
//! pe.reduce_typed(&[(1u64, 0.5f64)], Sum, ReduceTo::Root(total));
//! # }
//! ```
//!
//! A send of the wrong type does not compile:
//!
//! ```compile_fail
//! use converse::typed::Pod;
//! # fn program(pe: &mut converse::Pe) {
//! let h = pe.register_typed::<Pod<u64>, _>("n", |_pe, _n: u64| {});
//! pe.send_typed(0, h, &1.5f64); // expected `u64`, found `f64`
//! # }
//! ```
//!
//! Nor does a reduction whose values are not the target's:
//!
//! ```compile_fail
//! use converse::typed::{Elems, ReduceTo, Sum};
//! # fn program(pe: &mut converse::Pe) {
//! let h = pe.register_typed::<Elems<u64>, _>("sum", |_pe, _v: Vec<u64>| {});
//! pe.reduce_typed(&[1u32], Sum, ReduceTo::Root(h)); // expected `u64`, found `u32`
//! # }
//! ```

use crate::collectives::ReduceTarget;
use crate::pe::{HandlerId, Pe};
use converse_machine::Message;
use std::marker::PhantomData;

/// Why a payload is not a value of a codec's type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The payload's length does not fit the type.
    #[error("{got} bytes are not {what} ({size}-byte values)")]
    Length {
        /// The codec's type.
        what: &'static str,
        /// Bytes of one value.
        size: usize,
        /// Bytes of the payload.
        got: usize,
    },
    /// The bytes do not decode (`Serde`).
    #[error("not a {what}: {why}")]
    Malformed {
        /// The codec's type.
        what: &'static str,
        /// What the decoder said.
        why: String,
    },
}

/// How values of one type go on the wire (see the module docs for the four given).
pub trait Codec: 'static {
    /// What a handler of this codec receives.
    type Value;
    /// What a send of this codec takes.
    type Ref: ?Sized;
    /// A message whose payload is `v` encoded.
    fn message(v: &Self::Ref) -> Message;
    /// The value `payload` encodes.
    ///
    /// # Errors
    /// [`DecodeError`] when it does not.
    fn decode(payload: &[u8]) -> Result<Self::Value, DecodeError>;
}

/// A handler registered with [`Pe::register_typed`]: its messages carry values of codec `C`.
/// `Copy`, and the same on every PE, as a [`HandlerId`] is.
pub struct Typed<C: Codec> {
    id: HandlerId,
    _codec: PhantomData<fn() -> C>,
}

impl<C: Codec> Typed<C> {
    /// The handler's id, for the byte API ([`Pe::send_msg`] of a message [`Codec::message`]
    /// made, say).
    pub fn id(self) -> HandlerId {
        self.id
    }
}

impl<C: Codec> Clone for Typed<C> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<C: Codec> Copy for Typed<C> {}

impl<C: Codec> std::fmt::Debug for Typed<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Typed<{}>({})",
            std::any::type_name::<C>(),
            self.id.raw()
        )
    }
}

/// The codecs are markers, never values: `Debug` prints their name.
macro_rules! marker_debug {
    ($($c:ident),*) => {$(
        impl<T> std::fmt::Debug for $c<T> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(std::any::type_name::<Self>())
            }
        }
    )*};
}
marker_debug!(Pod, Pods, Serde, Elems);

/// A plain-old-data value, its bytes as in memory ([`bytemuck::Pod`]: `#[repr(C)]`, no
/// padding, every bit pattern valid).
pub struct Pod<T>(PhantomData<T>);

impl<T: bytemuck::Pod> Codec for Pod<T> {
    type Value = T;
    type Ref = T;

    #[inline]
    fn message(v: &T) -> Message {
        Message::from_payload(bytemuck::bytes_of(v))
    }

    #[inline]
    fn decode(p: &[u8]) -> Result<T, DecodeError> {
        // Unaligned: a payload starts wherever the envelope ends.
        bytemuck::try_pod_read_unaligned(p).map_err(|_| DecodeError::Length {
            what: std::any::type_name::<T>(),
            size: std::mem::size_of::<T>(),
            got: p.len(),
        })
    }
}

/// A slice of plain-old-data values, their bytes as in memory, back to back.
pub struct Pods<T>(PhantomData<T>);

impl<T: bytemuck::Pod> Codec for Pods<T> {
    type Value = Vec<T>;
    type Ref = [T];

    fn message(v: &[T]) -> Message {
        Message::from_payload(bytemuck::cast_slice(v))
    }

    fn decode(p: &[u8]) -> Result<Vec<T>, DecodeError> {
        let size = std::mem::size_of::<T>();
        if size == 0 || !p.len().is_multiple_of(size) {
            return Err(DecodeError::Length {
                what: std::any::type_name::<T>(),
                size,
                got: p.len(),
            });
        }
        // One copy, into memory aligned for `T`.
        Ok(bytemuck::pod_collect_to_vec(p))
    }
}

/// A value of a type [`Serialize`](serde::Serialize) and
/// [`Deserialize`](serde::Deserialize) know, in postcard's compact format.
pub struct Serde<T>(PhantomData<T>);

/// postcard's output: straight into the message.
struct IntoMessage(Message);

impl postcard::ser_flavors::Flavor for IntoMessage {
    type Output = Message;

    fn try_push(&mut self, b: u8) -> postcard::Result<()> {
        self.0.extend_payload(&[b]);
        Ok(())
    }

    fn try_extend(&mut self, data: &[u8]) -> postcard::Result<()> {
        self.0.extend_payload(data);
        Ok(())
    }

    fn finalize(self) -> postcard::Result<Message> {
        Ok(self.0)
    }
}

impl<T: serde::Serialize + serde::de::DeserializeOwned + 'static> Codec for Serde<T> {
    type Value = T;
    type Ref = T;

    fn message(v: &T) -> Message {
        // Encoding into a growing buffer fails only on a type serde cannot describe to
        // postcard (a map of unknown length, say): a defect of the program, not of its input.
        postcard::serialize_with_flavor(v, IntoMessage(Message::with_capacity(64))).unwrap_or_else(
            |e| {
                panic!(
                    "a {} cannot be encoded by postcard: {e}",
                    std::any::type_name::<T>()
                )
            },
        )
    }

    fn decode(p: &[u8]) -> Result<T, DecodeError> {
        let what = std::any::type_name::<T>();
        match postcard::take_from_bytes(p) {
            Ok((v, [])) => Ok(v),
            Ok((_, rest)) => Err(DecodeError::Malformed {
                what,
                why: format!("{} bytes left over", rest.len()),
            }),
            Err(e) => Err(DecodeError::Malformed {
                what,
                why: e.to_string(),
            }),
        }
    }
}

/// A value with a fixed-size, little-endian wire form: the numbers, `bool`, tuples of them,
/// and [`Located`]. What [`Elems`] carries and reductions fold.
pub trait Elem: Copy + 'static {
    /// Bytes of the wire form: at least one (an [`Elems`] of a zero-sized type does not
    /// compile).
    const SIZE: usize;
    /// Write the wire form into `out` (`SIZE` bytes).
    fn put(self, out: &mut [u8]);
    /// The value whose wire form `b` (`SIZE` bytes) is.
    fn get(b: &[u8]) -> Self;
}

macro_rules! numbers {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            #[inline]
            fn put(self, out: &mut [u8]) {
                out.copy_from_slice(&self.to_le_bytes());
            }
            #[inline]
            fn get(b: &[u8]) -> Self {
                let mut w = [0u8; std::mem::size_of::<$t>()];
                w.copy_from_slice(b);
                <$t>::from_le_bytes(w)
            }
        }
    )*};
}
numbers!(u8, u16, u32, u64, u128, i8, i16, i32, i64, i128, f32, f64);

impl Elem for bool {
    const SIZE: usize = 1;
    fn put(self, out: &mut [u8]) {
        out[0] = u8::from(self);
    }
    fn get(b: &[u8]) -> Self {
        b[0] != 0
    }
}

macro_rules! tuples {
    ($(($($n:ident $i:tt),+)),*) => {$(
        impl<$($n: Elem),+> Elem for ($($n,)+) {
            const SIZE: usize = 0 $(+ $n::SIZE)+;
            fn put(self, out: &mut [u8]) {
                let mut at = 0;
                $(
                    self.$i.put(&mut out[at..at + $n::SIZE]);
                    at += $n::SIZE;
                )+
                let _ = at;
            }
            fn get(b: &[u8]) -> Self {
                let mut at = 0;
                ($({
                    let v = $n::get(&b[at..at + $n::SIZE]);
                    at += $n::SIZE;
                    let _ = at;
                    v
                },)+)
            }
        }
    )*};
}
tuples!((A 0, B 1), (A 0, B 1, C 2), (A 0, B 1, C 2, D 3));

/// A value and where it came from (a PE, an index), for [`MinLoc`] and [`MaxLoc`]: MPI's
/// `MPI_MINLOC` pairs. Ties go to the smaller `at`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Located<T> {
    /// The value compared.
    pub value: T,
    /// Where it is.
    pub at: u64,
}

impl<T: Elem> Elem for Located<T> {
    const SIZE: usize = T::SIZE + 8;
    fn put(self, out: &mut [u8]) {
        self.value.put(&mut out[..T::SIZE]);
        self.at.put(&mut out[T::SIZE..]);
    }
    fn get(b: &[u8]) -> Self {
        Located {
            value: T::get(&b[..T::SIZE]),
            at: u64::get(&b[T::SIZE..]),
        }
    }
}

/// Values of [`Elem`]s, each little-endian, back to back.
pub struct Elems<T>(PhantomData<T>);

impl<T: Elem> Codec for Elems<T> {
    type Value = Vec<T>;
    type Ref = [T];

    fn message(v: &[T]) -> Message {
        const { assert!(T::SIZE > 0, "an Elem's wire form has at least one byte") };
        let mut m = Message::new(v.len() * T::SIZE);
        for (x, out) in v.iter().zip(m.payload_mut().chunks_exact_mut(T::SIZE)) {
            x.put(out);
        }
        m
    }

    fn decode(p: &[u8]) -> Result<Vec<T>, DecodeError> {
        const { assert!(T::SIZE > 0, "an Elem's wire form has at least one byte") };
        if !p.len().is_multiple_of(T::SIZE) {
            return Err(DecodeError::Length {
                what: std::any::type_name::<T>(),
                size: T::SIZE,
                got: p.len(),
            });
        }
        Ok(p.chunks_exact(T::SIZE).map(T::get).collect())
    }
}

/// How a reduction folds one value into another. It must be associative and commutative:
/// contributions are folded in the order they arrive. Tuples fold component-wise with the
/// same operation.
pub trait ReduceOp<T>: Copy + 'static {
    /// Its name, for errors.
    const NAME: &'static str;
    /// Fold `x` into `acc`.
    fn fold(acc: &mut T, x: T);
}

macro_rules! op {
    ($(#[$doc:meta])* $op:ident, $name:literal, [$($t:ty),*], |$a:ident, $x:ident| $e:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, Default)]
        pub struct $op;
        $(
            impl ReduceOp<$t> for $op {
                const NAME: &'static str = concat!("typed::", $name);
                #[inline]
                fn fold($a: &mut $t, $x: $t) {
                    *$a = $e;
                }
            }
        )*
    };
}

op!(
    /// Sum (integers wrap, as `wrapping_add`).
    Sum, "Sum", [u8, u16, u32, u64, u128, i8, i16, i32, i64, i128],
    |a, x| a.wrapping_add(x)
);
impl ReduceOp<f32> for Sum {
    const NAME: &'static str = "typed::Sum";
    fn fold(a: &mut f32, x: f32) {
        *a += x;
    }
}
impl ReduceOp<f64> for Sum {
    const NAME: &'static str = "typed::Sum";
    fn fold(a: &mut f64, x: f64) {
        *a += x;
    }
}
op!(
    /// Product (integers wrap, as `wrapping_mul`).
    Product, "Product", [u8, u16, u32, u64, u128, i8, i16, i32, i64, i128],
    |a, x| a.wrapping_mul(x)
);
impl ReduceOp<f32> for Product {
    const NAME: &'static str = "typed::Product";
    fn fold(a: &mut f32, x: f32) {
        *a *= x;
    }
}
impl ReduceOp<f64> for Product {
    const NAME: &'static str = "typed::Product";
    fn fold(a: &mut f64, x: f64) {
        *a *= x;
    }
}
op!(
    /// Minimum (of floats: a NaN loses to any number, as `f64::min`).
    Min, "Min", [u8, u16, u32, u64, u128, i8, i16, i32, i64, i128, bool],
    |a, x| Ord::min(*a, x)
);
op!(
    /// Maximum (of floats: a NaN loses to any number, as `f64::max`).
    Max, "Max", [u8, u16, u32, u64, u128, i8, i16, i32, i64, i128, bool],
    |a, x| Ord::max(*a, x)
);
macro_rules! float_min_max {
    ($($t:ty),*) => {$(
        impl ReduceOp<$t> for Min {
            const NAME: &'static str = "typed::Min";
            fn fold(a: &mut $t, x: $t) {
                *a = a.min(x);
            }
        }
        impl ReduceOp<$t> for Max {
            const NAME: &'static str = "typed::Max";
            fn fold(a: &mut $t, x: $t) {
                *a = a.max(x);
            }
        }
    )*};
}
float_min_max!(f32, f64);
op!(
    /// Bitwise and.
    BitAnd, "BitAnd", [u8, u16, u32, u64, u128, i8, i16, i32, i64, i128, bool],
    |a, x| *a & x
);
op!(
    /// Bitwise or.
    BitOr, "BitOr", [u8, u16, u32, u64, u128, i8, i16, i32, i64, i128, bool],
    |a, x| *a | x
);
op!(
    /// Bitwise exclusive or.
    BitXor, "BitXor", [u8, u16, u32, u64, u128, i8, i16, i32, i64, i128, bool],
    |a, x| *a ^ x
);
op!(
    /// Logical and: whether every PE's value is true.
    And, "And", [bool],
    |a, x| *a && x
);
op!(
    /// Logical or: whether some PE's value is true.
    Or, "Or", [bool],
    |a, x| *a || x
);

/// The smallest value and where it is (ties: the smaller `at`).
#[derive(Debug, Clone, Copy, Default)]
pub struct MinLoc;
/// The largest value and where it is (ties: the smaller `at`).
#[derive(Debug, Clone, Copy, Default)]
pub struct MaxLoc;

/// Whether `x` should replace `a` in a located minimum (`less`) or maximum: a value that
/// compares with nothing (a NaN) loses to any that does, whatever the order of arrival, so
/// the fold stays commutative.
fn located_wins<T: PartialOrd>(x: &Located<T>, a: &Located<T>, less: bool) -> bool {
    let ordered = |v: &T| v.partial_cmp(v).is_some();
    match (ordered(&x.value), ordered(&a.value)) {
        (true, false) => true,
        (false, true) => false,
        (false, false) => x.at < a.at,
        (true, true) => {
            let better = if less {
                x.value < a.value
            } else {
                x.value > a.value
            };
            better || (x.value == a.value && x.at < a.at)
        }
    }
}

impl<T: Elem + PartialOrd> ReduceOp<Located<T>> for MinLoc {
    const NAME: &'static str = "typed::MinLoc";
    fn fold(a: &mut Located<T>, x: Located<T>) {
        if located_wins(&x, a, true) {
            *a = x;
        }
    }
}

impl<T: Elem + PartialOrd> ReduceOp<Located<T>> for MaxLoc {
    const NAME: &'static str = "typed::MaxLoc";
    fn fold(a: &mut Located<T>, x: Located<T>) {
        if located_wins(&x, a, false) {
            *a = x;
        }
    }
}

macro_rules! tuple_ops {
    ($(($($n:ident $i:tt),+)),*) => {$(
        impl<O, $($n: Elem),+> ReduceOp<($($n,)+)> for O
        where
            O: TupleOp $(+ ReduceOp<$n>)+,
        {
            const NAME: &'static str = <O as TupleOp>::NAME;
            fn fold(a: &mut ($($n,)+), x: ($($n,)+)) {
                $(<O as ReduceOp<$n>>::fold(&mut a.$i, x.$i);)+
            }
        }
    )*};
}

/// The operations that fold tuples component-wise (every one but [`MinLoc`] and
/// [`MaxLoc`], which pair a value with its place themselves).
pub trait TupleOp: Copy + 'static {
    /// Its name, for errors.
    const NAME: &'static str;
}
macro_rules! tuple_op_names {
    ($($op:ident),*) => {$(
        impl TupleOp for $op {
            const NAME: &'static str = concat!("typed::", stringify!($op));
        }
    )*};
}
tuple_op_names!(Sum, Product, Min, Max, BitAnd, BitOr, BitXor, And, Or);
tuple_ops!((A 0, B 1), (A 0, B 1, C 2), (A 0, B 1, C 2, D 3));

/// Where a typed reduction's result goes: a handler of the same element type, so that a
/// reduction of other values does not compile.
#[derive(Debug)]
pub enum ReduceTo<T: Elem> {
    /// To this handler on PE 0.
    Root(Typed<Elems<T>>),
    /// To this handler on every PE (an all-reduce).
    All(Typed<Elems<T>>),
}

impl<T: Elem> Clone for ReduceTo<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: Elem> Copy for ReduceTo<T> {}

impl Pe {
    /// Register a typed handler: `handler` gets each message's payload decoded as codec `C`
    /// says (module docs), and [`send_typed`](Pe::send_typed) sends it only values of that
    /// type. Otherwise as [`register`](Pe::register) (same panics). A payload that does not
    /// decode (bytes sent to it with the byte API, of another length) ends the job with a
    /// line naming the handler, the sender and the lengths: a wrong value would be worse.
    pub fn register_typed<C, F>(&mut self, name: &str, handler: F) -> Typed<C>
    where
        C: Codec,
        F: Fn(&mut Pe, C::Value) + 'static,
    {
        let owned = name.to_owned();
        let id = self.register(name, move |pe, msg| match C::decode(msg.payload()) {
            Ok(v) => handler(pe, v),
            Err(e) => pe.abort(&format!(
                "typed handler '{owned}' got a message from PE {} it cannot decode: {e}",
                msg.src_pe()
            )),
        });
        Typed {
            id,
            _codec: PhantomData,
        }
    }

    /// Send `value` to typed handler `h` on PE `dest`, encoded into the message sent (one
    /// pass). As [`send`](Pe::send) otherwise.
    ///
    /// # Panics
    /// When `dest` is not a PE of the job.
    #[inline]
    pub fn send_typed<C: Codec>(&mut self, dest: usize, h: Typed<C>, value: &C::Ref) {
        self.send_msg(dest, h.id, C::message(value));
    }

    /// Send `value` to typed handler `h` on each PE of `dests`: encoded once, a copy of the
    /// message per PE. As [`multicast`](Pe::multicast) otherwise.
    ///
    /// # Panics
    /// When a PE of `dests` is not a PE of the job.
    pub fn multicast_typed<C: Codec>(&mut self, dests: &[usize], h: Typed<C>, value: &C::Ref) {
        let Some((&last, rest)) = dests.split_last() else {
            return;
        };
        let msg = C::message(value);
        for &d in rest {
            // A copy per destination: each message is handed over, and the layer owns it.
            self.send_msg(d, h.id, msg.clone());
        }
        self.send_msg(last, h.id, msg);
    }

    /// Send `value` to typed handler `h` on node `node`, run there by the first of its PEs
    /// free to take it. As [`send_node`](Pe::send_node) otherwise.
    ///
    /// # Panics
    /// When `node` is not a node of the job.
    pub fn send_node_typed<C: Codec>(&mut self, node: usize, h: Typed<C>, value: &C::Ref) {
        self.send_node_msg(node, h.id, C::message(value));
    }

    /// Broadcast `value` to typed handler `h` on every other node, once per node. As
    /// [`broadcast_node`](Pe::broadcast_node) otherwise.
    pub fn broadcast_node_typed<C: Codec>(&mut self, h: Typed<C>, value: &C::Ref) {
        self.broadcast_node_msg(h.id, C::message(value));
    }

    /// Broadcast `value` to typed handler `h` on every node, this PE's included. As
    /// [`broadcast_node_all`](Pe::broadcast_node_all) otherwise.
    pub fn broadcast_node_all_typed<C: Codec>(&mut self, h: Typed<C>, value: &C::Ref) {
        self.broadcast_node_all_msg(h.id, C::message(value));
    }

    /// Broadcast `value` to typed handler `h` on every other PE.
    pub fn broadcast_typed<C: Codec>(&mut self, h: Typed<C>, value: &C::Ref) {
        self.broadcast_msg(h.id, C::message(value));
    }

    /// Broadcast `value` to typed handler `h` on every PE, this one included.
    pub fn broadcast_all_typed<C: Codec>(&mut self, h: Typed<C>, value: &C::Ref) {
        self.broadcast_all_msg(h.id, C::message(value));
    }

    /// Contribute `values` to the next reduction, folded element by element with `op`; the
    /// result reaches `target`'s handler as a `Vec<T>`. As [`reduce`](Pe::reduce) otherwise:
    /// every PE calls its reductions in the same order with the same operation, and one
    /// whose contribution has another number of values ends the job with a line naming both
    /// PEs and the lengths.
    ///
    /// ```no_run
    /// use converse::typed::{Elems, Located, MaxLoc, ReduceTo};
    /// converse::run(|pe| {
    ///     let worst = pe.register_typed::<Elems<Located<f64>>, _>("worst", |pe, v| {
    ///         println!("largest residual {} on PE {}", v[0].value, v[0].at);
    ///         pe.exit(0);
    ///     });
    ///     let mine = Located { value: 1.0 / (1.0 + pe.my_pe() as f64), at: pe.my_pe() as u64 };
    ///     pe.reduce_typed(&[mine], MaxLoc, ReduceTo::Root(worst));
    /// });
    /// ```
    pub fn reduce_typed<T, O>(&mut self, values: &[T], op: O, target: ReduceTo<T>)
    where
        T: Elem,
        O: ReduceOp<T>,
    {
        let _ = op;
        let mine = Elems::<T>::message(values);
        let target = match target {
            ReduceTo::Root(h) => ReduceTarget::Root(h.id),
            ReduceTo::All(h) => ReduceTarget::All(h.id),
        };
        self.reduce(mine.payload(), fold::<T, O>, target);
    }
}

/// The byte-level combine function of a typed reduction: decode each pair of values, fold,
/// encode back in place.
#[allow(clippy::ptr_arg)] // the `Combine` signature, which may grow the accumulator
fn fold<T: Elem, O: ReduceOp<T>>(acc: &mut Vec<u8>, x: &[u8]) {
    if acc.len() != x.len() || !acc.len().is_multiple_of(T::SIZE) {
        crate::ops::mismatch(O::NAME, T::SIZE, acc.len(), x.len());
        return;
    }
    for (a, b) in acc.chunks_exact_mut(T::SIZE).zip(x.chunks_exact(T::SIZE)) {
        let mut v = T::get(a);
        O::fold(&mut v, T::get(b));
        v.put(a);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round<C: Codec>(v: &C::Ref) -> C::Value {
        let m = C::message(v);
        C::decode(m.payload()).unwrap_or_else(|e| panic!("{e}"))
    }

    #[derive(Debug, Clone, Copy, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
    #[repr(C)]
    struct P {
        x: f64,
        n: u32,
        k: u32,
    }

    #[test]
    fn codecs_round_trip() {
        let p = P { x: 2.5, n: 7, k: 9 };
        assert_eq!(round::<Pod<P>>(&p), p);
        assert_eq!(round::<Pods<P>>(&[p, p]), vec![p, p]);
        let t = [(1u8, -2i64, 0.5f32), (3, 4, 8.0)];
        assert_eq!(round::<Elems<(u8, i64, f32)>>(&t), t.to_vec());
        let s = (String::from("halo"), vec![1u16, 2, 3], Some(-4i32));
        assert_eq!(round::<Serde<(String, Vec<u16>, Option<i32>)>>(&s), s);
    }

    #[test]
    fn wrong_payloads_are_errors() {
        assert!(matches!(
            Pod::<u64>::decode(&[1, 2, 3]),
            Err(DecodeError::Length {
                size: 8,
                got: 3,
                ..
            })
        ));
        assert!(Pods::<u32>::decode(&[0; 6]).is_err());
        assert!(Elems::<(u8, u16)>::decode(&[0; 4]).is_err());
        assert!(Serde::<String>::decode(&[200]).is_err());
        // Bytes left over after a value are not that value.
        let mut m = Serde::<u8>::message(&5);
        m.extend_payload(&[0]);
        assert!(Serde::<u8>::decode(m.payload()).is_err());
    }

    fn folded<T: Elem, O: ReduceOp<T>>(a: &[T], b: &[T]) -> Vec<T> {
        let mut acc = Elems::<T>::message(a).payload().to_vec();
        fold::<T, O>(&mut acc, Elems::<T>::message(b).payload());
        Elems::<T>::decode(&acc).unwrap_or_default()
    }

    #[test]
    fn operations_fold_numbers_tuples_and_places() {
        assert_eq!(folded::<i32, Sum>(&[1, -5], &[2, 3]), [3, -2]);
        assert_eq!(folded::<f64, Product>(&[1.5], &[4.0]), [6.0]);
        assert_eq!(folded::<i8, Min>(&[-3, 9], &[2, -100]), [-3, -100]);
        assert_eq!(folded::<f32, Max>(&[1.0], &[f32::NAN]), [1.0]);
        assert_eq!(folded::<f64, Min>(&[f64::NAN], &[1.0]), [1.0]);
        assert_eq!(folded::<u8, BitXor>(&[0b1100], &[0b1010]), [0b0110]);
        assert_eq!(
            folded::<bool, And>(&[true, true], &[true, false]),
            [true, false]
        );
        assert_eq!(folded::<bool, Or>(&[false], &[true]), [true]);
        assert_eq!(
            folded::<(u64, f64), Sum>(&[(1, 0.25)], &[(2, 0.5)]),
            [(3, 0.75)]
        );
        assert_eq!(folded::<(i16, u32), Max>(&[(5, 1)], &[(-1, 7)]), [(5, 7)]);
        let l = |value, at| Located { value, at };
        assert_eq!(
            folded::<Located<f64>, MinLoc>(&[l(2.0, 3)], &[l(2.0, 1)]),
            [l(2.0, 1)]
        );
        // A NaN loses in either order.
        let nan = l(f64::NAN, 0);
        assert_eq!(
            folded::<Located<f64>, MaxLoc>(&[nan], &[l(1.0, 5)]),
            [l(1.0, 5)]
        );
        assert_eq!(
            folded::<Located<f64>, MaxLoc>(&[l(1.0, 5)], &[nan]),
            [l(1.0, 5)]
        );
        let li = |value: i32, at| Located { value, at };
        assert_eq!(
            folded::<Located<i32>, MaxLoc>(&[li(2, 3)], &[li(9, 4)]),
            [li(9, 4)]
        );
    }

    #[test]
    fn a_contribution_of_another_length_is_a_mismatch_and_folds_nothing() {
        let _ = crate::ops::take_mismatch();
        let mut acc = Elems::<u64>::message(&[1, 2]).payload().to_vec();
        let before = acc.clone();
        fold::<u64, Sum>(&mut acc, Elems::<u32>::message(&[1, 2]).payload());
        assert_eq!(acc, before);
        assert_eq!(crate::ops::take_mismatch(), Some(("typed::Sum", 8, 16, 8)));
    }
}
