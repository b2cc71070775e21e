"""How much memory this machine can give a computation, and the one guard that refuses a size
before anything is allocated (bench runs, synthetic layers and checkpoint tensors all go
through it)."""
from __future__ import annotations

import os

from workbench.errors import InvalidInputError, WorkbenchError

MEMORY_FRACTION = 0.8  # of the memory available when the check runs


def bench_bytes(n: int, k: int, m: int, paths: int) -> int:
    """About the peak memory of one bench run, from peak RSS over the idle process: 32 B
    per weight element with 2 paths, 43 B with 6; per token row, the activation copies and
    the output every path keeps (this estimate is 1.2-1.5x the measured token part)."""
    return n * k * (28 + 3 * paths) + m * k * (6 + 2 * paths) + m * n * (4 + 4 * paths)


def available_bytes() -> int | None:
    """MemAvailable, or less under a cgroup v2 memory limit; None where neither is readable."""
    found = []
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            found += [int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:")]
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open("/sys/fs/cgroup/memory.max", encoding="ascii") as f:
            limit = f.read().strip()
        with open("/sys/fs/cgroup/memory.current", encoding="ascii") as f:
            used = int(f.read().strip())
        if limit != "max":
            found.append(int(limit) - used)
    except (OSError, ValueError):
        pass
    if not found and hasattr(os, "sysconf"):
        try:
            found.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (OSError, ValueError):
            pass
    return min(found) if found else None


def check_fits(need: int, what: str, advice: str,
               error: type[WorkbenchError] = InvalidInputError) -> None:
    """Refuse `need` bytes above MEMORY_FRACTION of the available memory with `error`: the
    message says what needs it (`what`), both sizes, and what to make smaller (`advice`)."""
    free = available_bytes()
    if free is not None and need > MEMORY_FRACTION * free:
        raise error(
            f"size: {what} needs about {need / 2**30:.1f} GiB; the limit here is "
            f"{MEMORY_FRACTION * free / 2**30:.1f} GiB ({MEMORY_FRACTION:.0%} of the available "
            f"memory); {advice}")
