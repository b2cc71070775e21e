"""`python -m workbench trace`: one dispatch trace, or a batch of them in one process."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from workbench.cli import trace_moe
from workbench.cli.inputs import (MAX_ARG_BYTES, bounded_lines, check_path, checkpoint_path,
                                  int_in, json_arg, json_object, open_input, open_stdin, parse_json,
                                  platform_arg, shown)
from workbench.dispatch.moe import MOE_VERSIONS
from workbench.dispatch.versions import DEFAULT_VERSION, available, rule_set
from workbench.errors import USER_ERRORS, InvalidInputError
from workbench.text import printable

# The keys of one --batch line; exactly one of CASE_KINDS.
CASE_KINDS = ("mp_config", "scheme", "inc", "gptq", "awq", "config_gate")
CASE_OPTIONAL = ("platform", "env", "id", "vllm_version")

BATCH_FORMAT = f"""\
--batch FILE reads JSON Lines (FILE may be '-' for stdin, or a pipe): one JSON object per
line, at most {MAX_ARG_BYTES} bytes; blank lines are skipped. Each object holds exactly one of
  "mp_config": {{...}}   an MPLinearLayerConfig, as --mp-config takes it
  "scheme":    {{...}}   a compressed-tensors layer scheme, as --scheme takes it
  "inc":       {{...}}   an INC/AutoRound layer config, as --inc takes it
  "gptq":      {{...}}   a GPTQ checkpoint layer, as --gptq takes it
  "awq":       {{...}}   an AWQ checkpoint layer, as --awq takes it
  "config_gate": {{...}} a model-wide quantization config, as --config-gate takes it
and optionally
  "platform": "sm90-h200" or {{"preset": ..., ...}}   (default: --platform)
  "env": {{"VLLM_DISABLED_KERNELS": "MacheteLinearKernel", ...}}   (added to --env)
  "id": any JSON value, copied into that line's output
  "vllm_version": the rule set to trace with (default: --vllm-version)
Output: one JSON trace per input line, in order. A line that cannot be traced prints
{{"input_error": "line N: ...", "line": N}} instead and the batch goes on; the command then
ends with exit code 2 and one error line naming the bad lines. Example: examples/trace_batch.jsonl.
(tests/fixtures/vllm-*/vllm_oracle_*.json* are test oracles with inputs and expected outputs, not
--batch input.)
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("trace", help=f"trace vLLM {DEFAULT_VERSION}'s kernel selection for one layer",
                       description="Trace scheme resolution and kernel selection as vLLM "
                                   f"{DEFAULT_VERSION} "
                                   "does it, on a simulated or the real platform.",
                       epilog=BATCH_FORMAT, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--mp-config", metavar="JSON", help="an MPLinearLayerConfig as JSON (or @file)")
    src.add_argument("--scheme", metavar="JSON", help="a compressed-tensors layer scheme as JSON (or @file)")
    src.add_argument("--inc", metavar="JSON", help="an INC/AutoRound layer config as JSON (or @file)")
    src.add_argument("--gptq", metavar="JSON", help="a GPTQ checkpoint layer as JSON (or @file)")
    src.add_argument("--awq", metavar="JSON", help="an AWQ checkpoint layer as JSON (or @file)")
    src.add_argument("--config-gate", metavar="JSON",
                     help='{"quantization", "quantization_config", "dtype"}: the model-wide '
                          "config check and capability/dtype gate (or @file)")
    src.add_argument("--checkpoint", metavar="PATH", help="a checkpoint directory (with --layer)")
    trace_moe.register_options(p, src)
    src.add_argument("--batch", metavar="FILE",
                     help="JSON Lines cases, one object per line ('-' for stdin; format below)")
    p.add_argument("--layer", help="layer name inside --checkpoint")
    p.add_argument("--tp", type=int_in(1, 1024),
                   help="tensor-parallel size for --checkpoint (default 1)")
    p.add_argument("--parallel", choices=("column", "row"),
                   help="how --checkpoint's layer is sharded under --tp (default: row for "
                        "down_proj/o_proj-like layers, column otherwise, as vLLM builds them)")
    p.add_argument("--platform", default="sm90-h200",
                   help="preset name, 'host' (this machine: its GPU where it has one), "
                   "'host-cpu', or platform JSON (default: sm90-h200)")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                   help="VLLM_* variable or linear_backend / linear_backend_per_quant (repeatable)")
    p.add_argument("--vllm-version", choices=sorted({*available(), *MOE_VERSIONS}),
                   default=DEFAULT_VERSION,
                   help=f"the vLLM rule set to trace with (default: {DEFAULT_VERSION})")
    p.add_argument("--versions", metavar="OLD,NEW",
                   help="what changes on upgrade: trace with both rule sets and print, per layer "
                        "and platform, the steps, reasons, selection, runtime and env handling "
                        "that differ, each with both releases' vLLM file:line ('no change' where "
                        "none does); with --checkpoint and no --layer, every layer")
    p.add_argument("--platforms", metavar="P1,P2",
                   help="with --versions: several platform presets instead of --platform")
    p.add_argument("--against-vllm", metavar="DIR",
                   help="also run the case through vLLM's own code from an unpacked sdist DIR "
                        "and print the fields that differ (exit 1 if any, 0 if none)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the trace JSON")
    out.add_argument("--markdown", action="store_true", help="print the trace as Markdown")
    p.set_defaults(func=run)


def load_json_arg(text: str, what: str) -> Any:
    """Parse a JSON argument; `@path` reads it from a regular file (both bounded)."""
    return json_arg(text, what)


def trace_case(case: Any, platform: str | dict = "sm90-h200", env: dict | None = None,
               version: str | None = None):
    """One --batch case (see BATCH_FORMAT); `platform`, `env`, `version`: the command's defaults."""
    from workbench.dispatch import TRACERS

    case = json_object(case, "case")
    unknown = sorted(set(case) - set(CASE_KINDS) - set(CASE_OPTIONAL))
    if unknown:
        raise InvalidInputError(f"case: unknown key(s) {shown(unknown)}; accepted: one of "
                                f"{', '.join(CASE_KINDS)}, and {', '.join(CASE_OPTIONAL)}")
    kinds = [k for k in CASE_KINDS if k in case]
    if len(kinds) != 1:
        raise InvalidInputError(f"case: expected exactly one of {', '.join(CASE_KINDS)}, "
                                f"got {len(kinds)}")
    platform = case.get("platform", platform)
    if isinstance(platform, str):
        platform = platform_arg(platform, "case.platform")  # JSON text in a string: bounded too
    elif not isinstance(platform, dict):
        raise InvalidInputError(f"case.platform: expected a preset name or a JSON object, got "
                                f"{shown(platform, 40)}")
    if "env" in case:
        env = {**(env or {}), **json_object(case["env"], "case.env")}
    version = case.get("vllm_version", version)
    if version is not None and not isinstance(version, str):
        raise InvalidInputError(f"case.vllm_version: expected a version string such as "
                                f"{DEFAULT_VERSION!r}, got {shown(version, 40)}")
    return TRACERS[kinds[0]](json_object(case[kinds[0]], f"case.{kinds[0]}"), platform, env,
                             rules=rule_set(version))


def env_mapping(pairs: list[str]) -> dict[str, str]:
    """`--env KEY=VALUE` arguments as a mapping (for `parse_env`); a pair without "=" is named."""
    mapping = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InvalidInputError(f"--env: expected KEY=VALUE, got {shown(pair)}")
        mapping[key] = value
    return mapping


def _print(trace, args) -> None:
    if args.json:
        print(json.dumps(trace.to_json()))
    elif args.markdown:
        print(printable(trace.to_markdown(), keep_newlines=True))
    else:
        print(printable(format_text(trace), keep_newlines=True))


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
    lines += [f"warning: {w.sentence()}" for w in trace.warnings]
    for i, s in enumerate(trace.steps, 1):
        lines.append(f"  {i}. {s.kernel:32s} {s.outcome:10s} {s.reason or ''}")
    if trace.selected:
        lines.append(f"selected: {trace.selected}")
    if trace.runtime:
        lines.append(f"runtime: {trace.runtime}")
    if trace.error:
        lines.append(f"{trace.error_type}: {trace.error}")
    if trace.vllm_version:
        lines.append(f"(vLLM {trace.vllm_version} rules)")  # every trace names its release
    return "\n".join(lines)


def _object_arg(text: str, what: str) -> dict:
    return json_object(load_json_arg(text, what), what)


def run(args: argparse.Namespace) -> int:
    env = env_mapping(args.env)
    platform = platform_arg(args.platform)
    if not args.checkpoint:  # nothing may be silently ignored
        given = [f for f, v in (("--layer", args.layer), ("--tp", args.tp),
                                ("--parallel", args.parallel)) if v is not None]
        if given:
            raise InvalidInputError(f"{', '.join(given)}: given without --checkpoint, the only "
                                    "source they apply to")
    moe_checkpoint = bool(args.checkpoint) and trace_moe.is_moe_layer_name(args.layer)
    if args.moe_backend is not None and not (args.moe_scheme or moe_checkpoint):
        raise InvalidInputError("--moe-backend: given without --moe-scheme or --checkpoint's "
                                "--layer ...experts, the sources it applies to")
    if args.moe_scheme or moe_checkpoint:
        if args.against_vllm is not None or env:
            raise InvalidInputError("--against-vllm / --env: not taken with --moe-scheme (the MoE "
                                    "rules are held to vLLM's recorded answers by the tests)")
        return trace_moe.run_moe(args, platform)
    if args.versions is not None:
        return _run_versions(args, platform, env)
    if args.platforms is not None:
        raise InvalidInputError("--platforms: applies to --versions only")
    if args.batch:
        if args.markdown:
            raise InvalidInputError("--markdown: --batch prints one JSON trace per line")
        if args.against_vllm is not None:
            raise InvalidInputError("--against-vllm: takes one case, not --batch")
        return _run_batch(args.batch, platform, env, args.vllm_version)
    from workbench.dispatch import TRACERS

    given = [k for k in CASE_KINDS if getattr(args, k) is not None]
    if given:
        flag = "--" + given[0].replace("_", "-")
        data = _object_arg(getattr(args, given[0]), flag)
        trace = TRACERS[given[0]](data, platform, env, rules=rule_set(args.vllm_version))
        if args.against_vllm is not None:
            return _against_vllm(args.against_vllm, given[0], data, platform, env, trace)
    elif args.against_vllm is not None:
        raise InvalidInputError("--against-vllm: takes one case (--mp-config, --scheme, --gptq, "
                                "--awq or --inc), not --checkpoint")
    else:
        if not args.layer:
            raise InvalidInputError("--checkpoint needs --layer NAME (see `python -m workbench inspect PATH`)")
        from workbench.checkpoints import trace_checkpoint_layer

        trace = trace_checkpoint_layer(checkpoint_path(args.checkpoint, "--checkpoint"), args.layer,
                                       platform, env, tp_size=args.tp or 1, parallel=args.parallel,
                                       version=args.vllm_version)
    _print(trace, args)
    return 0


def version_pair(text: str) -> tuple[str, str]:
    """`--versions OLD,NEW`: two releases with rule sets, older first as given."""
    parts = [v.strip() for v in text.split(",")]
    if len(parts) != 2 or parts[0] == parts[1]:
        raise InvalidInputError(f"--versions: expected two different versions as OLD,NEW, got "
                                f"{shown(text)}; available: {', '.join(available())}")
    for v in parts:
        if v not in available():
            raise InvalidInputError(f"--versions: no rule set for {shown(v)}; available: "
                                    f"{', '.join(available())}")
    return parts[0], parts[1]


def _run_versions(args: argparse.Namespace, platform: Any, env: dict) -> int:
    """Trace each layer on each platform with both rule sets and print what differs."""
    from workbench.dispatch import TRACERS
    from workbench.dispatch.version_diff import version_diff

    old, new = version_pair(args.versions)
    if args.batch or args.against_vllm is not None or args.markdown:
        raise InvalidInputError("--versions: takes --mp-config, --scheme, --inc, --gptq, --awq, "
                                "--config-gate or --checkpoint, printed as text or --json")
    platforms = ([platform_arg(p.strip(), "--platforms") for p in args.platforms.split(",")]
                 if args.platforms else [platform])
    given = [k for k in CASE_KINDS if getattr(args, k) is not None]
    if given:
        data = _object_arg(getattr(args, given[0]), "--" + given[0].replace("_", "-"))
        layers = [(None, lambda p, v: TRACERS[given[0]](data, p, env, rules=rule_set(v)))]
    else:
        from workbench.checkpoints import list_layers, trace_checkpoint_layer

        path = checkpoint_path(args.checkpoint, "--checkpoint")
        names = [args.layer] if args.layer else [s.name for s in list_layers(path)]
        layers = [(name, lambda p, v, name=name: trace_checkpoint_layer(
            path, name, p, env, tp_size=args.tp or 1, parallel=args.parallel, version=v))
            for name in names]
    out = []
    for name, trace in layers:
        for p in platforms:
            diff = version_diff(trace(p, old), trace(p, new), env)
            label = p if isinstance(p, str) else p.get("name") or json.dumps(p)
            out.append((name, label, diff))
    if args.json:
        for name, label, diff in out:
            print(json.dumps({"layer": name, "platform": label, **diff.to_json()}))
        return 0
    print(f"vLLM {old} -> {new}")
    for name, label, diff in out:
        print((f"{name} on {label}:" if name else f"on {label}:"))
        print(printable(diff.to_text(), keep_newlines=True))
    return 0


def _against_vllm(src: str, kind: str, data: dict, platform: Any, env: dict, trace) -> int:
    """Print each recorded field where the workbench differs from vLLM's own code."""
    from workbench.platforms import resolve_platform
    from workbench.recorder.against import compare

    _, diffs = compare(kind, data, resolve_platform(platform), env, trace,
                       check_path(src, "--against-vllm"))
    for d in diffs:
        print(f"{d.field}:\n  workbench: {json.dumps(d.workbench)}\n  vllm:      {json.dumps(d.vllm)}")
    print(f"{len(diffs)} field(s) differ from vLLM" if diffs else "same as vLLM")
    return 1 if diffs else 0


def _run_batch(path: str, platform: str | dict, env: dict, version: str | None = None) -> int:
    """One trace JSON per input line, in order; a bad line prints its error and the run goes on."""
    handle = open_stdin("--batch") if path == "-" else open_input(path, "--batch", fifo=True)
    bad: list[int] = []
    bugs: list[int] = []
    with handle:
        for number, line in bounded_lines(handle):
            if line is not None and not line.strip():
                continue
            try:
                if line is None:
                    raise InvalidInputError(f"over {MAX_ARG_BYTES} bytes; accepted: at most "
                                            f"{MAX_ARG_BYTES} per line")
                case = parse_json(line, "JSON text")
                out = trace_case(case, platform, env, version).to_json()
                if isinstance(case, dict) and "id" in case:
                    out["id"] = case["id"]
            except USER_ERRORS as exc:
                bad.append(number)
                out = {"input_error": f"line {number}: {exc}", "line": number}
            except Exception as exc:  # noqa: BLE001 - a bug on one line must not lose the others
                bugs.append(number)
                out = {"internal_error": f"line {number}: {type(exc).__name__}: {exc}", "line": number}
            print(json.dumps(out))
    sys.stdout.flush()
    if bugs:
        raise RuntimeError(f"--batch line(s) {', '.join(map(str, bugs[:10]))} failed inside the "
                           "workbench (their output lines hold internal_error)")
    if bad:
        listed = ", ".join(map(str, bad[:10])) + (", ..." if len(bad) > 10 else "")
        raise InvalidInputError(f"--batch: {len(bad)} line(s) could not be traced (line {listed}); "
                                "their output lines hold input_error")
    return 0
