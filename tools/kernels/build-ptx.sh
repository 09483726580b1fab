#!/usr/bin/env bash
# Compiles the stability check's kernels (crates/core/src/stability/kernels/stability.cu) to the PTX that
# crates/core/src/stability/cuda.rs embeds, with Debian 12's clang-14 and nothing from the CUDA toolkit.
#   bash tools/kernels/build-ptx.sh            rewrites crates/core/src/stability/kernels/stability.ptx
#   bash tools/kernels/build-ptx.sh OUT.ptx    writes OUT.ptx instead (crates/core/tests/core/stability_kernels.rs
#                                              compares it with the committed file)
# CLANG names another clang; its output must stay byte for byte what clang-14 writes.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
source_file="$root/crates/core/src/stability/kernels/stability.cu"
output=${1:-$root/crates/core/src/stability/kernels/stability.ptx}
clang=${CLANG:-clang-14}

if ! command -v "$clang" >/dev/null 2>&1; then
  echo "build-ptx: $clang is not installed; run \`bash .ci/setup test\` (it installs Debian's clang-14)." >&2
  exit 1
fi

# PTX for sm_80 (the oldest card with bf16 tensor cores); the driver compiles it for the card
# it loads on. -nocudainc/-nocudalib: the source uses clang's builtins, not CUDA's headers.
# -ffp-contract=off: no multiply-add the source did not write (the checked results must be
# the CPU's exactly; those kernels also use explicitly rounded PTX operations).
"$clang" --cuda-device-only -S -x cuda --cuda-gpu-arch=sm_80 -nocudainc -nocudalib \
  -O3 -ffp-contract=off -o "$output" "$source_file"
