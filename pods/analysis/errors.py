"""The one error type of the analysis: a bad input, with the fix in its message."""


class CompareError(ValueError):
    """An input the comparison refuses to guess about. The CLI prints it as one line, exit 2."""
