#!/usr/bin/env bash
# The GPU check for a lent machine, about 8 minutes: the kernel tests on CUDA at larger shapes, Bard's
# end-to-end parity on CUDA in fp16 (both in tests/test_kernels.py), and bench/kernels.py (the kernels
# against a device copy and SDPA, end to end against HF continuous batching for Bard and a random-init
# Qwen2-shaped 0.5B body, and that body's decode step at batch 64 x 4k against the bandwidth roofline).
#
#   bash tools/gpu_check.sh [OUT_DIR]        (default: $OUT if set, else build/gpu_check)
#
# Writes OUT_DIR/gpu_check.log and OUT_DIR/gpu_check.json (the benchmark's figures plus the test
# outcome). Needs only what the GPU machine has (torch, triton, transformers, pytest, hypothesis):
# nothing is installed; minicb runs from this checkout. Exits 2, saying so, where torch sees no GPU.
set -uo pipefail
cd "$(dirname "$0")/.."
out_dir=${1:-${OUT:-build/gpu_check}}
mkdir -p "$out_dir"
log=$out_dir/gpu_check.log
python=${PYTHON:-python3}

if ! $python -c 'import torch' 2>/dev/null; then
    echo "gpu_check: $python cannot import torch; point PYTHON at the interpreter that has it." | tee "$log"
    exit 2
fi
if ! $python -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    echo "gpu_check: no CUDA GPU is visible to torch ($python); nothing was run. The CPU tests are 'make test'." | tee "$log"
    exit 2
fi

# minicb and minicb_kernels (kernels/minicb_kernels) import from this checkout without installing anything.
export PYTHONPATH=$PWD:$PWD/kernels PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 HF_HUB_OFFLINE=1

{
    echo "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"
    $python -c 'import torch, triton, transformers; print("torch", torch.__version__, "triton", triton.__version__, "transformers", transformers.__version__)'
    echo "== kernel tests and Bard parity on CUDA"
} 2>&1 | tee "$log"
timeout 300 $python -m pytest -q -p no:cacheprovider tests/test_kernels.py tests/test_attention.py 2>&1 | tee -a "$log"
tests_rc=${PIPESTATUS[0]}

echo "== bench/kernels.py" | tee -a "$log"
timeout 300 $python bench/kernels.py --out "$out_dir/bench_kernels.json" 2>&1 | tee -a "$log"
bench_rc=${PIPESTATUS[0]}

$python - "$out_dir" "$tests_rc" "$bench_rc" <<'PY' | tee -a "$log"
import json, pathlib, sys
out_dir, tests_rc, bench_rc = pathlib.Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
bench = out_dir / "bench_kernels.json"
report = {"tests_passed": tests_rc == 0, "tests_exit_code": tests_rc, "bench_exit_code": bench_rc,
          "bench": json.loads(bench.read_text()) if bench.exists() else None}
(out_dir / "gpu_check.json").write_text(json.dumps(report, indent=2) + "\n")
print(f"gpu_check: tests {'passed' if tests_rc == 0 else f'FAILED ({tests_rc})'}, "
      f"bench {'done' if bench_rc == 0 else f'FAILED ({bench_rc})'}; wrote {out_dir / 'gpu_check.json'}")
PY
[ "$tests_rc" -eq 0 ] && [ "$bench_rc" -eq 0 ]
