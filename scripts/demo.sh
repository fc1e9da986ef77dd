#!/usr/bin/env bash
# The README's main command: installs what is missing, builds, and launches
# 4 local workers that run every collective (examples/collectives.cpp).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
build/cli/bagua launch --nproc-per-node 4 -- build/examples/collectives
