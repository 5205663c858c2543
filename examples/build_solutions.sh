#!/bin/sh
# Builds every example native solution the way the harness does (nvcc alone, one shared library
# per solution) into ${OUT:-build/examples}/<name>.so. Run from the repository root after
# `make headers`. Extra link flags per solution: cuBLAS(Lt) for gemm_*, cuDNN for conv_*.
# ARCH (default sm_90) and NVCC (default nvcc) may be overridden; CUDNN_LIB may name the
# directory holding libcudnn.so (e.g. a pip nvidia-cudnn wheel's lib/).
set -eu
ARCH=${ARCH:-sm_90}
NVCC=${NVCC:-nvcc}
OUTDIR=${OUTDIR:-build/examples}
INC="-Ibuild/include"
[ -f build/include/dlpack/dlpack.h ] || { echo "run 'make headers' first" >&2; exit 2; }
mkdir -p "$OUTDIR"
status=0
for dir in examples/solutions/*/; do
	name=$(basename "$dir")
	case $name in
	gemm_*) libs="-lcublasLt -lcublas" ;;
	conv_*) libs="${CUDNN_LIB:+-L$CUDNN_LIB} -lcudnn" ;;
	*) libs="" ;;
	esac
	# shellcheck disable=SC2086
	if $NVCC -O3 --use_fast_math -std=c++17 -Xcompiler -fPIC -arch="$ARCH" -shared -cudart shared $INC \
		-o "$OUTDIR/$name.so" "$dir"kernels/*.cu $libs; then
		echo "built $OUTDIR/$name.so"
	else
		echo "FAILED $name" >&2
		status=1
	fi
done
exit $status
