#!/bin/bash
# The long-range cells on one four-GPU machine for a fixed stretch of time, resumable: for time-limited allocations
# (a batch job, a lent machine). Run from the repository root:
#
#   benchmarks/campaign/longrange.sh MINUTES OUTDIR [EXTRA_RUNS] [--tests]
#
#   GPU 0: S4D Table 5, S4-LegS (suite data) / Pathfinder-32, 200 epochs (also S4 Table 4's S4 row); once it has
#          finished, S4D-Inv and then S4D-LegS, each at the spec's setting (one at a time: a call packs one of them)
#   GPU 1, 3: EXTRA_RUNS (S4D-Lin at the spec's setting stayed at chance and is not trained here:
#          benchmarks/campaign/s4d_lin.txt trains the runs of that cell that learn or test why)
#   GPU 2: S4D Table 6, S4D (suite data) / Path-X, 50 epochs (its 200,000 images take minutes to make on a fresh
#          machine: --tests runs the GPU tests there meanwhile, in three streams: logs gpu_tests_test_fftconv.log,
#          gpu_tests_test_layers.log and gpu_tests_test_step_graph.log, whose last lines the call prints); the
#          tests at the default CPU priority, four threads each
#   EXTRA_RUNS: a file of further runs, one per line "GPU|SPEC|CELLS|RUN OPTIONS[|pack]" (e.g.
#          "1|s4d-table-5|S4D-Lin (suite data)/Pathfinder|--set tasks.Pathfinder.loader_args.normalize=false|pack"),
#          each in its own --set folder, writing its results file when it finishes its schedule unless its options
#          say --train-only; several may share a GPU; '#' starts a comment;
#          "pack" brings the run's checkpoint back with the main cells' (the others' stay on the machine, their
#          metrics come back)
# A run whose checkpoints have all finished their schedules is not started again (`runners progress --finished`:
# resumed, it would train nothing and write its results file once more); calls.txt says so.
#
# Checkpoints: $CAMPAIGN_RESUME_FROM (a folder a previous call's pack went to, if set) and then checkpoints/ are
# copied into runs/, never over one already there; every run checkpoints and stops after MINUTES (interrupted 75 s
# later if still going, e.g. still preparing data), then the checkpoints of the main cells and of the extra runs
# marked "pack", those that have not finished their schedules, are packed (runners.train.transfer) with the logs,
# the metrics of every run, the results files the call wrote and `runners progress` into
# OUTDIR/campaign.tar.part<NN> (15 MB parts: cat them | tar x; a call brings back at most 64 MiB).
set -u
MIN=$1; OUTDIR=$2; EXTRA=${3:-}; TESTS=${4:-}
[ "$EXTRA" = "--tests" ] && { EXTRA=""; TESTS="--tests"; }
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
START=$(date +%s); HARD=$((MIN * 60 + 75))
LOG=${CAMPAIGN_LOGS:-/tmp/campaign_logs}; mkdir -p "$LOG" "$OUTDIR"; STAGE=$(mktemp -d)
echo "call start $(date -u +%FT%TZ) minutes $MIN extra runs [${EXTRA}]" >> "$LOG/calls.txt"
nvidia-smi --query-gpu=index,name,memory.used --format=csv >> "$LOG/calls.txt" 2>&1
mkdir -p runs
if [ -n "${CAMPAIGN_RESUME_FROM:-}" ] && [ -f "$CAMPAIGN_RESUME_FROM/transfer_manifest.json" ]; then
  UNPACKED=$(mktemp -d)
  python3 -m runners.train.transfer unpack "$CAMPAIGN_RESUME_FROM" "$UNPACKED" >> "$LOG/calls.txt" 2>&1 \
    && cp -rn "$UNPACKED/." runs/
fi
cp -rn checkpoints/s4d-table-5 checkpoints/s4d-table-6 runs/ 2>/dev/null
RUN_FULL="python3 -m runners run --tier full --data suite --no-progress --reference"
RUN="timeout -s INT $HARD $RUN_FULL"
finished() {  # every checkpoint under runs/$1 has finished its schedule: nothing left to train
  python3 -m runners progress --runs runs --finished "$1" >> "$LOG/calls.txt" 2>&1
}

pathfinder_rows() {  # GPU 0: S4D Table 5's rows on Pathfinder-32 at the spec's setting, one after the other: the
  # first that has not finished its schedule trains for what is left of the call, and when it finishes the next starts
  local row cell left started=""
  for row in S4-LegS S4D-Inv S4D-LegS; do
    cell="s4d-table-5/full/${row}_suite_data__Pathfinder"
    finished "$cell" && continue
    left=$((MIN * 60 - $(date +%s) + START))  # seconds of the call's minutes left
    [ -z "$started" ] || [ "$left" -ge 120 ] || break  # after one finished in this call: too little left to start
    started=1
    echo "GPU 0: $row (suite data) / Pathfinder, $left s of the call left ($(date -u +%T))" >> "$LOG/pathfinder.log"
    timeout -s INT $((left + 75)) $RUN_FULL s4d-table-5 --cells "$row (suite data)/Pathfinder" --gpus 0 \
      --stop-after-minutes "$(awk "BEGIN { print $left / 60 }")" >> "$LOG/pathfinder.log" 2>&1
    finished "$cell" || break  # paused at the call's deadline (or stopped): the next call resumes it
  done
}
pathfinder_rows &
# Path-X at the default CPU priority: at nice 15 its 200,000 images took 8 min 44 s on a fresh machine (7 min 26 s
# at equal priority), near this call's hard stop, and the Pathfinder runs' first epochs were no faster
finished 's4d-table-6/full/S4D_suite_data__Path-X' || $RUN s4d-table-6 --cells '*/S4D (suite data)' --gpus 2 \
  --stop-after-minutes "$MIN" >> "$LOG/pathx.log" 2>&1 &
if [ -n "$TESTS" ]; then  # on GPU 2 while Path-X's data is made (7-9 minutes): the GPU tests, in three streams
  # at the default priority: at nice 15 beside the generator's processes they ran only 19, 47 and 18 tests in their 7
  # minutes (at equal priority all three streams finished in 2-4.2 minutes), for 17 s of generation (7 min 9 s)
  for files in "tests/test_bf16_stream.py tests/test_mixed_precision.py tests/test_fftconv.py" tests/test_layers.py \
      tests/test_step_graph.py; do
    OMP_NUM_THREADS=4 CUDA_VISIBLE_DEVICES=2 timeout -s INT 420 python3 -m pytest -q --maxfail=10 -ra --durations=10 \
      -p no:cacheprovider $files >> "$LOG/gpu_tests_$(basename "${files##* }" .py).log" 2>&1 &
  done
fi
extra_run() {  # GPU, spec, cells, options, "pack" to bring the run's checkpoint back
  echo "extra run on GPU $1: $2 $3 $4 ($(date -u +%T))" >> "$LOG/extra_runs.log"
  local folder  # its --set folder, as run --dry-run names it
  folder=$(eval "python3 -m runners run $2 --tier full --data suite --train-only --cells '$3' $4 --dry-run" \
    | sed -n 's#^  trains in runs/\(.*\)/ (the folder.*#\1#p')
  [ "$5" = "pack" ] && [ -n "$folder" ] && echo "$folder/*" >> "$STAGE/pack_globs"
  if [ -n "$folder" ] && finished "$folder"; then
    echo "extra run on GPU $1: runs/$folder has finished its schedule; not started" >> "$LOG/extra_runs.log"
    return
  fi
  eval "OMP_NUM_THREADS=6 CUDA_VISIBLE_DEVICES=$1 $RUN $2 --cells '$3' $4 \
    --stop-after-minutes $MIN" >> "$LOG/extra_runs.log" 2>&1
}
if [ -n "$EXTRA" ]; then
  while IFS='|' read -r gpu spec cells opts keep; do
    [ -n "$gpu" ] && [ "${gpu:0:1}" != "#" ] && extra_run "$gpu" "$spec" "$cells" "$opts" "${keep:-}" &
  done < "$EXTRA"
fi
wait

PACK=(--cells 's4d-table-5/full/*' --cells 's4d-table-6/full/*')
[ -f "$STAGE/pack_globs" ] && while read -r glob; do PACK+=(--cells "$glob"); done < "$STAGE/pack_globs"
mkdir -p "$STAGE/ckpt"  # empty when every run has finished: their results files and metrics come with the logs
python3 -m runners.train.transfer pack runs/ "$STAGE/ckpt" --unfinished-only "${PACK[@]}" >> "$LOG/calls.txt" 2>&1
for f in runs/*/full*/*/metrics.jsonl runs/*/full*/*/steps.jsonl runs/*/full*/logs/* runs/*/full*/overrides.json; do
  [ -f "$f" ] && { d="$LOG/runs/$(dirname "$f")"; mkdir -p "$d"; cp "$f" "$d/"; }
done
touch -d "@$START" "$STAGE/.start"
find results -type f -newer "$STAGE/.start" -exec cp --parents {} "$LOG/" \; 2>/dev/null
python3 -m runners progress > "$LOG/progress_$(date -u +%H%M).txt" 2>&1
echo "call end $(date -u +%FT%TZ)" >> "$LOG/calls.txt"
cp -r "$LOG" "$STAGE/logs"
tar cf - -C "$STAGE" ckpt logs | split -b 15m -d - "$OUTDIR/campaign.tar.part"
ls -la "$OUTDIR"; tail -n 4 "$LOG"/*.log 2>/dev/null
