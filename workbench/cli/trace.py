"""`python -m workbench trace`: one dispatch trace, or a batch of them in one process."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from workbench.errors import USER_ERRORS, InvalidInputError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("trace", help="trace vLLM 0.33.0's kernel selection for one layer",
                       description="Trace scheme resolution and kernel selection as vLLM 0.33.0 "
                                   "does it, on a simulated or the real platform.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--mp-config", metavar="JSON", help="an MPLinearLayerConfig as JSON (or @file)")
    src.add_argument("--scheme", metavar="JSON", help="a compressed-tensors layer scheme as JSON (or @file)")
    src.add_argument("--inc", metavar="JSON", help="an INC/AutoRound layer config as JSON (or @file)")
    src.add_argument("--checkpoint", metavar="PATH", help="a checkpoint directory (with --layer)")
    src.add_argument("--batch", metavar="FILE", help="JSONL cases, one per line ('-' for stdin)")
    p.add_argument("--layer", help="layer name inside --checkpoint")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel size for --checkpoint")
    p.add_argument("--parallel", choices=("column", "row"), default="column",
                   help="how --checkpoint's layer is sharded under --tp")
    p.add_argument("--platform", default="sm90-h200",
                   help="preset name, 'host', or platform JSON (default: sm90-h200)")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                   help="VLLM_* variable or linear_backend / linear_backend_per_quant (repeatable)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the trace JSON")
    out.add_argument("--markdown", action="store_true", help="print the trace as Markdown")
    p.set_defaults(func=run)


def load_json_arg(text: str, what: str) -> Any:
    """Parse a JSON argument; `@path` reads it from a file."""
    if text.startswith("@"):
        try:
            with open(text[1:], encoding="utf-8") as f:
                text = f.read()
        except OSError as exc:
            raise InvalidInputError(f"{what}: cannot read {text[1:]!r}: {exc.strerror}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInputError(f"{what}: malformed JSON ({exc.msg} at line {exc.lineno} column "
                                f"{exc.colno})") from None


def trace_case(case: dict):
    """One batch case: `{"mp_config"|"scheme"|"inc": {...}, "platform": ..., "env": {...}}`."""
    from workbench.dispatch import trace_inc, trace_mp, trace_scheme

    if not isinstance(case, dict):
        raise InvalidInputError(f"case: expected a JSON object, got {type(case).__name__}")
    platform = case.get("platform", "sm90-h200")
    env = case.get("env")
    kinds = [k for k in ("mp_config", "scheme", "inc") if k in case]
    if len(kinds) != 1:
        raise InvalidInputError("case: expected exactly one of 'mp_config', 'scheme' or 'inc'")
    fn = {"mp_config": trace_mp, "scheme": trace_scheme, "inc": trace_inc}[kinds[0]]
    return fn(case[kinds[0]], platform, env)


def _env_mapping(pairs: list[str]) -> dict[str, str]:
    mapping = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InvalidInputError(f"--env: expected KEY=VALUE, got {pair!r}")
        mapping[key] = value
    return mapping


def _print(trace, args) -> None:
    if args.json:
        print(json.dumps(trace.to_json()))
    elif args.markdown:
        print(trace.to_markdown())
    else:
        print(format_text(trace))


def format_text(trace) -> str:
    lines = []
    for p in trace.predicates:
        mark = "MATCH" if p.matched else "no   "
        lines.append(f"  {mark} {p.name}" + (f" -> {p.result}" if p.matched else f"  ({p.detail})"))
    if trace.scheme:
        lines.append(f"scheme: {trace.scheme}")
    for gate in trace.gates:
        lines.append(f"  gate: {gate}")
    if trace.mp_config is not None:
        lines.append(f"mp config: {json.dumps(trace.mp_config.to_json())}")
    for i, s in enumerate(trace.steps, 1):
        lines.append(f"  {i}. {s.kernel:32s} {s.outcome:10s} {s.reason or ''}")
    if trace.selected:
        lines.append(f"selected: {trace.selected}")
    if trace.runtime:
        lines.append(f"runtime: {trace.runtime}")
    if trace.error:
        lines.append(f"{trace.error_type}: {trace.error}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    env = _env_mapping(args.env)
    if args.batch:
        return _run_batch(args.batch)
    from workbench.dispatch import trace_inc, trace_mp, trace_scheme

    if args.mp_config:
        trace = trace_mp(load_json_arg(args.mp_config, "--mp-config"), args.platform, env)
    elif args.scheme:
        trace = trace_scheme(load_json_arg(args.scheme, "--scheme"), args.platform, env)
    elif args.inc:
        trace = trace_inc(load_json_arg(args.inc, "--inc"), args.platform, env)
    else:
        if not args.layer:
            raise InvalidInputError("--checkpoint needs --layer NAME (see `python -m workbench inspect PATH`)")
        from workbench.checkpoints import trace_checkpoint_layer

        trace = trace_checkpoint_layer(args.checkpoint, args.layer, args.platform, env,
                                       tp_size=args.tp, parallel=args.parallel)
    _print(trace, args)
    return 0


def _run_batch(path: str) -> int:
    """One trace JSON per input line, in order; a bad line prints its error and the run goes on."""
    stream = sys.stdin if path == "-" else None
    try:
        handle = stream or open(path, encoding="utf-8")
    except OSError as exc:
        raise InvalidInputError(f"--batch: cannot read {path!r}: {exc.strerror}") from None
    status = 0
    with handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                case = load_json_arg(line, f"--batch line {number}")
                out = trace_case(case).to_json()
            except USER_ERRORS as exc:
                status = 2
                out = {"input_error": f"line {number}: {exc}"}
            print(json.dumps(out), flush=False)
    sys.stdout.flush()
    return status
