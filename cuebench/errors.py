"""The one base class for errors caused by user input (files, options, data).

The command line prints these as a one-line message naming what is wrong and exits
with status 2, instead of a traceback.
"""


class CuebenchError(Exception):
    """Bad input: a malformed file, an unknown name, a corrupt image, a refused request."""
