"""Measurements in a child process: a kernel that crashes, hangs or runs out of memory ends
the child, never the process that asked (the app's server, which every user shares).

A `Worker` is one child Python (`python -m workbench.contained`, started fresh, never forked
from a process that holds torch or CUDA). Requests and answers are JSON lines: the parent
sends what to measure and the layer's source (`layer_source_*`: a checkpoint's path and
layer name, or a synthetic / trained spec), never a pickled object, and the child rebuilds
the layer the loaders would. While it works the child sends progress lines (a page's bar
moves) and, before each kernel call it makes outside a timed region, which path at which M
(the stage a crash is named by). Its stdout is the protocol only: anything a library prints
goes to its stderr, a file whose tail a failure carries.

One worker serves many requests: the JIT-compiled GPU kernels and the loaded layer stay in it
between runs (Humming's first call compiles for seconds), and a path's first call is timed
once per worker and layer (`first_call`). A failure ends the worker; the next request starts
a fresh one, whose first calls are timed again. A request that takes longer than its
`timeout_s` is a hang: the child is killed.

The timing is `workbench.bench`'s, the same code the `bench` CLI runs in its own process.
"""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from pathlib import Path
from typing import Any, Callable

from workbench.errors import USER_ERRORS, InvalidInputError, MeasurementDiedError

__all__ = ["Worker", "layer_source_checkpoint", "layer_source_synthetic", "layer_source_trained",
           "layer_from_source", "DEFAULT_TIMEOUT_S", "TIMEOUT_ENV", "timeout_from_env"]

# A request (one M of a sweep, a first call, a calibration) with no answer after this long is
# a hang. $WORKBENCH_RUN_TIMEOUT_S sets another limit for the app's runs.
DEFAULT_TIMEOUT_S = 300.0
TIMEOUT_ENV = "WORKBENCH_RUN_TIMEOUT_S"
# A child has this long to import torch and the core before its first request (not counted
# in any request's limit).
STARTUP_TIMEOUT_S = 120.0
# An idle child exits after this long (its parent starts another when asked again).
IDLE_EXIT_S = 1800.0
# Tests only: "MODE[:PATH][@M]" makes the child die before that path's call at that M (PATH
# "calibration": as a calibration starts; MODE: segv, ill, abort, hang, oom, kill). Read by
# the child alone.
PLANT_ENV = "WORKBENCH_CONTAINED_PLANT"


def timeout_from_env() -> float:
    """$WORKBENCH_RUN_TIMEOUT_S, else DEFAULT_TIMEOUT_S."""
    raw = os.environ.get(TIMEOUT_ENV, "")
    if not raw:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value <= 86400:
        raise InvalidInputError(f"{TIMEOUT_ENV}={raw!r}; accepted: seconds, a number above 0 and at most 86400")
    return value


# --------------------------------------------------------------------------- layer sources
# What the child needs to rebuild a layer: plain JSON, read by the core's own readers.


def layer_source_checkpoint(path: str | Path, name: str) -> dict:
    return {"kind": "checkpoint", "path": str(path), "name": name}


def layer_source_synthetic(spec: dict, name: str) -> dict:
    return {"kind": "synthetic", "spec": dict(spec), "name": name}


def layer_source_trained(spec: dict) -> dict:
    return {"kind": "trained", "spec": dict(spec)}


def layer_from_source(source: dict):
    """The QuantizedLayer a source names: a checkpoint's layer read from its safetensors, a
    seeded synthetic layer, or a MiniLM layer quantized round-to-nearest."""
    kind = source.get("kind") if isinstance(source, dict) else None
    if kind == "checkpoint":
        from workbench.checkpoints import open_checkpoint

        return open_checkpoint(source["path"]).load_layer(source["name"])
    if kind == "synthetic":
        from workbench.synthetic import SyntheticSpec, synthetic_layer

        return synthetic_layer(SyntheticSpec(**source["spec"]), name=source["name"])
    if kind == "trained":
        from workbench.trained import trained_layer

        spec = dict(source["spec"])
        return trained_layer(spec.pop("name"), **spec)
    raise InvalidInputError(f"layer source {str(source)[:200]}; accepted: kind checkpoint, synthetic or trained")


# --------------------------------------------------------------------------- the parent's side


def _how(rc: int) -> str:
    """How a child ended, from its return code: a signal's name, or its exit status."""
    if rc >= 0:
        return f"exit status {rc}"
    try:
        return signal.Signals(-rc).name
    except ValueError:
        return f"signal {-rc}"


_CAP = "start the app with W4A8_KERNELS_MAX_ISA=avx512 (or avx2) to keep the native engines off their widest instructions"


def _advice(how: str, path: str | None, what: str) -> str:
    """What the user can do about a failure, by how it failed and where."""
    if what == CALIBRATION:
        fix = {"timeout": f"calibrate on a quieter machine, or allow it longer ({TIMEOUT_ENV})",
               "out of memory": "close what else holds this machine's memory and calibrate again"}
        return fix.get(how, f"{_CAP}, and calibrate again")
    drop = f"drop `{path}` from Paths" if path else "drop paths one at a time to find the one that fails"
    if how == "SIGILL":
        return f"SIGILL is an instruction this CPU or its OS does not run: {_CAP}, or {drop}"
    if how == "out of memory":
        return f"use smaller token counts M, a smaller layer, or {drop}"
    if how == "timeout":
        return (f"use smaller token counts M or fewer Repeats, or {drop}; a slower machine may need a longer "
                f"limit ({TIMEOUT_ENV})")
    return f"{drop} and run again, or {_CAP}"


CALIBRATION = "this machine's calibration"


class _Failed(Exception):
    """How a request died, before it is worded (parent side)."""


class Worker:
    """A child process that measures on request; dead or hung, it is replaced at the next one.

    `threads`: the torch threads the child computes with (default: this process's torch
    count where torch is loaded, so a calibration's key and a sweep's threads are the
    asker's). `env`: extra environment for the child.
    """

    def __init__(self, *, threads: int | None = None, env: dict[str, str] | None = None) -> None:
        if threads is None and "torch" in sys.modules:
            threads = int(sys.modules["torch"].get_num_threads())
        self.threads = threads
        self.env = dict(env or {})
        self._proc: subprocess.Popen | None = None
        self._err = None  # the child's stderr, a temporary file
        self._buf = b""
        self._next_id = 0
        self._abandoned: tuple[int, float] | None = None  # (request id, its deadline)
        self.starts = 0  # children started (a test reads it: a failure starts a fresh one)
        self._finalizer = None

    # ---------------------------------------------------------------- life of the child
    def _start(self) -> None:
        if self._err is not None:
            self._err.close()
        self._err = tempfile.TemporaryFile()
        cmd = [sys.executable, "-m", "workbench.contained"]
        if self.threads:
            cmd += ["--threads", str(self.threads)]
        self._proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err,
                                      env={**os.environ, **self.env}, bufsize=0)
        self._buf = b""
        self._abandoned = None
        self.starts += 1
        self._finalizer = weakref.finalize(self, _kill, self._proc)
        try:
            ready = self._read_line(time.monotonic() + STARTUP_TIMEOUT_S)
        except _Failed as died:
            self._raise("the measuring process", _how(died.args[0]), {})
        if ready is None:
            self._raise("the measuring process's start", "timeout", {}, timeout_s=STARTUP_TIMEOUT_S)

    def ensure_started(self) -> int:
        """The child's pid, started now if none runs (a run's load window counts its CPU time as
        the run's own: `workbench.noise.cpu_sample`)."""
        if not self.alive():
            if self._proc is not None:
                self.close()
            self._start()
        return self._proc.pid

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def close(self) -> None:
        """End the child (it holds the compiled kernels and the layer) now."""
        if self._finalizer is not None:
            self._finalizer()
        self._proc = None

    def pid(self) -> int | None:
        return self._proc.pid if self.alive() else None

    def _stderr_tail(self, n: int = 2000) -> str:
        if self._err is None:
            return ""
        try:
            self._err.seek(0, os.SEEK_END)
            size = self._err.tell()
            self._err.seek(max(0, size - n))
            return self._err.read().decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""

    # ---------------------------------------------------------------- one request
    def _read_line(self, deadline: float) -> dict | None:
        """The child's next JSON line, or None at the deadline (raises _Failed where it died)."""
        fd = self._proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], min(left, 1.0))
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:  # the child ended
                rc = self._proc.wait()
                raise _Failed(rc)
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def _request(self, op: str, args: dict, *, what: str, timeout_s: float,
                 progress: Callable[[int, int, str], None] | None = None) -> dict:
        self.ensure_started()
        self._next_id += 1
        rid = self._next_id
        extra = 0.0
        if self._abandoned is not None:  # an interrupted request still runs first: its time too
            extra = max(0.0, self._abandoned[1] - time.monotonic())
        deadline = time.monotonic() + timeout_s + extra
        stage: dict = {}
        answered = False
        try:
            self._proc.stdin.write((json.dumps({"id": rid, "op": op, **args}) + "\n").encode())
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError):  # it died between the check and the write
            self.close()
            self._start()
            self._proc.stdin.write((json.dumps({"id": rid, "op": op, **args}) + "\n").encode())
            self._proc.stdin.flush()
        try:
            while True:
                try:
                    msg = self._read_line(deadline)
                except _Failed as died:
                    self._raise(what, _how(died.args[0]), stage)
                if msg is None:
                    self._raise(what, "timeout", stage, timeout_s=timeout_s)
                if msg.get("id") != rid:
                    continue  # the tail of an interrupted request
                self._abandoned = None
                answered = not ("stage" in msg or "progress" in msg)
                if "stage" in msg:
                    stage = msg["stage"]
                elif "progress" in msg:
                    if progress is not None:
                        progress(*msg["progress"])
                elif "oom" in msg:  # the child ends too: what it holds after a failed allocation is no one's
                    self._raise(what, "out of memory", stage, detail=msg["oom"])
                elif "error" in msg:
                    _reraise(msg["error"])
                else:
                    return msg["result"]
        except MeasurementDiedError:
            raise
        except BaseException:
            # the asker stopped waiting (a page's Stop): the child finishes that request,
            # and the next one reads past its lines
            if self.alive() and not answered:
                self._abandoned = (rid, deadline)
            raise

    def _raise(self, what: str, how: str, stage: dict, *, timeout_s: float | None = None, detail: str = "") -> None:
        """Ends the child (dead, hung or out of memory) and raises the failure in words."""
        path, m = stage.get("path") or None, stage.get("m")
        where = ""
        if stage:  # the last thing the child said it was about to do
            where = (f" during {stage.get('what', 'a call')}" + (f" of path `{path}`" if path else "")
                     + (f" at M = {m}" if m is not None else ""))
        if how == "timeout":
            said = f"{what} did not answer within {timeout_s:.0f} s{where}: stopped as a hang"
        elif how == "out of memory":
            said = f"{what} ran out of memory{where} ({detail[:200]})"
        elif how == "SIGKILL":
            how = "out of memory"
            said = (f"{what} was killed (SIGKILL){where}: the system ends a process that way when memory "
                    "runs out")
        elif how.startswith("SIG"):
            said = f"{what} crashed with {how}{where}"
        else:
            said = f"{what} ended with {how}{where}"
        tail = self._stderr_tail()
        self.close()
        advice = _advice(how, path, what)
        raise MeasurementDiedError(
            f"{said[0].upper()}{said[1:]} (in a child process: nothing else ended). {advice[0].upper()}{advice[1:]}.",
            what=what, how=how, path=path,
            m=m, stderr_tail=tail)

    # ---------------------------------------------------------------- what it measures
    def bench(self, source: dict, paths: list[str], ms: list[int], *, repeats: int, warmup: int,
              max_call_s: float, error_rows: int = 64, timeout_s: float = DEFAULT_TIMEOUT_S,
              progress: Callable[[int, int, str], None] | None = None) -> list[dict]:
        """`workbench.bench.bench_layer_weight` in the child: the records as dicts."""
        return self._request("bench", {"source": source, "paths": list(paths), "ms": list(ms),
                                       "repeats": repeats, "warmup": warmup, "max_call_s": max_call_s,
                                       "error_rows": error_rows},
                             what="the kernel run", timeout_s=timeout_s, progress=progress)

    def first_call(self, source: dict, path: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> float:
        """A path's first call on the layer (a JIT compile), in seconds: measured once per child
        and layer, the compiled kernels kept there for the runs after it."""
        return self._request("first_call", {"source": source, "path": path},
                             what=f"`{path}`'s first call", timeout_s=timeout_s)

    def per_token(self, source: dict, paths: list[str], m: int, kind: str, *,
                  timeout_s: float = DEFAULT_TIMEOUT_S) -> dict:
        """Each path's relative error per token (`workbench.bench.per_token_errors`) on the first m
        of `kind` activations ("synthetic": the bench's; "real": a MiniLM layer's own inputs):
        {"m": tokens, "errors": {path: [...]}, "skipped": {path: why}}."""
        return self._request("per_token", {"source": source, "paths": list(paths), "m": m, "kind": kind},
                             what="the per-token error run", timeout_s=timeout_s)

    def calibrate(self, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> list[str]:
        """This machine's calibration (`workbench.perf.cpu.host_calibration`, cached on disk by
        the child); the warnings it gave, as text."""
        return self._request("calibrate", {}, what=CALIBRATION, timeout_s=timeout_s)


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            proc.kill()
        except OSError:
            pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    for f in (proc.stdin, proc.stdout):
        try:
            f.close()
        except (OSError, AttributeError):
            pass


def _reraise(err: dict) -> None:
    """A named error from the child raised here as its own class; anything else is a bug, raised
    with the child's traceback."""
    import importlib

    module, name, message = err.get("module", ""), err.get("type", ""), err.get("message", "")
    if module.split(".")[0] in ("workbench", "w4a8_kernels"):
        try:
            cls = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            cls = None
        if isinstance(cls, type) and issubclass(cls, USER_ERRORS):
            try:
                exc = cls(message)
            except TypeError:
                exc = None
            if exc is not None:
                raise exc
    raise RuntimeError(f"measurement child: {module}.{name}: {message}\n{err.get('traceback', '')}")


# --------------------------------------------------------------------------- the child's side


def _is_oom(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    torch = sys.modules.get("torch")
    oom = getattr(torch, "OutOfMemoryError", None) if torch is not None else None
    return (oom is not None and isinstance(exc, oom)) or "can't allocate memory" in str(exc)


class _Child:
    def __init__(self, out) -> None:
        self.out = out
        self.layers: dict[str, Any] = {}
        self.first: dict[tuple[str, str], float] = {}
        plant = os.environ.get(PLANT_ENV, "")
        spec, _, m = plant.partition("@")
        mode, _, path = spec.partition(":")
        self.plant = (mode, path or None, int(m) if m else None) if mode else None

    def send(self, msg: dict) -> None:
        self.out.write(json.dumps(msg) + "\n")
        self.out.flush()

    def layer(self, source: dict):
        key = json.dumps(source, sort_keys=True)
        if key not in self.layers:
            if len(self.layers) >= 4:
                self.layers.pop(next(iter(self.layers)))
            self.layers[key] = layer_from_source(source)
        return self.layers[key]

    def stage(self, rid: int, path: str, m: int | None, what: str) -> None:
        self.send({"id": rid, "stage": {"path": path, "m": m, "what": what}})
        self.planted(path, m)

    def planted(self, path: str, m: int | None) -> None:
        if self.plant is not None:
            mode, p, at = self.plant
            if (p is None or p == path) and (at is None or at == m):
                _die(mode)

    def handle(self, req: dict) -> Any:
        rid, op = req["id"], req["op"]
        if op == "bench":
            from workbench.bench import bench_layer_weight

            recs = bench_layer_weight(
                self.layer(req["source"]), req["paths"], req["ms"], repeats=req["repeats"], warmup=req["warmup"],
                max_call_s=req["max_call_s"], error_rows=req["error_rows"],
                progress=lambda done, total, msg: self.send({"id": rid, "progress": [done, total, msg]}),
                on_stage=lambda path, m, what: self.stage(rid, path, m, what))
            return [r.to_dict() for r in recs]
        if op == "first_call":
            from workbench.bench import first_call_s, int4_weight_of
            from workbench.execution import execution_path

            key = (json.dumps(req["source"], sort_keys=True), req["path"])
            if key not in self.first:
                layer = self.layer(req["source"])
                self.stage(rid, req["path"], 1, "the first call")
                self.first[key] = first_call_s(int4_weight_of(layer), execution_path(req["path"]))
            return self.first[key]
        if op == "per_token":
            from workbench.bench import int4_weight_of, per_token_errors
            from workbench.error_split import activations

            layer = self.layer(req["source"])
            x = activations(layer, req["m"], req["kind"])
            errors, skipped = {}, {}
            for path in req["paths"]:  # one at a time: a crash is named by its path
                self.stage(rid, path, int(x.shape[0]), "the per-token run")
                e, s = per_token_errors(int4_weight_of(layer), layer.source_weight, [path], x)
                errors.update(e)
                skipped.update(s)
            return {"m": int(x.shape[0]), "errors": errors, "skipped": skipped}
        if op == "calibrate":
            import warnings

            from workbench.perf.cpu import host_calibration

            self.planted("calibration", None)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                host_calibration.cache_clear()
                host_calibration()
            return [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
        raise InvalidInputError(f"request {op!r}; accepted: bench, first_call, per_token, calibrate")

    def serve(self) -> None:
        import traceback

        stdin = sys.stdin.buffer
        while True:
            ready, _, _ = select.select([stdin], [], [], IDLE_EXIT_S)
            if not ready:
                return  # idle: the parent starts another when asked again
            line = stdin.readline()
            if not line:
                return  # the parent has gone
            req = json.loads(line)
            try:
                self.send({"id": req["id"], "result": self.handle(req)})
            except Exception as exc:  # noqa: BLE001 - every failure goes back, named
                if _is_oom(exc):
                    self.send({"id": req["id"], "oom": f"{type(exc).__name__}: {exc}"})
                    continue
                self.send({"id": req["id"], "error": {
                    "module": type(exc).__module__, "type": type(exc).__qualname__, "message": str(exc),
                    "traceback": traceback.format_exc()[-4000:]}})


def _die(mode: str) -> None:
    """A planted failure (tests): a real signal, hang or failed allocation in this process."""
    if mode == "segv":
        import ctypes

        ctypes.string_at(0)  # reads address 0: SIGSEGV
    elif mode == "ill":
        os.kill(os.getpid(), signal.SIGILL)
    elif mode == "abort":
        os.abort()
    elif mode == "kill":  # what the kernel's out-of-memory killer sends
        os.kill(os.getpid(), signal.SIGKILL)
    elif mode == "oom":
        raise MemoryError("planted: cannot allocate 1 TiB")
    elif mode == "hang":
        while True:
            time.sleep(3600)
    time.sleep(1)  # a signal is delivered before this returns


def _child_main(argv: list[str]) -> None:
    import faulthandler

    # The asker's session and scheduling group (its timings are the asker's); a terminal's
    # Ctrl-C is for the asker, whose exit closes this child's stdin and ends it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The protocol owns the real stdout; anything printed by a library goes to stderr.
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    faulthandler.enable()  # a crash leaves its Python stack in stderr, whose tail the parent keeps
    if "--threads" in argv:
        import torch

        torch.set_num_threads(int(argv[argv.index("--threads") + 1]))
    import workbench.bench  # noqa: F401 - torch and the kernels, before the first request's clock starts

    child = _Child(out)
    child.send({"ready": True})
    child.serve()


if __name__ == "__main__":
    _child_main(sys.argv[1:])
