#!/usr/bin/env bash
# The README's main command: installs what is missing, builds, and trains
# the Fashion-MNIST quickstart recipe on 2 local workers
# (recipes/fashion-mnist-mlp.yaml; output in runs/fashion-mnist-mlp/).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
build/cli/bagua run recipes/fashion-mnist-mlp.yaml "$@"
