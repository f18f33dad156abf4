# The two commands of the README: `make demo` and `make test`. Both set everything up first.
.PHONY: setup demo test bench clean

setup:
	@bash scripts/setup.sh

demo: setup
	@.venv/bin/dpsense demo

test: setup
	@bash scripts/test.sh

# The benchmarks `make bench` runs, in order; each prints its table with a baseline measured in
# the same run (bench/README.md). Add a benchmark by adding its line.
BENCHES = \
	bench/sampler.py \
	bench/detection.py \
	bench/smooth.py

bench: setup
	@status=0; for b in $(BENCHES); do \
		echo "## $$b"; echo; .venv/bin/python $$b || status=1; echo; \
	done; exit $$status

clean:
	rm -rf .venv .pytest_cache .hypothesis build *.egg-info
