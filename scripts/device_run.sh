#!/usr/bin/env bash
# One full device run on the GPU machine (see docs/lab/device-runs.md): build the `cuda` preset with
# many jobs, run the GPU tests (op parity, the golden fixtures on the CUDA backend, the CLI
# on --device cuda) and the benchmarks, and write a report under $OUT (or build/device-out).
# Usage (through the device tool, carry [".debs"]): bash scripts/device_run.sh [STAGE ...]
#   stages: test (default), bench, lab, release, engram, spec, sweep, ab, engine, profile, kernels, trace, detail, check, probe,
#   baseline, all (all but baseline, kernels, trace, detail, probe and spec);
#   BENCH_ARGS are passed to bench/bench_device (also under sweep, once per setting of SWEEP),
#   TRACE_ARGS to it under the trace, LAB_ARGS to bench/bench_cuda_ops under lab (e.g. "--lab --family linear")
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-build/device-out}
mkdir -p "$OUT"
STAGES=${*:-test}
[ "$STAGES" = all ] && STAGES="test bench engine profile check"
R="$OUT/report.txt"
{
  echo "== machine"; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1; nproc; date -u
  echo "== stages: $STAGES"
} > "$R"
# The device image lacks the PCRE2 and utf8proc dev packages: the run carries Debian's .deb
# files in .debs/ (scripts/fetch_device_debs.sh) and unpacks them into a private prefix, never
# over the system's own libraries.
PREFIX=/tmp/debs
if [ -d .debs ]; then
  for f in .debs/*.deb; do dpkg -x "$f" "$PREFIX"; done
  export PKG_CONFIG_SYSROOT_DIR=$PREFIX PKG_CONFIG_PATH=$PREFIX/usr/lib/x86_64-linux-gnu/pkgconfig
  export LD_LIBRARY_PATH=$PREFIX/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
t0=$(date +%s)
cmake -S . -B build/cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DDEEPINFER_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
  >> "$OUT/build.log" 2>&1
cmake --build build/cuda -j "$(nproc)" --target deepinfer test_cuda_parity test_cuda_model test_model test_cli test_engine bench_cuda_ops bench_device \
  >> "$OUT/build.log" 2>&1
# The CUPTI timeline library (stage trace) when the toolkit has CUPTI; its absence fails only that stage.
cmake --build build/cuda -j "$(nproc)" --target di_kernel_trace >> "$OUT/build.log" 2>&1 || echo "no di_kernel_trace" >> "$R"
cmake --build build/cuda -j "$(nproc)" --target wgmma_probe l2_probe >> "$OUT/build.log" 2>&1 || echo "no probes" >> "$R"
echo "build exit $? ($(( $(date +%s) - t0 )) s)" >> "$R"
tail -30 "$OUT/build.log" | grep -E "error|FAILED" >> "$R"

for stage in $STAGES; do
  case $stage in
    test)
      echo "== op parity (CPU vs CUDA)" >> "$R"
      ./build/cuda/tests/test_cuda_parity 2>&1 | tail -40 >> "$R"
      echo "== golden fixtures on the CUDA backend" >> "$R"
      ./build/cuda/tests/test_model --gtest_filter='*cuda*' 2>&1 | grep -E "rel err|OK|FAILED|PASSED|Failure|Expected|Which|actual|batch of" | head -80 >> "$R"
      echo "== bf16 on the CUDA backend, device random weights" >> "$R"
      ./build/cuda/tests/test_cuda_model 2>&1 | grep -E "rel err|greedy|OK|FAILED|PASSED|Failure|Expected|Which|actual" | head -60 >> "$R"
      echo "== the engine on the CUDA backend" >> "$R"
      ./build/cuda/tests/test_engine --gtest_filter='*cuda*' 2>&1 | grep -E "OK|FAILED|PASSED|Failure|Expected|Which|actual" | head -20 >> "$R"
      echo "== CLI on --device cuda" >> "$R"
      for fx in swa ced full full-q; do
        d=tests/data/v41/$fx
        ./build/cuda/deepinfer logits --model "$d" --tokens "$d/golden/tokens.npy" --device cuda --out "$OUT/$fx.npy" \
          > "$OUT/$fx.txt" 2>&1
        echo "$fx exit $?: $(tail -1 "$OUT/$fx.txt")" >> "$R"
      done
      ;;
    bench)
      echo "== kernel lab" >> "$R"
      ./build/cuda/bench/bench_cuda_ops >> "$R" 2>&1
      echo "== model on the device: bench_device ${BENCH_ARGS:-}" >> "$R"
      # shellcheck disable=SC2086
      ./build/cuda/bench/bench_device ${BENCH_ARGS:-} >> "$R" 2>&1
      ;;
    lab)
      echo "== kernel lab ${LAB_ARGS:-}" >> "$R"
      # shellcheck disable=SC2086
      ./build/cuda/bench/bench_cuda_ops ${LAB_ARGS:-} >> "$R" 2>&1
      ;;
    release)
      # The release formats at full depth (bench/configs/v41-flash-l40-e128) and their products.
      echo "== kernel lab: the products" >> "$R"
      ./build/cuda/bench/bench_cuda_ops --lab --family linear >> "$R" 2>&1
      echo "== bench_device, release formats, 40 layers, 128 experts" >> "$R"
      ./build/cuda/bench/bench_device --config bench/configs/v41-flash-l40-e128 --batches 1,64,256 --prompts 8 --steps 8 >> "$R" 2>&1
      echo "== the same at batch 1, context 65536" >> "$R"
      ./build/cuda/bench/bench_device --config bench/configs/v41-flash-l40-e128 --batches 1 --context 65536 --prompts 0 --steps 8 \
        2>&1 | grep -E "^decode" >> "$R"
      echo "== bench_device, bf16, 16 layers, 64 experts (v41-flash-l16-e64), for comparison" >> "$R"
      ./build/cuda/bench/bench_device --config bench/configs/v41-flash-l16-e64 --batches 1,64,256 --prompts 8 --steps 8 \
        2>&1 | grep -E "^model|^decode|^prefill" >> "$R"
      echo "== the same at batch 1, context 65536" >> "$R"
      ./build/cuda/bench/bench_device --config bench/configs/v41-flash-l16-e64 --batches 1 --context 65536 --prompts 0 --steps 8 \
        2>&1 | grep -E "^decode" >> "$R"
      ;;
    engram)
      # Engram tables in host memory against device memory: bench_device on the release config
      # with its two Engram layers (bench/configs/v41-flash-l40-e128-engram, 5.1 GB of tables),
      # one placement after the other on the same machine; ENGRAM_ARGS are added to both.
      for place in host device; do
        echo "== bench_device, release formats, 40 layers, Engram tables in $place memory ${ENGRAM_ARGS:-}" >> "$R"
        # shellcheck disable=SC2086
        ./build/cuda/bench/bench_device --config bench/configs/v41-flash-l40-e128-engram --engram-tables $place \
          --batches 1,64,256 --prompts 4 --steps 8 ${ENGRAM_ARGS:-} >> "$R" 2>&1
        echo "bench_device exit $?" >> "$R"
      done
      ;;
    spec)
      # The verify curve of speculative decoding (docs/SPECULATIVE.md): bench_device --verify-curve
      # on the bf16 shape and on the release formats at full depth, batches 1, 8, 64 and 256, k = 0..5
      # drafts a sequence, the draft round, plain decoding with the draft stages off and on, and the
      # speed-up computed at the published acceptance lengths; SPEC_ARGS are added to both.
      for cfg in v41-flash-l16-e64 v41-flash-l40-e128; do
        echo "== verify curve: bench_device --config bench/configs/$cfg --verify-curve 1 ${SPEC_ARGS:-}" >> "$R"
        # shellcheck disable=SC2086
        ./build/cuda/bench/bench_device --config bench/configs/$cfg --verify-curve 1 --batches 1,8,64,256 \
          --draft-tokens 0,1,2,3,4,5 --prompts 0 --steps 8 ${SPEC_ARGS:-} >> "$R" 2>&1
        echo "bench_device exit $?" >> "$R"
      done
      ;;
    sweep)
      # bench_device once per setting of SWEEP: settings separated by ';', each a list of
      # VAR=value passed through env (e.g. SWEEP="X=0;X=4 Y=8"), the decode and prefill lines kept.
      IFS=';' read -ra settings <<< "${SWEEP:-}"
      for setting in "${settings[@]}"; do
        echo "== sweep: $setting (bench_device ${BENCH_ARGS:-})" >> "$R"
        # shellcheck disable=SC2086
        env $setting ./build/cuda/bench/bench_device ${BENCH_ARGS:-} 2>&1 | grep -E "^decode|^prefill" >> "$R"
      done
      ;;
    ab)
      # A/B on one machine (machines of one kind differ by a few percent): bench_device of this
      # tree and of the tree with the patch AB_PATCH (default ab.patch, e.g. `git diff BASE >
      # ab.patch`, left untracked so it travels) reverted, built in /tmp/ab-base, alternately
      # AB_ROUNDS (default 2) times.
      rm -rf /tmp/ab-base && mkdir -p /tmp/ab-base
      tar --exclude=./build -cf - . | tar -xf - -C /tmp/ab-base
      patch=$(realpath "${AB_PATCH:-ab.patch}")
      (cd /tmp/ab-base && patch -R -p1 -s < "$patch" &&
        cmake -S . -B build/cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DDEEPINFER_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a &&
        cmake --build build/cuda -j "$(nproc)" --target bench_device) >> "$OUT/build.log" 2>&1
      base_rc=$?
      echo "ab base build exit $base_rc" >> "$R"
      sides="this base"
      [ $base_rc -eq 0 ] || sides=this
      for _ in $(seq "${AB_ROUNDS:-2}"); do
        for side in $sides; do
          dir=.
          [ $side = base ] && dir=/tmp/ab-base
          echo "== ab: $side (bench_device ${BENCH_ARGS:-})" >> "$R"
          # shellcheck disable=SC2086
          $dir/build/cuda/bench/bench_device ${BENCH_ARGS:-} 2>&1 | grep -E "^decode|^prefill" >> "$R"
        done
      done
      ;;
    engine)
      # End to end through the CLI: run-batch of 128 token-id prompts x 1024, 128 tokens each,
      # random bf16 weights of the bench shape: greedy, then sampled (temperature 0.8, top-p
      # 0.95, every fourth request with 5 logprobs; drawn on the GPU).
      for mode in greedy sampled; do
        echo "== run-batch on --device cuda (v41-flash-l16-e64, random bf16 weights), $mode" >> "$R"
        MODE=$mode python3 -c '
import json, os, random
random.seed(0)
sampled = os.environ["MODE"] == "sampled"
for i in range(128):
    ids = [random.randrange(3, 120000) for _ in range(1024)]
    body = {"prompt_token_ids": ids, "max_tokens": 128, "temperature": 0, "ignore_eos": True}
    if sampled:
        body.update({"temperature": 0.8, "top_p": 0.95, "seed": i})
        if i % 4 == 0:
            body["logprobs"] = 5
    print(json.dumps({"custom_id": f"r{i}", "body": body}))
' > "$OUT/engine_in.jsonl"
        ./build/cuda/deepinfer run-batch --model bench/configs/v41-flash-l16-e64 --load-format random --device cuda \
          --dtype bfloat16 --max-num-seqs 128 --max-num-batched-tokens 8192 --input "$OUT/engine_in.jsonl" \
          --output "$OUT/engine_out.jsonl" --metrics "$OUT/engine_metrics.json" >> "$R" 2>&1
        echo "run-batch exit $?" >> "$R"
        cat "$OUT/engine_metrics.json" >> "$R" 2>/dev/null
        echo >> "$R"
        rm -f "$OUT/engine_in.jsonl" "$OUT/engine_out.jsonl"
      done
      ;;
    profile)
      echo "== per-op profile, decode at batch 1 (bench_device --device cuda-profile ${PROFILE_ARGS:-})" >> "$R"
      # shellcheck disable=SC2086
      ./build/cuda/bench/bench_device --device cuda-profile --batches 1 --prompts 0 --steps 10 ${PROFILE_ARGS:-} >> "$R" 2>&1
      echo "== per-op profile, prefill 1 x 4096 replay + exact" >> "$R"
      ./build/cuda/bench/bench_device --device cuda-profile --batches "" --prompts 1 --prompt-len 4096 >> "$R" 2>&1
      ;;
    detail)
      # ncu's full section set for the launches DETAIL_ARGS picks (e.g. "-k regex:attention_mma_k
      # --launch-skip 2 -c 1 ./build/cuda/tests/test_cuda_parity --gtest_filter=CudaPrefill.*Tensor*").
      echo "== ncu detail: ${DETAIL_ARGS:-}" >> "$R"
      # shellcheck disable=SC2086
      ncu --set full ${DETAIL_ARGS:-} > "$OUT/ncu_detail.txt" 2>&1
      echo "ncu exit $?" >> "$R"
      ;;
    kernels)
      # GPU time of every kernel of one batch-1 decode step at 4096 context (ncu, one metric
      # pass at the running clocks with warm caches, as in a real step; graphs off so each
      # launch is seen), summarised by scripts/kernel_times.py.
      echo "== kernels of a batch-1 decode step at 4096 context (ncu ${KERNEL_ARGS:-})" >> "$R"
      # shellcheck disable=SC2086
      ncu --csv --clock-control none --cache-control none --metrics gpu__time_duration.sum,launch__grid_size ./build/cuda/bench/bench_device --batches 1 --prompts 0 \
        --steps 2 --graphs 0 ${KERNEL_ARGS:-} > "$OUT/ncu.csv" 2> "$OUT/ncu.err"
      echo "ncu exit $?" >> "$R"
      python3 scripts/kernel_times.py "$OUT/ncu.csv" "$OUT/step_kernels.txt" >> "$R" 2>&1
      gzip -f "$OUT/ncu.csv"
      ;;
    trace)
      # The GPU's own timeline of decode steps (CUPTI timestamps through an LD_PRELOADed
      # library: graphs and programmatic launches as they ran, unlike ncu's one kernel at a
      # time), summarised by scripts/trace_summary.py: wall, busy and idle time of the last
      # step, exclusive time per kernel, the largest gaps.
      echo "== trace of decode steps (bench_device --prompts 0 --steps 4 ${TRACE_ARGS:---batches 1})" >> "$R"
      # shellcheck disable=SC2086
      DI_TRACE_OUT="$OUT/trace.csv" LD_PRELOAD=./build/cuda/libdi_kernel_trace.so ./build/cuda/bench/bench_device --prompts 0 \
        --steps 4 ${TRACE_ARGS:---batches 1} > "$OUT/trace.log" 2>&1
      echo "trace exit $?" >> "$R"
      grep -E "^decode" "$OUT/trace.log" >> "$R"
      python3 scripts/trace_summary.py "$OUT/trace.csv" "$OUT/step_trace.txt" >> "$R" 2>&1
      gzip -f "$OUT/trace.csv"
      ;;
    probe)
      # Whether wgmma (m64n8k16) gives the bits of the mma.sync chain for the same k order.
      echo "== wgmma probe" >> "$R"
      ./build/cuda/wgmma_probe >> "$R" 2>&1
      echo "probe exit $?" >> "$R"
      # What an L2 prefetch does for a following read (docs/lab/device-runs.md).
      echo "== L2 prefetch probe" >> "$R"
      ./build/cuda/l2_probe >> "$R" 2>&1
      echo "l2 probe exit $?" >> "$R"
      ;;
    baseline)
      # The transformers reference on the same shape (needs carry [".baseline"]: the deepseek_v41
      # model files and a transformers >= 5.24 wheel; see docs/lab/device-runs.md).
      echo "== transformers baseline (scripts/baseline_transformers.py)" >> "$R"
      if [ -d .baseline/deepseek_v41 ]; then
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/tfpkg \
          .baseline/transformers-*.whl >> "$OUT/baseline.log" 2>&1
        cp -r .baseline/deepseek_v41 /tmp/tfpkg/transformers/models/
        PYTHONPATH=/tmp/tfpkg PYTHONUNBUFFERED=1 python3 scripts/baseline_transformers.py \
          --config bench/configs/v41-flash-l16-e64/config.json --prefill-reps 4 --decode-steps 10 >> "$R" 2>&1
      else
        echo "no .baseline/ carried: skipped" >> "$R"
      fi
      ;;
    check)
      echo "== cross-check of the discrete ops (CUDA vs the CPU on the same inputs), float32 and bf16" >> "$R"
      for fx in ced full-q full-q-seed25; do
        for dt in float32 bfloat16; do
          d=tests/data/v41/$fx
          echo "$fx $dt: $(./build/cuda/deepinfer logits --model "$d" --tokens "$d/golden/tokens.npy" --device cuda-check \
            --dtype $dt 2>&1 | grep -E 'cross-check' | tr '\n' ' ')" >> "$R"
        done
      done
      ;;
  esac
done
echo "== total $(( $(date +%s) - t0 )) s" >> "$R"
cat "$R"
