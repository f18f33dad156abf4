# Stand-in board (tools/ptyboard.py): the unix port's machine module plus the calls
# board firmware makes that the unix port lacks.
from umachine import *

PWRON_RESET = 1
HARD_RESET = 2
WDT_RESET = 3
DEEPSLEEP_RESET = 4
SOFT_RESET = 5
_CAUSES = {'power': PWRON_RESET, 'hard': HARD_RESET, 'soft': SOFT_RESET}


def reset():
    # Ends the interpreter at once (a signal cannot be caught by Python code); the
    # stand-in sees the signal and boots the board again with main.py.
    import os
    os.system('kill -%s $PPID' % os.getenv('PTYBOARD_RESET_SIGNAL'))
    while True:
        pass


def reset_cause():
    import os
    return _CAUSES.get(os.getenv('PTYBOARD_RESET') or 'power', PWRON_RESET)


def unique_id():
    return b'\xe6\x61\x38\x52\x83\x4d\x2c\x2a'


def freq(hz=None):
    if hz is None:
        return 125000000
