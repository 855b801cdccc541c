//! Window bounds at the edges of time: every computation saturates, so an
//! event at any `i64` millisecond (`i64::MIN` and `i64::MAX` included)
//! belongs to windows whose bounds are clipped to the representable range,
//! instead of wrapping around or panicking. A window whose end would lie
//! past `i64::MAX` ends at `i64::MAX` and then includes that instant: it
//! fires at the end of input.
//!
//! ```
//! use streamwork::window::ends::{ends, first_end_containing, last_end_containing};
//! // Windows of 10 ms every 5 ms holding t = 12: [5, 15) and [10, 20).
//! let (first, last) = (first_end_containing(10, 5, 12), last_end_containing(10, 5, 12));
//! assert_eq!(ends(first, last, 5).collect::<Vec<_>>(), [15, 20]);
//! // At the end of time: clipped, not wrapped.
//! assert_eq!(last_end_containing(10, 5, i64::MAX), i64::MAX);
//! ```

/// The start of slice `index` of `len` milliseconds (clipped at `i64::MIN`).
#[inline]
pub fn slice_start(index: i64, len: i64) -> i64 {
    index.saturating_mul(len)
}

/// The end of the last window (of `size`, every `slide`) containing `t`.
#[inline]
pub fn last_end_containing(size: i64, slide: i64, t: i64) -> i64 {
    let exact = t
        .div_euclid(slide)
        .checked_mul(slide)
        .and_then(|start| start.checked_add(size));
    exact.unwrap_or_else(|| clip(wide(t).div_euclid(wide(slide)) * wide(slide) + wide(size)))
}

/// The end of the first window (of `size`, every `slide`) containing `t`.
#[inline]
pub fn first_end_containing(size: i64, slide: i64, t: i64) -> i64 {
    let exact = t
        .checked_sub(size)
        .and_then(|d| d.div_euclid(slide).checked_add(1))
        .and_then(|k| k.checked_mul(slide))
        .and_then(|start| start.checked_add(size));
    exact.unwrap_or_else(|| {
        let k = (wide(t) - wide(size)).div_euclid(wide(slide)) + 1;
        clip(k * wide(slide) + wide(size))
    })
}

/// Far from the edges every bound is exact in `i64`; near them, it is
/// computed in `i128` and clipped.
fn wide(v: i64) -> i128 {
    i128::from(v)
}

fn clip(v: i128) -> i64 {
    i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
}

/// The last instant of the window ending at `end`: `end - 1`, or `end`
/// itself for a window clipped at the end of time.
#[inline]
pub fn last_instant(end: i64) -> i64 {
    if end == i64::MAX { end } else { end - 1 }
}

/// The window end after `end`: `end + slide`, or the end of time for the
/// windows that would end past it (all clipped into one); `None` after that.
#[inline]
pub fn next_end(end: i64, slide: i64) -> Option<i64> {
    end.checked_add(slide)
        .or((end < i64::MAX).then_some(i64::MAX))
}

/// The window ends `first`, `first + slide`, ... up to `last`, ending with
/// the window clipped at the end of time rather than wrapping.
pub fn ends(first: i64, last: i64, slide: i64) -> impl Iterator<Item = i64> {
    let mut next = Some(first);
    std::iter::from_fn(move || {
        let end = next.filter(|&end| end <= last)?;
        next = next_end(end, slide);
        Some(end)
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Far from the edges, the bounds are the exact ones; everywhere,
        /// `t` lies within the clipped windows and nothing overflows.
        #[test]
        fn windows_contain_their_events_at_any_time(
            t in any::<i64>(),
            size in 1i64..1_000_000,
            slide_div in 1i64..100,
        ) {
            let slide = (size / slide_div).max(1);
            let (first, last) = (first_end_containing(size, slide, t), last_end_containing(size, slide, t));
            prop_assert!(first <= last);
            for end in ends(first, last, slide).take(200) {
                let start = end.saturating_sub(size);
                prop_assert!(start <= t && t <= last_instant(end), "{t} in [{start}, {end})");
            }
            let safe = i64::MIN / 4..i64::MAX / 4;
            if safe.contains(&t) {
                prop_assert_eq!(last, t.div_euclid(slide) * slide + size);
                prop_assert_eq!(first, ((t - size).div_euclid(slide) + 1) * slide + size);
                prop_assert_eq!(ends(first, last, slide).count() as i64, (last - first) / slide + 1);
            }
        }
    }

    #[test]
    fn the_edges_of_time_are_clipped() {
        assert_eq!(last_end_containing(10, 10, i64::MAX), i64::MAX);
        assert_eq!(first_end_containing(10, 5, i64::MAX), i64::MAX);
        assert_eq!(
            ends(i64::MAX - 3, i64::MAX, 5).collect::<Vec<_>>(),
            [i64::MAX - 3, i64::MAX]
        );
        assert_eq!(ends(i64::MAX, i64::MAX, 5).collect::<Vec<_>>(), [i64::MAX]);
        assert_eq!(slice_start((i64::MIN + 1).div_euclid(1000), 1000), i64::MIN);
        // The first window holding `i64::MIN` starts before it: clipped.
        assert_eq!(first_end_containing(10, 5, i64::MIN), i64::MIN + 3);
        assert_eq!(last_instant(i64::MAX), i64::MAX);
    }
}
