#!/usr/bin/env bash
# Regenerates the tables at the top of BENCHMARKS.md (between the benchmarks.sh markers): one
# table per method family, speed over dense beside recall, on the generated `text` workload at
# 8K and 32K and on the real layer-6 dump of code-tiny-8k, plus the runner against llama.cpp
# when its tools are built. Every table comes from one `spattn bench` process, whose timed runs
# go round-robin over dense and the methods, so the ratios hold on a noisy machine too. The
# same pass renders the GPU tables from the GPU records docs/benchmarks/gpu-records.txt lists
# (taken on a GPU machine by scripts/cuda_vs_torch.py, not by this script) and the index of
# the dated log (docs/benchmarks/log/*.md). Everything else in BENCHMARKS.md is hand-written.
# Without running anything, `scripts/benchmarks_tables.py docs/benchmarks BENCHMARKS.md
# --no-plots` renders the same from the committed records (ctest benchmarks_current checks it).
#
#   scripts/benchmarks.sh [--quick] [--long] [--lengths A,B] [--build DIR] [--models DIR]
#                         [--llama-bin DIR] [--note TEXT] [--out FILE]
#
#   --quick      a smoke test (2K and 4K, one timed run, no llama.cpp) into a temporary folder
#                (and a copy of BENCHMARKS.md unless --out): checks the script and the tables,
#                not the figures. Never part of ctest.
#   --long       adds 128K on `text` (slow: dense alone takes minutes on 2 cores).
#   --lengths    the `text` lengths instead (e.g. 8192 when the machine is too busy for 32K).
#   --build      the build folder with bin/spattn and python/ (default: build; run `make build`).
#   --models     the shared models folder (default: $SPATTN_MODELS, else ../shared/models).
#   --llama-bin  llama.cpp's bin folder with llama-bench (default: $LLAMA_BIN, else
#                third_party/llama.cpp/build/bin); missing: that table says it was skipped.
#   --note       a sentence for the generated header (e.g. "shared machine: other jobs ran").
#   --out        the file whose block is replaced (default: BENCHMARKS.md).
#
# Time: every method's warm-up computes its recall against exact attention, so a length
# costs several dense passes per method, and 32K about 16 times 8K. `--lengths 8192` (8K, the
# dump, llama.cpp) took 7 minutes on 2 cores shared with other builds (load average 5-7); the
# default was not timed. The records and plots go to docs/benchmarks/ (JSON, PNG), the tables
# into the block in --out.
set -euo pipefail
cd "$(dirname "$0")/.."

build=build quick=0 long=0 note="" out=BENCHMARKS.md out_given=0 lengths_given=
models=${SPATTN_MODELS:-../shared/models}
llama_bin=${LLAMA_BIN:-third_party/llama.cpp/build/bin}
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --long) long=1 ;;
    --lengths) lengths_given=${2//,/ }; shift ;;
    --build) build=$2; shift ;;
    --models) models=$2; shift ;;
    --llama-bin) llama_bin=$2; shift ;;
    --note) note=$2; shift ;;
    --out) out=$2; out_given=1; shift ;;
    -h|--help) sed -n '2,29p' "$0"; exit 0 ;;
    *) echo "benchmarks.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

# The tree as it was before this run writes its records (tracked files under docs/benchmarks).
tree=$(git status --porcelain --untracked-files=no | grep -q . && echo dirty || echo clean)
spattn=$build/bin/spattn
[ -x "$spattn" ] || { echo "benchmarks.sh: $spattn not found: run 'make build' first" >&2; exit 2; }
[ -f "$out" ] || { echo "benchmarks.sh: $out not found" >&2; exit 2; }

if [ $quick = 1 ]; then
  lengths="2048 4096" repeat=1 reps=1
else
  lengths="8192 32768" repeat=3 reps=3
  if [ $long = 1 ]; then lengths="$lengths 131072"; fi
fi
if [ -n "$lengths_given" ]; then lengths=$lengths_given; fi
dir=docs/benchmarks
py=${PYTHON:-/usr/bin/python3}  # the interpreter the Python package is built for (docs/python.md)
if [ $quick = 1 ]; then  # a smoke test leaves the repository alone unless --out says otherwise
  dir=$(mktemp -d)
  [ $out_given = 1 ] || { cp "$out" "$dir/BENCHMARKS.md"; out=$dir/BENCHMARKS.md; }
fi
mkdir -p "$dir"
heads=2 dim=128 threads=$(nproc)
records=()
commands=()

unpath() {  # a record names the models and tools by $MODELS and $LLAMA_BIN, not this machine's paths
  "$py" - "$1" "$models" "$llama_bin" <<'EOF'
import os, sys
path, models, llama_bin = sys.argv[1:]
text = open(path).read()
for given, var in ((models, "$MODELS"), (llama_bin, "$LLAMA_BIN")):
    for form in sorted({os.path.realpath(given), os.path.abspath(given), given}, key=len, reverse=True):
        text = text.replace(form.rstrip("/") + "/", var + "/")
open(path, "w").write(text)
EOF
}

# A command as a reader runs it: the models and llama.cpp's tools by the variables the page
# defines, not this machine's paths.
add_command() {
  local c="$*"
  c=${c//$models/\$MODELS}
  c=${c//$llama_bin/\$LLAMA_BIN}
  commands+=("$c")
}

run() {  # name, then the command; its stdout (JSON) goes to $dir/name.json
  local name=$1; shift
  echo "benchmarks.sh: $*" >&2
  "$@" > "$dir/$name.json"
  unpath "$dir/$name.json"
  records+=("$dir/$name.json")
  add_command "$@"
}

# Every method at its defaults (the catalog's default specs), dense first.
for n in $lengths; do
  run "text-$n" "$spattn" bench --workload text --seq "$n" --heads $heads --dim $dim \
    --seed 0 --repeat $repeat --threads "$threads" --json
done

dump=$models/code-tiny-8k-layer6-qkv.safetensors
skipped=()
if [ -f "$dump" ]; then
  run "dump-layer6-8192" "$spattn" bench --qkv "$dump" --dtype f32 --repeat $repeat \
    --threads "$threads" --json
else
  skipped+=("real dump: $dump not found (--models DIR)")
fi

model=$models/code-tiny-8k.gguf
if [ $quick = 1 ]; then
  skipped+=("runner against llama.cpp: not run in --quick")
elif [ -x "$llama_bin/llama-bench" ] && [ -f "$model" ]; then
  args=(scripts/vs_llama.py --llama-bin "$llama_bin" --spattn "$spattn" -m "$model"
        --test pp4096 --test tg64@4096 --reps $reps -t "$threads" --json)
  [ -f "$models/code-heldout.txt" ] && args+=(--text "$models/code-heldout.txt")
  echo "benchmarks.sh: ${args[*]}" >&2
  "$py" "${args[@]}" > "$dir/vs-llama.json"
  unpath "$dir/vs-llama.json"
  records+=("$dir/vs-llama.json")
  add_command "${args[@]}"
else
  skipped+=("runner against llama.cpp: no llama-bench in $llama_bin (build llama.cpp's tools, --llama-bin DIR) or no $model")
fi

meta=$dir/meta.json
cpu=$(lscpu 2>/dev/null | sed -n 's/^Model name:[[:space:]]*//p' | head -1)
family=$(lscpu 2>/dev/null | sed -n 's/^CPU family:[[:space:]]*//p' | head -1)
cpu_model=$(lscpu 2>/dev/null | sed -n 's/^Model:[[:space:]]*//p' | head -1)
[ -n "$family" ] && cpu="$cpu (family $family model $cpu_model)"
"$py" - "$meta" "$cpu" "$(nproc)" "$(git rev-parse --short HEAD)" \
  "$tree" \
  "$(date -u '+%Y-%m-%d %H:%M UTC')" "$note" "$quick" "$dir" <<'EOF'
import json, sys
keys = ["cpu", "cores", "commit", "tree", "date", "note", "quick", "dir"]
json.dump(dict(zip(keys, sys.argv[2:])), open(sys.argv[1], "w"))
EOF

printf '%s\n' "${records[@]}" > "$dir/records.txt"
printf '%s\n' "${commands[@]}" > "$dir/commands.txt"
printf '%s\n' "${skipped[@]+"${skipped[@]}"}" > "$dir/skipped.txt"
PYTHONPATH=$build/python "$py" scripts/benchmarks_tables.py "$dir" "$out"
echo "benchmarks.sh: wrote the tables into $out (records in $dir)" >&2
