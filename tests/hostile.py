"""Hostile values for the fuzz tests (pages and API): what the issue #15 attack used.

NUL characters (PostgreSQL text cannot hold them), unicode digits (``"²".isdigit()`` is true
and ``int("²")`` raises), huge and negative numbers (overflowing timedelta, dates, 64-bit
columns), far and malformed dates (year 1, 9999, 10000), and plain random text.
"""

from __future__ import annotations

from hypothesis import strategies as st

NUL = st.sampled_from(["\x00", "a\x00b", "1\x00", "vision\x00"])
UNICODE_DIGITS = st.sampled_from(["²", "٣", "１２", "⑤", "߁", "𝟗", "½", "Ⅻ"])
HUGE = st.one_of(
    st.integers(min_value=10**9, max_value=10**40).map(str),
    st.integers(max_value=-1).map(str),
    st.sampled_from(["1e308", "1e999", "-0", "NaN", "inf", "9" * 400, "0x10", "1_000"]),
)
FAR_DATES = st.sampled_from(
    [
        "9999-12-31", "0001-01-01", "10000-01-01", "9999-12-31T23:59", "0001-01-01T00:00",
        "2026-02-30", "2026-13-01", "9999-12", "0000-00-00", "2026-12-01T25:61",
    ]
)  # fmt: skip
VALUE = st.one_of(NUL, UNICODE_DIGITS, HUGE, FAR_DATES, st.text(max_size=30))
