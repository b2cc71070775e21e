"""`python -m workbench platforms`: the platform presets (and this host)."""
from __future__ import annotations

import argparse
import json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("platforms", help="list the platform presets")
    p.add_argument("--host", action="store_true", help="also detect this machine")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from workbench.platforms import PRESETS, detect_host

    platforms = list(PRESETS.values()) + ([detect_host()] if args.host else [])
    engines = engine_verdicts() if args.host else {}
    if args.json:
        rows = [p.to_json() for p in platforms]
        if args.host:
            rows[-1] = {**rows[-1], "native_engines": engines}
        print(json.dumps(rows, indent=1))
        return 0
    for p in platforms:
        extras = ", ".join(p.packages) or "-"
        print(f"{p.name:18s} {p.device:4s} {target(p):8s} packages: {extras:10s} {p.description}")
        isa = f"isa: {' '.join(isa_flags(p)) or '-'}; " if p.device == "cpu" else ""
        print(f"{'':18s} {isa}torch ops: {', '.join(p.torch_ops) or '-'}")
    for variant, standing in engines.items():
        print(f"{'':18s} native engine {variant}: {standing}")
    return 0


def engine_verdicts() -> dict[str, str]:
    """This machine's C engines: admitted after their self-test, or why not."""
    from workbench.bench import engine_verdicts
    return engine_verdicts()


_ISA_FIELDS = ("avx2", "avx512", "avx512_vnni", "avx512_bf16", "amx", "zen")


def isa_flags(p) -> list[str]:
    """The CPU features a platform records (only the runtime notes read them, except amx/zen)."""
    return [name for name in _ISA_FIELDS if getattr(p, name)]


def target(p) -> str:
    """What names the chip: the SM for CUDA, the gfx arch for ROCm, the arch for a CPU."""
    if p.device == "cuda":
        return "sm?" if p.capability is None else f"sm{p.capability}"
    if p.device == "rocm":
        return p.gfx or "ROCm"
    if p.device == "cpu":
        return p.cpu_arch or "-"
    return ""
