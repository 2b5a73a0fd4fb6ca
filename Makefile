# asrdecode developer commands. `make demo` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
OUT    ?= out

.PHONY: install demo test lint clean-out

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

## demo: transcribe the bundled demo data with the embedded default model and print the report
demo: install
	$(BIN)/asrdecode transcribe data/demo/synthetic/manifest.jsonl --out $(OUT)/demo-synthetic --overwrite
	$(BIN)/asrdecode transcribe data/demo/real/manifest.jsonl --out $(OUT)/demo-real --overwrite
	$(BIN)/asrdecode build-graph --config configs/graph/demo-ctc-bpe-tlg.yaml --out $(OUT)/graphs/demo-ctc-bpe-tlg
	$(BIN)/asrdecode transcribe data/demo/synthetic/manifest.jsonl --config configs/wfst.yaml \
		decoder.graph=$(OUT)/graphs/demo-ctc-bpe-tlg --out $(OUT)/demo-synthetic-wfst --overwrite
	$(BIN)/asrdecode build-graph --config configs/graph/sphinx-en-us.yaml --out $(OUT)/graphs/sphinx-en-us
	$(BIN)/asrdecode transcribe data/demo/real/manifest.jsonl --config configs/sphinx-en-us.yaml \
		decoder.graph=$(OUT)/graphs/sphinx-en-us --out $(OUT)/demo-real-sphinx --overwrite
	$(BIN)/asrdecode transcribe data/real/test/manifest.jsonl --config configs/sphinx-en-us.yaml \
		decoder.graph=$(OUT)/graphs/sphinx-en-us --out $(OUT)/real-test-sphinx --overwrite
	$(BIN)/asrdecode transcribe data/demo/synthetic/manifest.jsonl --config configs/transducer-greedy.yaml \
		--out $(OUT)/demo-synthetic-rnnt --overwrite
	$(BIN)/asrdecode transcribe data/demo/real/manifest.jsonl --config configs/transducer-greedy.yaml \
		--out $(OUT)/demo-real-rnnt --overwrite
	$(BIN)/python scripts/demo_summary.py \
		"synthetic TTS, demo model, ctc-greedy=$(OUT)/demo-synthetic" \
		"synthetic TTS, demo model, wfst + demo TLG=$(OUT)/demo-synthetic-wfst" \
		"real speech, demo model, ctc-greedy=$(OUT)/demo-real" \
		"real speech, sphinx en-us HMM, wfst + HCLG=$(OUT)/demo-real-sphinx" \
		"real speech held out (data/real/test), sphinx en-us HMM, wfst + HCLG=$(OUT)/real-test-sphinx" \
		"synthetic TTS, demo RNN-T, transducer-greedy=$(OUT)/demo-synthetic-rnnt" \
		"real speech, demo RNN-T, transducer-greedy=$(OUT)/demo-real-rnnt"

## test: install and run the whole suite
test: install
	$(BIN)/python -m pytest

lint: install
	$(BIN)/ruff check asrdecode tests scripts
	$(BIN)/ruff format --check asrdecode tests scripts || true

clean-out:
	rm -rf $(OUT)
