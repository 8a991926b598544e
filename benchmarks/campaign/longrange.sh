#!/bin/bash
# Long training runs on one machine (one GPU or several) for a fixed stretch of time, resumable: for time-limited allocations
# (a batch job, a lent machine). Run from the repository root:
#
#   benchmarks/campaign/longrange.sh MINUTES OUTDIR RUNS [--tests]
#
#   RUNS: a file of the runs to train, one per line "GPU|SPEC|CELLS|RUN OPTIONS[|pack]" (e.g.
#          "0|s4d-table-5|S4D-Inv (suite data)/Pathfinder||pack" for a cell at the spec's setting, or
#          "1|s4d-table-5|S4D-Lin (suite data)/Pathfinder|--set tasks.Pathfinder.loader_args.normalize=false|pack"),
#          at the full tier on suite data, writing its results file when it finishes its schedule unless its options
#          say --train-only (a run with --set trains in its own folder); several may share a GPU; '#' starts a
#          comment; a CRLF line is read as its LF twin; a field with a character outside its set (quotes, '$',
#          ';', backticks, ...) stops the call before anything starts, naming the line; "pack" brings the run's
#          checkpoint back (the others' stay on the machine, their metrics come back). A run whose checkpoint folders (as `run --dry-run` names them) have all finished their schedules is
#          not started again (`runners progress --finished`: resumed, it would train nothing and write its results
#          file once more); calls.txt says so. A finished run's folder is removed from checkpoints/ once its results
#          file is committed: take its line out of RUNS then, or the next call starts it over.
#   --tests: on GPU 2 (on a one-GPU machine: CUDA_VISIBLE_DEVICES=0 beside the runs), the GPU tests, in three streams (logs gpu_tests_test_fftconv.log, gpu_tests_test_layers.log
#          and gpu_tests_test_step_graph.log, whose last lines the call prints), at the default CPU priority, four
#          threads each, up to 7 minutes each
#
# Checkpoints: $CAMPAIGN_RESUME_FROM (a folder a previous call's pack went to, if set) and then checkpoints/ are
# copied into runs/, never over one already there; every run checkpoints and stops after MINUTES (interrupted 75 s
# later if still going, e.g. still preparing data), then the checkpoints of the runs marked "pack", those that have not
# finished their schedules, are packed (runners.execute.transfer) with the logs, the metrics of every run, the results
# files the call wrote and `runners progress` into OUTDIR/campaign.tar.part<NN> (15 MB parts: cat them | tar x; a call
# brings back at most 64 MiB, about three Pathfinder-32 checkpoints with the logs).
set -u
MIN=${1:-}; OUTDIR=${2:-}; RUNS=${3:-}; TESTS=${4:-}
if ! [[ "$MIN" =~ ^[1-9][0-9]*$ ]] || [ -z "$OUTDIR" ]; then
  echo "longrange.sh: MINUTES '$MIN' must be a whole number of minutes >= 1, and OUTDIR given; usage: longrange.sh" \
    "MINUTES OUTDIR RUNS [--tests]" >&2; exit 2
fi
if [ -n "$TESTS" ] && [ "$TESTS" != "--tests" ]; then
  echo "longrange.sh: the fourth argument is '$TESTS': --tests or nothing" >&2; exit 2
fi
if [ ! -f "$RUNS" ]; then
  echo "longrange.sh: RUNS file '$RUNS' not found; usage: longrange.sh MINUTES OUTDIR RUNS [--tests]" >&2; exit 2
fi
# The runs file, read once and checked before anything starts: one run per line, fields split at '|', a CRLF line's
# '\r' dropped; a field with a character outside its set is refused by file, line and field (nothing of a line
# is ever run by the shell: the options are split at spaces into words, without quotes or expansion).
RUN_GPU=(); RUN_SPEC=(); RUN_CELLS=(); RUN_OPTS=(); RUN_KEEP=(); lineno=0; bad=""
while IFS= read -r line || [ -n "$line" ]; do
  lineno=$((lineno + 1)); line=${line%$'\r'}
  [ -z "${line//[[:space:]]/}" ] || [ "${line:0:1}" = "#" ] && continue
  IFS='|' read -r gpu spec cells opts keep extra <<< "$line"
  why=""
  [[ "$gpu" =~ ^[0-9]+$ ]] || why="GPU '$gpu' is not a GPU index (0, 1, ...)"
  [ -z "$why" ] && { [[ "$spec" =~ ^[a-z0-9][a-z0-9-]*$ ]] || why="SPEC '$spec' is not a spec id (letters, digits, '-')"; }
  [ -z "$why" ] && { [[ "$cells" =~ ^[][A-Za-z0-9\ ()*?/_.,=+-]+$ ]] \
    || why="CELLS '$cells' holds a character outside letters, digits, spaces and ()*?/_.,=+-[]"; }
  [ -z "$why" ] && { [[ "$opts" =~ ^[A-Za-z0-9\ _.,:=+/-]*$ ]] \
    || why="RUN OPTIONS '$opts' hold a character outside letters, digits, spaces and _.,:=+/- (no quotes)"; }
  [ -z "$why" ] && { [ -z "$keep" ] || [ "$keep" = "pack" ] || why="the fifth field is '$keep': 'pack' or nothing"; }
  [ -z "$why" ] && { [ -z "$extra" ] || why="more than five '|'-separated fields"; }
  if [ -n "$why" ]; then bad=1; echo "longrange.sh: $RUNS line $lineno: $why" >&2; continue; fi
  RUN_GPU+=("$gpu"); RUN_SPEC+=("$spec"); RUN_CELLS+=("$cells"); RUN_OPTS+=("$opts"); RUN_KEEP+=("$keep")
done < "$RUNS"
[ -n "$bad" ] && { echo "longrange.sh: nothing started; fix $RUNS" >&2; exit 2; }

export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
START=$(date +%s); HARD=$((MIN * 60 + 75))
LOG=${CAMPAIGN_LOGS:-/tmp/campaign_logs}; mkdir -p "$LOG" "$OUTDIR"; STAGE=$(mktemp -d)
echo "call start $(date -u +%FT%TZ) minutes $MIN runs [${RUNS}]" >> "$LOG/calls.txt"
nvidia-smi --query-gpu=index,name,memory.used --format=csv >> "$LOG/calls.txt" 2>&1
mkdir -p runs
if [ -n "${CAMPAIGN_RESUME_FROM:-}" ] && [ -f "$CAMPAIGN_RESUME_FROM/transfer_manifest.json" ]; then
  UNPACKED=$(mktemp -d)
  python3 -m runners.execute.transfer unpack "$CAMPAIGN_RESUME_FROM" "$UNPACKED" >> "$LOG/calls.txt" 2>&1 \
    && cp -rn "$UNPACKED/." runs/
fi
for spec_dir in checkpoints/*/; do cp -rn "$spec_dir" runs/; done
RUN_FULL=(python3 -m runners run --tier full --data suite --no-progress --reference)
finished() {  # every checkpoint under runs/$1 has finished its schedule: nothing left to train
  python3 -m runners progress --runs runs --finished "$1" >> "$LOG/calls.txt" 2>&1
}

TEST_GPU=$(( $(nvidia-smi -L 2>/dev/null | grep -c "^GPU") > 2 ? 2 : 0 ))  # GPU 2, or the one GPU a small machine has
if [ -n "$TESTS" ]; then  # on GPU 2, in three streams at the default priority: at nice 15 beside a data generator's
  # processes they ran only 19, 47 and 18 tests in their 7 minutes (at equal priority all three streams finished in
  # 2-4.2 minutes)
  for files in "tests/test_bf16_stream.py tests/test_mixed_precision.py tests/test_fftconv.py" tests/test_layers.py \
      tests/test_step_graph.py; do
    OMP_NUM_THREADS=4 CUDA_VISIBLE_DEVICES=$TEST_GPU timeout -s INT 420 python3 -m pytest -q --maxfail=10 -ra --durations=10 \
      -p no:cacheprovider $files >> "$LOG/gpu_tests_$(basename "${files##* }" .py).log" 2>&1 &
  done
fi
train_run() {  # GPU, spec, cells, options (words split at spaces), "pack" to bring the run's checkpoint back
  local opts folders folder left=""
  read -ra opts <<< "$4"
  echo "run on GPU $1: $2 $3 $4 ($(date -u +%T))" >> "$LOG/runs.log"
  folders=$(python3 -m runners run "$2" --tier full --data suite --cells "$3" "${opts[@]}" --dry-run \
    | sed -n 's#^  checkpoint folder: runs/\(.*\)/$#\1#p')  # its checkpoint folders, as run --dry-run names them
  if [ -z "$folders" ]; then
    echo "run on GPU $1: $2 '$3' $4 names no checkpoint folder (run --dry-run); not started" >> "$LOG/runs.log"
    return
  fi
  for folder in $folders; do
    [ "$5" = "pack" ] && echo "$folder" >> "$STAGE/pack_globs"
    finished "$folder" || left=1
  done
  if [ -z "$left" ]; then
    echo "run on GPU $1: runs/${folders//$'\n'/, runs/} finished its schedule; not started" >> "$LOG/runs.log"
    return
  fi
  OMP_NUM_THREADS=6 CUDA_VISIBLE_DEVICES=$1 timeout -s INT "$HARD" "${RUN_FULL[@]}" "$2" --cells "$3" "${opts[@]}" \
    --stop-after-minutes "$MIN" >> "$LOG/runs.log" 2>&1
}
for i in "${!RUN_GPU[@]}"; do
  train_run "${RUN_GPU[$i]}" "${RUN_SPEC[$i]}" "${RUN_CELLS[$i]}" "${RUN_OPTS[$i]}" "${RUN_KEEP[$i]}" &
done
wait

PACK=()
[ -f "$STAGE/pack_globs" ] && while read -r glob; do PACK+=(--cells "$glob"); done < "$STAGE/pack_globs"
mkdir -p "$STAGE/ckpt"  # empty when every run has finished: their results files and metrics come with the logs
[ ${#PACK[@]} -gt 0 ] && python3 -m runners.execute.transfer pack runs/ "$STAGE/ckpt" --unfinished-only "${PACK[@]}" \
  >> "$LOG/calls.txt" 2>&1
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
