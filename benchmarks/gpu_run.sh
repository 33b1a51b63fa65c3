#!/usr/bin/env bash
# One run on a GPU machine: the GPU tests, then the per-backend table and the Ray-vs-inline benchmark.
# Needs the ray and torchao extras installed (sageattention and flash-attn for the forge part).
#   bash benchmarks/gpu_run.sh OUTDIR [tests|backends|ray|forge ...]
set -u
out=${1:-gpu-results}; shift || true
parts=${*:-tests backends ray}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 RAY_AUTH_MODE=${RAY_AUTH_MODE:-disabled}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
for part in $parts; do
  case $part in
    tests)
      timeout 420 python -m pytest tests/test_gpu.py tests/test_forge_ray.py -m gpu -v -p no:cacheprovider \
        -o log_level=WARNING > "$out/gpu_tests.log" 2>&1
      grep -E "PASSED|FAILED|XFAIL|SKIPPED|ERROR|passed|failed" "$out/gpu_tests.log" | tail -20 ;;
    backends)
      timeout 420 python benchmarks/backends.py --model mlp --executor ray \
        --backends jit,jit-max,aot,onnx,ao-int8wo,ao-int8dq,ao-fp8wo --out "$out/backends_mlp.md" \
        > "$out/backends_mlp.log" 2>&1
      grep -A12 "^| backend" "$out/backends_mlp.md"; tail -3 "$out/backends_mlp.md" ;;
    ray)
      timeout 560 python benchmarks/ray_vs_inline.py --model mlp --gpus "$(nvidia-smi -L | wc -l)" \
        --backends jit,jit-max,jit-ro,ao-int8wo,ao-int8dq,ao-fp8wo --out "$out/ray_vs_inline.md" \
        > "$out/ray_vs_inline.log" 2>&1
      sed -n '1,25p' "$out/ray_vs_inline.md" ;;
    forge)
      timeout 420 python benchmarks/kernel_forge.py --out "$out/kernel_forge.md" > "$out/kernel_forge.log" 2>&1
      cat "$out/kernel_forge.md" ;;
  esac
done
