"""Board entry point: validate the provisioning config, then run the main loop.

    micropython firmware/main.py config.json     # unix port, from a checkout
    micropython main.py config.json              # unix port, in a deployed folder
    (on a board: deploy the files and config.json; main.py runs at boot)
"""
import sys

if sys.path[0].endswith("firmware"):
    # Run from a checkout: shared_protocol is a package one level up.
    sys.path.append(sys.path[0][:-len("firmware")] or ".")

import gc
import app

gc.collect()
app.main(sys.argv[1] if len(sys.argv) > 1 else "config.json")
