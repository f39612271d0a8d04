"""Writing a file so that a failure never leaves half of it, nor clobbers what a user has.

The data go to a hidden temporary name beside the destination and are moved into place once
complete; without `overwrite`, an existing destination is refused before any work, and one that
appears meanwhile is not replaced.
"""
from __future__ import annotations

import os
import uuid
from pathlib import Path


def check_destination(path: str | os.PathLike, overwrite: bool, who: str) -> Path:
    """`path` as a Path, after the checks that can fail before any work (`who` names the caller
    in the messages)."""
    path = Path(path)
    if not path.parent.is_dir():
        raise FileNotFoundError(f"{who}: cannot write {path}: the folder {path.parent} does not exist")
    if path.is_dir():
        raise IsADirectoryError(f"{who}: {path} is a folder; give a file name ending in .gguf")
    if path.exists() and not overwrite:
        raise FileExistsError(f"{who}: {path} already exists; pass overwrite=True to replace it")
    return path


def partial_path(path: Path) -> Path:
    """A fresh hidden name beside `path` for the file being written."""
    return path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.partial")


def move_into_place(partial: Path, path: Path, overwrite: bool, who: str) -> None:
    if overwrite:
        os.replace(partial, path)
        return
    try:
        os.link(partial, path)  # fails if a file appeared meanwhile: nothing is clobbered
    except FileExistsError:
        raise FileExistsError(f"{who}: {path} appeared while writing; pass overwrite=True to replace it") from None
    except OSError:  # a file system without hard links
        if path.exists():
            raise FileExistsError(f"{who}: {path} already exists; pass overwrite=True to replace it") from None
        os.replace(partial, path)
