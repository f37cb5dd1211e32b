"""The CLI's usage error: its own module, so that command modules elsewhere (gert/preview/cli.py,
gert_triton/cli.py) raise it without importing gert.tools.cli, which imports them."""


class UsageError(Exception):
    """Bad arguments: one line on stderr, exit code 2."""
