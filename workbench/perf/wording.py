"""How a predicted time reads at the faces: a figure from the datasheet alone (basis
"roofline") is a lower bound, never a cost or a ratio."""
from __future__ import annotations

__all__ = ["US", "time_text", "band_text", "is_bound", "ratio_text", "scaled"]

US = "µs"


def is_bound(basis: str | None) -> bool:
    return basis == "roofline"


def _num(us: float) -> str:
    return f"{us:.1f}" if us >= 0.1 else f"{us:.3g}"


def time_text(us: float | None, basis: str | None, unit: bool = True) -> str:
    """'12.3 µs', or 'at least 0.5 µs (roofline)', or '-' where there is no figure."""
    if us is None:
        return "-"
    text = f"{_num(us)} {US}" if unit else _num(us)
    return f"at least {_num(us)} {US} (roofline)" if is_bound(basis) else text


def band_text(low: float | None, high: float | None, basis: str | None) -> str:
    """The band, or '-' for a bound (it has none: only its floor is known)."""
    if low is None or high is None or is_bound(basis):
        return "-"
    return f"{_num(low)}-{_num(high)}"


def ratio_text(us: float | None, basis: str | None, ref_us: float | None, ref_basis: str | None,
               ref_name: str) -> str | None:
    """'0.66x the native time', or None where either side is only a bound (or missing)."""
    if not us or not ref_us or is_bound(basis) or is_bound(ref_basis):
        return None
    return f"{us / ref_us:.2f}x {ref_name}"


def scaled(us: float | None) -> str:
    """A time in the unit that reads: '12.3 µs', '4.6 ms', '321.2 s' ('-' where none)."""
    if us is None:
        return "-"
    if us >= 1e6:
        return f"{us / 1e6:.1f} s"
    if us >= 1e3:
        return f"{us / 1e3:.1f} ms"
    return f"{_num(us)} {US}"
