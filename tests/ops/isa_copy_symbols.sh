#!/bin/bash
# An ISA copy of ops/cpu/array_kernels.cpp (AVX2 or AVX-512; ops/CMakeLists.txt) must define no
# symbol that the baseline code could also define: the linker keeps one copy of a weak symbol,
# and if it kept this one, a CPU without that ISA would run its instructions (SIGILL). Every
# global or weak symbol of the object must therefore name the copy's own namespaces:
# loom::cpu::ISA or Eigen's, renamed loom_eigen_ISA.
#   isa_copy_symbols.sh OBJECT ISA [NM]
set -euo pipefail
object=$1
isa=$2
nm=${3:-nm}
symbols=$("$nm" -C --defined-only "$object" | awk '$2 ~ /^[A-Z]$|^[uvw]$/')
if [ -z "$symbols" ]; then
  echo "no global symbols in $object: is it the $isa copy of array_kernels.cpp?" >&2
  exit 1
fi
shared=$(grep -v -e "loom_eigen_$isa::" -e "loom::cpu::$isa::" <<<"$symbols" || true)
if [ -n "$shared" ]; then
  echo "symbols of $object that the baseline code could share (ODR):" >&2
  echo "$shared" >&2
  exit 1
fi
echo "$(wc -l <<<"$symbols") global or weak symbols, all in loom::cpu::$isa or loom_eigen_$isa"
