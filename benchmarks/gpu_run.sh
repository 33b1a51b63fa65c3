#!/usr/bin/env bash
# The GPU tests and the benchmarks on a GPU machine, in parts that each fit one command of about 10 minutes.
# Needs the ray, torchao and onnx-gpu extras (pip install -e ".[ray,torchao,onnx-gpu]"), as the GPU image's setup
# installs them; the forge part also uses sageattention and flash-attn where they are installed.
#   bash benchmarks/gpu_run.sh OUT [bytecode|tests|backends|wrapper|ray|bert|decisions|aitune|forge|ort|memory|resume|
#                                   zoo-text|zoo-vision|zoo-diffusion ...]
# Each benchmark writes its table (OUT/<part>.md) and its JSON; benchmarks/README.md says how a run becomes a
# row of benchmarks/RESULTS.md.
set -u
out=${1:-gpu-results}; shift || true
parts=${*:-bytecode tests}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 RAY_AUTH_MODE=${RAY_AUTH_MODE:-disabled}
gpus=$(nvidia-smi -L | wc -l)
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
run() {   # run NAME LIMIT_S COMMAND...: the command's output to OUT/NAME.log, then the table it wrote
  local name=$1 limit=$2; shift 2
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  echo "$name: exit $?"
  if [ -f "$out/$name.md" ]; then cat "$out/$name.md"; else tail -20 "$out/$name.log"; fi
}
for part in $parts; do
  echo "== $part $(date +%T)"
  case $part in
    bytecode)   # first, where the image ships no bytecode caches: without them every new process, each Ray
      # actor included, compiles torch and Inductor from source (docs/measurement.md)
      python -m compileall -q -j 0 $(python -c "import aitune_ray.runtime.bytecode as b; print(' '.join(b.folders(['torch', 'ray', 'sympy', 'torchao', 'aitune_ray'])))") .
      echo "bytecode caches written" ;;
    tests)
      timeout 480 python -m pytest tests -m gpu -v -rsx -p no:cacheprovider -o log_level=WARNING \
        > "$out/gpu_tests.log" 2>&1
      grep -E "PASSED|FAILED|XFAIL|SKIPPED|ERROR|passed|failed" "$out/gpu_tests.log" | tail -40 ;;
    backends)   # which backend wins on the encoder (fp16), inline
      run backends 560 python benchmarks/backends.py --model encoder --dtype float16 \
        --backends ${BACKENDS:-jit,jit-ro,jit-max,onnx-graphs,ao-fp8wo,kernels} --out "$out/backends.md" ;;
    wrapper)   # the deployed module's own cost per call (host only, under a minute)
      run wrapper 120 python benchmarks/backends.py --wrapper-cost --out "$out/wrapper.md" ;;
    ray)   # Ray against inline, the ViT-B-sized fp16 encoder with 4 candidates, repeated pairs (about 9 minutes)
      run ray 590 python benchmarks/ray_vs_inline.py --model encoder --dtype float16 \
        --runs ${RUNS:-ray:$gpus,inline,ray:$gpus,inline} --run-timeout ${RUN_TIMEOUT:-130} \
        --backends ${BACKENDS:-jit,jit-max,ao-fp8wo,kernels} --log-dir "$out/actor-logs" --out "$out/ray.md" ;;
    bert)   # Ray against inline on BERT-base with 9 candidates, none over 40% of the total, caches off
      TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 run bert 590 python benchmarks/ray_vs_inline.py --model bert \
        --backends jit,jit-max,jit-ro,ao-int8wo,ao-fp8wo,ao-fp8dq,onnx,kernels,kernels-ro --runs "ray:$gpus,inline" \
        --run-timeout 290 --log-dir "$out/actor-logs-bert" --out "$out/bert.md" ;;
    decisions)   # tunings of the ViT and BERT-base with batch-size dispatch (DISPATCH=--dispatch, the default),
      # each against a user's loop; runs until the budget is spent (about 10 minutes)
      run decisions 590 python benchmarks/decisions.py --out "$out/decisions" --models ${MODELS:-vit,bert} \
        --runs ${RUNS:-3} ${DISPATCH---dispatch} --backends ${BACKENDS:-jit,jit-ro,jit-max,onnx-graphs,ao-fp8wo,kernels} \
        --budget-s ${BUDGET_S:-420}
      sed -n '1,60p' "$out/decisions/decisions.md" ;;
    aitune)   # tuning time beside AITune 0.6.0 on the ViT. AITune imports TensorRT and nvidia-modelopt when it
      # loads; where the image lacks them, benchmarks/beside_aitune.py stands them in.
      # AITune's wheel and those of its dependencies that the image lacks (autowrapt, dill, nvtx, wrapt 2,
      # polygraphy) are not part of this repository: put them in the folder AITUNE_WHEELS (default .whl).
      wheels=${AITUNE_WHEELS:-.whl}
      if ! ls "$wheels"/*.whl > /dev/null 2>&1; then echo "aitune: no wheels in $wheels (set AITUNE_WHEELS)"; continue; fi
      python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/aitsite "$wheels"/*.whl 2>&1 | grep -v WARNING
      PYTHONPATH="/tmp/aitsite:$PYTHONPATH" run aitune 590 python benchmarks/beside_aitune.py \
        --out "$out/aitune" --runs ${RUNS:-aitune_ray,aitune} --run-timeout ${RUN_TIMEOUT:-280}
      cat "$out/aitune/beside_aitune.md" ;;
    forge)   # the kernel forge per SDPA shape (about 5 minutes)
      run forge 400 python benchmarks/kernel_forge.py --out "$out/forge.md" ;;
    ort)   # ONNX Runtime on the GPU against eager and Inductor, the ViT and BERT-base (about 8 minutes)
      run ort 560 python benchmarks/ort_gpu.py --models vit,bert --rounds 5 --burst-ms 40 --out "$out/ort"
      cat "$out/ort/ort_gpu.md" ;;
    memory)   # peak memory with 2 and 8 candidates that each hold 4 GiB once built, inline and on Ray
      run memory 300 python benchmarks/memory.py --device cuda --candidates 2,8 --buffer-mb 4096 --ray \
        --out "$out/memory.md" ;;
    resume)   # a job killed half-way and resumed, against the same job run cold, on Ray
      run resume 590 python benchmarks/resume.py --executor ray --device cuda --timeout 180 --out "$out/resume.md" ;;
    zoo-text|zoo-vision|zoo-diffusion)   # the model zoo at full size, fp16, in three parts of about 10 minutes:
      # every model x backend, built, checked against eager (type and every tensor), saved and loaded, timed. Needs
      # the zoo extra's libraries (the image lacks diffusers: bring its wheel, or its models say "unavailable");
      # a part stopped at its limit keeps what it found in OUT/<part>.partial.json
      case $part in
        zoo-text) models=bert,distilbert,roberta-cls,bert-cls,gpt2,llama,qwen2,t5-encoder,deberta-v2,clip-text ;;
        zoo-vision) models=vit,swin,convnext,whisper-encoder,wav2vec2,timm-resnet,timm-convnext,timm-vit,tv-resnet18,tv-mobilenet-v3,tv-efficientnet-b0,tv-fpn ;;
        zoo-diffusion) models=unet,dit,pixart,sd3,vae-decoder ;;
      esac
      run "$part" 590 python benchmarks/zoo.py --size full --dtype float16 --models "${MODELS:-$models}" \
        --backends ${BACKENDS:-jit,aot,onnx,ao-int8wo,kernels} --out "$out/$part.md" ;;
    *) echo "unknown part $part" ;;
  esac
done
