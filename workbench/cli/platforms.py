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
    if args.json:
        print(json.dumps([p.to_json() for p in platforms], indent=1))
        return 0
    for p in platforms:
        extras = ", ".join(p.packages) or "-"
        cap = "" if p.capability is None else f" sm{p.capability}"
        print(f"{p.name:18s} {p.device}{cap:7s} packages: {extras:10s} {p.description}")
    return 0
