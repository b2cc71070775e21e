"""End to end in a real headless Chromium: `streamlit run app.py`, then load, platform, trace, run, plots.

Debian's chromium is driven by Playwright through `executable_path` (no browser download).
Screenshots and the measured cold start go to tests/ui/artifacts/ (git-ignored).
"""
from __future__ import annotations

import contextlib

import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

from workbench.dispatch.versions import DEFAULT_VERSION

sync_api = pytest.importorskip("playwright.sync_api", reason="needs the playwright package")

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
CHROMIUM = os.environ.get("WORKBENCH_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-quic", "--no-first-run", "--disable-component-update", "--disable-sync"]
# Issue 6: cold start to the first page fully rendered, at most 5 s on a 2-core machine.
# Timing on a shared machine is noisy, so the budget holds for the best of a few fresh starts.
COLD_START_LIMIT_S = float(os.environ.get("WORKBENCH_COLD_START_LIMIT_S", "5"))
COLD_START_TRIES = 5
TIMINGS = ARTIFACTS / "timings.json"
# The landing page's last section: once it is drawn and no script runs, the page is complete.
LANDING_LAST = "Where the kernel loop differs"

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"no chromium at {CHROMIUM}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def _streamlit(log_name: str):
    """`streamlit run app.py` on a free port; yields (url, seconds until its health check answers)."""
    ARTIFACTS.mkdir(exist_ok=True)
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("WORKBENCH_ALLOWED_ROOTS", "WORKBENCH_UI_RAISE")}
    # An empty cache: this machine starts uncalibrated here as on a fresh clone, whatever ~/.cache holds.
    cache = tempfile.mkdtemp(prefix="w4a8-e2e-cache-")
    env["WORKBENCH_CACHE_DIR"] = cache
    log = open(ARTIFACTS / log_name, "w")
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app.py",
                             "--server.headless", "true", "--server.port", str(port)],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://localhost:{port}"
    try:
        deadline = time.perf_counter() + 60
        while True:  # the server answers its health endpoint before any session exists
            try:
                urllib.request.urlopen(f"{url}/_stcore/health", timeout=1).read()
                break
            except OSError:
                if proc.poll() is not None or time.perf_counter() > deadline:
                    pytest.fail(f"streamlit did not start; see {ARTIFACTS / log_name}")
                time.sleep(0.02)
        yield url, time.perf_counter() - t0
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        shutil.rmtree(cache, ignore_errors=True)


@pytest.fixture(scope="module")
def server():
    with _streamlit("streamlit.log") as (url, _):
        yield {"url": url}


def _idle(page, timeout_ms: int = 120_000) -> None:
    """Wait for the rerun an action started (if it shows) to finish: the status widget goes."""
    status = '[data-testid="stStatusWidget"]'
    try:
        page.wait_for_selector(status, state="attached", timeout=1500)
    except sync_api.TimeoutError:
        pass  # a fast rerun can start and end between two polls
    page.wait_for_selector(status, state="detached", timeout=timeout_ms)


def _select(page, label: str, option: str) -> None:
    box = page.locator('[data-testid="stSelectbox"]').filter(has_text=label).first
    box.click()
    page.keyboard.type(option)
    page.keyboard.press("Enter")
    _idle(page)


def _fill(page, label: str, value: str) -> None:
    field = page.locator('[data-testid="stTextInput"]').filter(has_text=label).locator("input").first
    field.fill(value)
    field.press("Enter")
    _idle(page)


def _number(page, main, label: str, value: int) -> None:
    field = main.locator('[data-testid="stNumberInput"]').filter(has_text=label).locator("input").first
    field.fill(str(value))
    field.press("Enter")
    _idle(page)


def _nav(page, title: str) -> None:
    page.locator('[data-testid="stSidebarNav"]').get_by_text(title, exact=True).click()
    _idle(page)


def _plots(page, at_least: int, timeout_ms: int = 60_000) -> int:
    """How many plotly plots have drawn (their SVG exists), waiting for `at_least` of them."""
    # A timeout is no failure here: the count is the answer, and each caller asserts on it.
    with contextlib.suppress(sync_api.TimeoutError):
        page.wait_for_function(
            f"() => document.querySelectorAll('.js-plotly-plot .main-svg').length >= {at_least}",
            timeout=timeout_ms)
    return page.locator(".js-plotly-plot .main-svg").count()


def _shot(page, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def _cold_start(pw) -> dict[str, float]:
    """A fresh server, then one session until the landing page is complete.

    Counted: the server's start, then the first page from request to its last section drawn
    with no script running. The browser's own launch is not the app's, so it comes first.
    """
    browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 1800})
        with _streamlit("streamlit-cold.log") as (url, server_s):
            t0 = time.perf_counter()
            page.goto(url)
            page.get_by_text(LANDING_LAST).first.wait_for(timeout=120_000)
            page.wait_for_selector('[data-testid="stStatusWidget"]', state="detached", timeout=60_000)
            first_page_s = time.perf_counter() - t0
            assert "The code picks" in page.locator('[data-testid="stMain"]').inner_text()
            _shot(page, "00-cold-start")
    finally:
        browser.close()
    return {"server_ready_s": round(server_s, 3), "first_page_s": round(first_page_s, 3),
            "cold_start_s": round(server_s + first_page_s, 3), "loadavg_1m": os.getloadavg()[0]}


def test_cold_start_within_budget():
    tries = []
    with sync_api.sync_playwright() as pw:
        while len(tries) < COLD_START_TRIES:
            if tries:
                time.sleep(2)  # let the last server's shutdown settle before the next start
            tries.append(_cold_start(pw))
            if tries[-1]["cold_start_s"] <= COLD_START_LIMIT_S:
                break
    best = min(tries, key=lambda t: t["cold_start_s"])
    TIMINGS.write_text(json.dumps({"limit_s": COLD_START_LIMIT_S, "best": best, "tries": tries},
                                  indent=1) + "\n")
    print(f"cold start {best['cold_start_s']:.2f} s (server {best['server_ready_s']:.2f} s + first page "
          f"{best['first_page_s']:.2f} s) at load {best['loadavg_1m']:.1f}; {len(tries)} start(s)")
    assert best["cold_start_s"] <= COLD_START_LIMIT_S, (
        f"cold start {best['cold_start_s']:.1f} s at best of {len(tries)} fresh starts (server ready "
        f"at {best['server_ready_s']:.1f} s, load {best['loadavg_1m']:.1f}) is over the "
        f"{COLD_START_LIMIT_S} s budget; benchmarks/bench_app_cold_start.py breaks the first session "
        "down by stage")


# ----------------------------------------------------------------------------- the walk

SCREENS = ARTIFACTS / "screens"
# Every figure's x-axis, read from the rendered plot: numeric axes only (heatmaps are categorical).
_AXES_JS = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(el => {
  const L = el._fullLayout, ax = L && L.xaxis;
  if (!ax) return null;
  const xs = [];
  (el._fullData || []).forEach(t => { if (t.visible !== false) (t.x || []).forEach(v => {
    if (typeof v === 'number' && isFinite(v)) xs.push(v); }); });
  return {title: (L.title && L.title.text) || '', type: ax.type, range: ax.range, xs: xs};
})"""


def _check_axes(page, where: str) -> int:
    """Issue 13.1: each figure's x-axis lies within its data (a little padding allowed)."""
    import math

    checked = 0
    for fig in page.evaluate(_AXES_JS):
        if not fig or fig["type"] not in ("linear", "log") or not fig["xs"]:
            continue
        xs = [math.log10(x) for x in fig["xs"] if x > 0] if fig["type"] == "log" else fig["xs"]
        lo, hi = min(xs), max(xs)
        pad = 0.25 * (hi - lo) + (0.5 if fig["type"] == "log" else 1.0)
        r0, r1 = fig["range"]
        assert lo - pad <= r0 <= lo + 1e-9 + pad and hi - pad <= r1 <= hi + pad, (
            f"{where}: x-axis {fig['range']} of {fig['title']!r} runs past its data [{lo}, {hi}]")
        checked += 1
    return checked


_TITLES_JS = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(el => {
  const t = el.querySelector('.gtitle'), L = el._fullLayout || {};
  const ys = [];
  (el._fullData || []).forEach(d => (d.y || []).forEach(v => { if (typeof v === 'number' && isFinite(v)) ys.push(v); }));
  return {title: t ? t.textContent : '', yrange: L.yaxis ? L.yaxis.range : null, ys: ys,
          ytype: L.yaxis ? L.yaxis.type : null, labels: (L.annotations || []).length};
})"""


def _check_speedup_headroom(page) -> None:
    """Issue 24.1: the largest speedup lies inside the y range, below the line labels' rows."""
    from workbench.plots import LABEL_ROW

    figs = [f for f in page.evaluate(_TITLES_JS) if f["title"].startswith("W4A8 speedup")]
    assert figs, "no speedup chart"
    for f in figs:
        y0, y1 = f["yrange"]
        # a log axis (speedups an order of magnitude apart) gives its range in log10 units
        ys = [math.log10(y) for y in f["ys"] if y > 0] if f["ytype"] == "log" else f["ys"]
        top = max(ys)
        assert y0 <= min(ys) and (top - y0) / (y1 - y0) <= 1 - LABEL_ROW * min(f["labels"], 1) + 1e-9, f


def _no_traceback(page, where: str) -> None:
    assert page.locator('[data-testid="stException"]').count() == 0, f"a traceback on {where}"
    assert "Traceback (most recent call last)" not in page.locator("body").inner_text(), where


def _screen(page, name: str) -> None:
    """A screenshot of the whole page for docs/screenshots, in 64 colours (a third of the size)."""
    import io

    from PIL import Image  # streamlit's own dependency

    SCREENS.mkdir(parents=True, exist_ok=True)
    # The app scrolls inside its main area, not the document: grow the window to the content.
    size = page.viewport_size
    height = page.evaluate("() => document.querySelector('[data-testid=\"stMain\"]').scrollHeight")
    page.set_viewport_size({"width": size["width"], "height": min(max(height, size["height"]), 9000)})
    time.sleep(0.5)  # plots re-lay out to the new size
    shot = Image.open(io.BytesIO(page.screenshot(full_page=True)))
    page.set_viewport_size(size)
    shot.convert("RGB").quantize(64).save(SCREENS / f"{name}.png", optimize=True)


def _sidebar_select(page, option: str) -> None:
    # the sidebar's Platform box (the vLLM version box stands above it)
    box = page.locator('[data-testid="stSidebar"] [data-testid="stSelectbox"]').filter(
        has_text=re.compile(r"^Platform")).first
    box.click()
    page.keyboard.type(option)
    page.keyboard.press("Enter")
    _idle(page)


def _stepper(page, main, name: str) -> None:
    """Issue 13.2/13.3: a new trace shows every candidate; the buttons match the position shown."""
    caption = main.get_by_text(re.compile(r"showing \d+ of \d+ candidate")).first
    shown, n = map(int, re.search(r"showing (\d+) of (\d+)", caption.inner_text()).groups())
    assert shown == n, f"{name}: a new trace opens at {shown} of {n}"
    button = lambda label: main.get_by_role("button", name=label, exact=True).first
    assert button("Next").is_disabled() and button("All").is_disabled()
    if n > 1:
        button("First").click()
        _idle(page)
        main.get_by_text(f"showing 1 of {n} candidate(s) tried").wait_for()
        assert button("Back").is_disabled() and not button("Next").is_disabled()
        button("Next").click()
        _idle(page)
        main.get_by_text(f"showing 2 of {n} candidate(s) tried").wait_for()
        assert not button("Back").is_disabled()
        button("All").click()
        _idle(page)
        main.get_by_text(f"showing {n} of {n} candidate(s) tried").wait_for()
        assert button("Next").is_disabled()


def _hostile_upload(page, ui, tmp_path) -> None:
    """Issue 11.3 in the browser: tensor names that are Markdown render as text, fetch nothing."""
    folder, image, _ = ui.hostile_checkpoint(tmp_path)
    fetched = []
    page.on("request", lambda r: fetched.append(r.url) if "127.0.0.1:8600" in r.url else None)
    page.locator('[data-testid="stRadio"]').get_by_text("Upload (safetensors)").click()
    _idle(page)
    page.get_by_text("Nothing uploaded yet").first.wait_for()
    assert page.locator('[data-testid="stAlertContentError"]').count() == 0  # no red before input
    page.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(
        [str(folder / "config.json"), str(folder / "model.safetensors")])
    main = page.locator('[data-testid="stMain"]')
    main.locator('[data-testid="stText"]').filter(has_text="model.safetensors").first.wait_for(timeout=60_000)
    _idle(page)
    # an accepted set empties the uploader: the next drop starts a new set (issue 24.4)
    assert page.locator('[data-testid="stFileUploaderFile"]').count() == 0
    _select(page, "Layer", ui.IMAGE[:6])
    main.get_by_text(f"Loaded model.safetensors / {image[:image.index('http')]}").first.wait_for()
    # read as typed (an invisible word joiner keeps the URL from becoming a link)
    assert f"Loaded model.safetensors / {image}" in main.inner_text().replace("\u2060", "")
    assert page.locator('img[src*="127.0.0.1:8600"]').count() == 0
    assert page.locator('a[href*="127.0.0.1"]').count() == 0  # not even a bare-URL autolink
    assert page.locator('a[href^="javascript"]').count() == 0
    assert not fetched, fetched
    _screen(page, "02b-layer-hostile-names")


def _shard_and_bin_uploads(page) -> None:
    """Issue 24.4 and 22.11 in the browser: two shards listed in full, no pile-up; a `.bin`
    refused by name once, the layer kept."""
    main = page.locator('[data-testid="stMain"]')
    pack = ROOT / "sample_models" / "ct-w4a16-pack"
    drop = page.locator('[data-testid="stFileUploaderDropzoneInput"]')
    drop.set_input_files([str(p) for p in sorted(pack.iterdir())])
    main.get_by_text("Loaded model-00001-of-00002.safetensors, model-00002-of-00002.safetensors").first.wait_for(
        timeout=60_000)
    _idle(page)
    listed = main.locator('[data-testid="stText"]').first.inner_text()
    assert listed.splitlines() == ["config.json", "model-00001-of-00002.safetensors",
                                   "model-00002-of-00002.safetensors", "model.safetensors.index.json"], listed
    assert page.locator('[data-testid="stFileUploaderFile"]').count() == 0  # nothing piled up
    bad = ARTIFACTS / "pytorch_model.bin"
    bad.write_bytes(b"\x80\x04K\x01.")  # a pickle: refused by its name, never read
    page.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files([str(pack / "config.json"), str(bad)])
    main.get_by_text("upload: pytorch_model.bin refused").first.wait_for(timeout=60_000)
    _idle(page)
    assert page.locator('[data-testid="stAlertContentError"]').count() == 1
    assert "Loaded model-00001-of-00002.safetensors" in main.inner_text()  # the layer in use stays
    _screen(page, "02c-layer-upload-refused")


@contextmanager
def _busy_cores(n: int):
    """n processes spinning on the CPU: the load a shared machine puts beside a run."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        time.sleep(0.5)
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_browser_walkthrough(server, ui, tmp_path):
    """Layer, Platform (three platforms, stepped), Kernels (sweep, Stop, restart), Alignment
    (TP 1/2/4/8, a model preset), Docs, every Tour step, a bad link: no traceback anywhere,
    every figure's x-axis within its data."""
    main = None
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1800})
            # 0. A bad link: a warning and the defaults, then the landing trace as usual.
            page.goto(server["url"] + "/?platform=bogus&pf=%7B%22capability%22%3A%22x%22%7D")
            page.get_by_text("The code picks").first.wait_for(timeout=120_000)
            _idle(page)
            side = page.locator('[data-testid="stSidebar"]').inner_text()
            assert "link parameter platform='bogus' ignored" in side and "link parameter pf=" in side
            main = page.locator('[data-testid="stMain"]')
            assert f"vLLM {DEFAULT_VERSION} selects" in main.inner_text()
            _no_traceback(page, "a bad link")
            _shot(page, "01-landing-trace")
            _screen(page, "01-trace-landing")

            # 1. Layer: another layer of the sample (histograms), then an upload with hostile names.
            _nav(page, "Layer")
            page.get_by_text("Loaded").first.wait_for()
            _select(page, "Layer", "model.layers.0.mlp.gate_proj")
            page.get_by_text("Loaded ct-w4a8-int-g128 / model.layers.0.mlp.gate_proj").first.wait_for()
            assert _plots(page, 2) >= 2
            _check_axes(page, "Layer")
            _no_traceback(page, "Layer")
            _shot(page, "02-layer")
            _screen(page, "02-layer")
            _hostile_upload(page, ui, tmp_path)
            _shard_and_bin_uploads(page)
            _no_traceback(page, "Layer (upload)")
            page.locator('[data-testid="stRadio"]').get_by_text("Bundled sample").click()
            _idle(page)
            page.get_by_text("Loaded ct-w4a8-int-g128").first.wait_for()

            # 2. Platform and trace: three platforms, the stepper walked on each.
            _nav(page, "Platform and trace")
            for preset in ("x86-avx512", "sm90-h200", "rocm-mi300x"):
                _sidebar_select(page, preset)
                page.get_by_text(re.compile(r"The code (picks|finds no kernel)")).first.wait_for()
                _stepper(page, main, preset)
                _no_traceback(page, f"trace on {preset}")
                _screen(page, f"03-trace-{preset}")
            _sidebar_select(page, "sm90-h200")
            page.get_by_text("The code picks HummingLinearKernel").first.wait_for()
            page.get_by_text("edit every field").first.click()
            _fill(page, "VLLM_DISABLED_KERNELS", "HummingLinearKernel")
            page.get_by_text("Failed to find a kernel that can implement the WNA16 linear layer").first.wait_for()
            _shot(page, "03-trace-h200")
            _fill(page, "VLLM_DISABLED_KERNELS", "")
            _sidebar_select(page, "this machine")

            # 3. Kernels: a long sweep stopped with the header's Stop keeps its figures; then a
            # small sweep runs to the end (issue 13.4).
            _nav(page, "Kernels")
            # Many repeats, so that each M takes long enough to be seen and the sweep cannot
            # end before Stop on a fast machine (the sample layer is small).
            _fill(page, "Token counts M", "1,2,4,8,16,32,64,128,256,512,1024,2048,4096")
            _number(page, main, "Repeats", 50)
            main.get_by_role("button", name="Run", exact=True).click()
            main.get_by_text(re.compile(r"Measured so far: M up to \d+\.")).first.wait_for(timeout=120_000)
            page.locator('[data-testid="stStatusWidget"]').get_by_role("button", name="Stop").click()
            # Issue 24.9: with no click of ours, the page says it stopped and drops the progress line.
            main.get_by_text(re.compile(r"stopped after M = \d+")).first.wait_for(timeout=60_000)
            _idle(page)
            assert page.locator('[data-testid="stProgress"]').count() == 0
            assert _plots(page, 2) >= 2  # the figures measured so far stay on the page
            _shot(page, "04a-kernels-stopped")
            _screen(page, "04a-kernels-header-stop")
            _number(page, main, "Repeats", 7)
            _fill(page, "Token counts M", "1,8")
            page.get_by_text("stopped after M =").first.wait_for()
            main.get_by_role("button", name="Run", exact=True).click()
            page.get_by_text("Results: M = [1, 8], done").first.wait_for(timeout=180_000)
            _idle(page)
            assert _plots(page, 4) >= 4  # latency here, saved latency, speedup, error
            assert "Measured crossover" in main.inner_text() and "Noise: p80/p20" in main.inner_text()
            assert _check_axes(page, "Kernels") >= 3
            _check_speedup_headroom(page)
            _no_traceback(page, "Kernels")
            _shot(page, "04-kernels")
            _screen(page, "04-kernels")
            # The error split (issue 34.2): each part against the reference it names.
            main.get_by_role("button", name="Split the error", exact=True).click()
            _idle(page)
            main.get_by_text("Exact float64 math, no kernel").first.wait_for(timeout=60_000)
            split = main.inner_text()
            assert "x @ dequant(W4)^T" in split and "rel_error and SQNR are against" in split
            _no_traceback(page, "Kernels (error split)")
            _screen(page, "04b-kernels-error-split")
            # A run under others' load (issue 34.4): flagged, and never a crossover.
            with _busy_cores(os.cpu_count() or 2):
                main.get_by_role("button", name="Run", exact=True).click()
                page.get_by_text("Results: M = [1, 8], done").first.wait_for(timeout=300_000)
                _idle(page)
            noisy = main.inner_text()
            assert "These timings are noisy" in noisy, noisy[-2000:]
            assert "an unreliable timing never makes a crossover" in noisy
            _no_traceback(page, "Kernels (noisy run)")
            _screen(page, "04c-kernels-noisy-run-flagged")
            # The predicted chart's title as rendered (issue 24.2), on a preset (no calibration).
            _sidebar_select(page, "sm90-h200")
            page.get_by_text("Predicted crossover").first.wait_for(timeout=60_000)
            _plots(page, 1)
            title = next(f["title"] for f in page.evaluate(_TITLES_JS) if f["title"].startswith("Predicted latency"))
            assert "\\" not in title and title.endswith("(dashed: predicted, band shaded; dotted: roofline)"), title
            assert "-None)" not in main.inner_text() and "band 1--" not in main.inner_text()
            _sidebar_select(page, "this machine")

            # 4. Alignment: TP 1, 2, 4, 8, then a model preset.
            _nav(page, "Alignment")
            for tp in (1, 2, 4, 8):
                _number(page, main, "tensor-parallel size", tp)
                page.get_by_text(f"at TP {tp} on").first.wait_for()
                _plots(page, 2)
                _check_axes(page, f"Alignment TP {tp}")
                _no_traceback(page, f"Alignment TP {tp}")
            _screen(page, "05-alignment-tp8")
            _select(page, "Shapes", "Llama-3.1-8B")
            page.get_by_text("Llama-3.1-8B per-rank shapes").first.wait_for()
            _check_axes(page, "Alignment Llama-3.1-8B")
            _no_traceback(page, "Alignment model preset")
            _screen(page, "05-alignment-llama-8b")

            # 4b. Model report (issue 24.3): bold where meant, µs.
            _nav(page, "Model report")
            # This machine is not calibrated: the page offers it and starts nothing unasked.
            main.get_by_text("This machine is not calibrated yet").first.wait_for(timeout=60_000)
            _sidebar_select(page, "x86-avx512")
            # The sample at the Alignment step's TP 8 does not load (o_proj's K = 32 < g128): no total.
            main.get_by_text(re.compile(r"does not load: vLLM refuses")).first.wait_for(timeout=120_000)
            _idle(page)
            _select(page, "Model preset or checkpoint", "Llama-3.1-8B")
            main.get_by_text(re.compile(r"Llama-3\.1-8B on .* per forward")).first.wait_for(timeout=120_000)
            summary = main.locator("p").filter(has_text="per forward").first
            assert summary.locator("strong").count() == 2, summary.inner_html()
            text = summary.inner_text()
            # a unit that reads (µs, ms or s: issue 34.11), never a bare "us"
            assert "**" not in text and re.search(r"\d (µs|ms|s)\b", text) and not re.search(r"\d us\b", text), text
            _no_traceback(page, "Model report")
            _screen(page, "05c-model-report")
            # The comparison (issue 34.1): W4A8 against W4A16 on two platforms, a verdict per phase.
            main.get_by_text("W4A8 against W4A16, side by side").first.wait_for(timeout=60_000)
            main.get_by_text(re.compile(r"on sm90-h200 at decode \(M = 1\)")).first.wait_for(timeout=180_000)
            _idle(page)
            body = main.inner_text()
            assert "at prefill (M = 2048)" in body and "comparison.csv" in body
            _no_traceback(page, "Model report (comparison)")
            _screen(page, "05d-model-report-comparison")

            # 5. Docs versus code.
            _nav(page, "Docs versus code")
            page.get_by_text("disagreement(s), each explained by its trace").wait_for()
            assert _plots(page, 1) >= 1
            assert "fails at first forward" in page.locator(".js-plotly-plot").first.inner_text()  # issue 24.8
            _no_traceback(page, "Docs")
            _shot(page, "05-docs")
            _screen(page, "06-docs")

            # 6. Every Tour step, by its one "Next step" button.
            _nav(page, "Tour")
            for i in range(1, 7):
                page.get_by_role("heading", name=re.compile(rf"^{i}\. ")).first.wait_for(timeout=180_000)
                _idle(page, timeout_ms=180_000)
                _plots(page, 1, timeout_ms=5_000)
                _check_axes(page, f"Tour step {i}")
                _no_traceback(page, f"Tour step {i}")
                _screen(page, f"07-tour-step-{i}")
                assert main.get_by_role("button", name="Next", exact=True).count() <= 1  # the stepper's only
                if i < 6:
                    main.get_by_role("button", name="Next step", exact=True).click()
            # Leaving the Tour (issue 34.6): the user's own platform is back, and the sidebar says so.
            _nav(page, "Platform and trace")
            page.get_by_text("Back from the Tour").first.wait_for(timeout=60_000)
            _idle(page)
            side = page.locator('[data-testid="stSidebar"]').inner_text()
            assert "x86-avx512" in side and "edited:" not in side, side
            _no_traceback(page, "back from the Tour")
            _screen(page, "08-tour-return")
        except Exception:
            if main is not None:
                _shot(page, "failure")
            raise
        finally:
            browser.close()
