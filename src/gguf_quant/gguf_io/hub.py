"""Split GGUFs from the Hugging Face Hub: transformers fetches only the shard named in
`gguf_file=`; the others are fetched here, into the same cache snapshot, before reading."""
from __future__ import annotations

import re
from pathlib import Path

from .reader import _SPLIT_RE

__all__ = ["fetch_missing_shards"]

# huggingface_hub's cache layout: <cache>/models--<org>--<name>/snapshots/<revision>/<file>
_SNAPSHOT_RE = re.compile(r"^(?P<kind>models|datasets|spaces)--(?P<repo>.+)$")


def fetch_missing_shards(path: str | Path) -> None:
    """For `name-0000K-of-0000N.gguf` inside a Hub cache snapshot, download the sibling shards
    that are not there yet. Anything else (a local file, a complete set) is left alone."""
    path = Path(path)
    m = _SPLIT_RE.match(path.name)
    if m is None:
        return
    count = int(m["count"])
    missing = [
        path.with_name(f"{m['stem']}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)
    ]
    missing = [p for p in missing if not p.is_file()]
    snapshot = next((p for p in path.parents if p.parent.name == "snapshots"), None)
    if not missing or snapshot is None:
        return
    repo = _SNAPSHOT_RE.match(snapshot.parent.parent.name)
    if repo is None:
        return
    from huggingface_hub import hf_hub_download

    repo_id = repo["repo"].replace("--", "/", 1)
    repo_type = {"models": None, "datasets": "dataset", "spaces": "space"}[repo["kind"]]
    for shard in missing:
        hf_hub_download(
            repo_id,
            shard.relative_to(snapshot).as_posix(),
            revision=snapshot.name,
            repo_type=repo_type,
            cache_dir=snapshot.parent.parent.parent,
        )
