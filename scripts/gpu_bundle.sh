#!/usr/bin/env bash
# Builds the ignored .te/ bundle the GPU machine needs (Transformer Engine + this project's wheels),
# then adds what the shared bundle script lacks: jsonargparse's `signatures` extra needs
# docstring-parser and typeshed-client, without which LightningCLI refuses to start there.
# Usage (repo root, on the CPU machine):  bash scripts/gpu_bundle.sh
# Then every device call: carry [".te"] (plus "data/large" for E. coli) and begin with
#   source .te/setup.sh && ...
set -euo pipefail
root=$(git rev-parse --show-toplevel); cd "$root"
[ -f .te/setup.sh ] || bash ../shared/gpu/te-bundle.sh
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d .te/whl \
  docstring-parser typeshed-client
ls .te/whl | grep -E "docstring|typeshed"
du -sh .te
