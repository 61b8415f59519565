#!/usr/bin/env bash
# One check of scalelab on a machine with a GPU, every figure written under $OUT.
#
#   benchmarks/gpu_check.sh                 # on the GPU machine (torch preinstalled)
#   benchmarks/gpu_check.sh --device cpu    # the same steps on the CPU, CUDA-only ones skipped
#   benchmarks/gpu_check.sh --device cpu --quick   # small models and sizes (minutes on a laptop)
#
# Steps, in this order, each with a time cap inside one overall budget (GPU_CHECK_BUDGET_S,
# default 560 s, so the whole check ends within 10 minutes):
#   1. pytest -m gpu            (the gpu-marked tests; pytest-rerunfailures not needed)
#   2. scalelab run, 1 worker + 1 parameter server (worker on the GPU, server on the CPU)
#   3. scalelab run, DDP (NCCL on the GPU)
#   4. device bandwidth: host<->device copies, Gloo staged through pinned memory, NCCL
#   4b. runner overhead: a bare training loop against scalelab run W=1 (all-reduce and PS),
#      resnet50 at batches 32 and 128, fp32 defaults and channels_last+bf16_autocast
#   4c. compute model: bare steps of 4 torchvision models at batches 32 and 128, fp32 and
#      bf16, against the plan's prediction, and at 128 each operation class's kernel time
#      against the roofline's (benchmarks/gpu_compute_check.py)
#   5. scalelab profile resnet50 --device cuda --batch-sizes auto --algorithms auto
#   6. scalelab plan --profile (the GPU profile), with its figure when matplotlib is there
# It needs torch, torchvision (the models), rich (the command line) and, for parts, pytest
# and matplotlib; what is missing is skipped with a message. scalelab need not be
# installed: the script runs `python -m scalelab` from src/. Environment: OUT (default
# ./gpu-check-out), PYTHON (default python3, or .venv/bin/python when there is one).
# Exit code: 0 when no step failed (skips are not failures), 1 otherwise, 2 for bad usage.
set -u

DEVICE=cuda
QUICK=${GPU_CHECK_QUICK:-0}
while [ $# -gt 0 ]; do
  case "$1" in
    --device) DEVICE=${2:-}; shift 2 ;;
    --device=*) DEVICE=${1#--device=}; shift ;;
    --quick) QUICK=1; shift ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument $1 (--device cpu|cuda, --quick)" >&2; exit 2 ;;
  esac
done
case "$DEVICE" in cpu|cuda) ;; *) echo "gpu_check.sh: --device must be cpu or cuda" >&2; exit 2 ;; esac

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 2
if [ -z "${PYTHON:-}" ]; then
  if [ -x "$ROOT/.venv/bin/python" ]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi
OUT=${OUT:-./gpu-check-out}
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)
export PYTHONPATH="$ROOT/src:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export MPLBACKEND=Agg
BUDGET_S=${GPU_CHECK_BUDGET_S:-560}
START=$(date +%s)
SUMMARY="$OUT/summary.tsv"
printf 'step\tstatus\tseconds\tnote\n' > "$SUMMARY"
FAILED=0

has() { "$PYTHON" -c "import $1" >/dev/null 2>&1; }
left() { echo $(( BUDGET_S - ($(date +%s) - START) )); }
record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >> "$SUMMARY"; echo "== $1: $2 ${4:+($4)}"; }
skip() { record "$1" skipped 0 "$2"; }

# step NAME CAP_S COMMAND...: run with the smaller of CAP_S and the budget left (keeping
# RESERVE_S for the steps after it); log to $OUT/NAME.log
step() {
  local name=$1 cap=$2; shift 2
  local limit; limit=$(( $(left) - ${RESERVE_S:-0} ))
  [ "$limit" -gt "$cap" ] && limit=$cap
  if [ "$limit" -lt 10 ]; then skip "$name" "no time left in the ${BUDGET_S} s budget"; return 1; fi
  echo "== $name (at most ${limit} s): $*"
  local t0 rc; t0=$(date +%s)
  timeout --signal=TERM --kill-after=10 "$limit" "$@" > "$OUT/$name.log" 2>&1
  rc=$?
  local dt=$(( $(date +%s) - t0 ))
  tail -n 25 "$OUT/$name.log"
  if [ $rc -eq 0 ]; then record "$name" ok "$dt" ""; return 0; fi
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then record "$name" timeout "$dt" "stopped after ${limit} s"
  else record "$name" failed "$dt" "exit $rc, see $name.log"; fi
  FAILED=1
  return 1
}

if ! has torch; then echo "gpu_check.sh: $PYTHON cannot import torch" >&2; exit 2; fi
if [ "$DEVICE" = cuda ] && ! "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "gpu_check.sh: --device cuda but torch sees no GPU (use --device cpu)" >&2; exit 2
fi
HAVE_CLI=1; has rich || HAVE_CLI=0
HAVE_TV=1; has torchvision || HAVE_TV=0

# the workload of the runs and the profile: resnet50 as asked, smaller with --quick
if [ "$QUICK" = 1 ]; then
  MODEL=resnet18; SHAPE=(--input-shape 3,32,32 --num-classes 10)
  RUN=(--batch-size 4 --steps 4 --warmup-steps 1)
  PROFILE=(--batch-sizes 2,4 --algorithms none --steps 2 --warmup 1)
  BW=(--max-bytes 1048576 --budget-bytes 2e7)
  OVERHEAD=("4:default"); OVERHEAD_SHAPE=("${SHAPE[@]}"); OVERHEAD_STEPS=(--steps 4 --warmup 1)
else
  MODEL=resnet50; SHAPE=()
  RUN=(--batch-size 32 --steps 20)
  PROFILE=(--batch-sizes auto --algorithms auto)
  BW=(--budget-bytes 1e9)
  OVERHEAD=("32:default" "128:default" "32:channels_last+bf16_autocast"
            "128:channels_last+bf16_autocast")
  OVERHEAD_SHAPE=(--input-shape 3,224,224 --num-classes 1000)
  OVERHEAD_STEPS=(--steps 15 --warmup 5)
fi
[ "$HAVE_TV" = 1 ] || { MODEL=tests.toy_runner:convnet; SHAPE=(--input-shape 1,6,6 --num-classes 3)
  OVERHEAD_SHAPE=("${SHAPE[@]}"); }

{ echo "device $DEVICE quick $QUICK python $PYTHON"; date -u
  "$PYTHON" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'gpus', torch.cuda.device_count()); [print(i, torch.cuda.get_device_name(i)) for i in range(torch.cuda.device_count())]"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
} > "$OUT/environment.txt" 2>&1
cat "$OUT/environment.txt"
[ "$HAVE_TV" = 1 ] || echo "== torchvision is missing: runs use tests.toy_runner:convnet, the profile is skipped"

# 1. gpu-marked tests
if ! has pytest; then skip gpu-tests "pytest is not installed"
else
  RESERVE_S=240 step gpu-tests 150 "$PYTHON" -m pytest -m gpu -o addopts="" -p no:cacheprovider \
    -q -rs tests --junitxml="$OUT/gpu-tests.xml"
fi

# 2-3. the runner on the device
if [ "$HAVE_CLI" = 0 ]; then skip run-ps "rich is not installed (the command line needs it)"
  skip run-ddp "rich is not installed"
else
  RESERVE_S=200 step run-ps 90 "$PYTHON" -m scalelab run "$MODEL" "${SHAPE[@]}" --workers 1 --ps 1 \
    --device "$DEVICE" "${RUN[@]}" --timeout 120 --quiet --out "$OUT/run-ps.json"
  RESERVE_S=170 step run-ddp 90 "$PYTHON" -m scalelab run "$MODEL" "${SHAPE[@]}" --workers 1 \
    --architecture allreduce --device "$DEVICE" "${RUN[@]}" --timeout 120 --quiet \
    --out "$OUT/run-ddp.json"
fi

# 4. bandwidth on the device
RESERVE_S=120 step device-bandwidth 75 "$PYTHON" benchmarks/device_bandwidth.py --device "$DEVICE" \
  "${BW[@]}" --out "$OUT/device_bandwidth.json"

# 4b. the runner against a bare loop (one repeat each: the device is not shared)
for cfg in "${OVERHEAD[@]}"; do
  b=${cfg%%:*}; alg=${cfg#*:}
  RESERVE_S=110 step "overhead-b$b-${alg%%+*}" 75 "$PYTHON" benchmarks/runner_overhead.py \
    --device "$DEVICE" --model "$MODEL" "${OVERHEAD_SHAPE[@]}" --batch-size "$b" --algorithm "$alg" \
    --repeats 1 "${OVERHEAD_STEPS[@]}" --out "$OUT/overhead-b$b-${alg%%+*}.json"
done

# 4c. the compute model: bare steps of torchvision models against the plan's prediction
if [ "$DEVICE" = cuda ] && [ "$HAVE_TV" = 1 ]; then
  RESERVE_S=100 step compute-check 90 "$PYTHON" benchmarks/gpu_compute_check.py \
    --models resnet50,densenet121,mobilenet_v2,vit_b_16 --batches 32,128 --class-batches 128 \
    --out "$OUT/gpu_compute_check.json"
else skip compute-check "needs CUDA and torchvision"; fi

# 5-6. profile on the device, then a plan from it
if [ "$HAVE_CLI" = 0 ] || [ "$HAVE_TV" = 0 ]; then
  skip profile "needs rich and torchvision"; skip plan "needs a profile"
else
  if RESERVE_S=25 step profile 400 "$PYTHON" -m scalelab profile "$MODEL" "${SHAPE[@]}" \
      --device "$DEVICE" "${PROFILE[@]}" --quiet --out "$OUT/profile.json"; then
    PLOT=(); if has matplotlib; then PLOT=(--plot "$OUT/plan.png"); else echo "== matplotlib is missing: plan without its figure"; fi
    step plan 60 "$PYTHON" -m scalelab plan --profile "$OUT/profile.json" --network 100GbE \
      --out "$OUT/plan.json" "${PLOT[@]}"
  else
    skip plan "the profile did not finish"
  fi
fi

# the figures, in one place
"$PYTHON" - "$OUT" > "$OUT/figures.txt" 2>&1 <<'EOF'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
def load(name):
    try:
        return json.loads((out / name).read_text())
    except (OSError, ValueError):
        return None
for name in ("run-ps.json", "run-ddp.json"):
    r = load(name)
    if r:
        s = r["steps"]
        med = {k: round(v["median"] * 1e3, 2) for k, v in s.items() if v}
        print(f"{name}: device {r['config'].get('device')} samples/s {r['samples_per_s']:.1f} "
              f"step medians (ms) {med} bytes/step {r['bytes_per_step']} "
              f"checksum {r['final_param_checksum']:.10g}")
p = load("profile.json")
if p:
    env, alg = p.get("environment", {}), p.get("algorithms") or {}
    best = max(p.get("batches", []), key=lambda b: b.get("samples_per_s", 0), default={})
    print(f"profile.json: {env.get('device_name') or env.get('device')} max_batch_size "
          f"{p.get('max_batch_size')} recommended {p.get('recommended_batch_size')} chosen "
          f"{alg.get('chosen')} best {best.get('samples_per_s', 0):.1f} samples/s at batch "
          f"{best.get('batch_size')}")
b = load("device_bandwidth.json")
if b:
    for group in ("copies", "gloo", "nccl"):
        for row in b.get(group) or []:
            print(f"{group} {row['bytes']} B: " + ", ".join(
                f"{k.removesuffix('_Bps')} {v / 1e9:.3f} GB/s" for k, v in row.items()
                if k.endswith("_Bps")))
    for what, why in b.get("skipped", {}).items():
        print(f"{what}: skipped ({why})")
import glob
for f in sorted(glob.glob(str(out / "overhead-*.json"))):
    o = json.loads(Path(f).read_text())
    c, sm = o["config"], o["summary"]
    print(f"{Path(f).name}: batch {c['batch_size']} {c['algorithm']}: bare "
          f"{sm['bare_samples_per_s']:.1f}/s, all-reduce {sm.get('allreduce_ratio', 0):.3f}, "
          f"ps {sm.get('ps_ratio', 0):.3f} of it (goals 0.95 and 0.85)")
r, b = load("run-ps.json"), load("device_bandwidth.json")
if r and b and b.get("gloo"):
    big = max(b["gloo"], key=lambda row: row["bytes"])
    bw = max(v for k, v in big.items() if k.endswith("_Bps"))
    ex = r["steps"].get("exchange_s") or {}
    bound = 2 * r["param_bytes"] / bw
    if ex.get("median"):
        print(f"PS W=1 P=1 push+pull {ex['median'] * 1e3:.1f} ms against 2 S_p / B_gloo = "
              f"{bound * 1e3:.1f} ms (B_gloo {bw / 1e9:.2f} GB/s, {big['bytes']} B messages): "
              f"{ex['median'] / bound:.2f}x (goal <= 1.3)")
pl = load("plan.json")
if pl:
    print(f"plan.json: recommendation {pl.get('recommendation')}")
EOF
cat "$OUT/figures.txt"
echo
column -t -s $'\t' "$SUMMARY" 2>/dev/null || cat "$SUMMARY"
echo "total $(( $(date +%s) - START )) s; everything is under $OUT"
exit $FAILED
