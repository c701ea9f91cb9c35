#!/bin/bash
# The AVX2 copy of ops/cpu/array_kernels.cpp (ops/CMakeLists.txt) must define no symbol that the
# baseline code could also define: the linker keeps one copy of a weak symbol, and if it kept
# this one, a CPU without AVX2 would run AVX2 instructions (SIGILL). Every global or weak symbol
# of the object must therefore name the copy's own namespaces: loom::cpu::avx2 or Eigen's,
# renamed loom_eigen_avx2.
#   isa_copy_symbols.sh OBJECT [NM]
set -euo pipefail
object=$1
nm=${2:-nm}
symbols=$("$nm" -C --defined-only "$object" | awk '$2 ~ /^[A-Z]$|^[uvw]$/')
if [ -z "$symbols" ]; then
  echo "no global symbols in $object: is it the AVX2 copy of array_kernels.cpp?" >&2
  exit 1
fi
shared=$(grep -v -e 'loom_eigen_avx2::' -e 'loom::cpu::avx2::' <<<"$symbols" || true)
if [ -n "$shared" ]; then
  echo "symbols of $object that the baseline code could share (ODR):" >&2
  echo "$shared" >&2
  exit 1
fi
echo "$(wc -l <<<"$symbols") global or weak symbols, all in loom::cpu::avx2 or loom_eigen_avx2"
