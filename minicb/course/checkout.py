"""The checkout the course runs in: where exercises/, solutions/, notebooks/ and workspace/ are."""
from __future__ import annotations

from pathlib import Path


def find_repo_root(start: Path | None = None) -> Path:
    """The checkout the course runs in: the nearest folder, from `start` (the working directory)
    upwards, that holds exercises/, solutions/ and minicb/. A notebook runs in notebooks/ and must grade
    the exercises next to it, even where minicb is installed from another checkout; outside any
    checkout, the folder above the minicb package."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if all((folder / name).is_dir() for name in ("exercises", "solutions", "minicb")):
            return folder
    return Path(__file__).resolve().parents[2]   # minicb/course/checkout.py


REPO_ROOT = find_repo_root()
