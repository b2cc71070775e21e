"""`python -m workbench matrix`: vLLM's documented hardware table against the computed one."""
from __future__ import annotations

import argparse
import json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("matrix", help="docs hardware table versus what the dispatch code does")
    from workbench.dispatch.versions import DEFAULT_VERSION, available

    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--vllm-version", choices=available(), default=DEFAULT_VERSION,
                   help=f"the release whose docs table and rules are compared (default: "
                        f"{DEFAULT_VERSION})")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from workbench.cli.trace import env_mapping
    from workbench.dispatch.docs_matrix import compute_matrix
    from workbench.dispatch.versions import rule_set

    rules = rule_set(args.vllm_version)
    rows = compute_matrix(env_mapping(args.env), rules)
    if args.json:
        print(json.dumps({"hardware": list(rules.DOCS_HARDWARE), "rows": rows}, indent=1))
        return 0
    print(f"{'implementation':30s} " + " ".join(f"{h[:9]:>9s}" for h in rules.DOCS_HARDWARE))
    for row in rows:
        cells = []
        for c in row["cells"]:
            docs = "Y" if c["docs"] else "N"
            code = "?" if c["code"] is None else ("N" if not c["code"] else
                                                  "y" if c["weight_only"] else "Y")
            fails = {"load": "L", "forward": "F"}.get(c.get("fails_at"), "")  # "N" is a selection failure
            cells.append(f"{docs}/{code}{fails}{'!' if c['disagrees'] else ' '}".rjust(9))
        print(f"{row['implementation'][:30]:30s} " + " ".join(cells))
    print("\ncells: docs/code; code 'y' runs weight-only, 'N' fails at selection, 'L' / 'F' after it: "
          "selected, but vLLM fails at load / at its first forward; '!' marks a disagreement, '?' a row "
          "not modelled")
    for row in rows:
        for c in row["cells"]:
            if c["disagrees"]:
                print(f"- {row['implementation']} on {c['hardware']}: {c['explanation']}")
    return 0
