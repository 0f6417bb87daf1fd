#!/usr/bin/env bash
# Run HERE (a machine with PyPI), from anywhere, before check.sh goes to the GPU machine:
# that machine cannot fetch, its image lacks simpy and pydantic (device/KINDS.md: it has
# torch, numpy, scipy, transformers, matplotlib, pyarrow, httpx, tqdm), and ../shared does
# not travel with the checkout. Fills .gpu/ (git-ignored): wheels for its Python 3.12 at the
# versions the tests here ran with, and a copy of the shared traces.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
rm -rf .gpu && mkdir -p .gpu/wheels
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .gpu/wheels simpy==4.1.2 pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 \
  typing-inspection==0.4.5 typing-extensions==4.16.0
cp -r "${BATCHLAB_TRACES:-$root/../shared/traces}" .gpu/traces
du -sh .gpu
echo "next: the device tool's run with command 'bash benchmarks/gpu/check.sh', carry ['.gpu'], timeout_s 560"
