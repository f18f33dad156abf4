# The two commands of the README: `make demo` and `make test`. Both set everything up first.
.PHONY: setup demo test bench clean

setup:
	@bash scripts/setup.sh

demo: setup
	@.venv/bin/dpsense demo

test: setup
	@bash scripts/test.sh

bench: setup
	@.venv/bin/python bench/sampler.py

clean:
	rm -rf .venv .pytest_cache .hypothesis build *.egg-info
