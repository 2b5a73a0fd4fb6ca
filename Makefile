# asrdecode developer commands. `make demo` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
OUT    ?= out

.PHONY: install real-data demo-data lm-data demo test test-gpu-versions gpu-wheels fuzz lint clean-out

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

## test-gpu-versions: the whole suite with the GPU image's torch 2.11.0 (and its triton 3.6.0) instead of
## the pinned 2.9.1, in .venv-gpu (a CUDA build of torch: several GB the first time), so that the GPU
## check meets no version difference the CPU could have shown
VENV_GPU := .venv-gpu
test-gpu-versions: install real-data demo-data lm-data
	test -x $(VENV_GPU)/bin/python || $(PYTHON) -m venv $(VENV_GPU)
	$(VENV_GPU)/bin/python -m pip install -q torch==2.11.0 torchaudio==2.11.0 \
		$$($(BIN)/python scripts/requirements.py --extra dev --without torch torchaudio)
	$(VENV_GPU)/bin/python -m pip install -q --no-deps -e .
	$(VENV_GPU)/bin/python -m pytest -n auto --maxprocesses=4

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
