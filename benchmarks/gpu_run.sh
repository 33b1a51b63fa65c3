#!/usr/bin/env bash
# One run on a GPU machine: any of the GPU tests, the per-backend table, Ray vs inline, the kernel forge.
# Needs the ray and torchao extras installed (sageattention and flash-attn for the forge part).
#   bash benchmarks/gpu_run.sh OUTDIR [bytecode|tests|profile-tests|driver-plan|ray1-long|ray1-heavy|ray-start|host-modes|host-cpus|ao-encoder|actor-start|decide|restored|agree|ort|ort-bert|forge-tests|overhead|kernel-time|compile-frames|forge-two|backends|ray|ray1|memory|bert|bert-ray|bert-inline|pipeline|forge ...]
# bert-ray and bert-inline are the two halves of the BERT Ray-vs-inline run, for machines that limit how
# long one command may take; `ray_vs_inline.py --include A.json B.json --runs ""` joins them in one table.
set -u
out=${1:-gpu-results}; shift || true
parts=${*:-bytecode tests backends ray}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 RAY_AUTH_MODE=${RAY_AUTH_MODE:-disabled}
gpus=$(nvidia-smi -L | wc -l)
bert=jit,jit-max,jit-ro,ao-int8wo,ao-int8dq,ao-fp8wo,onnx,kernels
# Without TorchAO int8 dynamic, which alone took 60% of BERT's candidate time, so that no candidate
# takes over 40% of the total; Inductor's caches are off for it, so neither run reuses the other's compiles.
balanced=jit,jit-max,jit-ro,ao-int8wo,ao-fp8wo,ao-fp8dq,onnx,kernels,kernels-ro
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
for part in $parts; do
  echo "== $part $(date +%T)"
  case $part in
    bytecode)   # first: write Python's bytecode caches where the machine has none, as a user's pip install
      # does (without them every new process, each Ray actor included, compiles torch and Inductor from source)
      python benchmarks/bytecode.py --write --repeats 1 2>&1 | tee "$out/bytecode.txt" ;;
    tests)
      timeout 420 python -m pytest tests/test_gpu.py tests/test_kernel_forge.py tests/test_forge_ray.py tests/test_profile_process.py -m gpu -v \
        -p no:cacheprovider -o log_level=WARNING > "$out/gpu_tests.log" 2>&1
      grep -E "PASSED|FAILED|XFAIL|SKIPPED|ERROR|passed|failed" "$out/gpu_tests.log" | tail -20 ;;
    ort)   # needs onnxruntime-gpu staged (stage.sh ort-gpu): ONNX Runtime's GPU tests, then ort_gpu.py on the ViT
      timeout 200 python -m pytest tests/test_onnx_runtime_gpu.py \
        "tests/test_gpu.py::test_onnxruntime_cuda_provider_never_falls_back_to_cpu" -m gpu -v \
        -p no:cacheprovider -o log_level=WARNING > "$out/ort_gpu_tests.log" 2>&1
      grep -E "PASSED|FAILED|XFAIL|SKIPPED|ERROR|passed|failed" "$out/ort_gpu_tests.log" | tail -20
      timeout 330 python benchmarks/ort_gpu.py --models vit --rounds 5 --burst-ms 40 --out "$out/ort-vit" \
        > "$out/ort_gpu_vit.log" 2>&1
      echo "ort_gpu.py vit: exit $?"; grep -E "^\||^###|failed to build" "$out/ort-vit/ort_gpu.md"; tail -3 "$out/ort_gpu_vit.log" ;;
    ort-bert)   # the same benchmark on examples/bert (BERT-base, fp16, batch sizes 8 and 32)
      timeout 330 python benchmarks/ort_gpu.py --models bert --rounds 5 --burst-ms 40 --out "$out/ort-bert" \
        > "$out/ort_gpu_bert.log" 2>&1
      echo "ort_gpu.py bert: exit $?"; grep -E "^\||^###|failed to build" "$out/ort-bert/ort_gpu.md"; tail -3 "$out/ort_gpu_bert.log" ;;
    forge-tests)
      timeout 200 python -m pytest tests/test_forge_ray.py -m gpu -v \
        -p no:cacheprovider -o log_level=WARNING -o faulthandler_timeout=80 --basetemp "$out/pytest" \
        "tests/test_gpu.py::test_max_throughput_on_gpu_never_slower_than_eager_at_a_recorded_batch_size" \
        > "$out/forge_tests.log" 2>&1
      grep -E "PASSED|FAILED|XFAIL|SKIPPED|ERROR|passed|failed" "$out/forge_tests.log" | tail -20
      timeout 120 python examples/attention_quickstart.py > "$out/attention_quickstart.log" 2>&1
      echo "attention quick start: exit $?"; tail -25 "$out/attention_quickstart.log" ;;
    backends)
      timeout 420 python benchmarks/backends.py --model mlp --executor ray \
        --backends jit,jit-max,aot,onnx,ao-int8wo,ao-int8dq,ao-fp8wo --out "$out/backends_mlp.md" \
        > "$out/backends_mlp.log" 2>&1
      grep -A12 "^| backend" "$out/backends_mlp.md"; tail -3 "$out/backends_mlp.md" ;;
    ray)
      timeout 560 python benchmarks/ray_vs_inline.py --model mlp --runs "ray:$gpus,inline" --run-timeout 270 \
        --backends jit,jit-max,jit-ro,ao-int8wo,ao-int8dq,ao-fp8wo --out "$out/ray_vs_inline.md" \
        > "$out/ray_vs_inline.log" 2>&1
      sed -n '1,30p' "$out/ray_vs_inline.md" ;;
    ray1-long)   # one GPU: the ViT-B-sized fp16 encoder with Inductor default and max-autotune, TorchAO fp8wo and
      # KernelSelector, on Ray with one actor and inline (about 8 minutes)
      timeout 590 python benchmarks/ray_vs_inline.py --model encoder --dtype float16 --runs ${RUNS:-ray:1,inline} \
        --run-timeout ${RUN_TIMEOUT:-290} --backends jit,jit-max,ao-fp8wo,kernels --out "$out/ray1_long.md" \
        --log-dir "$out/actor-logs-long" \
        > "$out/ray1_long.log" 2>&1
      sed -n '1,75p' "$out/ray1_long.md" | grep -v "^| Torch\|^| Kernel" ;;
    ray1-heavy)   # one GPU: the same encoder, with builds that autotune (max-autotune per batch size, and with
      # CUDA graphs), Inductor default and KernelSelector: a job of minutes rather than half a minute
      timeout 590 python benchmarks/ray_vs_inline.py --model encoder --dtype float16 --runs ${RUNS:-inline,ray:1} \
        --run-timeout ${RUN_TIMEOUT:-285} --backends ${BACKENDS:-jit,jit-max-static,jit-max-graphs,kernels} --out "$out/ray1_heavy.md" \
        --log-dir "$out/actor-logs-heavy" > "$out/ray1_heavy.log" 2>&1
      sed -n '1,75p' "$out/ray1_heavy.md" | grep -v "^| Torch\|^| Kernel" ;;
    host-cpus)   # eager's host-bound call pinned to each CPU, then 60 unpinned bursts read as wall time, the thread's
      # CPU time, context switches and the SM clock: what moves in a slow stretch (about 2 minutes)
      timeout 200 python benchmarks/host_cpus.py --passes 2 --bursts 3 --free 60 --out "$out/host_cpus.md" \
        > "$out/host_cpus.log" 2>&1
      echo "host_cpus.py: exit $?"; grep -A4 "^| unpinned" "$out/host_cpus.md"; tail -3 "$out/host_cpus.log" ;;
    host-modes)   # eager's host-bound call in three fresh processes, through what a tuning adds to a process (2 minutes)
      for i in 1 2 3; do
        timeout 100 python benchmarks/host_modes.py --bursts 15 --out "$out/host_modes_$i.md" > "$out/host_modes_$i.log" 2>&1
        echo "host_modes.py run $i: exit $?"; tail -8 "$out/host_modes_$i.log"
      done ;;
    driver-plan)   # eager in a Ray driver before and after a tuning with a kernel plan, the plan's profile made in a
      # child process and in the driver, alternating (about 3 minutes)
      timeout ${DRIVER_PLAN_S:-420} python benchmarks/driver_after_plan.py --repeats ${REPEATS:-2} \
        --out "$out/driver_after_plan.md" > "$out/driver_after_plan.log" 2>&1
      echo "driver_after_plan.py: exit $?"; grep "^|" "$out/driver_after_plan.md"; tail -3 "$out/driver_after_plan.log" ;;
    profile-tests)   # the GPU tests of the plan's profile in a child process, and a Ray driver's exit after it
      timeout 240 python -m pytest tests/test_profile_process.py \
        "tests/test_forge_ray.py::test_a_ray_driver_that_profiled_on_its_gpu_exits_when_done" -m gpu -v \
        -p no:cacheprovider -o log_level=WARNING > "$out/profile_tests.log" 2>&1
      grep -E "PASSED|FAILED|XFAIL|SKIPPED|ERROR|passed|failed|Error" "$out/profile_tests.log" | tail -20 ;;
    ao-encoder)   # TorchAO fp8wo on the fp16 encoder, compiled and with compile=False (under a minute)
      timeout 150 python benchmarks/torchao_encoder.py --quantization fp8wo > "$out/torchao_encoder.txt" 2>&1
      echo "torchao_encoder.py: exit $?"; grep "^compile=\|^TorchAO" "$out/torchao_encoder.txt" ;;
    ray-start)   # the parts of a local Ray's start and stop, lean and in Ray's own order (about 2 minutes)
      timeout 300 python benchmarks/ray_start.py --repeats 2 --out "$out/ray_start.md" > "$out/ray_start.log" 2>&1
      echo "ray_start.py: exit $?"; tail -16 "$out/ray_start.log" ;;
    actor-start)   # a tuner actor's start by warm-up mode: fresh processes, the encoder's first two builds (about 3 minutes)
      timeout 300 python benchmarks/actor_start.py --modes compile,imports,off --repeats 2 --run-timeout 80 \
        --out "$out/actor_start.md" > "$out/actor_start.log" 2>&1
      echo "actor_start.py: exit $?"; tail -12 "$out/actor_start.log" ;;
    decide)   # three tunings of the ViT with batch-size dispatch on, each against a user's loop (about 4 minutes)
      timeout 330 python benchmarks/decisions.py --out "$out/dec" --models vit --runs 3 --dispatch \
        --backends ${BACKENDS:-jit,jit-ro,jit-max} --budget-s 230 > "$out/decisions.log" 2>&1
      echo "decisions.py: exit $?"; sed -n '1,14p' "$out/dec/decisions.md"; grep -E "^\| (8|32) |^Decision|^Dispatch" "$out/dec/decisions.md" ;;
    restored)   # a JIT build kept from its build against fresh restores from its recipe, in paired rounds with
      # eager: before a restore has seen every size, after, and as the tuner's rounds time it (about 2 minutes)
      timeout 240 python benchmarks/restored_jit.py --out "$out/restored" --rounds 20 > "$out/restored.log" 2>&1
      echo "restored_jit.py: exit $?"; cat "$out/restored/restored_jit.md"; tail -3 "$out/restored.log" ;;
    agree)   # the tuner's rounds against a user's loop on one tuning, with the burst-length sweep (about 3 minutes)
      timeout 400 python benchmarks/harness_agreement.py --out "$out/agree" --backends jit,jit-ro --sweep \
        > "$out/agree.log" 2>&1
      echo "harness_agreement.py: exit $?"; tail -40 "$out/agree/agreement.md" ;;
    ray1)   # one GPU: Ray with one actor against inline, with where Ray's time goes (under 6 minutes)
      timeout 380 python benchmarks/ray_vs_inline.py --model encoder --runs ray:1,inline --run-timeout 180 \
        --backends jit,jit-ro,ao-int8wo,ao-fp8wo --log-dir "$out/actor-logs-ray1" --out "$out/ray1_vs_inline.md" \
        > "$out/ray1_vs_inline.log" 2>&1
      sed -n '1,60p' "$out/ray1_vs_inline.md" ;;
    memory)   # peak memory with 2 and 8 candidates that each hold 4 GiB once built, inline and on Ray
      timeout 240 python benchmarks/memory.py --device cuda --candidates 2,8 --buffer-mb 4096 --ray \
        --out "$out/memory.md" > "$out/memory.log" 2>&1
      cat "$out/memory.md" ;;
    bert)
      TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 timeout 570 python benchmarks/ray_vs_inline.py --model bert \
        --backends $balanced --runs "ray:$gpus,inline" --run-timeout 340 --log-dir "$out/actor-logs" --out "$out/bert.md" > "$out/bert.log" 2>&1
      sed -n '1,30p' "$out/bert.md" ;;
    bert-ray)
      timeout 450 python benchmarks/ray_vs_inline.py --model bert --backends $bert --runs "ray:$gpus" \
        --run-timeout 430 --log-dir "$out/actor-logs" --out "$out/bert_ray.md" > "$out/bert_ray.log" 2>&1
      sed -n '1,30p' "$out/bert_ray.md" ;;
    bert-inline)
      timeout 590 python benchmarks/ray_vs_inline.py --model bert --backends $bert --runs inline \
        --run-timeout 575 --out "$out/bert_inline.md" > "$out/bert_inline.log" 2>&1
      sed -n '1,30p' "$out/bert_inline.md" ;;
    pipeline)
      timeout ${PIPELINE_S:-560} python benchmarks/ray_vs_inline.py --model pipeline --backends ${PIPELINE_BACKENDS:-jit,jit-max,jit-ro,ao-int8wo,ao-fp8wo} \
        --runs "ray:$gpus,inline" --run-timeout $(( ${PIPELINE_S:-560} / 2 - 5 )) --out "$out/pipeline.md" > "$out/pipeline.log" 2>&1
      sed -n '1,40p' "$out/pipeline.md" ;;
    overhead)
      timeout 120 python benchmarks/forge_overhead.py > "$out/forge_overhead.log" 2>&1
      grep -v "^$" "$out/forge_overhead.log" | head -40 ;;
    kernel-time)
      timeout 150 python benchmarks/kernel_time.py --shapes "2,8,256,64;8,16,1024,64;4,32,4096,128,causal" \
        > "$out/kernel_time.log" 2>&1
      grep -v "^$" "$out/kernel_time.log" | grep -v Warning | tail -40 ;;
    compile-frames)
      timeout 150 python benchmarks/compile_frames.py > "$out/compile_frames.md" 2>&1
      grep "^|" "$out/compile_frames.md" ;;
    forge-two)
      timeout 150 python benchmarks/kernel_forge.py --shapes 2,8,256,64 4,32,4096,128,causal \
        --out "$out/kernel_forge_two.md" > "$out/kernel_forge_two.log" 2>&1
      cat "$out/kernel_forge_two.md" ;;
    forge)
      timeout 300 python benchmarks/kernel_forge.py --out "$out/kernel_forge.md" > "$out/kernel_forge.log" 2>&1
      cat "$out/kernel_forge.md"; tail -5 "$out/kernel_forge.log" ;;
  esac
done
