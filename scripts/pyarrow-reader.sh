#!/usr/bin/env bash
# pyarrow from PyPI, the independent reader the Parquet tests check the
# files against (pinned; installed under target/, not into the system).
#
#   eval "$(scripts/pyarrow-reader.sh)"
#   cargo test --features parquet --test parquet_files
#
# It exports STREAMWORK_PYARROW_PATH, the directory to put on PYTHONPATH.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR="$(pwd)/target/pyarrow"
if ! PYTHONPATH="$DIR" python3 -c 'import pyarrow' 2>/dev/null; then
    python3 -m pip install --quiet --disable-pip-version-check --target "$DIR" "pyarrow==19.0.1" >&2
fi
echo "export STREAMWORK_PYARROW_PATH=$DIR"
