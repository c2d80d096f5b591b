#!/bin/sh
# tests/gpu/bundle.sh: the GPU tests and benchmarks on a GPU machine that
# has the NVIDIA driver and the CUDA libraries but not tfg's build
# dependencies (OpenBLAS, libedit, Check, re2c, Bison):
#
#   sh tests/gpu/bundle.sh pack [BUILD]     # here: BUILD/gpu-bundle.tar.xz
#   sh tests/gpu/bundle.sh run BUNDLE OUT [WHAT]   # there, in a checkout of the same commit
#
# WHAT is all (the default), tests (tests/gpu/run.sh only) or bench
# (bench/gpu/run.sh only): a device's time is scarce, so a run can skip
# the part it does not need.
#
# pack puts the binaries the GPU scripts run (BUILD/tfg,
# BUILD/tests/gpu/conformance and oom, BUILD/bench/gpu/gpubench; stripped)
# and the shared libraries they load beyond glibc, the C++ runtime and the
# CUDA libraries (OpenBLAS and its Fortran runtime, libedit and theirs, as
# ldd finds them here) into one archive (about 11 MB). The binaries must
# be a CUDA build (make all bench-build test-gpu with nvcc found).
#
# run unpacks it into build/ and build/lib, finds the CUDA runtime,
# cuBLAS, cuDNN and NCCL (the CUDA toolkit's lib64, or the nvidia-* Python
# packages PyTorch installs), checks with ldd that every library resolves,
# then runs tests/gpu/run.sh (make test-gpu) and bench/gpu/run.sh, keeping
# their output in OUT/test-gpu.txt and OUT/bench-gpu.txt and the
# benchmark's result file (bench/results/gpu-DEVICE-DATE.txt) in OUT.
# Exit status: tests/gpu/run.sh's (the benchmark is not a test).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BINS="tfg tests/gpu/conformance tests/gpu/oom bench/gpu/gpubench"

# The libraries pack leaves out: the machine's own (glibc, the C++ and GCC
# runtimes) and the CUDA libraries, which must match the machine's driver.
system_lib() {
  case "$1" in
    libc.so* | libm.so* | libdl.so* | libpthread.so* | librt.so* | ld-linux* | linux-vdso* | libstdc++.so* | libgcc_s.so*) return 0 ;;
    libcuda.so* | libcudart.so* | libcublas.so* | libcublasLt.so* | libcudnn*.so* | libnccl.so*) return 0 ;;
  esac
  return 1
}

pack() {
  build=${1:-build}
  stage=$(mktemp -d)
  trap 'rm -rf "$stage"' EXIT
  mkdir -p "$stage/lib"
  for b in $BINS; do
    if [ ! -x "$build/$b" ]; then
      echo "tests/gpu/bundle.sh: $build/$b is missing: make all bench-build test-gpu" >&2
      exit 2
    fi
    if ! ldd "$build/$b" | grep -q 'libcudart'; then
      echo "tests/gpu/bundle.sh: $build/$b is not a CUDA build (no libcudart): build where nvcc is found" >&2
      exit 2
    fi
    mkdir -p "$stage/$(dirname "$b")"
    strip -o "$stage/$b" "$build/$b"
    ldd "$build/$b" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' >>"$stage/libs"
  done
  sort -u "$stage/libs" | while read -r name path; do
    system_lib "$name" || cp -L "$path" "$stage/lib/$name"
  done
  rm "$stage/libs"
  git -C "$ROOT" rev-parse HEAD >"$stage/COMMIT" 2>/dev/null || echo unknown >"$stage/COMMIT"
  tar -C "$stage" -cJf "$build/gpu-bundle.tar.xz" .
  echo "$build/gpu-bundle.tar.xz: $(ls "$stage/lib" | tr '\n' ' ')($(wc -c <"$build/gpu-bundle.tar.xz") bytes, commit $(cat "$stage/COMMIT"))"
}

# The directories holding the CUDA libraries on this machine, for
# LD_LIBRARY_PATH: the toolkit's, then the nvidia-* Python packages'.
cuda_dirs() {
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -d "$d" ] && echo "$d"; done
  python3 -c 'import nvidia, os
for p in nvidia.__path__:
    for s in sorted(os.listdir(p)):
        if os.path.isdir(os.path.join(p, s, "lib")): print(os.path.join(p, s, "lib"))' 2>/dev/null
}

run() {
  bundle=$1 out=$2 what=${3:-all}
  cd "$ROOT" || exit 2
  mkdir -p build "$out"
  tar -C build -xJf "$bundle" || exit 2
  want=$(cat build/COMMIT)
  have=$(git rev-parse HEAD 2>/dev/null || echo unknown)
  [ "$want" = "$have" ] || echo "tests/gpu/bundle.sh: note: the bundle is of commit $want, this checkout $have"
  path=$ROOT/build/lib
  for d in $(cuda_dirs); do path=$path:$d; done
  LD_LIBRARY_PATH=$path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export LD_LIBRARY_PATH
  missing=0
  for b in $BINS; do
    if ldd "build/$b" | grep 'not found'; then missing=1; fi
  done
  if [ "$missing" = 1 ]; then
    echo "tests/gpu/bundle.sh: libraries not found (above); LD_LIBRARY_PATH=$LD_LIBRARY_PATH" >&2
    exit 2
  fi
  rc=0
  : >"$out/started"
  if [ "$what" != bench ]; then
    sh tests/gpu/run.sh build 2>&1 | tee "$out/test-gpu.txt"
    rc=$(tail -1 "$out/test-gpu.txt" | grep -q '^tests-gpu: [0-9]* passed, 0 failed' && echo 0 || echo 1)
    grep -q '^SKIP: ' "$out/test-gpu.txt" && rc=0
  fi
  if [ "$what" != tests ]; then
    sh bench/gpu/run.sh build 2>&1 | tee "$out/bench-gpu.txt"
    [ -d bench/results ] && find bench/results -name 'gpu-*.txt' -newer "$out/started" -exec cp {} "$out/" \;
  fi
  rm -f "$out/started"
  exit "$rc"
}

case "${1:-}" in
  pack) shift; pack "$@" ;;
  run)
    case "$#:${4:-all}" in
      3:all | 4:all | 4:tests | 4:bench) ;;
      *) echo "usage: tests/gpu/bundle.sh run BUNDLE OUT [all|tests|bench]" >&2; exit 2 ;;
    esac
    run "$2" "$3" "${4:-all}"
    ;;
  *) echo "usage: tests/gpu/bundle.sh pack [BUILD] | run BUNDLE OUT [all|tests|bench]" >&2; exit 2 ;;
esac
