# Stand-in board (tools/ptyboard.py): the script each child runs under ``micropython -i``.
# It puts the board's folder first on the module path (running a script puts the
# script's own folder there), says the interpreter is up (the stand-in hides that
# marker), then runs boot.py and main.py in __main__'s globals as a board does, each
# ending like a board's: a traceback, then the REPL.
import sys as _pb_sys
_pb_sys.path[0] = ''
_pb_sys.argv.clear()
_pb_sys.stdout.write('\x1b]ptyboard-ready\x07')   # tools/ptyboard.py _READY


def _pb_boot():
    import os
    names = ['boot.py']
    if os.getenv('PTYBOARD_RUN_MAIN') != '0':
        names.append('main.py')
    for name in names:
        try:
            os.stat(name)
        except OSError:
            continue
        try:
            execfile(name, globals())
        except SystemExit:
            pass
        except BaseException as e:
            _pb_sys.print_exception(e)


_pb_boot()
del _pb_boot, _pb_sys
