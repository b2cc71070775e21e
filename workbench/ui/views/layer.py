"""Layer: pick a source (sample, directory, upload, synthetic, trained) and see what it holds."""
from __future__ import annotations

import json
import re

import streamlit as st

from workbench.ui import loaders, state, widgets
from workbench.ui.plain import plain
from workbench.ui.state import SAMPLE_ROOT, SOURCES, bind


def _sample_blurbs() -> dict[str, str]:
    """The 'what it shows' column of sample_models/README.md, by sample name."""
    readme = SAMPLE_ROOT / "README.md"
    if not readme.is_file():
        return {}
    out = {}
    for line in readme.read_text(encoding="utf-8").splitlines():
        m = re.match(r"\|\s*`([^`]+)`\s*\|\s*(.+?)\s*\|\s*$", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def _on_sample() -> None:
    st.session_state["layer.name"] = state.DEFAULT_LAYER


# A directory or upload source holds nothing until a path is typed or files are accepted:
# picking it only shows its controls, and every page keeps the layer it had until then.
_PENDING = "layer.pending"


def _ready(source: str) -> bool:
    ss = st.session_state
    return (source not in ("directory", "upload") or (source == "directory" and bool(ss["layer.dir"].strip()))
            or (source == "upload" and bool(ss["layer.upload_dir"])))


def _choose(source: str) -> None:
    """Make `source` the layer's source once it has something to load; else leave it pending."""
    ss = st.session_state
    if _ready(source):
        ss["layer.source"] = source
        ss[_PENDING] = None
    else:
        ss[_PENDING] = (source, ss["layer.source"])


def _shown_source() -> str:
    """The source the radio shows: a pending pick, while the source it was picked over holds."""
    ss = st.session_state
    pending = ss.get(_PENDING)
    return pending[0] if pending and pending[1] == ss["layer.source"] else ss["layer.source"]


def _checkpoint_source(source: str) -> None:
    ss = st.session_state
    if source == "sample":
        names = loaders.sample_names()
        if not names:
            st.error(f"No bundled sample found under {plain(SAMPLE_ROOT)}: run `python sample_models/generate.py`.")
            return
        if ss["layer.sample"] not in names:
            ss["layer.sample"] = names[0]
        bind(st.selectbox, "Sample checkpoint", "layer.sample", options=names, after=_on_sample)
        blurb = _sample_blurbs().get(ss["layer.sample"])
        if blurb:
            st.caption(blurb)
    elif source == "directory":
        roots = ", ".join(plain(r) for r in loaders.allowed_roots())
        bind(st.text_input, "Checkpoint directory (config.json + *.safetensors)", "layer.dir",
             placeholder=str(SAMPLE_ROOT / "ct-w4a8-int-g128"), after=lambda: _choose("directory"))
        st.caption(f"Allowed roots: {roots}. Add more with `{loaders.ROOTS_ENV}=/a{':'}/b` "
                   "before `streamlit run app.py`.")
    else:
        # No `type=` filter: the browser would drop a `.bin` without a word. Every file reaches
        # `loaders.check_upload`, which refuses it by name unread (nothing is ever unpickled).
        gen = ss.get("_upload.gen", 0)
        files = st.file_uploader(
            f"config.json and \\*.safetensors (up to {loaders.MAX_UPLOAD_MB} MiB in all; "
            "never pickles)", accept_multiple_files=True,
            key="w:upload" if gen == 0 else f"w:upload.{gen}")
        _save_upload(files or [])
        if ss["layer.upload_dir"]:
            # In full, one per line: the uploader's own list cuts long names to "mod...02.safetensors".
            st.caption("Uploaded:")
            st.text("\n".join(ss["_upload.names"]))


def _save_upload(files) -> None:
    """Write a new set of uploaded files once (not on every rerun).

    An accepted set becomes the layer every page uses, and the uploader is emptied (a new
    widget key), so the next upload starts a new set instead of piling onto this one. A
    refused set keeps the layer that was in use, and says why once.
    """
    from workbench.errors import USER_ERRORS

    ss = st.session_state
    ids = [f.file_id for f in files]
    if files and ss.get("_upload.ids") != ids:
        ss["_upload.ids"] = ids
        ss["_upload.error"] = ""
        try:
            folder = loaders.accept_upload([(f.name, f.getvalue()) for f in files],
                                           loaders.session_upload_dir(ss))
        except USER_ERRORS as exc:
            ss["_upload.error"] = str(exc)
        else:
            ss["layer.upload_dir"] = str(folder)
            ss["_upload.names"] = sorted(f.name for f in files)
            ss["layer.upload_label"] = ", ".join(n for n in ss["_upload.names"] if n.endswith(".safetensors"))
            ss["_upload.gen"] = ss.get("_upload.gen", 0) + 1
            _choose("upload")
            st.rerun()  # draw the emptied uploader and the new layer
    if files and ss.get("_upload.error"):
        st.error(plain(ss["_upload.error"]))


def _synthetic_source() -> None:
    from workbench.synthetic import DISTRIBUTIONS, SCHEMES

    c = st.columns(3)
    with c[0]:
        bind(st.number_input, "out_features N", "syn.out_features", min_value=1, max_value=16384, step=64)
        bind(st.number_input, "in_features K", "syn.in_features", min_value=1, max_value=16384, step=64)
        bind(st.selectbox, "group size", "syn.group_size", options=[-1, 32, 64, 128, 256],
             format_func=lambda g: "per channel (-1)" if g == -1 else str(g))
    with c[1]:
        bind(st.selectbox, "scheme", "syn.scheme", options=list(SCHEMES))
        bind(st.selectbox, "weight distribution", "syn.distribution", options=list(DISTRIBUTIONS))
        bind(st.checkbox, "symmetric weights", "syn.symmetric")
    with c[2]:
        bind(st.number_input, "outlier input channels", "syn.outlier_channels", min_value=0, max_value=16384)
        bind(st.selectbox, "model dtype", "syn.params_dtype", options=["bfloat16", "float16", "float32"])
        bind(st.number_input, "seed", "syn.seed", min_value=0, max_value=2**31 - 1)


def _trained_source() -> None:
    from workbench.synthetic import SCHEMES

    names = None
    try:
        from workbench.trained import minilm_linear_names

        names = minilm_linear_names()
    except Exception as exc:  # noqa: BLE001 - the package may be absent: a named error
        widgets.show_error(exc)
        return
    ss = st.session_state
    if ss["trained.name"] not in names:
        ss["trained.name"] = names[0]
    c = st.columns(3)
    with c[0]:
        bind(st.selectbox, "all-MiniLM-L6-v2 Linear", "trained.name", options=names)
    with c[1]:
        bind(st.selectbox, "scheme", "trained.scheme", options=list(SCHEMES))
        bind(st.selectbox, "group size", "trained.group_size", options=[-1, 32, 64, 128],
             format_func=lambda g: "per channel (-1)" if g == -1 else str(g))
    with c[2]:
        bind(st.checkbox, "symmetric weights", "trained.symmetric")
        bind(st.selectbox, "model dtype", "trained.params_dtype", options=["bfloat16", "float16", "float32"])
    st.caption("Real weights of sentence-transformers/all-MiniLM-L6-v2, quantized round-to-nearest; "
               "the Kernels page feeds it real activations captured from the model on real sentences.")


def _summary(layer, ckpt=None) -> None:
    st.subheader(plain(layer.name))
    c = st.columns([1, 1, 1, 2, 1.3, 1])
    c[0].metric("K (in_features)", layer.in_features)
    c[1].metric("N (out_features)", layer.out_features)
    c[2].metric("group size", "channel" if layer.group_size == -1 else layer.group_size)
    c[3].metric("format", layer.ct_format or layer.format.value,
                help="the compressed-tensors format when there is one, else the checkpoint format")
    c[4].metric("quantized bytes", f"{layer.nbytes:,}")
    bf16 = layer.in_features * layer.out_features * 2
    c[5].metric("size vs bf16", f"{layer.nbytes / bf16:.1%}",
                help="The quantized tensors' bytes (int4 codes, scales, zero points, g_idx) as a "
                     "share of the same weight stored in bf16 (N x K x 2 bytes).")
    info = {
        "checkpoint format": layer.format.value, "compressed-tensors format": layer.ct_format,
        "model dtype (params_dtype)": layer.params_dtype, "scale dtype": layer.scale_dtype,
        "symmetric": layer.symmetric, "bits": layer.num_bits, "packing": layer.packing.value,
        "qweight": f"{str(layer.qweight.dtype).removeprefix('torch.')} {list(layer.qweight.shape)}",
        "scales": f"{str(layer.scales.dtype).removeprefix('torch.')} {list(layer.scales.shape)}",
        "zeros": None if layer.zeros is None else list(layer.zeros.shape),
        "g_idx": layer.g_idx is not None, "parallel (vLLM)": layer.default_parallel,
        "source": layer.provenance.source,
    }
    left, right = st.columns(2)
    with left:
        st.markdown("**Layer**")
        # Tall enough for every row: a table clipped inside its own scroll area hides fields.
        st.dataframe([{"field": k, "value": str(v)} for k, v in info.items()], hide_index=True,
                     width="stretch", height=35 * (len(info) + 1) + 3)
    with right:
        st.markdown("**Quantization args**")
        d = layer.to_dict()  # the args as compressed-tensors' model_dump prints them
        st.json({"weights": d["weight_args"], "input_activations": d["input_args"],
                 "output_activations": d["output_args"], **({"quant_config": d["quant_config"]}
                                                            if layer.quant_config else {})},
                expanded=2)
    for note in layer.notes:
        st.caption(plain(note))
    from workbench import plots

    h1, h2 = st.columns(2)
    with h1:
        st.plotly_chart(plots.int4_histogram(layer), key="layer-hist-w")
    with h2:
        st.plotly_chart(plots.scale_histogram(layer), key="layer-hist-s")


def _listing(ckpt) -> None:
    """Every quantized layer of the checkpoint, with what vLLM resolves it to on this platform."""
    from workbench.checkpoints import listing_rows

    with widgets.user_errors():
        platform = widgets.current_platform()
        env = widgets.current_env()
        rows = listing_rows(ckpt.layers, platform, env, tp_size=st.session_state["tp.size"],
                            version=st.session_state["vllm.version"])
        n = len(rows)
        what = "The one quantized layer" if n == 1 else f"All {n} quantized layers"
        st.markdown(f"**{what}, resolved on {plain(platform.label())}** "
                    f"(TP {st.session_state['tp.size']})")
        # What vLLM makes of each layer first: a wide table scrolls, and these are the point.
        st.dataframe(rows, hide_index=True, width="stretch",
                     column_order=["layer", "kernel", "scheme", "error", "K", "N", "group_size",
                                   "ct_format", "input", "parallel"],
                     column_config={"layer": st.column_config.TextColumn(width="medium"),
                                    "error": st.column_config.TextColumn(width="large")})
    for note in ckpt.notes:
        st.caption(plain(note))


def _still_in_use() -> None:
    from workbench.errors import USER_ERRORS

    try:
        label = loaders.current_ref(st.session_state).label
    except USER_ERRORS:
        return
    st.caption(f"Every page still uses {plain(label)} until this source has a layer.")


def render() -> None:
    st.title("Layer")
    ss = st.session_state
    ss["w:layer.source"] = _shown_source()
    st.radio("Source", options=list(SOURCES), format_func=SOURCES.get, horizontal=True,
             key="w:layer.source", on_change=state.guarded(lambda: _choose(ss["w:layer.source"])))
    source = _shown_source()
    if source in ("sample", "directory", "upload"):
        _checkpoint_source(source)
    elif source == "synthetic":
        _synthetic_source()
    else:
        _trained_source()

    if source != ss["layer.source"] or not _ready(source):  # picked, nothing to load yet
        if source == "directory":
            st.info("Type the path of a checkpoint directory above.")
        elif not ss.get("_upload.error"):
            st.info("Nothing uploaded yet: drop config.json and the \\*.safetensors file(s) above.")
        if source != ss["layer.source"]:
            _still_in_use()
        return
    try:
        ref = loaders.current_ref(ss)
        ckpt = loaders.open_dir(ref.path) if ref.path is not None else None
        if ckpt is not None:
            if not ckpt.layers:
                st.error(plain(f"{ref.path.name}: no quantized layer found. " + " ".join(ckpt.notes)))
                return
            bind(st.selectbox, "Layer", "layer.name", options=ckpt.layer_names())
            ref = loaders.current_ref(ss)
        with st.spinner("Reading the layer's tensors..."):
            layer = loaders.load_layer(ref)
    except Exception as exc:  # noqa: BLE001 - named errors shown; others re-raised
        widgets.show_error(exc)
        return
    st.success(f"Loaded **{plain(ref.label)}**: this is the layer every page uses.")
    _summary(layer, ckpt)
    if ckpt is not None:
        _listing(ckpt)
    with st.expander("Layer summary as JSON"):
        st.code(json.dumps(layer.to_dict(), indent=2, default=str), language="json")
