"""A read-only dict for the mappings frozen values carry (a layer's tensor names, a config's
fields): reads, iterates, compares and serializes as a dict; every mutation raises."""
from __future__ import annotations

from typing import Any, Mapping

__all__ = ["FrozenDict", "freeze"]


class FrozenDict(dict):
    """A dict whose contents cannot change after construction."""

    def _refuse(self, *_: Any, **__: Any) -> None:
        raise TypeError(f"{type(self).__name__} is read-only; build a new one with dict(...)")

    __setitem__ = __delitem__ = __ior__ = _refuse  # type: ignore[assignment]
    clear = pop = popitem = setdefault = update = _refuse  # type: ignore[assignment]

    def __reduce__(self):  # pickles (the UI's data cache) without going through __setitem__
        return (type(self), (dict(self),))

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(sorted((k, _hashable(v)) for k, v in self.items())))


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict) and not isinstance(value, FrozenDict):
        return FrozenDict(value).__hash__()
    return value


def freeze(value: Mapping | None) -> FrozenDict | None:
    """A FrozenDict of `value`, nested dicts frozen too (lists are left as they are)."""
    if value is None:
        return None
    return FrozenDict({k: freeze(v) if isinstance(v, Mapping) else v for k, v in value.items()})
