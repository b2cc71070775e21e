"""How a predicted time reads at the faces: a figure from the datasheet alone (basis
"roofline") is a lower bound, never a cost or a ratio."""
from __future__ import annotations

__all__ = ["US", "time_text", "band_text", "is_bound", "ratio_text", "scaled", "lead_segments", "lead_text"]

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


def lead_segments(fast, slow) -> list[tuple[int, int, bool, float, float]]:
    """Where `fast` is ahead of `slow` (two predicted curves, `Prediction`s at the same Ms):
    runs of M as (first M, last M, ahead, smallest and largest slow / fast ratio). A point
    either side of which is only a bound (roofline) is left out."""
    a = {p.m: p for p in fast if p.predicted_us and not is_bound(p.basis)}
    b = {p.m: p for p in slow if p.predicted_us and not is_bound(p.basis)}
    out: list = []
    for m in sorted(set(a) & set(b)):
        r = b[m].predicted_us / a[m].predicted_us
        ahead = r > 1.0
        if out and out[-1][2] == ahead:
            first, _, _, lo, hi = out[-1]
            out[-1] = (first, m, ahead, min(lo, r), max(hi, r))
        else:
            out.append((m, m, ahead, r, r))
    return out


def lead_text(fast, slow, fast_name: str, slow_name: str) -> str:
    """'W4A8 is faster at M 1-128 (by 1.9-2.1x), slower at M 192-8192 (by 1.1-1.2x) than W4A16': where one curve
    leads the other and by how much, never a bare 'from never'."""
    segs = lead_segments(fast, slow)
    if not segs:
        return f"{fast_name} against {slow_name}: no M where both are costed"

    def span(first, last):
        return f"M = {first}" if first == last else f"M {first}-{last}"

    def by(lo, hi):
        return f"{lo:.2f}x" if abs(hi - lo) < 0.005 else f"{lo:.2f}-{hi:.2f}x"

    parts = [f"{'faster' if ahead else 'slower'} at {span(f, l)} (by {by(lo, hi) if ahead else by(1 / hi, 1 / lo)})"
             for f, l, ahead, lo, hi in segs]
    return f"{fast_name} is " + ", ".join(parts) + f" than {slow_name}"
