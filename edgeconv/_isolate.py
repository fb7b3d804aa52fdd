"""The working directory is not a place to import from.

``python -m edgeconv`` puts the working directory first on ``sys.path``; in CI that is a pull request's
files, and a ``json.py`` or ``numpy.py`` there would be imported in place of the real module. It is taken
off before edgeconv imports anything else, unless edgeconv itself is imported from it (a source checkout
run without installing). Code from the pipeline's folder is imported only with ``trust_code``, by the
loaders, from the folder they name. (Subprocesses are started with ``-P`` for the same reason.)
"""

import os
import sys


def no_imports_from_the_working_directory() -> None:
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cwd = os.getcwd()
    if cwd != here:
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != cwd]
