"""Run vLLM 0.33.0's own selection code from an unpacked sdist, on a simulated platform.

`workbench.recorder` drives this module; everything here that names a vLLM module, function or
stub belongs to 0.33.0, and still to 0.34.0, whose rule set keeps this recorder (the release
recorded is the sdist's own; a later tree that moves what it drives gets its own module,
`RuleSet.module("recorder")` finds the newest). The simulated platform is vLLM's real platform class (CudaPlatform,
RocmPlatform, XPUPlatform, CpuPlatform, ZenCpuPlatform) with only its hardware queries
answered from the case: `get_device_capability`, `get_device_name`, `get_cpu_architecture`,
the ROCm GCN arch (through a fake `amdsmi`), AMX support, and the torch ops present.
"""
from __future__ import annotations

import importlib
import os
import sys
import types
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from workbench.errors import InvalidInputError, WorkbenchError
from workbench.recorder import sandbox
from workbench.recorder.sdist import sdist_version

VLLM_VERSION = "0.33.0"

# Compiled extensions of vLLM, and compiled packages imported at module level by code the
# selection path imports but never calls (structured-output grammar backends).
STUBBED = {"vllm._C", "vllm._rocm_C", "vllm._moe_C", "vllm._C_stable_libtorch",
           "vllm._flashmla_C", "vllm._flashmla_extension_C", "vllm.third_party.flashmla",
           "vllm.cumem_allocator",
           # FlashAttention-2 of the CUDA build: since 0.34.0 vllm_flash_attn refuses to import
           # without it (vllm_flash_attn/__init__.py:34), and a CUDA platform imports it
           "vllm.vllm_flash_attn._vllm_fa2_C",
           "vllm_xpu_kernels", "xgrammar", "llguidance"}
# Optional packages whose presence is a platform field.
OPTIONAL = {"humming", "conch", "zentorch", "auto_round_kernel", "aiter"}
# Of those, the ones imported for real where the platform has them: vLLM's Humming kernel
# asks humming's schemas which activations to run (utils/humming/schema.py:261-400). Only the
# device is simulated (`humming.device.current_device`: its SM version).
REAL_OPTIONAL = {"humming"}
HUMMING_DEVICE_STOP = "humming.prepare_and_transform_humming_tensors"
# Triton with a backend vLLM accepts (`vllm.triton_utils.HAS_TRITON`, read at import from this
# Python) is the platform's `triton` field (default true, as a standard install brings it),
# where a release's config check reads it (0.34.0's platforms/cpu.py:242-243).
# torch ops whose presence is a platform field ("namespace.op").
SIMULATED_OPS = {"aten._dyn_quant_matmul_4bit", "_rocm_C.gptq_gemm_rdna3",
                 "_xpu_C.int4_gemm_w4a8", "_xpu_C.int4_gemm_w4a16",
                 "zentorch.zentorch_dynamic_qlinear", "zentorch.zentorch_woq_linear",
                 "zentorch.zentorch_woq_repack_weight"}
# Capability queries of the compiled `_C` extension, answered as its source does for a CUDA
# 12.8 build with every SM compiled in (csrc/quantization/w8a8/cutlass/scaled_mm_entry.cu:147,
# csrc/quantization/fp4/nvfp4_scaled_mm_entry.cu:71).
C_QUERIES = {
    "cutlass_scaled_mm_supports_fp8": lambda cc: cc >= 89,
    "cutlass_scaled_mm_supports_fp4": lambda cc: 100 <= cc < 130,
}

HARDWARE_QUERIES = ["auto_round_kernel.cpu_lib / xpu_lib (platform field ark_backend_lib)",
                    "Platform.get_device_capability", "Platform.get_device_name",
                    "Platform.get_cpu_architecture", "amdsmi (ROCm GCN arch)",
                    "torch.cpu._is_amx_tile_supported",
                    "vllm.triton_utils.HAS_TRITON (platform field triton)",
                    "torch.ops._C." + ", torch.ops._C.".join(sorted(C_QUERIES)),
                    "torch.ops presence of " +
                    ", ".join(sorted(SIMULATED_OPS))]

_CPU_ARCH = {"x86": "X86", "arm": "ARM", "powerpc": "POWERPC", "riscv": "RISCV",
             "s390x": "S390X"}


class SdistError(InvalidInputError):
    """The directory given is not an unpacked vLLM 0.33.0 sdist."""


class SdistIncomplete(SdistError):
    """The sdist lacks a module its import path needs, or holds one cut short."""


class VllmDependencyMissing(WorkbenchError):
    """This Python lacks a package that vLLM's import path imports (requirements/common.txt)."""


def environment_error(exc: BaseException, src: Path | None = None) -> WorkbenchError | None:
    """The named error when `exc` comes from the tree (`src`, by default the imported one) or
    this Python, not from vLLM's logic: then it is no answer of vLLM's to record. A missing
    optional package (a platform field) is vLLM's answer, as on a machine without it."""
    if src is None and "vllm" in sys.modules:
        src = Path(sys.modules["vllm"].__file__).resolve().parents[1]
    if (src is not None and isinstance(exc, SyntaxError) and exc.filename
            and Path(exc.filename).is_relative_to(src)):
        return SdistIncomplete(f"vLLM sdist {src}: {Path(exc.filename).relative_to(src)} line "
                               f"{exc.lineno} does not parse ({exc.msg}); the file is cut short "
                               "or edited: unpack the sdist again")
    if not isinstance(exc, ImportError) or not exc.name:
        return None
    top = exc.name.split(".")[0]
    if top in OPTIONAL or exc.name in STUBBED:
        return None
    if top == "vllm":
        where = exc.name.replace(".", "/")
        what = (f"module {exc.name} ({where}.py or {where}/__init__.py) is missing"
                if isinstance(exc, ModuleNotFoundError) else f"{exc.name} lacks a name: {exc}")
        return SdistIncomplete(f"vLLM sdist {src}: incomplete: {what}; unpack the whole sdist")
    what = ("is not installed" if isinstance(exc, ModuleNotFoundError)
            else f"is installed without what vLLM imports ({exc})")
    return VllmDependencyMissing(
        f"vLLM {VLLM_VERSION} imports {exc.name!r}, which {what} in this Python "
        f"({sys.prefix}): install the Python dependencies vLLM's import path needs "
        "(its requirements/common.txt; the README's 'Recording vLLM's answers' lists them)")


def _fake_amdsmi(arch: str) -> types.ModuleType:
    """`amdsmi` answering the one query vLLM's ROCm platform makes at import: the GCN arch."""
    m = types.ModuleType("amdsmi")

    class AmdSmiException(Exception):
        pass

    m.AmdSmiException = AmdSmiException
    m.AmdSmiMemoryType = types.SimpleNamespace(VRAM=0)
    m.amdsmi_init = m.amdsmi_shut_down = lambda *a, **k: None
    m.amdsmi_get_processor_handles = lambda: ["gpu0"]
    m.amdsmi_get_gpu_asic_info = lambda h: {"target_graphics_version": arch}
    for name in ("amdsmi_get_gpu_device_uuid", "amdsmi_get_gpu_memory_total",
                 "amdsmi_topo_get_link_type", "amdsmi_topo_get_numa_node_number"):
        setattr(m, name, sandbox.Stub(f"amdsmi.{name}"))
    return m


class Vllm:
    """The imported vLLM tree, and the switches that put it on one simulated platform."""

    def __init__(self, src: Path, packages: tuple[str, ...] = (),
                 expected: str = VLLM_VERSION) -> None:
        """Import vLLM from `src` with the optional `packages` importable: some vLLM modules
        decide at import what an optional package provides (`if has_humming(): ...`).

        `expected` is the release to record: this one, or a later one whose rule set keeps
        this recorder because its tree did not move what the recorder drives."""
        src = Path(src).resolve()
        version = sdist_version(src)
        if version != expected:
            raise SdistError(f"--vllm-src {src}: expected an unpacked vLLM {expected} sdist "
                             f"(PKG-INFO Version), found version {version!r}")
        self.version = version
        if not (src / "vllm" / "__init__.py").is_file():
            raise SdistIncomplete(f"vLLM sdist {src}: incomplete: no vllm/__init__.py beside its "
                                  "PKG-INFO; unpack the whole sdist")
        self.src = src
        if "vllm" in sys.modules and not str(getattr(sys.modules["vllm"], "__file__", "")
                                             ).startswith(str(src)):
            raise SdistError(f"another vllm is already imported from "
                             f"{sys.modules['vllm'].__file__}")
        if str(src) not in sys.path:
            sys.path.insert(0, str(src))
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
        sandbox.install(STUBBED, OPTIONAL, REAL_OPTIONAL)
        sandbox.set_packages(OPTIONAL, set(packages))
        sys.modules["amdsmi"] = _fake_amdsmi("gfx942")
        try:
            import vllm.platforms as platforms
            from vllm.platforms.cpu import CpuPlatform
            self.platforms = platforms
            platforms.current_platform = CpuPlatform()  # while the rest imports; replaced per case
            self.linear = importlib.import_module("vllm.model_executor.kernels.linear")
            # Attention's FlashAttention binding, imported by the quantization modules, is
            # chosen once at import by the platform of the moment: here, the CPU's (on XPU
            # since 0.34.0 it registers fakes for ops this sandbox only simulates)
            importlib.import_module("vllm.model_executor.layers.attention")
            self._init_parallel()
        except (ImportError, SyntaxError) as exc:
            if (named := environment_error(exc, src)) is not None:
                raise named from exc
            raise
        finally:
            sandbox.unhide()
        self.observer = sandbox.Observer(self.linear.choose_mp_linear_kernel,
                                         ("failure_reasons", "platform_kernels"))
        self._gfx = None

    @staticmethod
    def mod(name: str) -> types.ModuleType:
        return importlib.import_module(name)

    def _init_parallel(self) -> None:
        """A one-process tensor-parallel group (gloo), as a TP=1 vLLM run sets up: the weight
        parameters read their rank from it."""
        import tempfile
        ps = self.mod("vllm.distributed.parallel_state")
        self.mod("vllm.triton_utils").HAS_TRITON = True  # the scaffold's config, not a case's
        if ps._WORLD is None:
            init_file = Path(tempfile.mkdtemp(prefix="vllm-recorder-")) / "init"
            from vllm.config import VllmConfig, set_current_vllm_config
            with set_current_vllm_config(VllmConfig()):
                ps.init_distributed_environment(world_size=1, rank=0, local_rank=0,
                                                distributed_init_method=f"file://{init_file}",
                                                backend="gloo")
                ps.initialize_model_parallel(1, 1, backend="gloo")

    # -- provenance ---------------------------------------------------------------------
    def provenance(self) -> dict:
        return {"vllm_version": self.version, "vllm_src": self.src.name,
                "stubbed_compiled": sorted(STUBBED),
                "stubbed_optional_packages": sorted(OPTIONAL - REAL_OPTIONAL),
                "real_optional_packages": {n: _version_of(n) for n in sorted(REAL_OPTIONAL)},
                "humming_stand_ins": ["humming.device.current_device: only sm_version",
                                      "humming.ops.unpack_weight on CPU tensors (word order)",
                                      "torch.cuda.device(None): keeps the current device",
                                      f"{HUMMING_DEVICE_STOP}: the run stops there"],
                "stubbed_hardware_queries": HARDWARE_QUERIES,
                "stand_ins": ["VllmConfig.model_config: only `dtype` (no checkpoint is loaded)",
                              "ModelConfig for the quantization checks: the checkpoint's "
                              "quantization_config and dtype; maybe_update_config skipped "
                              "(it reads checkpoint files)",
                              "a one-process gloo tensor-parallel group (TP=1)"] +
                             [f"{m}.{n} (scheme level: a non-MP scheme's own kernel choice)"
                              for m, n in NON_MP_KERNEL_INITS.items()],
                "stub_calls": sorted(set(sandbox.Stub.CALLS))}

    # -- the platform -------------------------------------------------------------------
    def _platform_object(self, p: dict) -> Any:
        from vllm.platforms.interface import CpuArchEnum, DeviceCapability
        device = p["device"]
        cap = p.get("capability")
        arch = getattr(CpuArchEnum, _CPU_ARCH.get(p.get("cpu_arch") or "x86", "X86"))
        if device == "cuda":
            base = self.mod("vllm.platforms.cuda").CudaPlatform
        elif device == "rocm":
            if self._gfx != p["gfx"]:
                sys.modules["amdsmi"] = _fake_amdsmi(p["gfx"])
                importlib.reload(self.mod("vllm.platforms.rocm"))
                self._gfx = p["gfx"]
            base = self.mod("vllm.platforms.rocm").RocmPlatform
            cap = None  # ROCm derives it from the GCN arch, in vLLM's own code
        elif device == "xpu":
            base = self.mod("vllm.platforms.xpu").XPUPlatform
        elif device == "cpu" and p.get("zen") and "zentorch" in p.get("packages", []):
            base = self.mod("vllm.platforms.zen_cpu").ZenCpuPlatform  # vLLM's plugin rule
        elif device == "cpu":
            base = self.mod("vllm.platforms.cpu").CpuPlatform
        else:
            raise ValueError(f"platform.device: {device!r} is not simulated")
        ns: dict[str, Any] = {
            "get_device_name": classmethod(lambda cls, device_id=0: f"simulated {device}"),
            "get_cpu_architecture": classmethod(lambda cls: arch)}
        if cap is not None:
            dc = DeviceCapability(major=cap // 10, minor=cap % 10)
            ns["get_device_capability"] = classmethod(lambda cls, device_id=0: dc)
        elif device != "rocm":
            ns["get_device_capability"] = classmethod(lambda cls, device_id=0: None)
        return type(f"Simulated{base.__name__}", (base,), ns)()

    @contextmanager
    def on(self, platform: dict, env: dict, dtype: str | None = None) -> Iterator[Any]:
        """vLLM sees `platform` (and `env`) for the duration."""
        import torch
        stack = ExitStack()
        with stack:
            sandbox.set_packages(OPTIONAL, set(platform.get("packages", [])))
            stack.callback(sandbox.unhide)
            import_utils = self.mod("vllm.utils.import_utils")
            import_utils._has_module.cache_clear()
            import_utils._has_module_spec.cache_clear()
            self._ark(platform)
            obj = self._platform_object(platform)
            self.platforms.current_platform = obj
            for name, mod in list(sys.modules.items()):
                if name.startswith("vllm.") and getattr(mod, "current_platform", None) is not None \
                        and not isinstance(mod, sandbox.Stub):
                    if "current_platform" in getattr(mod, "__dict__", {}):
                        mod.current_platform = obj
            ops = set(platform.get("torch_ops", []))
            stack.enter_context(sandbox.torch_ops(SIMULATED_OPS, ops))
            saved_c = torch.ops.__dict__.get("_C")
            torch.ops._C = types.SimpleNamespace(**C_QUERIES)
            stack.callback(lambda: torch.ops.__dict__.pop("_C", None) if saved_c is None
                           else setattr(torch.ops, "_C", saved_c))
            triton_utils = self.mod("vllm.triton_utils")
            stack.callback(setattr, triton_utils, "HAS_TRITON", triton_utils.HAS_TRITON)
            triton_utils.HAS_TRITON = bool(platform.get("triton", True))
            amx = bool(platform.get("amx"))
            saved_amx = torch.cpu._is_amx_tile_supported
            torch.cpu._is_amx_tile_supported = lambda: amx
            stack.callback(setattr, torch.cpu, "_is_amx_tile_supported", saved_amx)
            stack.enter_context(self._env(env, dtype))
            if "humming" in platform.get("packages", []):
                stack.enter_context(_humming_device(platform.get("capability")))
            yield obj

    def _ark(self, platform: dict) -> None:
        """auto_round_kernel, when importable, may still lack its backend library
        (inc_ark_ops.py:29): the platform's `ark_backend_lib` field (default true)."""
        ark_ops = sys.modules.get("vllm.model_executor.layers.quantization.inc.schemes.inc_ark_ops")
        if ark_ops is not None:
            ark_ops.get_ark_state.cache_clear()
        if "auto_round_kernel" in platform.get("packages", []):
            ark = importlib.import_module("auto_round_kernel")
            if not platform.get("ark_backend_lib", True):
                ark.cpu_lib = ark.xpu_lib = None

    @contextmanager
    def _env(self, env: dict, dtype: str | None) -> Iterator[None]:
        envs = self.mod("vllm.envs")
        saved = {k: os.environ.get(k) for k in env if k.startswith("VLLM_")}
        for k, v in env.items():
            if k.startswith("VLLM_"):
                os.environ[k] = str(v)
        if hasattr(envs, "disable_envs_cache"):
            envs.disable_envs_cache()
        config = self.mod("vllm.config")
        kernel = {k: env[k] for k in ("linear_backend", "linear_backend_per_quant") if k in env}
        try:  # a model load always runs under a VllmConfig; its KernelConfig holds the backend
            kernel_config = config.KernelConfig(**kernel)  # EngineArgs.__post_init__
            # then create_engine_config: the environment check (arg_utils.py:2294 in 0.34.0;
            # hard_fail is EngineArgs' default, False), then the VllmConfig
            self.platforms.current_platform.validate_environ(False)
            vc = config.VllmConfig(kernel_config=kernel_config)
            if dtype is not None:  # no checkpoint is loaded: the model config says only its dtype
                # and the user's quantization override, None as ModelConfig's default
                # (config/model.py:269; kernels/linear/__init__.py:1021 reads it for MXFP4)
                model = types.SimpleNamespace(dtype=self.dtype(dtype), quantization_config=None)
                object.__setattr__(vc, "model_config", model)
            with config.set_current_vllm_config(vc):
                yield
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    # -- helpers ------------------------------------------------------------------------
    def scalar_type(self, name: str) -> Any:
        return getattr(self.mod("vllm.scalar_type").scalar_types, name)

    @staticmethod
    def dtype(name: str | None) -> Any:
        import torch
        return None if name is None else getattr(torch, name)

    def mp_config(self, c: dict) -> Any:
        MPLinearLayerConfig = self.linear.MPLinearLayerConfig
        return MPLinearLayerConfig(
            full_weight_shape=tuple(c["full_weight_shape"]),
            partition_weight_shape=tuple(c["partition_weight_shape"]),
            weight_type=self.scalar_type(c["weight_type"]), act_type=self.dtype(c["act_type"]),
            group_size=c["group_size"], zero_points=c["zero_points"],
            out_type=self.dtype(c.get("out_type")))

    @staticmethod
    def mp_config_json(cfg: Any) -> dict:
        def dt(d):
            return None if d is None else str(d).removeprefix("torch.")
        return {"weight_type": str(cfg.weight_type), "act_type": dt(cfg.act_type),
                "group_size": cfg.group_size, "zero_points": cfg.zero_points,
                "out_type": dt(cfg.out_type),
                "full_weight_shape": list(cfg.full_weight_shape),
                "partition_weight_shape": list(cfg.partition_weight_shape)}


class _SimulatedDevice:
    """What `humming.device.current_device` answers: the SM version, nothing else."""

    def __init__(self, capability: int | None) -> None:
        self.sm_version = capability

    def __getattr__(self, name: str):
        raise AttributeError(f"simulated device: {name} is not simulated (only sm_version)")


@contextmanager
def _humming_device(capability: int | None) -> Iterator[None]:
    import humming.device as hd
    saved = hd.current_device._value
    hd.current_device._value = _SimulatedDevice(capability)
    try:
        yield
    finally:
        hd.current_device._value = saved


def _cpu_unpack_weight(inputs: Any, num_bits: int, outputs: Any = None) -> Any:
    """Stands in for humming's CUDA `ops.unpack_weight` on the recorder's CPU tensors: every
    `num_bits` field of each int32, in word order (humming's own element order is not kept;
    `convert_symmetric_integer_weight` only asks whether any code is 0, schema/humming.py:305)."""
    import torch
    words = inputs.to(torch.int64) & 0xFFFFFFFF
    shifts = torch.arange(0, 32, num_bits, dtype=torch.int64)
    return ((words.unsqueeze(-1) >> shifts) & ((1 << num_bits) - 1)).flatten(-2).to(torch.int32)


@contextmanager
def _humming_until_device(v: "Vllm") -> Iterator[list]:
    """Humming's weight processing runs for real up to its first device step: the unpack kernel
    answered on the CPU, `prepare_and_transform_humming_tensors` (linear.py:135) stopping the
    run. Yields the list `check_and_fallback_input_schema`'s returned schemas go to."""
    import humming.ops as hops
    import humming.schema.humming as hschema
    facade = v.mod("vllm.utils.humming")
    schema_mod = v.mod("vllm.model_executor.layers.quantization.utils.humming.schema")
    linear_mod = v.mod("vllm.model_executor.layers.quantization.utils.humming.linear")
    returned: list = []
    real_check = linear_mod.check_and_fallback_input_schema

    def check(*args, **kwargs):
        out = real_check(*args, **kwargs)
        returned.append(out)
        return out

    import torch
    saved = [(hops, "unpack_weight", hops.unpack_weight),
             (linear_mod, "check_and_fallback_input_schema", real_check),
             (torch.cuda, "_exchange_device", torch.cuda._exchange_device),
             (torch.cuda, "_maybe_exchange_device", torch.cuda._maybe_exchange_device)]
    hops.unpack_weight = _cpu_unpack_weight
    # `with torch.cuda.device(None)` (humming/schema/base.py:112) keeps the current device on a
    # CUDA build; a CPU build's fallback compares None with 0.
    keep = (lambda device: -1 if device is None or device < 0
            else saved[2][2](device))
    torch.cuda._exchange_device = torch.cuda._maybe_exchange_device = keep
    assert hschema.ops is hops
    linear_mod.check_and_fallback_input_schema = check
    facade.__dict__["prepare_and_transform_humming_tensors"] = _RecordedOp(HUMMING_DEVICE_STOP)
    assert schema_mod.check_and_fallback_input_schema is real_check
    try:
        yield returned
    finally:
        for mod, name, value in saved:
            setattr(mod, name, value)
        facade.__dict__.pop("prepare_and_transform_humming_tensors", None)


def humming_activation(schema: Any, params_dtype: str) -> str:
    """`Runtime.activation` for the schema `check_and_fallback_input_schema` returned."""
    a = schema.a_dtype
    if a is None or a.num_bits >= 16:
        return {"bfloat16": "bf16", "float16": "fp16"}[params_dtype]
    return {"int8": "int8", "int4": "int4"}.get(str(a), "fp8" if "float8" in str(a) else str(a))


def _version_of(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version({"humming": "humming-kernels"}.get(dist, dist))
    except PackageNotFoundError:
        return None


def error_fields(exc: BaseException) -> dict:
    """vLLM's refusal as recorded; the tree's or this Python's failure is raised instead."""
    if isinstance(exc, (SdistIncomplete, VllmDependencyMissing)):
        raise exc  # named where it was first caught: passes the outer handlers unrecorded
    if (named := environment_error(exc)) is not None:
        raise named from exc
    return {"error": str(exc), "error_type": type(exc).__name__}


def record_mp(v: Vllm, case: dict) -> dict:
    """`choose_mp_linear_kernel(config)`: the kernel, and every reason its loop appended."""
    out = {"selected": None, "reasons": [], "error": None, "error_type": None}
    with v.observer.watching() as obs:
        try:
            with v.on(case["platform"], case["env"]):
                kernel = v.linear.choose_mp_linear_kernel(v.mp_config(case["input"]))
                out["selected"] = kernel.__name__
        except Exception as exc:  # vLLM's own refusal (or its config's), recorded as it is
            out.update(error_fields(exc))
    if obs.calls:
        out["reasons"] = list(obs.calls[-1]["failure_reasons"] or [])
    return out


CT = "vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors"


def _ct_config(case_input: dict) -> dict:
    """The checkpoint's `quantization_config` for one compressed-tensors layer."""
    group = {"targets": ["Linear"], "weights": case_input["weights"]}
    for key in ("input_activations", "output_activations"):
        if case_input.get(key) is not None:
            group[key] = case_input[key]
    return {"quant_method": "compressed-tensors", "format": case_input["format"],
            "config_groups": {"group_0": group}, "ignore": []}


def _kernel_stage(v: Vllm, obs: sandbox.Observer, error: dict | None) -> dict:
    """The oracle's `kernel` object: the selection a scheme's weight creation ran."""
    out = {"mp_config": None, "selected": None, "reasons": [], "error": None, "error_type": None}
    if obs.calls:
        call = obs.calls[-1]
        out["mp_config"] = v.mp_config_json(call["args"]["config"])
        out["selected"] = getattr(call.get("returned"), "__name__", None)
        out["reasons"] = list(call.get("failure_reasons") or [])
        out["candidates"] = [k.__name__ for k in call.get("platform_kernels") or []]
    if error:
        out.update(error)
    return out


def create_weights(v: Vllm, scheme: Any, case_input: dict, layer: Any = None) -> Any:
    """`scheme.create_weights` as vLLM's linear layer calls it (one partition, no loader)."""
    import torch
    layer = torch.nn.Module() if layer is None else layer
    in_f, out_f = case_input["in_features"], case_input["out_features"]
    scheme.create_weights(
        layer=layer, output_size=out_f, input_size=in_f,
        output_partition_sizes=[case_input.get("output_size_per_partition", out_f)],
        input_size_per_partition=case_input.get("input_size_per_partition", in_f),
        params_dtype=v.dtype(case_input["params_dtype"]), weight_loader=lambda *a, **k: None)
    return layer


# Schemes outside the MP path pick their own kernel when constructed (NVFP4, MXFP4), through
# selectors that probe compiled ops; that choice is not part of the scheme level, so those
# init functions are stood in for (listed in the provenance).
NON_MP_KERNEL_INITS = {
    CT.rsplit(".", 1)[0] + ".schemes.compressed_tensors_w4a4_nvfp4": "init_nvfp4_linear_kernel",
    CT.rsplit(".", 1)[0] + ".schemes.compressed_tensors_w4a4_mxfp4": "init_mxfp4_linear_kernel"}


@contextmanager
def _non_mp_kernel_inits(v: Vllm) -> Iterator[None]:
    saved = []
    for module, name in NON_MP_KERNEL_INITS.items():
        m = v.mod(module)
        saved.append((m, name, getattr(m, name)))
        setattr(m, name, sandbox.Stub(f"{module}.{name}"))
    try:
        yield
    finally:
        for m, name, fn in saved:
            setattr(m, name, fn)


def record_scheme(v: Vllm, case: dict) -> dict:
    """compressed-tensors: parse the config, resolve the layer's scheme, create its weights."""
    import torch
    out: dict[str, Any] = {"scheme": None, "selected": None, "reasons": [], "error": None,
                           "error_type": None}
    ct = v.mod(CT)
    try:
        with v.on(case["platform"], case["env"], case["input"].get("params_dtype")), \
                _non_mp_kernel_inits(v):
            config = ct.CompressedTensorsConfig.from_config(_ct_config(case["input"]))
            scheme = config.get_scheme(torch.nn.Linear(1, 1, bias=False),
                                       case["input"]["layer_name"])
            out["scheme"] = type(scheme).__name__
            if _uses_mp(scheme):
                with v.observer.watching() as obs:
                    try:
                        create_weights(v, scheme, case["input"])
                        err = None
                    except Exception as exc:  # after the scheme was chosen
                        err = error_fields(exc)
                out["kernel"] = _kernel_stage(v, obs, err)
    except Exception as exc:
        out.update(error_fields(exc))
    return out


def _uses_mp(scheme: Any) -> bool:
    """Schemes whose weight creation runs `choose_mp_linear_kernel` (their `create_weights`
    in vllm/model_executor/layers/quantization/compressed_tensors/schemes/)."""
    return type(scheme).__name__ in MP_SCHEMES


MP_SCHEMES = {"CompressedTensorsW4A8Int", "CompressedTensorsW4A8Fp8", "CompressedTensorsWNA16",
              "CompressedTensorsWNA8Int", "CompressedTensorsWNA4Int",
              "CompressedTensorsWNA8O8Int"}


# -- the quant-method levels: gptq, awq, inc ------------------------------------------------
# Input: {"quantization_config": <the checkpoint's dict>, "layer_name", "in_features",
# "out_features", "params_dtype", optional "input_size_per_partition" /
# "output_size_per_partition"}. Expected: {"quantization": the method name vLLM resolved,
# "method": the linear method `get_quant_method` returns (class name) or None, "inner": what
# it delegates to (INC's scheme, and the scheme's own linear method), "error",
# "error_type", "kernel": the selection its `create_weights` ran (the scheme level's shape) or
# None}. The run follows a model load: ModelConfig._verify_quantization (which method, the
# platform's whitelist), VllmConfig._get_quantization_config (from_config, then the capability
# and dtype gate), get_quant_method, create_weights.


def _model_config(v: Vllm, qc: dict, dtype: str) -> Any:
    """The ModelConfig fields the two quantization checks read (no checkpoint is loaded)."""
    import tempfile
    hf = types.SimpleNamespace(quantization_config=dict(qc))
    return types.SimpleNamespace(
        quantization=None, dtype=v.dtype(dtype), quantization_config=None, hf_config=hf,
        hf_text_config=None, model=tempfile.gettempdir(), revision=None,
        allow_deprecated_quantization=False,
        model_arch_config=types.SimpleNamespace(quantization_config=dict(qc),
                                                total_num_attention_heads=32,
                                                total_num_kv_heads=8))


@contextmanager
def _no_checkpoint_reads(cls: type) -> Iterator[None]:
    """`maybe_update_config` reads the checkpoint's safetensors headers, which do not exist;
    it runs after both gate checks, so skipping it changes no recorded outcome."""
    saved = cls.__dict__.get("maybe_update_config")
    cls.maybe_update_config = lambda self, *a, **k: None
    try:
        yield
    finally:
        if saved is None:
            del cls.maybe_update_config
        else:
            cls.maybe_update_config = saved


def load_quant_config(v: Vllm, qc: dict, dtype: str, out: dict) -> Any:
    """Model-load order: which method, the platform whitelist, from_config, the gate."""
    config = v.mod("vllm.config")
    registry = v.mod("vllm.model_executor.layers.quantization")
    model = _model_config(v, qc, dtype)
    config.ModelConfig._verify_quantization(model)
    out["quantization"] = model.quantization
    with _no_checkpoint_reads(registry.get_quantization_config(model.quantization)):
        return config.VllmConfig._get_quantization_config(model, config.LoadConfig())


def _inner_methods(method: Any) -> list[str]:
    """What a wrapping method delegates to, outermost first: INC's `INCLinearMethod.scheme`,
    and that scheme's `linear_method` (e.g. the AutoGPTQLinearMethod it builds)."""
    names = []
    while method is not None:
        method = getattr(method, "scheme", None) or getattr(method, "linear_method", None)
        if method is not None and not isinstance(method, sandbox.Stub):
            names.append(type(method).__name__)
    return names


def _carrier_layer(v: Vllm, case_input: dict) -> Any:
    """A real vLLM linear layer for `get_quant_method` to inspect (built unquantized, TP=1),
    given the per-rank sizes of the case: what a Column/RowParallelLinear shard holds
    (linear.py:496-498, 1708-1710), and what `check_marlin_supports_layer` reads."""
    linear = v.mod("vllm.model_executor.layers.linear")
    layer = linear.ReplicatedLinear(case_input["in_features"], case_input["out_features"],
                                    bias=False, params_dtype=v.dtype(case_input["params_dtype"]),
                                    quant_config=None, prefix=case_input["layer_name"])
    layer.input_size_per_partition = case_input.get("input_size_per_partition",
                                                    case_input["in_features"])
    layer.output_size_per_partition = case_input.get("output_size_per_partition",
                                                     case_input["out_features"])
    layer.output_partition_sizes = [layer.output_size_per_partition]
    del layer.weight  # built by UnquantizedLinearMethod; the quantized method makes its own
    return layer


def record_quant_method(v: Vllm, case: dict) -> dict:
    """A GPTQ / AWQ / INC checkpoint's linear layer, loaded as vLLM loads it."""
    i = case["input"]
    out: dict[str, Any] = {"quantization": None, "method": None, "inner": [], "error": None,
                           "error_type": None, "kernel": None}
    try:
        with v.on(case["platform"], case["env"], i["params_dtype"]):
            config = load_quant_config(v, i["quantization_config"], i["params_dtype"], out)
            layer = _carrier_layer(v, i)
            method = config.get_quant_method(layer, prefix=i["layer_name"])
            out["method"] = None if method is None else type(method).__name__
            out["inner"] = _inner_methods(method)
            if method is not None:
                with v.observer.watching() as obs:
                    try:
                        method.create_weights(
                            layer, i.get("input_size_per_partition", i["in_features"]),
                            [i.get("output_size_per_partition", i["out_features"])],
                            i["in_features"], i["out_features"], v.dtype(i["params_dtype"]),
                            weight_loader=lambda *a, **k: None)
                        err = None
                    except Exception as exc:
                        err = error_fields(exc)
                out["kernel"] = _kernel_stage(v, obs, err)
    except Exception as exc:
        out.update(error_fields(exc))
    return out


# -- the config gate -------------------------------------------------------------------------
# Input: {"quantization_config": the checkpoint's dict, "dtype": the model dtype}. Expected:
# {"quantization", "error", "error_type"}: the method vLLM resolved, and what the two model-load
# checks raised (None when the model gets past them).
def record_config_gate(v: Vllm, case: dict) -> dict:
    i = case["input"]
    out = {"quantization": None, "error": None, "error_type": None}
    try:
        with v.on(case["platform"], case["env"], i["dtype"]):
            load_quant_config(v, i["quantization_config"], i["dtype"], out)
    except Exception as exc:
        out.update(error_fields(exc))
    return out


RECORDERS: dict[str, Callable[[Vllm, dict], dict]] = {
    "mp": record_mp, "scheme": record_scheme, "gptq": record_quant_method,
    "awq": record_quant_method, "inc": record_quant_method, "config-gate": record_config_gate}


# -- the runtime level: what happens after selection, at weight processing -------------------
# Input: {"route": "scheme" | "gptq" | "awq" | "inc", "layer": that level's input}. The layer is
# built as at that level, then `process_weights_after_loading` runs with every compiled op
# present (a full build for the device) but recorded instead of run: the first one called
# stops the processing. Expected: {"route_error": the route's own error (type: text) or None,
# "kernel": the kernel (MP) or linear method that processes the weights, "kernel_act_type":
# the activation dtype vLLM configured that kernel with, "fails_at": "load" when the processing
# raised in vLLM's Python before any compiled op, "error", "error_type", "load_op": the first
# compiled op it called (or the optional package, or "torch.<device>" for the device runtime,
# where the processing stops being observable here), "layer_state": the plain values it set
# on the layer (use_w4a8, isa_hint, ...), "isa_hint": CPUWNA16's, "activation": the precision
# the forward computes the activations in where
# vLLM's Python decides it (an 8-bit kernel act type, CPUWNA16's use_w4a8, a weight-only
# kernel's 16-bit act type), else None}.


class OpReached(Exception):
    """A compiled op was called: the processing goes no further here."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class _RecordingOps:
    """`torch.ops.<ns>` of a full build: every op (or those listed) exists; a call stops."""

    def __init__(self, ns: str, only: set[str] | None = None, answers: dict | None = None):
        self._ns, self._only, self._answers = ns, only, answers or {}

    def __getattr__(self, op: str) -> Any:
        if op.startswith("__"):
            raise AttributeError(op)
        if op in self._answers:
            return self._answers[op]
        if self._only is not None and op not in self._only:
            raise AttributeError(f"'_OpNamespace' '{self._ns}' object has no attribute '{op}'")

        return _RecordedOp(f"{self._ns}.{op}")


class _RecordedOp:
    """An op packet (`torch.ops.ns.op`, `.default` and other overloads): a call stops."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, overload: str) -> "_RecordedOp":
        if overload.startswith("__"):
            raise AttributeError(overload)
        return self

    def __call__(self, *args, **kwargs):
        raise OpReached(self._name)


@contextmanager
def _recording_ops(platform: dict) -> Iterator[None]:
    have = set(platform.get("torch_ops", []))
    spaces = {"_C": _RecordingOps("_C", None, C_QUERIES)}
    for ns in ("_xpu_C", "_rocm_C", "zentorch"):
        spaces[ns] = _RecordingOps(ns, {p.split(".", 1)[1] for p in have if p.startswith(ns + ".")})
    with sandbox.op_namespaces(spaces):
        yield


def _plain_state(layer: Any, before: set[str]) -> dict:
    out = {}
    for k, val in vars(layer).items():
        if k in before or k.startswith("_"):
            continue
        if isinstance(val, (bool, int, float, str)) or val is None:
            out[k] = val
        elif type(val).__name__ == "dtype":
            out[k] = str(val).removeprefix("torch.")
    return out


def _build(v: Vllm, route: str, i: dict, params_dtype: str) -> tuple[Any, Any, dict]:
    """(the object that processes the weights, the layer, the route's record) as the route's
    level builds them."""
    import torch
    if route == "scheme":
        ct = v.mod(CT)
        with _non_mp_kernel_inits(v):
            config = ct.CompressedTensorsConfig.from_config(_ct_config(i))
            scheme = config.get_scheme(torch.nn.Linear(1, 1, bias=False), i["layer_name"])
        with v.observer.watching() as obs:
            layer = create_weights(v, scheme, i, _carrier_layer(v, i))
        return scheme, layer, {"method": type(scheme).__name__, "obs": obs}
    out: dict = {}
    config = load_quant_config(v, i["quantization_config"], params_dtype, out)
    layer = _carrier_layer(v, i)
    method = config.get_quant_method(layer, prefix=i["layer_name"])
    with v.observer.watching() as obs:
        method.create_weights(layer, i.get("input_size_per_partition", i["in_features"]),
                              [i.get("output_size_per_partition", i["out_features"])],
                              i["in_features"], i["out_features"], v.dtype(params_dtype),
                              weight_loader=lambda *a, **k: None)
    return method, layer, {"method": type(method).__name__, "obs": obs}


def _kernel_object(method: Any) -> Any:
    """The MPLinearKernel instance a scheme or method holds (INC wraps it twice)."""
    seen = 0
    while method is not None and seen < 4:
        kernel = getattr(method, "kernel", None)
        if kernel is not None and hasattr(kernel, "config"):
            return kernel
        method = getattr(method, "scheme", None) or getattr(method, "linear_method", None)
        seen += 1
    return None


def record_runtime(v: Vllm, case: dict) -> dict:
    import torch
    route, i = case["input"]["route"], case["input"]["layer"]
    out: dict[str, Any] = {"route_error": None, "kernel": None, "kernel_act_type": None,
                           "fails_at": None, "error": None, "error_type": None, "load_op": None,
                           "layer_state": {}, "isa_hint": None, "activation": None}
    started = False  # engine start (KernelConfig, validate_environ, VllmConfig) passed
    try:
        with v.on(case["platform"], case["env"], i["params_dtype"]):
            started = True
            try:
                method, layer, built = _build(v, route, i, i["params_dtype"])
            except Exception as exc:
                if (named := environment_error(exc)) is not None:
                    raise named from exc
                out["route_error"] = f"{type(exc).__name__}: {exc}"
                return out
            kernel = _kernel_object(method)
            out["kernel"] = type(kernel).__name__ if kernel is not None else built["method"]
            act = getattr(getattr(kernel, "config", None), "act_type", None)
            out["kernel_act_type"] = None if act is None else str(act).removeprefix("torch.")
            for p in layer.parameters():
                p.data.zero_()
            before = set(vars(layer))
            stub_calls = len(sandbox.Stub.CALLS)
            humming_run = (out["kernel"] == "HummingLinearKernel"
                           and "humming" in case["platform"].get("packages", []))
            with _recording_ops(case["platform"]), ExitStack() as hstack:
                decided = hstack.enter_context(_humming_until_device(v)) if humming_run else []
                try:
                    method.process_weights_after_loading(layer)
                except OpReached as reached:
                    out["load_op"] = reached.name
                except Exception as exc:
                    if len(sandbox.Stub.CALLS) > stub_calls:  # an optional package's stub ran
                        out["load_op"] = sandbox.Stub.CALLS[stub_calls].split("(")[0]
                    elif str(exc).startswith("Torch not compiled with"):  # the device runtime
                        out["load_op"] = f"torch.{case['platform']['device']}"
                    else:
                        out.update(fails_at="load", **error_fields(exc))
            out["layer_state"] = _plain_state(layer, before)
            out["isa_hint"] = out["layer_state"].get("isa_hint")
    except Exception as exc:
        if started:
            out.update(fails_at="load", **error_fields(exc))
        else:  # refused before any layer: the route never ran
            err = error_fields(exc)
            out["route_error"] = f"{err['error_type']}: {err['error']}"
    if out["fails_at"] is None and out["route_error"] is None:
        if out["kernel"] == "HummingLinearKernel":
            if decided:  # the schema vLLM's decision returned, from the real package
                out["activation"] = humming_activation(decided[-1], i["params_dtype"])
        elif out["kernel_act_type"] in ("int8", "float8_e4m3fn") and out["kernel"] in ACT_TYPE_RUNS:
            out["activation"] = "int8" if out["kernel_act_type"] == "int8" else "fp8"
        elif out["layer_state"].get("use_w4a8"):
            out["activation"] = "int8"  # cpu.py: int4_scaled_mm_cpu quantizes x per token
        elif out["kernel_act_type"] in ("bfloat16", "float16") and out["kernel"] in WEIGHT_ONLY:
            out["activation"] = {"bfloat16": "bf16", "float16": "fp16"}[out["kernel_act_type"]]
    return out


# Kernels whose forward takes the activations as they come for a 16-bit act type (no
# activation quantization in their apply path): marlin.py, machete.py, exllama.py,
# triton_w4a16.py, conch.py, cpu.py (cpu_gemm_wna16 unless use_w4a8), xpu.py (int4_gemm_w4a16).
# Others quantize inside their op (Dynamic4bit's aten op, XPUW4A8Int, Humming with a schema):
# their activation is left unrecorded (None) rather than guessed.
# Kernels whose forward quantizes the activations to an 8-bit act type: marlin.py:200 passes
# `input_dtype=c.act_type` to apply_gptq_marlin_linear (marlin_quant_input); humming.py maps
# int8 / float8_e4m3fn to its per-token dynamic input quantization.
ACT_TYPE_RUNS = {"MarlinLinearKernel", "HummingLinearKernel"}
WEIGHT_ONLY = {"MarlinLinearKernel", "MacheteLinearKernel", "ExllamaLinearKernel",
               "TritonW4A16LinearKernel", "ConchLinearKernel", "CPUWNA16LinearKernel",
               "XPUwNa16LinearKernel"}


RECORDERS["runtime"] = record_runtime
