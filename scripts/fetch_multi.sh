#!/usr/bin/env bash
# Fetch the bacterial genome collection of configs/pretrain-bacteria.yaml into data/large/multi/
# (git-ignored). Called by `make data-multi`. Idempotent: files already present are kept.
#
# Two Debian packages hold complete reference genomes (`apt-get download`, no root needed):
#   bowtie-examples  usr/share/doc/bowtie/examples/genomes/NC_008253.fna.gz      E. coli 536
#   ragout-examples  usr/share/doc/ragout/examples/<species>/references/*.fasta.gz
# Only the eleven genomes below are extracted; the packages' other genomes (N315, G27, V. cholerae,
# the assembled contigs) are left out so that nothing else is trained or tuned on. Each file is
# renamed <species>_<strain> so that metrics read val/<species>_<strain>/bits_per_base.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="$ROOT/data/large/multi"
mkdir -p "$DEST"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
if [[ -x "$ROOT/.venv/bin/python" ]]; then PY="$ROOT/.venv/bin/python"; else PY="${PYTHON:-python3}"; fi

RAGOUT=usr/share/doc/ragout/examples
# destination name            package          path inside the package
GENOMES=(
  "ecoli_536.fna.gz            bowtie-examples  usr/share/doc/bowtie/examples/genomes/NC_008253.fna.gz"
  "ecoli_mg1655.fasta.gz       ragout-examples  $RAGOUT/E.Coli/references/MG1655-K12.fasta.gz"
  "ecoli_dh1.fasta.gz          ragout-examples  $RAGOUT/E.Coli/references/DH1.fasta.gz"
  "saureus_col.fasta.gz        ragout-examples  $RAGOUT/S.Aureus/references/COL.fasta.gz"
  "saureus_jkd6008.fasta.gz    ragout-examples  $RAGOUT/S.Aureus/references/JKD6008.fasta.gz"
  "saureus_rf122.fasta.gz      ragout-examples  $RAGOUT/S.Aureus/references/RF122.fasta.gz"
  "saureus_usa300.fasta.gz     ragout-examples  $RAGOUT/S.Aureus/references/USA300_FPR3757.fasta.gz"
  "hpylori_els37.fasta.gz      ragout-examples  $RAGOUT/H.Pylori/references/ELS37.fasta.gz"
  "hpylori_gambia94_24.fasta.gz ragout-examples $RAGOUT/H.Pylori/references/Gambia94_24.fasta.gz"
  "hpylori_puno120.fasta.gz    ragout-examples  $RAGOUT/H.Pylori/references/Puno120.fasta.gz"
  "hpylori_sjm180.fasta.gz     ragout-examples  $RAGOUT/H.Pylori/references/SJM180.fasta.gz"
)

extracted=""  # packages unpacked so far
for entry in "${GENOMES[@]}"; do
  read -r name package member <<<"$entry"
  out="$DEST/$name"
  if [[ -s "$out" ]]; then
    echo "exists  $out"
    continue
  fi
  if [[ " $extracted " != *" $package "* ]]; then
    command -v apt-get >/dev/null || { echo "fetch_multi: apt-get not found (needed for Debian package $package)" >&2; exit 1; }
    (cd "$WORK" && apt-get download "$package" >/dev/null && dpkg-deb -x "$package"_*.deb "x-$package")
    extracted="$extracted $package"
  fi
  cp "$WORK/x-$package/$member" "$out.tmp"
  mv "$out.tmp" "$out"
  echo "fetched $out"
done

# Validate every file (and build the one-off decompressed cache) so problems show up now.
PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PY" -c '
import sys
from biomoe.data.sources.genome import Genome
for p in sys.argv[1:]:
    print(p, Genome(p))
' "$DEST"/*.gz
