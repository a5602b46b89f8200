#!/bin/bash
# The project's GPU checks in one go, for a machine with a CUDA GPU (run from the repository root):
#   1. install the carried wheels (.whl/: xgrammar and what it imports, lark, pydantic, gguf, quicktok-v1)
#      into /tmp/site when xgrammar is missing;
#   2. the CUDA tests: tests/test_expand.py and tests/test_kernels.py (Triton == CPU bit for bit);
#   3. benchmarks/gil_probe.py (does XGrammar's fill release the GIL?);
#   4. benchmarks/gpu_e2e.py within a time budget.
# It first compiles the native engine's C kernel for the machine's Python when gcc is there.
# Results (JSON and logs) go to $OUT (default ./artifacts/device). Environment knobs:
#   E2E_ARGS   extra arguments for gpu_e2e.py (default: the target run, budget 330 s)
#   TINY=1     everything small, on CPU (how this script is tried on a machine without a GPU)
#   TESTS      test files to run (default: tests/test_expand.py tests/test_kernels.py); SKIP_GIL=1 skips the probe
set -u -o pipefail
OUT="${OUT:-artifacts/device}"
mkdir -p "$OUT"
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
PY="${PYTHON:-python3}"
log() { echo "== $(date +%H:%M:%S) $*" | tee -a "$OUT/device.log"; }

if ! "$PY" -c "import xgrammar" 2>/dev/null; then
  log "installing carried wheels"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >>"$OUT/device.log" 2>&1 || { log "wheel install failed"; exit 3; }
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# The optional compiled core (csrc/) for this machine's Python (the tree travels without the
# git-ignored .so; without it every caller runs its Python reference).
kernel_so="cfgzip_lab/_native$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')"
if [ ! -f "$kernel_so" ] && command -v gcc >/dev/null; then
  gcc -O3 -fvisibility=hidden -shared -fPIC -I"$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')" \
    csrc/*.c -o "$kernel_so" >>"$OUT/device.log" 2>&1 || log "native kernel build failed: Python path"
fi
"$PY" -c 'import cfgzip_lab._binding as b; print("native kernel:", "compiled" if b.kernel else "python")' \
  2>&1 | tee -a "$OUT/device.log"
"$PY" - <<'PYEOF' 2>&1 | tee -a "$OUT/device.log"
import torch, xgrammar, transformers
print("torch", torch.__version__, "cuda", torch.cuda.is_available(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-", "transformers", transformers.__version__)
try:
    import triton; print("triton", triton.__version__)
except ImportError:
    print("triton missing")
PYEOF

log "tests"
timeout "${TEST_TIMEOUT:-150}" "$PY" -m pytest -q -p no:cacheprovider ${TESTS:-tests/test_expand.py tests/test_kernels.py} \
  -x --junitxml="$OUT/tests.xml" 2>&1 | tail -25 | tee -a "$OUT/device.log"
log "tests exit ${PIPESTATUS[0]}"

if [ "${SKIP_GIL:-0}" != 1 ]; then
  log "gil probe"
  timeout 90 "$PY" benchmarks/gil_probe.py --json "$OUT/gil_probe.json" 2>&1 | tee -a "$OUT/device.log"
fi

log "gpu_e2e"
if [ "${TINY:-0}" = 1 ]; then
  E2E_DEFAULT="--tiny --budget-s 200"
else
  E2E_DEFAULT="--budget-s 330"
fi
timeout "${E2E_TIMEOUT:-400}" "$PY" benchmarks/gpu_e2e.py ${E2E_ARGS:-$E2E_DEFAULT} --json "$OUT/gpu_e2e.json" \
  2>&1 | tee "$OUT/gpu_e2e.log" | tail -80
log "gpu_e2e exit ${PIPESTATUS[0]}"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw --format=csv >>"$OUT/device.log" 2>&1
log "done"
