"""The self-test a C engine passes before this process trusts it, run in a child process.

`python -m w4a8_kernels.selftest VARIANT` builds and loads VARIANT's library (the parent set
`W4A8_KERNELS_SELF_TEST=VARIANT`, so that load skips its own admission), runs one small
GEMM per entry point at one thread and at several, and prints one JSON line:
`{"ok": true, "checked": [...]}` or `{"ok": false, "why": "..."}`. A crash, a hang or an
exception in here never reaches the parent: it reads the exit status (`_native_lib.admit`).

Each result is held to what the engine promises: bit for bit the float32 arithmetic its
source documents (each group's exact int32 sum times its float32 scale, summed in group
order, times the token's scale, no fused multiply-add), and within float32 rounding of
the float64 reference.
"""
from __future__ import annotations

import json
import sys

import torch

# (M, N, K, group, asymmetric): a ragged token block and weight rows off the tiles, one
# group and several, per-channel; big enough that 2+ threads share the items; per-channel
# over several 32-token blocks (5) and an odd count of 64-deep K steps (17); groups that
# span several 64-deep steps (256), paired in the AMX engine's epilogue
CASES = ((1, 40, 256, 128, False), (37, 72, 384, 128, True), (33, 96, 320, -1, False),
         (70, 48, 512, 64, True), (150, 40, 1088, -1, True), (20, 40, 768, 256, True))


def in_order(x_q: torch.Tensor, x_scale: torch.Tensor, w_q: torch.Tensor, scales: torch.Tensor,
             g: int, zeros: torch.Tensor | None) -> torch.Tensor:
    """The engines' documented float32 arithmetic, the integer sums exact (int64 here)."""
    n, k = w_q.shape
    groups = k // g
    w = w_q.to(torch.int64).view(n, groups, g)
    if zeros is not None:
        w = w - zeros.to(torch.int64).unsqueeze(-1)
    dots = torch.einsum("mgk,ngk->mng", x_q.to(torch.int64).view(-1, groups, g), w)
    s = scales.to(torch.float32)
    acc = dots[:, :, 0].to(torch.float32) * s[:, 0]
    for j in range(1, groups):
        acc = acc + dots[:, :, j].to(torch.float32) * s[:, j]
    return acc * x_scale.to(torch.float32).reshape(-1, 1)


def run(variant: str) -> dict:
    """Build, load and check `variant` in this process (the child's side)."""
    from w4a8_kernels import _native_lib
    from w4a8_kernels.cpu_w4a8 import prepare_w4a8, w4a8_native, w4a8_native_from_quantized
    from w4a8_kernels.int8_gemm import Int8Engine
    from w4a8_kernels.quant import quantize_per_token_int8
    from w4a8_kernels.reference import w4a8_reference

    if _native_lib.load(variant) is None:
        return {"ok": False, "why": _native_lib.why_unavailable(variant)}
    checked = []
    wide = max(2, torch.get_num_threads())
    for threads in (1, wide):
        torch.set_num_threads(threads)
        for m, n, k, g, asym in CASES:
            gen = torch.Generator().manual_seed(m * 7919 + n * 31 + k)
            gg = k if g == -1 else g
            lo, hi = (0, 15) if asym else (-8, 7)
            w_q = torch.randint(lo, hi + 1, (n, k), generator=gen, dtype=torch.int8)
            zeros = torch.randint(0, 16, (n, k // gg), generator=gen, dtype=torch.int8) if asym else None
            scales = torch.rand(n, k // gg, generator=gen) * 0.02 + 0.001
            x = torch.randn(m, k, generator=gen)
            p = prepare_w4a8(w_q, scales, g, zeros, engine=Int8Engine(variant))
            where = f"M = {m}, N = {n}, K = {k}, group {g}, {'asym' if asym else 'sym'}, {threads} thread(s)"
            x_q, x_scale = quantize_per_token_int8(x)
            out = w4a8_native_from_quantized(x_q, x_scale, p)
            want = in_order(x_q, x_scale, w_q, scales, gg, zeros)
            if not torch.equal(out, want):
                bad = int((out != want).sum())
                return {"ok": False, "why": f"wrong bits at {where}: {bad} of {out.numel()} outputs "
                                            f"differ from the documented float32 order, max "
                                            f"{(out - want).abs().max().item():.3g}"}
            ref = w4a8_reference(x, w_q, scales, g, zeros)
            got = w4a8_native(x, p).double()
            tol = 1e-4 * float(ref.abs().max()) + 1e-6
            err = (got - ref).abs().max().item()
            if not err <= tol:
                return {"ok": False, "why": f"off the float64 reference at {where}: max |error| "
                                            f"{err:.3g} > {tol:.3g}"}
            checked.append(where)
    return {"ok": True, "checked": checked}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m w4a8_kernels.selftest VARIANT", file=sys.stderr)
        return 2
    print(json.dumps(run(argv[0])), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
