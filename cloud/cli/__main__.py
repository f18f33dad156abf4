"""``python -m dpsense.cloud.cli``: the ``dpsense`` command."""
import sys

from dpsense.cloud.cli import main

if __name__ == "__main__":
    sys.exit(main())
