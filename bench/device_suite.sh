#!/usr/bin/env bash
# Runs on the GPU machine (device tool), from the repository root. What it writes under $OUT comes back.
#   bash bench/device_suite.sh redteam      # red team, both layers, plus the naive harness on the hacks
#   bash bench/device_suite.sh throughput   # quick throughput mix, both harnesses
#   bash bench/device_suite.sh smoke        # a few cases of each, to check the machinery
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-bench/results}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name(0))" | tee -a "$OUT/gpu.txt"
case "${1:-smoke}" in
  redteam)
    timeout 560 python3 bench/gpu_redteam.py --naive --out "$OUT/redteam_gpu.json" 2>&1 | tee "$OUT/redteam.log" ;;
  throughput)
    timeout 560 python3 bench/eval_throughput.py --quick --timeout 45 --out "$OUT/throughput_quick_gpu.json" 2>&1 | tee "$OUT/throughput.log" ;;
  smoke)
    timeout 200 python3 bench/gpu_redteam.py --naive --skip-runtime-layer --only torch_op_instead_of_kernel \
      illegal_memory_access side_stream_escape memoise_data_ptr --out "$OUT/redteam_smoke.json" 2>&1 | tee "$OUT/smoke.log"
    timeout 200 python3 bench/eval_throughput.py --quick --limit 4 --timeout 45 --out "$OUT/throughput_smoke.json" 2>&1 | tee -a "$OUT/smoke.log" ;;
esac
