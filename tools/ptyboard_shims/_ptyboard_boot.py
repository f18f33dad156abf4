# Stand-in board (tools/ptyboard.py): what each child runs under ``micropython -i -c``,
# in __main__'s globals, with the module path MICROPYPATH gives (the board's folder first).
# It says the interpreter is up (the stand-in hides that marker), then runs boot.py and
# main.py in those globals as a board does, each ending like a board's: a traceback, then
# the REPL.
import sys as _pb_sys
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
