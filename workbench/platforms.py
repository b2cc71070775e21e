"""Platforms the dispatch rules run against: simulated presets, JSON overrides, and this host.

A `Platform` is an explicit value. The rules never read global state, so a trace for an
H200 can be computed on a laptop. The JSON form (keys `device`, `capability`, `cpu_arch`,
`gfx`, `zen`, `amx`, `packages`, `torch_ops`) is shared with other tools; the ISA flags and
`vendor` only feed the runtime notes (which CPU build of vLLM loads, which path a kernel
takes after selection), never kernel selection itself.

Preset packages follow what a standard install of the pinned vLLM release brings:
`humming-kernels` is in `requirements/cuda.txt:33`, `conch-triton-kernels` in
`requirements/rocm.txt:20`; zentorch is what makes vLLM pick its Zen CPU platform
(`vllm/platforms/__init__.py:207`).
"""
from __future__ import annotations

import json
import platform as _platform
import re
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from workbench.errors import InvalidInputError, UnknownPresetError

DEVICES = ("cuda", "rocm", "cpu", "xpu")
CPU_ARCHES = ("x86", "arm", "riscv", "powerpc", "s390x", "other")

# Optional packages that change dispatch (each named by the rule that imports or probes it).
KNOWN_PACKAGES = ("humming", "conch", "zentorch", "auto_round_kernel", "aiter")
# Torch ops whose presence a rule tests, as `namespace.op`.
DYN_QUANT_OP = "aten._dyn_quant_matmul_4bit"
RDNA3_OP = "_rocm_C.gptq_gemm_rdna3"
XPU_W4A8_OP = "_xpu_C.int4_gemm_w4a8"
ZENTORCH_WOQ_OPS = ("zentorch.zentorch_woq_repack_weight", "zentorch.zentorch_woq_linear")
ZENTORCH_DA8W4_OP = "zentorch.zentorch_dynamic_qlinear"
KNOWN_TORCH_OPS = (DYN_QUANT_OP, RDNA3_OP, XPU_W4A8_OP, *ZENTORCH_WOQ_OPS, ZENTORCH_DA8W4_OP)


@dataclass(frozen=True)
class Platform:
    """Everything the dispatch rules may ask about a machine."""

    device: str
    capability: int | None = None  # major*10 + minor; None on CPU/XPU (and CUDA without NVML)
    cpu_arch: str | None = None
    gfx: str | None = None  # ROCm GCN arch string, e.g. "gfx942"
    zen: bool = False  # vLLM chose ZenCpuPlatform (AMD + avx512 + importable zentorch)
    amx: bool = False  # torch.cpu._is_amx_tile_supported()
    packages: tuple[str, ...] = ()
    torch_ops: tuple[str, ...] = ()
    # auto_round_kernel, when importable, loaded its cpu_lib or xpu_lib (inc_ark_ops.py:29).
    ark_backend_lib: bool = True
    # Triton with a backend for the device, as vLLM's HAS_TRITON finds it (triton_utils/
    # importing.py); a standard install brings it (on x86 CPUs triton-cpu, requirements/cpu.txt).
    triton: bool = True
    # Runtime-only facts (not used by selection).
    avx2: bool = False
    avx512: bool = False
    avx512_bf16: bool = False
    avx512_vnni: bool = False
    vendor: str | None = None
    name: str = "custom"
    description: str = ""

    # -- the questions vLLM's platform object answers -------------------------------
    def is_cuda(self) -> bool:
        return self.device == "cuda"

    def is_rocm(self) -> bool:
        return self.device == "rocm"

    def is_cuda_alike(self) -> bool:
        return self.device in ("cuda", "rocm")

    def is_xpu(self) -> bool:
        return self.device == "xpu"

    def is_cpu(self) -> bool:
        return self.device == "cpu"

    def is_zen_cpu(self) -> bool:
        # vLLM only picks ZenCpuPlatform when `import zentorch` succeeds (vllm/platforms/__init__.py).
        return self.device == "cpu" and self.zen and "zentorch" in self.packages

    def has_package(self, name: str) -> bool:
        return name in self.packages

    def has_op(self, name: str) -> bool:
        return name in self.torch_ops

    def is_device_capability(self, cap: int) -> bool:
        return self.capability is not None and self.capability == cap

    def to_json(self) -> dict:
        data = asdict(self)
        data["packages"] = list(self.packages)
        data["torch_ops"] = list(self.torch_ops)
        return data

    def label(self) -> str:
        return self.description or self.name


def capability_from_gfx(gfx: str | None) -> int | None:
    """ROCm capability as HIP derives it from the GCN arch (vllm/platforms/rocm.py)."""
    match = re.match(r"gfx(\d+)", gfx or "")
    if not match:
        return None
    digits = match.group(1)
    if len(digits) in (2, 3):  # gfx9x / gfx9xx: one-digit major (gfx90a -> "90")
        return int(digits[0]) * 10 + int(digits[1])
    if len(digits) == 4:  # gfx1xxx: two-digit major
        return int(digits[:2]) * 10 + int(digits[2])
    return None


# --------------------------------------------------------------------------- presets

_CUDA_PKGS = ("humming",)
_ALL_CPU_OPS = (DYN_QUANT_OP,)  # torch >= 2.6 registers the aten op on every build


def _cuda(name: str, cap: int, desc: str) -> Platform:
    return Platform("cuda", cap, packages=_CUDA_PKGS, torch_ops=(DYN_QUANT_OP,), name=name,
                    description=desc)


PRESETS: dict[str, Platform] = {
    p.name: p
    for p in (
        _cuda("sm70-v100", 70, "NVIDIA V100 (Volta, SM 7.0)"),
        _cuda("sm75-t4", 75, "NVIDIA T4 (Turing, SM 7.5)"),
        _cuda("sm80-a100", 80, "NVIDIA A100 (Ampere, SM 8.0)"),
        _cuda("sm86-a10", 86, "NVIDIA A10 (Ampere, SM 8.6)"),
        _cuda("sm89-l40s", 89, "NVIDIA L40S (Ada, SM 8.9)"),
        _cuda("sm90-h100", 90, "NVIDIA H100 SXM5 (Hopper, SM 9.0)"),
        _cuda("sm90-h200", 90, "NVIDIA H200 SXM (Hopper, SM 9.0)"),
        _cuda("sm100-b200", 100, "NVIDIA B200 (Blackwell, SM 10.0)"),
        _cuda("sm120-rtx5090", 120, "NVIDIA GeForce RTX 5090 (Blackwell, SM 12.0)"),
        Platform("rocm", 94, gfx="gfx942", packages=("conch",), torch_ops=(DYN_QUANT_OP,),
                 name="rocm-mi300x", description="AMD MI300X (CDNA3, gfx942)"),
        Platform("rocm", 110, gfx="gfx1100", packages=("conch",),
                 torch_ops=(DYN_QUANT_OP, RDNA3_OP), name="rocm-rdna3",
                 description="AMD Radeon RX 7900 XTX (RDNA3, gfx1100)"),
        Platform("cpu", cpu_arch="x86", avx2=True, vendor="GenuineIntel",
                 torch_ops=_ALL_CPU_OPS, name="x86-avx2",
                 description="x86 CPU with AVX2 only (no AVX512)"),
        Platform("cpu", cpu_arch="x86", avx2=True, avx512=True, avx512_bf16=True,
                 avx512_vnni=True, vendor="AuthenticAMD", torch_ops=_ALL_CPU_OPS,
                 name="x86-avx512", description="x86 CPU with AVX512 (VNNI, BF16), no AMX"),
        Platform("cpu", cpu_arch="x86", amx=True, avx2=True, avx512=True, avx512_bf16=True,
                 avx512_vnni=True, vendor="GenuineIntel", torch_ops=_ALL_CPU_OPS,
                 name="x86-spr-amx", description="Intel Sapphire Rapids (AVX512 + AMX)"),
        Platform("cpu", cpu_arch="x86", zen=True, avx2=True, avx512=True, avx512_bf16=True,
                 avx512_vnni=True, vendor="AuthenticAMD", packages=("zentorch",),
                 torch_ops=(DYN_QUANT_OP, *ZENTORCH_WOQ_OPS, ZENTORCH_DA8W4_OP),
                 name="zen4-zentorch", description="AMD Zen 4 EPYC with zentorch"),
        Platform("cpu", cpu_arch="arm", torch_ops=(DYN_QUANT_OP,), name="arm-kleidiai",
                 description="Arm CPU (Neoverse) with aten._dyn_quant_matmul_4bit (KleidiAI)"),
        Platform("cpu", cpu_arch="arm", torch_ops=(), name="arm-no-dyn-quant",
                 description="Arm CPU, torch without aten._dyn_quant_matmul_4bit"),
        Platform("cpu", cpu_arch="riscv", torch_ops=_ALL_CPU_OPS, name="riscv",
                 description="RISC-V CPU (RVV)"),
        Platform("cpu", cpu_arch="powerpc", torch_ops=_ALL_CPU_OPS, name="powerpc",
                 description="IBM Power CPU (VSX)"),
        Platform("xpu", torch_ops=(DYN_QUANT_OP, XPU_W4A8_OP), name="xpu",
                 description="Intel Data Center GPU (XPU) with vllm-xpu-kernels"),
    )
}
# Other names of a preset: each resolves to its own part (matched case-insensitively).
ALIASES = {"h100": "sm90-h100", "h200": "sm90-h200", "a100": "sm80-a100", "a10": "sm86-a10",
           "l40s": "sm89-l40s", "b200": "sm100-b200", "rtx5090": "sm120-rtx5090",
           "rtx-5090": "sm120-rtx5090", "v100": "sm70-v100", "t4": "sm75-t4",
           "mi300x": "rocm-mi300x", "gfx942": "rocm-mi300x", "gfx1100": "rocm-rdna3",
           "7900xtx": "rocm-rdna3", "sapphire-rapids": "x86-spr-amx", "zen": "zen4-zentorch",
           "arm": "arm-kleidiai"}


def preset_key(name: str) -> str | None:
    """The preset a name or alias names (case-insensitive), or None."""
    low = name.lower() if isinstance(name, str) else name
    key = ALIASES.get(low, low)
    return key if key in PRESETS else None


def accepted_names() -> str:
    """The preset names and their aliases, for "accepted" in error text."""
    return (f"{', '.join(PRESETS)}; aliases "
            f"{', '.join(f'{a} ({k})' for a, k in ALIASES.items())}")


def get_preset(name: str) -> Platform:
    key = preset_key(name)
    if key is None:
        raise UnknownPresetError(
            f"platform: unknown preset {name!r}; accepted: {accepted_names()}, "
            f"'host', 'host-cpu', or a JSON object (names are matched case-insensitively)"
        )
    return PRESETS[key]


def preset_for_host(host: Platform) -> str | None:
    """The GPU preset that stands for a GPU host where a preset is needed (the cost model): the
    one an alias in the device's name points to ("NVIDIA H200" -> h200), else the preset of its
    capability; None for a CPU or XPU host, or a GPU no preset matches."""
    if host.device not in ("cuda", "rocm"):
        return None
    name = host.description.lower()
    for alias, key in ALIASES.items():
        if re.search(rf"\b{re.escape(alias)}\b", name) and PRESETS[key].device == host.device:
            return key
    same = [key for key, p in PRESETS.items()
            if p.device == host.device and p.capability == host.capability]
    return same[0] if same else None


# DeviceCapability.to_int() is major*10 + minor with a one-digit minor
# (vllm/platforms/interface.py:128-134); majors 1-19 cover every CUDA and HIP device so far.
CAPABILITY_RANGE = (10, 199)
_JSON_FIELDS = {"device", "capability", "cpu_arch", "gfx", "zen", "amx", "packages",
                "torch_ops", "ark_backend_lib", "triton", "avx2", "avx512", "avx512_bf16", "avx512_vnni",
                "vendor", "name", "description"}


def platform_from_json(data: dict) -> Platform:
    """A platform from JSON. `"preset": NAME` picks the base; other keys override it.

    Without a preset, absent keys take neutral defaults (no capability, no packages, no ops),
    so `torch_ops` must list every relevant op that is present.
    """
    if not isinstance(data, dict):
        raise InvalidInputError(f"platform: expected a preset name or JSON object, got {data!r}")
    data = dict(data)
    preset = data.pop("preset", None)
    if preset is not None and not isinstance(preset, str):
        raise InvalidInputError(f"platform.preset: expected a preset name, got {preset!r}")
    unknown = sorted(set(data) - _JSON_FIELDS)
    if unknown:
        raise InvalidInputError(
            f"platform: unknown field(s) {unknown}; accepted: {sorted(_JSON_FIELDS | {'preset'})}"
        )
    if preset is not None:
        base = get_preset(preset)
    else:
        if "device" not in data:
            raise InvalidInputError(f"platform.device: missing; accepted: {', '.join(DEVICES)}")
        base = Platform(device=str(data["device"]))
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key in ("packages", "torch_ops"):
            if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
                raise InvalidInputError(f"platform.{key}: expected a list of strings, got {value!r}")
            values[key] = tuple(value)
        elif key in ("zen", "amx", "avx2", "avx512", "avx512_bf16", "avx512_vnni",
                     "ark_backend_lib", "triton"):
            if not isinstance(value, bool):
                raise InvalidInputError(f"platform.{key}: expected true or false, got {value!r}")
            values[key] = value
        elif key == "capability":
            lo, hi = CAPABILITY_RANGE
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or not lo <= value <= hi):
                raise InvalidInputError(
                    f"platform.capability: got {value!r}; accepted: null or an integer from {lo} "
                    f"to {hi}, major*10+minor like 90 for SM 9.0"
                )
            values[key] = value
        else:
            if value is not None and not isinstance(value, str):
                raise InvalidInputError(f"platform.{key}: expected a string, got {value!r}")
            values[key] = value
    result = replace(base, **values)
    if result.device not in DEVICES:
        raise InvalidInputError(
            f"platform.device: unknown device {result.device!r}; accepted: {', '.join(DEVICES)}"
        )
    if result.cpu_arch is not None and result.cpu_arch not in CPU_ARCHES:
        raise InvalidInputError(
            f"platform.cpu_arch: unknown arch {result.cpu_arch!r}; accepted: {', '.join(CPU_ARCHES)}"
        )
    if result.device == "rocm" and "capability" not in data and "gfx" in data:
        result = replace(result, capability=capability_from_gfx(result.gfx))
    if preset is None and "name" not in data:
        result = replace(result, name="custom")
    return result


def resolve_platform(spec: str | dict | Platform) -> Platform:
    """A preset name, `host`, a JSON string or object, or a Platform."""
    if isinstance(spec, Platform):
        return spec
    if isinstance(spec, dict):
        return platform_from_json(spec)
    if not isinstance(spec, str):
        raise InvalidInputError(f"platform: expected a preset name or JSON object, got {spec!r}")
    text = spec.strip()
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidInputError(f"platform: malformed JSON ({exc.msg} at column {exc.colno})") from None
        return platform_from_json(data)
    if text == HOST:
        return detect_host()
    if text == HOST_CPU:
        return detect_host(cpu=True)
    return get_preset(text)


# --------------------------------------------------------------------------- this machine


def _cpu_flags() -> tuple[set[str], str | None]:
    flags: set[str] = set()
    vendor = None
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("flags", "Features") and not flags:
                    flags = set(value.split())
                elif key == "vendor_id" and vendor is None:
                    vendor = value.strip()
    except OSError:
        pass
    return flags, vendor


def _arch_of(machine: str) -> str | None:
    """vLLM's `Platform.get_cpu_architecture()` mapping of `platform.machine()`."""
    m = machine.lower()
    if m in ("x86_64", "amd64", "i386", "i686"):
        return "x86"
    if m.startswith(("arm", "aarch")):
        return "arm"
    if m.startswith("ppc"):
        return "powerpc"
    if m == "s390x":
        return "s390x"
    if m.startswith("riscv"):
        return "riscv"
    return "other" if m else None


def _present_ops() -> tuple[str, ...]:
    import torch

    present = []
    for qualified in KNOWN_TORCH_OPS:
        namespace, op = qualified.split(".", 1)
        try:
            getattr(getattr(torch.ops, namespace), op)
        except (AttributeError, RuntimeError):
            continue
        present.append(qualified)
    return tuple(present)


def _present_packages() -> tuple[str, ...]:
    from importlib.util import find_spec

    return tuple(p for p in KNOWN_PACKAGES if find_spec(p) is not None)


def _torch_build() -> dict[str, Any] | None:
    """The installed torch's `torch/version.py`, read as text (importing torch costs 2 s).

    Only literal assignments are read (`ast.literal_eval`), nothing is executed. None when
    torch is absent or the file has an unexpected form; then `detect_host` imports torch.
    """
    import ast
    from importlib.util import find_spec

    try:
        spec = find_spec("torch")
        if spec is None or not spec.submodule_search_locations:
            return None
        path = Path(next(iter(spec.submodule_search_locations))) / "version.py"
        tree = ast.parse(path.read_text(encoding="utf-8"))
        values: dict[str, Any] = {}
        for node in tree.body:
            target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
            if isinstance(target, ast.Name) and getattr(node, "value", None) is not None:
                values[target.id] = ast.literal_eval(node.value)
        return {k: values[k] for k in ("__version__", "cuda", "hip", "xpu")}
    except (OSError, SyntaxError, ValueError, KeyError, StopIteration):
        return None


def _version_at_least(version: str, major: int, minor: int) -> bool:
    match = re.match(r"(\d+)\.(\d+)", version)
    return bool(match) and (int(match.group(1)), int(match.group(2))) >= (major, minor)


# `host` is this machine as vLLM sees it: its GPU when it has one. `host-cpu` is its CPU even
# then, so the CPU engines stay one choice away on a GPU machine.
HOST, HOST_CPU = "host", "host-cpu"
HOST_NAMES = (HOST, HOST_CPU)


def detect_host(*, import_torch: bool = False, cpu: bool = False) -> Platform:
    """This machine as vLLM would see it: device, capability, ISA, packages, ops.

    A CPU-only torch build without zentorch cannot see a GPU or a zentorch op, so its
    platform is read without importing torch (the app's first page needs it in well under
    a second): AMX from the kernel's `amx_tile` flag, `aten._dyn_quant_matmul_4bit` from the
    torch version (registered on every build since 2.6). `import_torch=True` probes torch
    itself; a test holds both equal on the machine it runs on. `cpu=True`: this machine's CPU
    even where it has a GPU (named `host-cpu`).
    """
    flags, vendor = _cpu_flags()
    arch = _arch_of(_platform.machine())
    packages = _present_packages()
    isa = dict(
        avx2="avx2" in flags,
        avx512="avx512f" in flags,
        avx512_bf16="avx512_bf16" in flags,
        avx512_vnni="avx512_vnni" in flags or "avx512vnni" in flags,
        vendor=vendor,
    )
    if cpu:
        build = _torch_build()
        ops = ((DYN_QUANT_OP,) if build is not None and "zentorch" not in packages
               and _version_at_least(build["__version__"], 2, 6) else _present_ops())
        return replace(_host_cpu(arch, "amx_tile" in flags, packages, ops, isa), name=HOST_CPU)
    build = None if import_torch else cpu_only_torch_build(packages)
    if build is not None:
        ops = (DYN_QUANT_OP,) if _version_at_least(build["__version__"], 2, 6) else ()
        return _host_cpu(arch, "amx_tile" in flags, packages, ops, isa)
    return _probe_with_torch(arch, packages, isa)


def cpu_only_torch_build(packages: tuple[str, ...] | None = None) -> dict[str, Any] | None:
    """The installed torch's version file where it names a build that can see no device
    (no CUDA, ROCm or XPU) and zentorch is absent: then this machine is read without
    importing torch. None where torch must be asked (detect_host imports it)."""
    if "zentorch" in (_present_packages() if packages is None else packages):
        return None
    build = _torch_build()
    return None if build is None or build["cuda"] or build["hip"] or build["xpu"] else build


def _host_cpu(arch: str | None, amx: bool, packages: tuple[str, ...], ops: tuple[str, ...],
              isa: dict[str, Any]) -> Platform:
    vendor = isa["vendor"]
    # vLLM picks ZenCpuPlatform when cpuinfo has AuthenticAMD and avx512 and zentorch imports.
    zen = vendor == "AuthenticAMD" and isa["avx512"] and "zentorch" in packages
    desc = f"this machine: {arch} CPU" + (f" ({vendor})" if vendor else "")
    return Platform("cpu", cpu_arch=arch, zen=zen, amx=amx, packages=packages, torch_ops=ops,
                    triton=_has_triton_cpu(), name="host", description=desc, **isa)


def _has_triton_cpu() -> bool:
    """Triton with its CPU backend installed (triton-cpu), read from disk, nothing imported."""
    from importlib.util import find_spec

    spec = find_spec("triton")
    return bool(spec and spec.submodule_search_locations
                and any((Path(d) / "backends" / "cpu").is_dir()
                        for d in spec.submodule_search_locations))


def _probe_with_torch(arch: str | None, packages: tuple[str, ...], isa: dict[str, Any]) -> Platform:
    import torch

    ops = _present_ops()
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        if getattr(torch.version, "hip", None):
            gfx = getattr(props, "gcnArchName", "").split(":")[0] or None
            return Platform("rocm", capability_from_gfx(gfx), gfx=gfx, packages=packages,
                            torch_ops=ops, name="host", description=f"this machine: {props.name}",
                            cpu_arch=arch, **isa)
        major, minor = torch.cuda.get_device_capability(0)
        return Platform("cuda", major * 10 + minor, packages=packages, torch_ops=ops, name="host",
                        description=f"this machine: {props.name}", cpu_arch=arch, **isa)
    if hasattr(torch, "xpu") and torch.xpu.is_available():
        return Platform("xpu", packages=packages, torch_ops=ops, name="host",
                        description="this machine: Intel XPU", cpu_arch=arch, **isa)
    amx = bool(getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)())
    return _host_cpu(arch, amx, packages, ops, isa)
