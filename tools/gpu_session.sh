#!/usr/bin/env bash
# A session on a machine with an NVIDIA GPU: build rasfast against the python3 that holds a
# CUDA torch, then run the GPU tests, compute-sanitizer and benchmarks/gpu_*.py.
#
#   tools/gpu_session.sh build            # cmake + ninja, sm_<this GPU> only, .so files into rasfast/
#   tools/gpu_session.sh test             # every kernel test on the real device (cuda + triton)
#   tools/gpu_session.sh sanitize [TOOL]  # compute-sanitizer (memcheck|racecheck|synccheck|initcheck)
#                                         # over the CUDA kernel tests
#   tools/gpu_session.sh bench [NAME...]  # benchmarks/gpu_NAME.py (default: all), results/ updated
#   tools/gpu_session.sh all              # every stage above, each under its own time limit
#   tools/gpu_session.sh roofline         # the prepared roofline run (issue 38), < 8 minutes:
#                                         # build, benchmarks/gpu_roofline.py, the theme/beam/
#                                         # graph_conv/graph_train benchmarks, the kernel tests; one tarball.
#                                         # Without a GPU: gpu_roofline.py on the CUDA emulator.
#
# On a lent machine that goes back after a short idle time, run `all` in ONE call: a second
# call may find no machine (the first session with a GPU lost its sanitizer and benchmark
# stages that way).
#
# Logs and results go to $OUT (default build/gpu-out). No pip install: the extensions link
# no libtorch (CMakeLists.txt), so the build only needs pybind11, cmake and ninja there.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-build/gpu-out}
mkdir -p "$OUT"
PY=${PY:-python3}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
stage=${1:-test}; shift || true

# the editable install maps kernels/ to rasfast.kernels; without an install a link does it
[ -e rasfast/kernels ] || ln -s ../kernels rasfast/kernels

case "$stage" in
build)
  arch=$($PY -c "import torch; c=torch.cuda.get_device_capability(); print(f'{c[0]}{c[1]}')")
  cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DPython_EXECUTABLE="$(command -v $PY)" -Dpybind11_DIR="$($PY -m pybind11 --cmakedir)" \
    -DCMAKE_CUDA_ARCHITECTURES="${arch}-real" >"$OUT/cmake.log" 2>&1 \
    || { tail -40 "$OUT/cmake.log"; exit 1; }
  time cmake --build build/gpu -j "$(nproc)" >"$OUT/build.log" 2>&1 || { tail -60 "$OUT/build.log"; exit 1; }
  cp build/gpu/_C*.so build/gpu/_cuda*.so rasfast/
  # the C++ operator kernels (csrc/torch_ops/) load only with their torch-version stamp beside
  # them; without this copy every op ran its Python kernel on the GPU (sessions 4-5 never had it)
  cp build/gpu/_torch_ops.so build/gpu/_torch_ops.torch-version rasfast/ \
    || echo "WARNING: no _torch_ops built: the operators keep their Python kernels"
  mkdir -p "$OUT/so" && cp rasfast/_C*.so rasfast/_cuda*.so "$OUT/so/"
  $PY -c "import rasfast, json; print(json.dumps(rasfast.backends(), indent=1, default=str))"
  ;;
test)
  # the kernel families' tests; their GPU cases compare cuda and triton with the reference
  files=${TESTS:-tests/test_select.py tests/test_theme_ops.py tests/test_theme_triton.py tests/test_beam.py \
    tests/test_segment.py tests/test_graph_conv.py tests/test_check_finite.py tests/test_index.py \
    tests/test_dispatch.py tests/test_gpu_offsets.py tests/test_profile.py tests/test_native_cuda_ops.py \
    tests/test_torch_ops_cuda.py tests/test_graph_conv_backward.py tests/test_graph_replay.py}
  $PY -m pytest -q -p no:cacheprovider --timeout=900 -rfEs "$@" $files 2>&1 | tee "$OUT/test.log"
  ;;
sanitize)
  tool=${1:-memcheck}; shift || true
  # torch's caching allocator hides out-of-bounds accesses inside its blocks from memcheck
  # few hypothesis examples (conftest's "sanitize" profile): instrumented launches are slow
  files=${SANITIZE_FILES:-tests/test_select.py tests/test_theme_ops.py tests/test_beam.py \
    tests/test_segment.py tests/test_graph_conv.py tests/test_index.py}
  HYPOTHESIS_PROFILE=${HYPOTHESIS_PROFILE:-sanitize} PYTORCH_NO_CUDA_MEMORY_CACHING=1 \
    compute-sanitizer --tool "$tool" --error-exitcode 9 --print-limit 50 \
    $PY -m pytest -v -p no:cacheprovider -m cuda_kernels "$@" $files \
    2>&1 | tee "$OUT/sanitize_$tool.log"
  ;;
bench)
  names=${*:-select theme beam graph_conv graph_llm}
  for n in $names; do
    echo "== gpu_$n"
    $PY benchmarks/gpu_$n.py 2>&1 | tee "$OUT/bench_$n.log"
    # this benchmark's results, copied as soon as it ends: the sixth session's stage limit
    # cut the last benchmark and lost every earlier one's .md/.json with it. This stage's
    # files only: a blanket gpu_*.md copy once put the committed gpu_roofline.md over the
    # roofline file this run had just written in $OUT
    cp benchmarks/results/*"$n"*.md benchmarks/results/*"$n"*.json "$OUT"/ 2>/dev/null
  done
  ;;
all)
  # Benchmarks first, alone on the GPU (their timings see nothing else running); then the tests
  # (pytest-xdist where installed) and each compute-sanitizer tool side by side, since they
  # check correctness only. Everything under $OUT is packed into one gpu_results.tar.gz as
  # well: the device tool returns at most 8 files.
  me="$0"
  ls rasfast/_cuda.*.so >/dev/null 2>&1 || bash "$me" build >"$OUT/build_stage.log" 2>&1 \
    || { tail -40 "$OUT/build_stage.log"; exit 1; }
  timeout "${BENCH_S:-300}" bash "$me" bench ${BENCHES:-} >"$OUT/bench_stage.log" 2>&1
  echo "bench stage rc=$?"; grep -E "^(==|\|)" "$OUT/bench_stage.log" | tail -60
  xdist=""; $PY -c "import xdist" 2>/dev/null && xdist="-n ${TEST_PROCS:-6}"
  timeout "${TEST_S:-200}" bash "$me" test $xdist >"$OUT/test_stage.log" 2>&1 &
  for tool in ${SANITIZERS:-memcheck racecheck synccheck}; do
    timeout "${SANITIZE_S:-200}" bash "$me" sanitize "$tool" >/dev/null 2>&1 &
  done
  wait
  tail -25 "$OUT/test_stage.log"
  for f in "$OUT"/sanitize_*.log; do
    echo "== $f"; grep -cE " PASSED| FAILED| ERROR" "$f"; grep -E "ERROR SUMMARY|FAILED|Error|passed|failed" "$f" | tail -8
  done
  tar czf /tmp/gpu_results.tar.gz -C "$OUT" --exclude=so . && mv /tmp/gpu_results.tar.gz "$OUT/"
  # keep the tarball and the stage logs only (the tool returns at most 8 files)
  find "$OUT" -maxdepth 1 -type f ! -name gpu_results.tar.gz ! -name '*_stage.log' \
    ! -name 'sanitize_*.log' -delete
  rm -rf "$OUT/so"
  ;;
roofline)
  # Every minute on a lent GPU goes to measurement: one call builds, measures and packs.
  # Stage limits (seconds) keep the whole under 8 minutes; each stage's log is in the tarball.
  if ! $PY -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    echo "no CUDA device: the roofline script on the CUDA emulator (tiny sizes; counts and parity only)"
    RASFAST_CUDA_EMU=1 $PY benchmarks/gpu_roofline.py --emulate --out "$OUT/gpu_roofline"
    exit $?
  fi
  me="$0"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,temperature.gpu,utilization.gpu \
    --format=csv >"$OUT/nvidia_smi.csv" 2>&1
  bash "$me" build >"$OUT/build_stage.log" 2>&1 || { tail -40 "$OUT/build_stage.log"; exit 1; }
  export ROOF_S=${ROOF_S:-210}  # the script reads it too: its Nsight Compute steps end in time
  timeout "$ROOF_S" $PY benchmarks/gpu_roofline.py --out "$OUT/gpu_roofline" >"$OUT/roofline.log" 2>&1
  echo "roofline rc=$?"
  grep -E "^\| (select|theme|triple|segment|graph)|^\| [0-9]|parity|Ceilings|DRAM|CUDA graph" "$OUT/roofline.log" | tail -45
  if [ "${BENCHES-beam graph_conv theme graph_train}" != "" ]; then  # BENCHES= skips the stage
    timeout "${BENCH_S:-150}" bash "$me" bench ${BENCHES:-beam graph_conv theme graph_train} >"$OUT/bench_stage.log" 2>&1
    echo "bench stage rc=$?"; grep -E "^(==|\|)" "$OUT/bench_stage.log" | tail -30
  fi
  xdist=""; $PY -c "import xdist" 2>/dev/null && xdist="-n ${TEST_PROCS:-8}"
  timeout "${TEST_S:-180}" bash "$me" test $xdist >"$OUT/test_stage.log" 2>&1
  echo "test stage rc=$?"; tail -15 "$OUT/test_stage.log"
  tar czf /tmp/gpu_results.tar.gz -C "$OUT" --exclude=so . && mv /tmp/gpu_results.tar.gz "$OUT/"
  find "$OUT" -maxdepth 1 -type f ! -name gpu_results.tar.gz ! -name 'gpu_roofline.*' ! -name '*_stage.log' \
    ! -name roofline.log -delete
  rm -rf "$OUT/so"
  ;;
select-probe)
  # A short follow-up after a select kernel change: build, Nsight Compute's speed-of-light,
  # occupancy and warp-stall sections of the two row passes, then parity and timings.
  bash "$0" build >"$OUT/build_stage.log" 2>&1 || { tail -40 "$OUT/build_stage.log"; exit 1; }
  timeout 90 ncu --clock-control none -k regex:"filter_topk|radix_pass" --launch-count 2 \
    --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
    $PY benchmarks/gpu_roofline.py --ncu-probe >"$OUT/ncu_select.txt" 2>&1
  grep -E "filter_topk|radix_pass|Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Theoretical Occupancy|Registers|Block Limit|Stall|Warp Cycles|Issued" \
    "$OUT/ncu_select.txt" | head -60
  timeout 100 $PY benchmarks/gpu_roofline.py --select-only ${PROBE_ARGS:---quick} --out "$OUT/select_probe" 2>&1 | tail -32
  ;;
*) echo "unknown stage $stage" >&2; exit 2 ;;
esac
