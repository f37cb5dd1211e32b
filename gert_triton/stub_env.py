"""Hand Triton's Python stub the environment of the Python that runs gert.

The stub embeds libpython in *isolated* mode (it ignores PYTHONPATH and the user site) and finds its prefix the way
any embedded interpreter does: by looking up ``python3`` on PATH. Started from an activated venv that finds the
venv; started as ``/path/to/.venv/bin/gert serve`` by systemd, cron or a container entrypoint it finds the system's
Python, and every model.py importing gert_triton or a package installed in the venv fails to load.

So the server gets, first on its PATH, a small prefix made for it: ``bin/python3`` (a link to this interpreter's base
executable) beside a ``pyvenv.cfg`` (``home`` = the base interpreter), and a site-packages folder whose ``.pth``
file runs ``_gert_stub_env`` at start-up. That module:

1. runs ``site.addsitedir`` on this interpreter's site directories (its venv's, the user site if this interpreter
   uses it), so their ``.pth`` files run: the finders of editable installs, path entries;
2. puts this interpreter's ``sys.path`` first, in its order (PYTHONPATH entries included), and drops site-packages
   folders this interpreter does not use.

What is handed over does not depend on the working directory: the directory of the running script (``sys.path[0]``,
or the cwd under ``-m`` / ``-c``) is left out, as it is for any other program.
"""

from __future__ import annotations

import json
import os
import site
import sys
import tempfile
from typing import Optional, Sequence

_MODULE = '''\
"""Written by gert_triton.stub_env: this interpreter gets the import path of the Python that started the server."""
import os
import site
import sys

PATHS = {paths}
SITE_DIRS = {site_dirs}
HERE = os.path.dirname(os.path.abspath(__file__))


def _site_packages(p):
    return os.path.basename(os.path.normpath(p)) in ("site-packages", "dist-packages")


def _apply():
    had = list(sys.path)
    for d in SITE_DIRS:
        site.addsitedir(d)
    added = [p for p in sys.path if p not in had]
    rest = [p for p in had + added if p not in PATHS and not _site_packages(p)]
    sys.path[:] = PATHS + rest


_apply()
'''


def import_path(path: Optional[Sequence[str]] = None) -> list:
    """This interpreter's import path as the stub should get it: absolute, existing, without the script's folder."""
    entries = list(sys.path if path is None else path)
    if path is None and entries:
        entries = entries[1:]  # the running script's folder, or the cwd for -m / -c / the REPL
    out: list = []
    for p in entries:
        if not p:
            continue
        p = os.path.abspath(p)
        if os.path.exists(p) and p not in out:
            out.append(p)
    return out


def site_dirs() -> list:
    """The site directories whose .pth files this interpreter ran: its site-packages and, if enabled, user site."""
    dirs = list(site.getsitepackages()) if hasattr(site, "getsitepackages") else []
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    return [os.path.abspath(d) for d in dirs if os.path.isdir(d)]


def write_prefix(dest: Optional[str] = None) -> str:
    """Write the stub's prefix (see the module doc) into a new folder, returned; put ``<it>/bin`` first on the
    server's PATH. The caller removes the folder."""
    dest = dest or tempfile.mkdtemp(prefix="gert-stub-env-")
    base = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    os.makedirs(os.path.join(dest, "bin"), exist_ok=True)
    for name in ("python3", version):
        os.symlink(base, os.path.join(dest, "bin", name))
    with open(os.path.join(dest, "pyvenv.cfg"), "w") as f:
        f.write(
            f"home = {os.path.dirname(base)}\ninclude-system-site-packages = false\n"
            f"version = {'.'.join(map(str, sys.version_info[:3]))}\n"
        )
    packages = os.path.join(dest, "lib", version, "site-packages")
    os.makedirs(packages)
    with open(os.path.join(packages, "_gert_stub_env.py"), "w") as f:
        f.write(_MODULE.format(paths=json.dumps(import_path()), site_dirs=json.dumps(site_dirs())))
    with open(os.path.join(packages, "_gert_stub_env.pth"), "w") as f:
        f.write("import _gert_stub_env\n")
    return dest
