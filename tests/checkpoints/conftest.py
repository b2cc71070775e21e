"""Helpers for checkpoint tests: copies of the bundled samples, edited on disk."""
from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "sample_models"


def generator_module():
    """sample_models/generate.py, imported by path (it is a script, not a package)."""
    if "sample_generate" in sys.modules:
        return sys.modules["sample_generate"]
    spec = importlib.util.spec_from_file_location("sample_generate", SAMPLES / "generate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["sample_generate"] = module  # dataclasses look their module up while building
    spec.loader.exec_module(module)
    return module


def copy_sample(name: str, dest: Path) -> Path:
    out = dest / name
    shutil.copytree(SAMPLES / name, out)
    return out


def edit_config(path: Path, fn, file: str = "config.json") -> None:
    data = json.loads((path / file).read_text())
    fn(data)
    (path / file).write_text(json.dumps(data))


def edit_tensors(path: Path, fn, file: str = "model.safetensors") -> None:
    tensors = load_file(str(path / file))
    fn(tensors)
    save_file(tensors, str(path / file), metadata={"format": "pt"})


def write_checkpoint(path: Path, tensors: dict[str, torch.Tensor], quantization_config: dict,
                     dtype: str = "bfloat16") -> Path:
    """A one-file checkpoint with a Llama-ish config.json."""
    path.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(path / "model.safetensors"),
              metadata={"format": "pt"})
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "dtype": dtype,
              "quantization_config": quantization_config}
    (path / "config.json").write_text(json.dumps(config))
    return path


@pytest.fixture
def sample_copy(tmp_path):
    return lambda name: copy_sample(name, tmp_path)


@pytest.fixture(scope="session")
def tools():
    """The helpers above (test modules cannot import conftest under importlib mode)."""
    from types import SimpleNamespace

    return SimpleNamespace(copy_sample=copy_sample, edit_config=edit_config, edit_tensors=edit_tensors,
                           write_checkpoint=write_checkpoint, generator=generator_module,
                           samples=SAMPLES, repo=REPO)
