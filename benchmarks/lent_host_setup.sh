# Sourced by the run scripts for a lent GPU host (nothing installs there): pipes fail as a
# whole, Python unbuffered, D = $OUT/run made, the carried wheels (.whl/) installed into
# /tmp/site, and the repository and its kernels importable; t0 starts the script's clock.
set -o pipefail
export PYTHONUNBUFFERED=1
: "${OUT:?set OUT to the results folder}"
t0=$SECONDS
D=$OUT/run
mkdir -p "$D"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD:$PWD/kernels
