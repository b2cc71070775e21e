"""`python -m workbench.recorder --vllm-src DIR --out tests/fixtures`: rebuild every fixture."""
from __future__ import annotations

import argparse
import sys

from workbench.recorder import LEVELS, RecorderError, regenerate


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m workbench.recorder", description=__doc__)
    ap.add_argument("--vllm-src", required=True, help="an unpacked vLLM sdist directory")
    ap.add_argument("--out", default="tests/fixtures",
                    help="the fixture folder (default: %(default)s)")
    ap.add_argument("--levels", default=None,
                    help="comma-separated subset of " + ",".join(LEVELS) + " (default: all)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the generated levels (default 0)")
    args = ap.parse_args(argv)
    levels = args.levels.split(",") if args.levels else None
    try:
        regenerate(args.vllm_src, args.out, levels, args.seed,
                   progress=lambda s: print(s, file=sys.stderr))
    except RecorderError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
