# The two commands of the README: `make demo` and `make test`. Both set everything up first.
.PHONY: setup demo test bench clean

setup:
	@bash scripts/setup.sh

demo: setup
	@.venv/bin/dpsense demo

test: setup
	@bash scripts/test.sh

# Every benchmark of bench/, one after the other (bench/suite.py lists them with their sizes);
# each prints its table with a baseline measured in the same run (bench/README.md).
bench: setup
	@.venv/bin/python bench/suite.py

clean:
	rm -rf .venv .pytest_cache .hypothesis build *.egg-info
