#!/usr/bin/env bash
# Builds .te/ (git-ignored): Transformer Engine and this project's wheels as one offline bundle, for
# a GPU machine that cannot reach a package index. Then adds what the base bundle script lacks:
# jsonargparse's `signatures` extra needs docstring-parser and typeshed-client, without which
# LightningCLI refuses to start.
# Usage (repo root, on a machine with internet access):  bash scripts/gpu_bundle.sh
# Then copy .te/ (and data/large/ for E. coli) into the checkout on the GPU machine and start
# each command with
#   source .te/setup.sh && ...
set -euo pipefail
root=$(git rev-parse --show-toplevel); cd "$root"
[ -f .te/setup.sh ] || bash ../shared/gpu/te-bundle.sh
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d .te/whl \
  docstring-parser typeshed-client
ls .te/whl | grep -E "docstring|typeshed"
du -sh .te
