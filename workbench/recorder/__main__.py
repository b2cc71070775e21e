"""`python -m workbench.recorder --vllm-src DIR`: rebuild every fixture of DIR's release."""
from __future__ import annotations

import argparse
import sys

from pathlib import Path

from workbench.recorder import LEVELS, RecorderError, fixture_dir, regenerate
from workbench.recorder.sdist import sdist_version


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m workbench.recorder", description=__doc__)
    ap.add_argument("--vllm-src", required=True, help="an unpacked vLLM sdist directory")
    ap.add_argument("--out", default=None,
                    help="the fixture folder (default: tests/fixtures/vllm-<the sdist's version>)")
    ap.add_argument("--levels", default=None,
                    help="comma-separated subset of " + ",".join(LEVELS) + " (default: all)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the generated levels (default 0)")
    args = ap.parse_args(argv)
    levels = args.levels.split(",") if args.levels else None
    try:
        out = args.out or fixture_dir("tests/fixtures", sdist_version(Path(args.vllm_src)))
        regenerate(args.vllm_src, out, levels, args.seed,
                   progress=lambda s: print(s, file=sys.stderr))
    except RecorderError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
