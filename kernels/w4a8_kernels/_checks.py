"""Input checks shared by every kernel entry point.

Each check raises `KernelInputError` naming the tensor, what it holds and what is
accepted, so a bad call never turns into a silently wrong result.
"""
from __future__ import annotations

import math
from contextlib import contextmanager

import torch

from w4a8_kernels.errors import KernelInputError, KernelMemoryError

_FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
_INT_DTYPES = (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)
# torch's CPU allocator reports failure as a RuntimeError with this text, Python as MemoryError
_ALLOC_FAILED = ("can't allocate memory", "DefaultCPUAllocator", "not enough memory")


def check_device(t: torch.Tensor, name: str, device: str | None) -> None:
    """A tensor with data (never `meta`), on `device` when given."""
    if t.device.type == "meta":
        raise KernelInputError(f"{name} is on the meta device (a shape without data); "
                               f"the kernels need real values, on {device or 'cpu or cuda'}")
    if device is not None and t.device.type != device:
        raise KernelInputError(f"{name} is on device {t.device}; this kernel takes {device} tensors")


def check_activations(x: torch.Tensor, k: int | None = None, name: str = "x",
                      device: str | None = "cpu") -> None:
    """x must be a 2-D floating tensor [M, K] on `device`, with K == k when given."""
    if not isinstance(x, torch.Tensor):
        raise KernelInputError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in _FLOAT_DTYPES:
        raise KernelInputError(
            f"{name} has dtype {x.dtype}; accepted: float32, float16, bfloat16, float64")
    if x.dim() != 2:
        raise KernelInputError(f"{name} must be 2-D [M, K], got shape {tuple(x.shape)}")
    check_device(x, name, device)
    if k is not None and x.shape[1] != k:
        raise KernelInputError(
            f"{name} has K = {x.shape[1]} columns but the weight has K = {k} (in_features)")


def all_finite(x: torch.Tensor) -> bool:
    """Whether every element of x is finite, at the cost of one sum: a sum in float32 (or
    float64) is finite whenever every term is, and an Inf or NaN term makes it Inf or NaN;
    only a sum that overflowed from finite terms is checked element by element. About 40x
    cheaper than isfinite(x).all() at 128 x 4096, which cost the W4A16 fallback ~8% a call."""
    if not x.numel():
        return True
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    return math.isfinite(float(x.sum(dtype=acc))) or bool(torch.isfinite(x).all())


def check_finite_rows(amax: torch.Tensor, name: str = "x") -> None:
    """A row whose absolute max is Inf or NaN cannot be quantized to int8."""
    bad = ~torch.isfinite(amax.reshape(-1))
    if bool(bad.any()):
        rows = bad.nonzero().reshape(-1)[:8].tolist()
        raise KernelInputError(
            f"{name} holds Inf or NaN in rows {rows} (showing up to 8); dynamic int8 "
            "quantization needs finite activations")


def check_float32_range(x: torch.Tensor, name: str = "x") -> None:
    """float64 values beyond float32's finite range would become Inf in the float32 math:
    say so, instead of reporting an Inf the caller never gave."""
    if x.dtype != torch.float64 or not x.numel():
        return
    amax = torch.linalg.vector_norm(x, ord=float("inf"), dim=1)
    check_finite_rows(amax, name)
    limit = torch.finfo(torch.float32).max
    over = amax > limit
    if bool(over.any()):
        rows = over.nonzero().reshape(-1)[:8].tolist()
        raise KernelInputError(
            f"{name} (float64) holds values up to {float(amax.max()):.3g} in rows {rows} "
            f"(showing up to 8), outside float32's finite range (|x| <= {limit:.4g}); the "
            "kernels compute in float32")


def check_token_scales(x_scale: torch.Tensor, k: int, w_scale_absmax: float,
                       name: str = "x_scale") -> None:
    """Per-token scales of int8 codes, checked in float32, the dtype the output is computed in:
    finite there (a float64 1e39 is not), and small enough that the largest output the integer
    sums allow (K products of |code| <= 127 and |w - z| <= 15, times the weight scale) stays
    finite, so the result cannot be Inf without a word."""
    limit = torch.finfo(torch.float32).max
    top = float(x_scale.detach().abs().max()) if x_scale.numel() else 0.0
    if not math.isfinite(top) or top > limit:
        raise KernelInputError(f"{name} holds values up to {top:.4g}, outside float32's finite range "
                               f"(|{name}| <= {limit:.4g}); the output is computed in float32")
    bound = top * k * 127 * 15 * float(w_scale_absmax)
    if bound > limit:
        allowed = limit / (k * 127 * 15 * float(w_scale_absmax))
        raise KernelInputError(
            f"{name} holds values up to {top:.4g}: with K = {k} and weight scales up to "
            f"{float(w_scale_absmax):.4g}, outputs could reach {bound:.4g}, beyond float32's "
            f"{limit:.4g}; accepted: |{name}| <= {allowed:.4g} for this layer")


def check_weight(
    w_q: torch.Tensor,
    scales: torch.Tensor,
    group_size: int,
    zeros: torch.Tensor | None = None,
    *,
    check_range: bool = True,
    device: str | None = None,
) -> tuple[int, int, int, torch.Tensor]:
    """Validate an int4 weight in the project's convention; return (N, K, g, scales_2d).

    w_q: int8 [N, K], signed [-8, 7] without zeros, unsigned [0, 15] with zeros.
    scales: floating [N, K // g] ([N] is read as [N, 1] for per-channel).
    zeros: None or integer [N, K // g] in [0, 15].
    group_size: -1 or K for per-channel, else a divisor of K.
    device: where every tensor must be (None: any real device, all the same one).
    """
    if not isinstance(w_q, torch.Tensor) or w_q.dtype != torch.int8:
        got = w_q.dtype if isinstance(w_q, torch.Tensor) else type(w_q).__name__
        raise KernelInputError(f"w_q must be a torch.int8 tensor holding int4 values, got {got}")
    if w_q.dim() != 2:
        raise KernelInputError(f"w_q must be 2-D [N, K], got shape {tuple(w_q.shape)}")
    check_device(w_q, "w_q", device)
    n, k = w_q.shape
    if n == 0 or k == 0:
        raise KernelInputError(f"w_q has an empty dimension: shape {(n, k)}; N and K must be >= 1")
    if isinstance(group_size, bool) or not isinstance(group_size, int):
        raise KernelInputError(f"group_size must be an int (-1 for per-channel), got "
                               f"{type(group_size).__name__} {group_size!r}")
    g = k if group_size in (-1, k) else int(group_size)
    if g <= 0 or k % g != 0:
        raise KernelInputError(
            f"group_size = {group_size} does not divide K = {k}; accepted: -1 (per-channel), "
            f"K, or a positive divisor of K")
    n_groups = k // g
    if not isinstance(scales, torch.Tensor) or scales.dtype not in _FLOAT_DTYPES:
        got = scales.dtype if isinstance(scales, torch.Tensor) else type(scales).__name__
        raise KernelInputError(
            f"scales must be a floating tensor (float32, float16, bfloat16), got {got}")
    check_device(scales, "scales", device or w_q.device.type)
    if scales.dim() == 1 and n_groups == 1:
        scales = scales.reshape(-1, 1)
    if tuple(scales.shape) != (n, n_groups):
        raise KernelInputError(
            f"scales has shape {tuple(scales.shape)}; for w_q {(n, k)} and group_size "
            f"{group_size} it must be [N, K // g] = {(n, n_groups)}")
    if zeros is not None:
        if not isinstance(zeros, torch.Tensor) or zeros.dtype not in _INT_DTYPES:
            got = zeros.dtype if isinstance(zeros, torch.Tensor) else type(zeros).__name__
            raise KernelInputError(f"zeros must be an integer tensor, got {got}")
        check_device(zeros, "zeros", device or w_q.device.type)
        if tuple(zeros.shape) != (n, n_groups):
            raise KernelInputError(
                f"zeros has shape {tuple(zeros.shape)}; it must match scales {(n, n_groups)}")
    if check_range:
        lo, hi = (0, 15) if zeros is not None else (-8, 7)
        w_min, w_max = int(w_q.min()), int(w_q.max())
        if w_min < lo or w_max > hi:
            kind = "unsigned [0, 15] (zeros given)" if zeros is not None else "signed [-8, 7]"
            raise KernelInputError(
                f"w_q holds values in [{w_min}, {w_max}], outside int4 {kind}")
        if zeros is not None and (int(zeros.min()) < 0 or int(zeros.max()) > 15):
            raise KernelInputError(
                f"zeros holds values in [{int(zeros.min())}, {int(zeros.max())}]; accepted [0, 15]")
    if not bool(torch.isfinite(scales).all()):
        raise KernelInputError("scales holds Inf or NaN")
    if scales.dtype == torch.float64 and bool((scales.abs() > torch.finfo(torch.float32).max).any()):
        raise KernelInputError("scales (float64) holds values outside float32's finite range; "
                               "the kernels apply scales in float32")
    # The float32 output of one row is at most |scale| * 15 * K * |x|: scales this large make
    # it overflow (Inf) for activations of magnitude 1, which the float64 reference would not.
    s_max = float(scales.abs().max())
    if s_max * 15 * k > torch.finfo(torch.float32).max:
        raise KernelInputError(
            f"scales reach {s_max:.3g}: with K = {k} the float32 output overflows for activations "
            f"of magnitude 1; accepted: max |scale| * 15 * K below float32's max "
            f"({torch.finfo(torch.float32).max:.3g})")
    return n, k, g, scales


def scale_notes(scales: torch.Tensor) -> tuple[str, ...]:
    """What a kernel reports about accepted but unusual scales (never silently)."""
    notes = []
    neg = int((scales < 0).sum())
    if neg:
        notes.append(f"{neg} of {scales.numel()} weight scales are negative (accepted: the "
                     "sign flips those groups' contribution, as in the reference)")
    zero = int((scales == 0).sum())
    if zero:
        notes.append(f"{zero} of {scales.numel()} weight scales are zero (those groups contribute 0)")
    return tuple(notes)


@contextmanager
def memory_guard(what: str, nbytes: int):
    """Turn an allocation failure while doing `what` into KernelMemoryError with the sizes."""
    try:
        yield
    except MemoryError as exc:
        raise KernelMemoryError(_memory_message(what, nbytes, exc)) from None
    except RuntimeError as exc:
        if not any(s in str(exc) for s in _ALLOC_FAILED):
            raise
        raise KernelMemoryError(_memory_message(what, nbytes, exc)) from None


def _memory_message(what: str, nbytes: int, exc: BaseException) -> str:
    detail = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
    return (f"out of memory {what}: it needs about {nbytes / 2**30:.2f} GiB of working "
            f"buffers ({detail}); use a smaller layer or raise the memory limit")
