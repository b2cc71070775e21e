#!/usr/bin/env bash
# Packs Streamlit, plotly and Jupyter's kernel (CPython 3.12, x86-64) as one unpacked site,
# .uisite/uisite.tar.xz (about 8 MB), for a lent host whose image lacks them and installs nothing
# (benchmarks/lent_host_ui_run.sh). What that image already holds is left out, and so is what
# the tests never import (the app's browser assets, pydeck, debugpy, jedi's stubs): whole, the
# wheels would not fit beside the working tree in one call. Needs pip and network here.
#   bash benchmarks/make_ui_site.sh
set -euo pipefail
cd "$(dirname "$0")/.."
W=$(mktemp -d); S=$W/uisite
python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64 \
  --platform manylinux1_x86_64 -d "$W/whl" \
  "streamlit==1.67.0" "plotly==7.1.0" "nbclient==0.11.0" nbformat ipykernel ipywidgets anywidget
# in the lent image already (its own versions serve)
for p in pyarrow numpy pandas pillow pygments narwhals protobuf charset_normalizer psutil packaging \
         urllib3 jinja2 anyio certifi click requests idna attrs typing_extensions h11 markupsafe \
         python_dateutil tzdata; do rm -f "$W/whl/$p"-*.whl; done
mkdir -p "$S"
for w in "$W"/whl/*.whl; do unzip -q -o "$w" -d "$S"; done
rm -rf "$S"/*.data "$S"/pydeck* "$S"/debugpy* "$S"/widgetsnbextension* "$S/streamlit/static" \
       "$S/jedi/third_party/typeshed" "$S/plotly/labextension"
mkdir -p .uisite && tar -cJf .uisite/uisite.tar.xz -C "$W" uisite && rm -rf "$W"
ls -la .uisite/uisite.tar.xz
