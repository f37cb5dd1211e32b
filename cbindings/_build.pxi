# Which runtime the extension was built against (setup.py passes the toolkit's path).
from backend cimport GERT_BACKEND_NAME, GERT_TOOLKIT_ROOT


def backend() -> str:
    """'hostnpu' (the CPU implementation built in) or 'cann' (linked against a CANN toolkit)."""
    return GERT_BACKEND_NAME.decode()


def toolkit_root() -> str:
    """The toolkit gert._cann was built against (ASCEND_HOME_PATH at build time), or '' with the host NPU built in."""
    return GERT_TOOLKIT_ROOT.decode()
