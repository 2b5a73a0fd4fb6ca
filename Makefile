# asrdecode developer commands. `make demo` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
OUT    ?= out

.PHONY: install real-data demo-data lm-data demo test test-gpu-versions need-python312 gpu-image-check cuda-tests-on-cpu gpu-wheels fuzz lint clean-out

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

## real-data: data/real's recordings (not tracked), built from pinned sources when first needed and
## checked against data/real/SHA256SUMS (sox, libsox-fmt-mp3, apt-get; network the first time)
real-data: install
	$(BIN)/python scripts/prepare_real_speech.py --if-needed

## demo-data: data/demo's wavs and ARPA files from their tracked FLAC and gzip copies, checked against
## data/demo/packed/SHA256SUMS (scripts/pack_data.py)
demo-data: install
	$(BIN)/python scripts/pack_data.py unpack

## lm-data: data/lm's LMs (not tracked), exported from the installed pocketsphinx's en-us.lm.bin when
## first needed (under 2 minutes here) and checked against data/lm/SHA256SUMS
lm-data: install
	@cd data/lm && sha256sum --quiet -c SHA256SUMS 2>/dev/null && echo "data/lm: up to date" || { cd ../.. && \
		$(BIN)/python scripts/export_sphinx_lm.py && $(BIN)/python scripts/exact_readable_lm.py \
		data/lm/sphinx-en-us-72k.arpa.gz data/lm/sphinx-en-us-72k-exact.arpa.gz && \
		cd data/lm && sha256sum --quiet -c SHA256SUMS && echo "data/lm: made, checksums match"; }

## demo: real English first (the default setup: no config, graph built into the cache on first use),
## then pocketsphinx's HMM on the same sets, then the embedded neural demo models; a summary table at the end
demo: install real-data demo-data
	$(BIN)/asrdecode transcribe data/demo/real/manifest.jsonl --out $(OUT)/demo-real-default --overwrite
	$(BIN)/asrdecode transcribe data/real/test/manifest.jsonl --out $(OUT)/real-test-default --overwrite
	$(BIN)/asrdecode transcribe data/demo/real/manifest.jsonl --model embedded:sphinx-en-us \
		--out $(OUT)/demo-real-sphinx --overwrite
	$(BIN)/asrdecode transcribe data/real/test/manifest.jsonl --model embedded:sphinx-en-us \
		--out $(OUT)/real-test-sphinx --overwrite
	$(BIN)/asrdecode transcribe data/demo/synthetic/manifest.jsonl --model embedded:demo_ctc_bpe \
		--out $(OUT)/demo-synthetic --overwrite
	$(BIN)/asrdecode transcribe data/demo/real/manifest.jsonl --model embedded:demo_ctc_bpe \
		--out $(OUT)/demo-real --overwrite
	$(BIN)/asrdecode build-graph --config configs/graph/demo-ctc-bpe-tlg.yaml --out $(OUT)/graphs/demo-ctc-bpe-tlg
	$(BIN)/asrdecode transcribe data/demo/synthetic/manifest.jsonl --config configs/wfst.yaml \
		decoder.graph=$(OUT)/graphs/demo-ctc-bpe-tlg --out $(OUT)/demo-synthetic-wfst --overwrite
	$(BIN)/asrdecode transcribe data/demo/synthetic/manifest.jsonl --config configs/transducer-greedy.yaml \
		--out $(OUT)/demo-synthetic-rnnt --overwrite
	$(BIN)/asrdecode transcribe data/demo/synthetic/manifest.jsonl --config configs/demo-rnnt-beam-lm.yaml \
		--out $(OUT)/demo-synthetic-rnnt-beam-lm --overwrite
	$(BIN)/asrdecode transcribe data/demo/real/manifest.jsonl --config configs/transducer-greedy.yaml \
		--out $(OUT)/demo-real-rnnt --overwrite
	$(BIN)/asrdecode transcribe data/demo/synthetic/manifest.jsonl --config configs/transducer-greedy.yaml \
		--model embedded:demo_tdt_bpe --out $(OUT)/demo-synthetic-tdt --overwrite
	$(BIN)/asrdecode transcribe data/demo/real/manifest.jsonl --config configs/transducer-greedy.yaml \
		--model embedded:demo_tdt_bpe --out $(OUT)/demo-real-tdt --overwrite
	$(BIN)/python scripts/demo_summary.py \
		"real speech, default (hama + wfst-otf)=$(OUT)/demo-real-default" \
		"real speech held out (real/test), default=$(OUT)/real-test-default" \
		"real speech, sphinx HMM + wfst-otf=$(OUT)/demo-real-sphinx" \
		"real speech held out (real/test), sphinx=$(OUT)/real-test-sphinx" \
		"synthetic TTS, demo CTC, ctc-greedy=$(OUT)/demo-synthetic" \
		"synthetic TTS, demo CTC, wfst + demo TLG=$(OUT)/demo-synthetic-wfst" \
		"real speech, demo CTC, ctc-greedy=$(OUT)/demo-real" \
		"synthetic TTS, demo RNN-T, transducer-greedy=$(OUT)/demo-synthetic-rnnt" \
		"synthetic TTS, demo RNN-T, beam + token LM=$(OUT)/demo-synthetic-rnnt-beam-lm" \
		"real speech, demo RNN-T, transducer-greedy=$(OUT)/demo-real-rnnt" \
		"synthetic TTS, demo TDT, transducer-greedy=$(OUT)/demo-synthetic-tdt" \
		"real speech, demo TDT, transducer-greedy=$(OUT)/demo-real-tdt"

## test: install and run the whole suite, on up to 4 worker processes (one per core; pytest-xdist)
test: install real-data demo-data lm-data
	$(BIN)/python -m pytest -n auto --maxprocesses=4

## The GPU machine's Python: 3.12 (python3.12, else pyenv's; or PYTHON312=...)
PYTHON312 ?= $(firstword $(foreach p,python3.12 $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python3.12),\
	$(if $(shell $(p) --version 2>/dev/null),$(p))))
## $(call venv312,DIR): DIR as a Python 3.12 venv (made anew if it is missing or another Python's)
venv312 = $(1)/bin/python -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null \
	|| $(PYTHON312) -m venv --clear $(1)
need-python312:
	@test -n "$(PYTHON312)" || { echo "needs Python 3.12, the GPU image's (PYTHON312=/path/to/python3.12)" >&2; exit 1; }

## test-gpu-versions: the whole suite with the GPU image's Python 3.12 and packages (scripts/gpu_image.txt:
## torch 2.11.0, triton 3.6.0, numpy 2.5.2, ...) plus asrdecode's other requirements, in .venv-gpu (a
## CUDA build of torch: several GB the first time), so that the GPU check meets no version difference the
## CPU could have shown
VENV_GPU := .venv-gpu
test-gpu-versions: install real-data demo-data lm-data need-python312
	$(call venv312,$(VENV_GPU))
	$(VENV_GPU)/bin/python -m pip install -q -r scripts/gpu_image.txt \
		$$($(BIN)/python scripts/requirements.py --extra dev --without torch torchaudio)
	$(VENV_GPU)/bin/python -m pip install -q --no-deps -e .
	$(VENV_GPU)/bin/python -m pytest -n auto --maxprocesses=4

## gpu-image-check: scripts/gpu_check.sh run as on the GPU machine, less its GPU: in .venv-gpu-image,
## Python 3.12 with only the image's packages (scripts/gpu_image.txt), the wheels of .whl/ installed by
## the check itself; its CPU part (20k-word graph, the benchmark's CPU rows) into out/gpu-image-check
VENV_GPU_IMAGE := .venv-gpu-image
gpu-image-check: gpu-wheels real-data demo-data lm-data need-python312
	$(call venv312,$(VENV_GPU_IMAGE))
	$(VENV_GPU_IMAGE)/bin/python -m pip install -q -r scripts/gpu_image.txt
	PYTHON=$(VENV_GPU_IMAGE)/bin/python scripts/gpu_check.sh out/gpu-image-check

## cuda-tests-on-cpu: the `cuda` tests, then the GPU benchmark's cuda rows (--quick), with the CPU in
## cuda's place (the Triton kernels under their interpreter), so that their own code and every option
## they set have run before a GPU runs them (PYTHON_FOR_TESTS=.venv-gpu/bin/python: with the GPU
## image's versions, after make test-gpu-versions)
PYTHON_FOR_TESTS ?= $(BIN)/python
cuda-tests-on-cpu: install real-data demo-data lm-data
	ASRDECODE_CUDA_TESTS_DEVICE=cpu TRITON_INTERPRET=1 $(PYTHON_FOR_TESTS) -m pytest -m cuda -n auto \
		--maxprocesses=4 tests/decoders/test_cuda_decoders.py tests/models/test_cuda_encoders.py
	TRITON_INTERPRET=1 $(PYTHON_FOR_TESTS) -m asrdecode.bench.gpu --quick --cuda-rows-on-cpu \
		--out $(OUT)/bench/gpu-cuda-rows-on-cpu

## gpu-wheels: the cp312 manylinux x86-64 wheels scripts/gpu_check.sh needs on the GPU machine
## (scripts/gpu_wheels.txt: what its image lacks) into .whl/, carried there with the checkout
gpu-wheels: install
	rm -rf .whl
	$(BIN)/python -m pip download -q --only-binary=:all: --no-deps --python-version 3.12 --implementation cp \
		--abi cp312 --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 -d .whl -r scripts/gpu_wheels.txt
	@du -cb .whl/*.whl | tail -n 1 | awk '{ printf "gpu-wheels: %.1f MiB in .whl/\n", $$1 / 1048576; \
		if ($$1 > 20 * 1048576) { print "gpu-wheels: over the 20 MiB budget" > "/dev/stderr"; exit 1 } }'

## fuzz: the long profile of the input fuzzing (tests/fuzz; the suite runs 150 cases per format)
fuzz: install
	ASRDECODE_FUZZ_EXAMPLES=$${ASRDECODE_FUZZ_EXAMPLES:-10000} $(BIN)/python -m pytest -q tests/fuzz -p no:warnings

lint: install
	$(BIN)/ruff check asrdecode tests scripts
	$(BIN)/ruff format --check asrdecode tests scripts || true

clean-out:
	rm -rf $(OUT)
