"""Virtual environments the tests make beside the running Python (the contract environment, a Python under /tmp).

They see the running Python's installed packages, whether it is a venv or a system Python: a ``.pth`` file in
the new venv adds the running Python's site folders with ``site.addsitedir``, so their own ``.pth`` files (an
editable install's) work too. ``--system-site-packages`` would not do: it shows the *base* interpreter's packages,
and the base interpreter of a venv has none of the venv's (no torch, no kitae). Packages installed into the new
venv come first on its ``sys.path``.
"""

from __future__ import annotations

import site
import subprocess
import sys
from pathlib import Path

LINK = "_running_python_packages.pth"


def running_site_dirs() -> list[str]:
    """The folders the running Python imports its installed packages from: its site-packages (a venv's own, and
    the system's where the venv includes them, or a system Python's), and the user's where it is enabled."""
    dirs = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    return [d for d in dirs if Path(d).is_dir()]


def make_venv(folder: Path, pip: bool = True) -> Path:
    """A venv in ``folder`` that imports its own packages first, then the running Python's; its python."""
    subprocess.run([sys.executable, "-m", "venv", *([] if pip else ["--without-pip"]), str(folder)], check=True)
    python = folder / "bin" / "python"
    own = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                         capture_output=True, text=True, check=True).stdout.strip()
    adds = "; ".join(f"site.addsitedir({d!r})" for d in running_site_dirs())
    (Path(own) / LINK).write_text(f"import site; {adds}\n")  # one line: site runs a .pth line that starts "import"
    return python
