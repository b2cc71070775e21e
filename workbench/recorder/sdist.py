"""The version an unpacked vLLM sdist declares: what picks the rule set that records from it."""
from __future__ import annotations

import os
from pathlib import Path

from workbench.errors import InvalidInputError


class RecorderError(InvalidInputError):
    """The recorder was pointed at something it cannot record from."""


def sdist_version(src: Path) -> str:
    """The `Version:` an unpacked sdist's PKG-INFO declares."""
    if not Path(src).is_dir():
        raise RecorderError(f"--vllm-src {src}: not a directory")
    info = Path(src) / "PKG-INFO"
    if not info.is_file():
        raise RecorderError(f"--vllm-src {src}: no PKG-INFO; expected an unpacked vLLM sdist "
                            "(the directory that `tar xzf vllm-X.Y.Z.tar.gz` creates)")
    for line in info.read_text(errors="replace").splitlines():
        if line.startswith("Version:"):
            return line.split(":", 1)[1].strip()
    raise RecorderError(f"--vllm-src {src}: PKG-INFO has no Version line")


def sdist_cache() -> Path:
    """Where unpacked vLLM sdists are kept for the citation checks (the user's cache dir)."""
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "w4a8-workbench"


def find_sdist(version: str) -> Path | None:
    """An unpacked vLLM `version` sdist at hand: $WORKBENCH_VLLM_SRC when it is that version,
    `vllm-<version>` under $WORKBENCH_VLLM_SDISTS or the cache; None when there is none."""
    places = [Path(p) for p in [os.environ.get("WORKBENCH_VLLM_SRC")] if p]
    places += [Path(d) / f"vllm-{version}" for d in
               [os.environ.get("WORKBENCH_VLLM_SDISTS"), sdist_cache()] if d]
    for place in places:
        try:
            if sdist_version(place) == version:
                return place
        except RecorderError:
            continue
    return None


def fetch_sdist(version: str) -> Path:
    """Download vLLM `version`'s sdist from PyPI into the cache and unpack it (once)."""
    import json
    import tarfile
    import urllib.request

    found = find_sdist(version)
    if found is not None:
        return found
    req = urllib.request.Request("https://pypi.org/simple/vllm/",
                                 headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        files = json.load(r)["files"]
    name = f"vllm-{version}.tar.gz"
    url = next((f["url"] for f in files if f["filename"] == name), None)
    if url is None:
        raise RecorderError(f"PyPI lists no {name}")
    cache = sdist_cache()
    cache.mkdir(parents=True, exist_ok=True)
    tar = cache / name
    urllib.request.urlretrieve(url, tar)
    with tarfile.open(tar) as t:
        t.extractall(cache, filter="data")
    tar.unlink()
    return cache / f"vllm-{version}"
