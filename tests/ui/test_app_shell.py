"""The router and the frame every page shares: navigation, sidebar, config, the bug guard."""
from __future__ import annotations

import tomllib


def test_the_pages_and_the_sidebar(ui):
    at = ui.open_app()
    from workbench.ui.main import PAGES

    assert [p[1] for p in PAGES] == ["Layer", "Platform and trace", "Kernels", "Alignment",
                                     "Model report", "Docs versus code", "Tour"]
    side = ui.text(at, main_only=False)
    assert "**Layer:** ct-w4a8-int-g128 / model.layers.0.mlp.down_proj" in side
    # the sidebar's platform picker drives every page
    at.selectbox(key="w:pf.preset:sidebar").set_value("xpu").run()
    assert "The code picks **`XPUW4A8IntLinearKernel`**" in ui.text(at)
    at.switch_page("workbench/ui/pages/alignment.py").run()
    assert "on Intel Data Center GPU (XPU)" in ui.text(at)


def test_config_binds_to_localhost_headless():
    cfg = tomllib.loads((ui_root() / ".streamlit" / "config.toml").read_text())
    assert cfg["server"]["address"] == "localhost"
    assert cfg["server"]["headless"] is True
    assert cfg["browser"]["gatherUsageStats"] is False


def ui_root():
    from workbench.ui.state import REPO_ROOT

    return REPO_ROOT


def test_a_bug_in_a_page_is_a_red_box_not_a_traceback(ui, monkeypatch):
    from workbench.ui.views import docs

    def broken(**_):
        raise RuntimeError("boom")

    monkeypatch.setattr(docs, "render", broken)
    monkeypatch.delenv("WORKBENCH_UI_RAISE")
    at = ui.open_app("docs")
    assert not at.exception
    (err,) = ui.errors(at)
    assert err.startswith("Unexpected error on this page (RuntimeError: boom)")
    # the other pages keep working in the same session
    at.switch_page("workbench/ui/pages/trace.py").run()
    assert not ui.errors(at) and "The code picks" in ui.text(at)


def test_the_landing_page_imports_torch_only_where_the_build_could_see_a_gpu():
    # Importing torch costs ~2 s of the 5 s cold-start budget; on a CPU-only build the landing
    # trace needs none (the host is read from torch's version file, the layer from its
    # safetensors header). A CUDA, ROCm or XPU build must ask torch whether a device is there
    # (an Intel AMX host with an H100 and torch+cu130 took that path).
    import subprocess
    import sys

    from workbench.platforms import cpu_only_torch_build

    cpu_only = cpu_only_torch_build() is not None

    probe = ("import sys; from streamlit.testing.v1 import AppTest; "
             f"at = AppTest.from_file({str(ui_root() / 'app.py')!r}, default_timeout=60); at.run(); "
             "text = ' '.join(m.value for m in at.markdown); "
             "assert 'The code picks' in text, text[:500]; "
             "assert not at.exception and not at.error, (at.exception, at.error); "
             "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                         cwd=ui_root())
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == str(not cpu_only)


def test_a_failing_widget_callback_is_one_red_box_in_the_main_area(ui, monkeypatch):
    # Streamlit runs callbacks before the script, outside the page's try: the router re-raises
    # what one raised inside its boundary on the next run.
    from workbench.ui import state

    monkeypatch.delenv("WORKBENCH_UI_RAISE")
    at = ui.open_app("trace")

    def broken(name):
        raise RuntimeError(f"boom {name}")

    monkeypatch.setattr(state, "set_preset", broken)
    at.selectbox(key="w:pf.preset:sidebar").set_value("xpu").run()
    assert not at.exception
    assert not at.sidebar.error
    (err,) = ui.errors(at)
    assert err.startswith("Unexpected error in a control of this page (RuntimeError: boom xpu)")
    monkeypatch.undo()
    at.run()  # shown once: the next run is clean
    assert not ui.errors(at) and "The code picks" in ui.text(at)


def test_an_error_is_shown_once_not_in_the_sidebar_too(ui):
    at = ui.open_app("trace", state={"layer.source": "directory", "layer.dir": "/etc"})
    assert not at.sidebar.error
    (err,) = ui.errors(at)
    assert "is not under an allowed root" in err
    assert "Layer:** not loaded" in "\n".join(m.value for m in at.sidebar.markdown)


def test_link_warnings_stay_with_the_page_the_link_opened(ui):
    at = ui.open_app(query={"platform": "bogus"})
    assert len(at.sidebar.warning) == 1
    at.switch_page("workbench/ui/pages/layer.py").run()
    assert not at.sidebar.warning
    at.switch_page("workbench/ui/pages/trace.py").run()
    assert not at.sidebar.warning


def test_an_unknown_link_parameter_is_named(ui):
    # Issue 24.7: the README promises a warning for a parameter the app cannot use.
    at = ui.open_app(query={"foo": "bar"})
    (warning,) = [ui.unplain(w.value) for w in at.sidebar.warning]
    assert warning.startswith("link parameter foo='bar' ignored: not a parameter of this app; accepted: source,")


def test_a_refused_tour_step_names_the_default_as_a_link_counts(ui):
    # Issue 24.7: steps are 1-6 in a link; the default is step 1, not "0".
    at = ui.open_app(query={"step": "99"})
    (warning,) = [ui.unplain(w.value) for w in at.sidebar.warning]
    assert warning == "link parameter step='99' ignored: out of range; accepted: 1 to 6. Using the default (1)."
    assert at.session_state["tour.step"] == 0
