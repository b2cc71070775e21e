"""Tensor-parallel alignment: what every candidate kernel says about a shard, and padding cost.

Shared by the app's Alignment page and notebook 03. `marlin_padded_nk` is the rule set's model
of vLLM's function of that name (`vllm/model_executor/layers/quantization/utils/marlin_utils.py`):
Marlin no longer rejects a tile-misaligned shard, it zero-pads it to the cheaper of its two
thread-tile families.
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from workbench.errors import InvalidInputError
from workbench.limits import MAX_DIM, check_int, shown

if TYPE_CHECKING:
    from workbench.dispatch.versions import RuleSet


def _disabled(env: dict[str, str], extra: list[str]) -> dict[str, str]:
    """The env with `extra` kernels added to VLLM_DISABLED_KERNELS (to ask the next candidate)."""
    user = env.get("VLLM_DISABLED_KERNELS", "")
    return {**env, "VLLM_DISABLED_KERNELS": ",".join(x for x in (user, *extra) if x)}


def kernel_verdicts(t, platform, env: dict[str, str]) -> dict:
    """What vLLM picked in trace `t` and what every other candidate says about the same config
    (asked of the rule set that made `t`, `t.rules`)."""
    from workbench.dispatch import trace_mp

    verdicts: dict[str, tuple[str, str]] = {}
    if t.mp_config is None:
        return verdicts
    first, accepted, cur = True, [], t
    while True:
        for s in cur.steps:
            if s.kernel in verdicts:
                continue
            if s.outcome == "selected":
                verdicts[s.kernel] = ("selected" if first else "accepts", "")
            else:
                verdicts[s.kernel] = (s.outcome, s.reason or "")
        if cur.selected is None or len(accepted) > len(t.candidates):
            break
        accepted.append(cur.selected)
        first = False
        cur = trace_mp(t.mp_config, platform, _disabled(env, accepted), t.rules)
    return verdicts


def _rules(rules: "RuleSet | None") -> "RuleSet":
    from workbench.dispatch.versions import pinned

    return rules or pinned()


@functools.lru_cache(maxsize=8)  # a RuleSet hashes by identity
def pad_rules(rules: "RuleSet | None" = None) -> tuple[tuple[str, int, int], ...]:
    """Tile rules that force zero-padding, as (label, K multiple, N multiple), read from the
    rule set's kernels (None: the pinned one's); Marlin picks the cheaper of its two families
    itself."""
    from workbench.models import TORCH_INT4PACK, rule_name

    r = _rules(rules)
    machete = r.KERNELS_BY_NAME["MacheteLinearKernel"].shape_multiples
    cutlass = r.KERNELS_BY_NAME["CutlassW4A8LinearKernel"].shape_multiples
    xpu = r.KERNELS_BY_NAME["XPUW4A8IntLinearKernel"].shape_multiples
    return ((f"Machete ({rule_name(*machete)})", *machete),
            (f"Cutlass W4A8 ({rule_name(*cutlass)})", *cutlass),
            (f"torch CPU int4pack ({rule_name(*TORCH_INT4PACK[1:])})", *TORCH_INT4PACK[1:]),
            (f"XPU / INC W4A8 ({rule_name(*xpu)})", *xpu))



def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def marlin_padded_nk(n: int, k: int, group_size: int,
                     rules: "RuleSet | None" = None) -> tuple[int, int]:
    """The rule set's `marlin_padded_nk`: the cheaper of Marlin's two padded tile families."""
    check_int("n", n, 1, MAX_DIM), check_int("k", k, 1, MAX_DIM)
    check_int("group_size", group_size, 1, MAX_DIM, also=(-1,))

    return _rules(rules).marlin_padded_nk(n, k, group_size)


def offset_shapes(dim: str, base: int, other: int, offsets: list[int]) -> list[tuple[int, int, int]]:
    """(offset, K, N) of each shape `dim` = base + offset, the other side fixed; shapes with a
    side of zero or less left out."""
    out = []
    for off in offsets:
        size = base + off
        k, n = (size, other) if dim == "K" else (other, size)
        if k > 0 and n > 0:
            out.append((off, k, n))
    return out


def padding_rows(dim: str, base: int, other: int, offsets: list[int], group_size: int,
                 rules: "RuleSet | None" = None) -> list[dict]:
    """Extra work (%) of zero-padding each shape up to what each tile rule of `rules` (None: the
    pinned rule set) needs."""
    if dim not in ("K", "N"):
        raise InvalidInputError(f"dim: {shown(dim)}; accepted: 'K' or 'N'")
    check_int("base", base, 1, MAX_DIM), check_int("other", other, 1, MAX_DIM)
    for i, off in enumerate(offsets):
        check_int(f"offsets[{i}]", off, -MAX_DIM, MAX_DIM)
    rows = []
    for off, k, n in offset_shapes(dim, base, other, offsets):
        size = base + off
        pn, pk = marlin_padded_nk(n, k, group_size, rules)
        rows.append({"offset": off, "size": size, "rule": "Marlin (marlin_padded_nk)",
                     "cost": 100.0 * (pn * pk / (n * k) - 1)})
        for label, km, nm in pad_rules(rules):
            rows.append({"offset": off, "size": size, "rule": label,
                         "cost": 100.0 * (_round_up(n, nm) * _round_up(k, km) / (n * k) - 1)})
    return rows


# --------------------------------------------------------------------------- shard tables


def spec_with_shape(spec, name: str, k: int, n: int):
    """`spec`'s quantization args on another (K, N) shape: a LayerSpec, no tensors."""
    from dataclasses import replace

    return replace(spec, name=name, in_features=k, out_features=n)


def rules_broken(k: int, n: int, group_size: int, rules: "RuleSet | None" = None) -> list[str]:
    """The alignment rules a K x N shard breaks, each with the kernel or op that checks it."""
    from workbench.models import alignment_rules

    return [f"{r.name} ({r.who})" for r in alignment_rules(rules) if not r.holds(k, n, group_size)]


def _shard_row(name: str, k: int | None, n: int | None, trace_fn, platform, env) -> dict:
    from workbench.errors import USER_ERRORS

    row = {"layer": name, "label": f"{name.split('.')[-1]}  [K {k}, N {n}]", "K": k, "N": n,
           "scheme": None, "selected": None, "error": None, "error_type": None, "candidates": [],
           "verdicts": {}}
    try:
        t = trace_fn()
    except USER_ERRORS as exc:  # a shard TP cannot split: one row, not the table
        row.update(error=str(exc), error_type=type(exc).__name__)
        return row
    row.update(scheme=t.scheme, selected=t.selected, error=t.error, error_type=t.error_type,
               candidates=list(t.candidates), verdicts=kernel_verdicts(t, platform, env))
    return row


def _mark_refused(rows: list[dict]) -> list[dict]:
    """A layer refused before any kernel is tried keeps its row: every candidate reads 'refused'."""
    kernels = list(dict.fromkeys(k for r in rows for k in r["candidates"]))
    for r in rows:
        if r["error"] and not r["verdicts"]:
            why = f"{r['error_type']} before any kernel is tried: {r['error']}"
            r["verdicts"] = {k: ("refused", why) for k in kernels}
    return rows


def shard_rows(specs, platform, env: dict[str, str], tp_size: int, parallel: str | None = None,
               version: "RuleSet | str | None" = None) -> list[dict]:
    """Each layer's shard at TP `tp_size`: vLLM's choice and what every candidate says
    (`version`: the vLLM rule set or its version, None for the pinned one)."""
    from workbench.checkpoints import trace_layer

    rows = []
    for spec in specs:
        try:
            k, n = spec.partition_shape(tp_size, parallel)
        except Exception:  # noqa: BLE001 - the trace below names the refusal
            k, n = None, None
        rows.append(_shard_row(spec.name, k, n, lambda spec=spec: trace_layer(
            spec, platform, env, tp_size=tp_size, parallel=parallel, version=version), platform, env))
    return _mark_refused(rows)


def model_shard_traces(model: str, tp_size: int, scheme_of, platform, env: dict[str, str] | None = None,
                       version: "RuleSet | str | None" = None) -> list[tuple]:
    """(partition, trace it) for each per-rank shard of a model preset, as vLLM builds it:
    the layer's own quantization args at its full shape (`scheme_of(layer, K, N)`, so its real
    group size) with the shard's input and output sizes, which vLLM's checks read
    (a group that does not divide the shard's K is refused, never costed per-channel). The
    Alignment page and the model report both read the shards from here."""
    from workbench.dispatch import trace_scheme
    from workbench.models import partitions

    full = {p.layer: p for p in partitions(model, 1)}
    out = []
    for p in partitions(model, tp_size):
        def trace(p=p):
            scheme = scheme_of(p.layer, full[p.layer].k, full[p.layer].n)
            if isinstance(scheme, dict):  # scheme JSON (the preset report's)
                scheme = {**scheme, "input_size_per_partition": p.k, "output_size_per_partition": p.n}
            else:  # a layer's typed CTScheme
                scheme = scheme.partitioned(p.k, p.n)
            return trace_scheme(scheme, platform, env or {}, version)

        out.append((p, trace))
    return out


def model_shard_rows(spec, model: str, platform, env: dict[str, str], tp_size: int,
                     version: "RuleSet | str | None" = None) -> list[dict]:
    """A model preset's per-rank shapes (as vLLM shards them) with `spec`'s quantization args."""
    def scheme_of(layer: str, k: int, n: int):
        return spec_with_shape(spec, f"{model}.{layer}", k, n).scheme_input(1)

    return _mark_refused([_shard_row(f"{model}.{p.layer}", p.k, p.n, trace, platform, env)
                          for p, trace in model_shard_traces(model, tp_size, scheme_of, platform, env, version)])
