#!/usr/bin/env bash
# The GPU check, one prepared call:  scripts/gpu_check.sh OUT_DIR [--quick]
#
# On a machine with CUDA (one H100 or H200, Python 3.12 with its own torch 2.9-2.11, nothing to
# download), in at most 8 minutes:
#   1. installs the wheels in .whl/ (made here by `make gpu-wheels`, listed in scripts/gpu_wheels.txt)
#      into a temporary folder with `pip install --no-index --no-deps --target` (OUT_DIR keeps only
#      the results, four small files) and puts the checkout and them on PYTHONPATH (the machine's
#      own torch is used); stops in one line if a module or a wheel's requirement is missing;
#   2. runs the `cuda` tests: every decoder gives on cuda what it gives on the CPU, each model
#      family's encoder output on cuda is within 1e-3 of the CPU's (OUT_DIR/cuda-tests.log);
#   3. runs `asrdecode bench gpu`: per decoder, throughput at batch 1, 32 and 256 on cuda against
#      the CPU on all cores, torch operations (kernel launches) and host syncs per frame, peak GPU
#      memory (OUT_DIR/bench_gpu.json and OUT_DIR/bench_gpu.md); its graphs (the demo TLG and the
#      20k-word TLG) are built beside step 2 (OUT_DIR/graphs.log).
# Without CUDA it runs its CPU part (the wheels, the imports, the cuda tests' collection, the
# benchmark's CPU rows) and says so in one line; the test suite runs it that way (--quick:
# small batches, seconds). GPU_WHEELS=DIR reads the wheels from DIR instead of .whl/;
# GPU_CHECK_GRAPHS=DIR builds the benchmark's graph there instead of out/bench.
#
# What travels to the GPU machine is the checkout (tracked and untracked-not-ignored files) plus
# .whl/ (carried): at most 64 MiB together. tests/test_tree_size.py keeps the tracked files under
# 40 MiB and scripts/gpu_wheels.txt names under 20 MiB of wheels. `make gpu-image-check` runs this
# script here in the image's Python and packages (scripts/gpu_image.txt). No GPU run has been made yet.
set -euo pipefail

usage="usage: scripts/gpu_check.sh OUT_DIR [--quick]"
OUT=${1:?$usage}
QUICK=${2:-}
if [[ -n "$QUICK" && "$QUICK" != "--quick" ]]; then
    echo "gpu_check: unknown option $QUICK ($usage)" >&2
    exit 2
fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
WHEELS=${GPU_WHEELS:-$ROOT/.whl}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
START=$SECONDS

# 1. wheels and imports
SITE=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-site.XXXXXX")
trap 'rm -rf "$SITE"' EXIT
shopt -s nullglob
wheels=("$WHEELS"/*.whl)
if ((${#wheels[@]})); then
    "$PY" -m pip install -q --no-index --no-deps --target "$SITE" "${wheels[@]}"
    echo "gpu_check: installed ${#wheels[@]} wheels from $WHEELS into $SITE"
else
    echo "gpu_check: no wheels in $WHEELS: using the installed packages"
fi
export PYTHONPATH="$ROOT:$SITE${PYTHONPATH:+:$PYTHONPATH}"
# every module the check imports, and every requirement of the wheels just installed (the image
# must hold what they need: kaldingram needs tqdm, jiwer click >= 8.1.8)
if ! missing=$(SITE="$SITE" "$PY" - <<'EOF'
import importlib.metadata as md
import importlib.util
import os

from packaging.requirements import Requirement

names = ["torch", "numpy", "numba", "soundfile", "jiwer", "kaldifst", "kaldilm", "torchaudio", "sentencepiece",
         "google.protobuf", "kaldingram", "yaml", "click", "rich", "pytest", "xdist", "asrdecode"]
missing = [n for n in names if importlib.util.find_spec(n) is None]
for dist in md.distributions(path=[os.environ["SITE"]]):
    for line in dist.requires or []:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        try:
            version = md.version(req.name)
        except md.PackageNotFoundError:
            version = None
        if version is None or not req.specifier.contains(version, prereleases=True):
            missing.append(f"{req}{f' (not {version})' if version else ''} for {dist.metadata['Name']}")
print(", ".join(missing))
EOF
) || [[ -n "$missing" ]]; then
    echo "gpu_check: missing Python packages: ${missing:-?} (scripts/gpu_wheels.txt lists what the image lacks: make gpu-wheels where pip works, carry .whl/)" >&2
    exit 1
fi
CUDA=$("$PY" -c "import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')")
if [[ -z "$CUDA" ]]; then
    echo "gpu_check: no CUDA device: running the CPU part only (cuda tests skipped, the benchmark's CPU rows)"
else
    echo "gpu_check: $CUDA, torch $("$PY" -c 'import torch; print(torch.__version__)')"
fi

# the benchmark's graphs (the demo and 20k-word TLGs) and its CPU rows' numba kernels, made beside
# the cuda tests
GRAPHS=${GPU_CHECK_GRAPHS:-out/bench}
quick=()
if [[ -n "$QUICK" ]]; then
    quick=(--quick)
fi
(cd "$ROOT" && timeout 240 "$PY" -m asrdecode.bench.gpu --graphs-only --graphs "$GRAPHS" "${quick[@]}") \
    > "$OUT/graphs.log" 2>&1 &
graphs_pid=$!

# 2. the cuda tests (skipped without CUDA: collected, so a broken import still fails here); with the
# benchmark's limits below, the check ends within 8 minutes
TESTS=(tests/decoders/test_cuda_decoders.py tests/models/test_cuda_encoders.py)
workers=()
if [[ -n "$CUDA" ]]; then
    workers=(-n 4)
fi
status=0
# (4 torch threads a worker: the CPU sides of the comparisons share the cores with the graph build)
(cd "$ROOT" && OMP_NUM_THREADS=4 timeout 270 \
    "$PY" -m pytest -q -m cuda -p no:cacheprovider "${workers[@]}" "${TESTS[@]}") \
    > "$OUT/cuda-tests.log" 2>&1 || status=$?
echo "gpu_check: cuda tests: $(tail -n 1 "$OUT/cuda-tests.log") (exit $status, $OUT/cuda-tests.log)"
if ((status != 0 && status != 5)); then  # 5: every test deselected or skipped
    tail -n 30 "$OUT/cuda-tests.log" >&2
fi

# 3. the benchmark
if ! wait "$graphs_pid"; then  # the bench says which rows lack their graph
    echo "gpu_check: graph build failed: $(tail -n 1 "$OUT/graphs.log") ($OUT/graphs.log)" >&2
fi
echo "gpu_check: graphs built at $((SECONDS - START)) s"
bench=(--out "$OUT" --graphs "$GRAPHS" --seconds 150 "${quick[@]}")
(cd "$ROOT" && timeout 200 "$PY" -m asrdecode.bench.gpu "${bench[@]}")  # = asrdecode bench gpu
echo "gpu_check: done in $((SECONDS - START)) s"
if ((status != 0 && status != 5)); then
    exit "$status"
fi
