"""A run's images: the pictures of its image prompts, copied into runs/NAME/images/ as the run logs them.

The run page shows a group's images from the run's own folder only, never from the path the data set named:
a run folder stays self-contained (copy it elsewhere and its page still shows them) and the server reads no
file outside it. Files are content-addressed (:func:`kitae.data.images.stored_name`: a sha256 prefix and the
format's extension), so a picture used by many groups is one file; each is written under a temporary name and
renamed, so a reader never sees half a file.

Stored groups name their images by those file names: ``item["images"]`` lists them and each image part of
``messages`` reads ``{"type": "image", "image": NAME}``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from kitae.errors import KitaeError

IMAGES_DIR = "images"
NAME = re.compile(r"[0-9a-f]{32}\.(png|jpg|gif|webp|bmp)")
CONTENT_TYPES = {"png": "image/png", "jpg": "image/jpeg", "gif": "image/gif", "webp": "image/webp",
                 "bmp": "image/bmp"}


class RunImages:
    """The writer's side: :meth:`add` copies an image (a kitae.data.images reference) into the run once."""

    def __init__(self, run_dir: str | Path):
        self.folder = Path(run_dir) / IMAGES_DIR
        self._names: dict[str, str] = {}  # reference -> stored name

    def add(self, ref: str) -> str:
        from kitae.data.images import image_bytes, stored_name

        if ref not in self._names:
            data = image_bytes(ref)
            name = stored_name(data)
            target = self.folder / name
            if not target.is_file():
                self.folder.mkdir(parents=True, exist_ok=True)
                tmp = self.folder / f".{name}.{os.getpid()}.tmp"
                tmp.write_bytes(data)
                os.replace(tmp, target)
            self._names[ref] = name
        return self._names[ref]

    def stored_row(self, messages: list[dict], images: list[str]) -> tuple[list[dict], list[str]]:
        """(messages with each image part naming its stored file, the stored names of `images`)."""
        names = [self.add(ref) for ref in images]
        out = []
        for m in messages:
            content = m.get("content")
            if isinstance(content, list):
                content = [{**p, "image": self.add(p["image"])} if p.get("type") == "image" else p for p in content]
            out.append({**m, "content": content})
        return out, names


def image_file(run_dir: str | Path, name: Any) -> Path:
    """The stored image `name` of the run in `run_dir`; KitaeError for any other name (a path, ``..``, a file
    that is not a stored image) or a file that is missing or lies outside the run's images folder."""
    if not isinstance(name, str) or NAME.fullmatch(name) is None:
        raise KitaeError(f"{str(name)[:80]!r} is not the name of a stored image")
    folder = (Path(run_dir) / IMAGES_DIR).resolve()
    file = (folder / name).resolve()
    if file.parent != folder or not file.is_file():
        raise KitaeError(f"the run has no image {name}")
    return file


def content_type(name: str) -> str:
    return CONTENT_TYPES[name.rsplit(".", 1)[-1]]
