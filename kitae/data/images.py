"""Images in prompt rows: where they come from, checks on load, and the forms graders and judges need.

A row names an image by a file path (relative paths are relative to the data file's folder), a ``file://`` URL,
or a ``data:image/...;base64,...`` URL. The loader (kitae.data.loader) resolves each to a *reference*: the
absolute path of the file, or the data URL as given; ``row["images"]`` lists a row's references in the order
they appear in its messages. kitae never downloads, so an ``http(s)://`` URL is refused with what to do instead.

Checks (:func:`check_image`): the file exists and is a file, holds at most :data:`MAX_IMAGE_BYTES` bytes, PIL
reads it as an image, and it has at most :data:`MAX_IMAGE_PIXELS` pixels (read from the header, before the
pixels are decoded: a small file that claims a huge picture, a "decompression bomb", is refused unopened).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import re
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

MAX_IMAGE_BYTES = 20 * 1024 * 1024
MAX_IMAGE_PIXELS = 4096 * 4096
_DATA_URL = re.compile(r"data:(image/[\w.+-]+)?(;[\w=.+-]+)*;base64,(.*)", re.S)
MIME = {"PNG": "image/png", "JPEG": "image/jpeg", "GIF": "image/gif", "WEBP": "image/webp", "BMP": "image/bmp"}
EXTENSIONS = {"image/png": ".png", "image/jpeg": ".jpg", "image/gif": ".gif", "image/webp": ".webp",
              "image/bmp": ".bmp"}


class ImageError(ValueError):
    """An image that cannot be used; the message says why and what to do (the caller adds file, row, field)."""


def resolve_ref(raw: Any, base_dir: str | Path | None) -> str:
    """The reference for an image named by ``raw`` (a path, file:// URL or data: URL); ImageError otherwise."""
    if not isinstance(raw, str) or not raw.strip():
        raise ImageError(f"expected an image path, a file:// URL or a data:image/...;base64 URL, got {_show(raw)}")
    if raw.startswith("data:"):
        _decode_data_url(raw)  # a malformed one fails here, with the row named
        return raw
    scheme = urlsplit(raw).scheme.lower()
    if scheme in ("http", "https"):
        raise ImageError(f"{raw[:80]!r} is a web address and kitae never downloads; save the image next to the "
                         "data file and give its path")
    if scheme == "file":
        path = Path(unquote(urlsplit(raw).path))
    elif len(scheme) > 1:  # "C:" on Windows is a drive, not a scheme
        raise ImageError(f"unsupported image URL scheme {scheme!r}; give a path, a file:// URL or a data: URL")
    else:
        path = Path(raw).expanduser()
    if not path.is_absolute():
        path = Path(base_dir or ".") / path
    return str(path.resolve())


def image_bytes(ref: str) -> bytes:
    """The encoded image (PNG, JPEG, ...) behind a reference, size-checked."""
    if ref.startswith("data:"):
        data = _decode_data_url(ref)
    else:
        path = Path(ref)
        if not path.is_file():
            raise ImageError(f"no image file at {ref}" + ("" if not path.exists() else " (not a file)")
                             + "; relative paths are relative to the data file's folder")
        size = path.stat().st_size
        if size > MAX_IMAGE_BYTES:
            raise ImageError(f"{ref} is {size / 2**20:.1f} MiB, more than {MAX_IMAGE_BYTES // 2**20} MiB; shrink it")
        data = path.read_bytes()
    if len(data) > MAX_IMAGE_BYTES:
        raise ImageError(f"the image is {len(data) / 2**20:.1f} MiB, more than {MAX_IMAGE_BYTES // 2**20} MiB; "
                         "shrink it")
    return data


def check_image(ref: str) -> tuple[int, int]:
    """(width, height) of a readable image within the limits; ImageError otherwise."""
    from PIL import Image, UnidentifiedImageError

    data = image_bytes(ref)
    try:
        with Image.open(io.BytesIO(data)) as im:
            width, height = im.size
            if width * height > MAX_IMAGE_PIXELS:
                raise ImageError(f"{_name(ref)} is {width}x{height} pixels, more than {MAX_IMAGE_PIXELS:,}; "
                                 "shrink it")
            im.verify()
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        if isinstance(exc, ImageError):
            raise
        raise ImageError(f"{_name(ref)} is not a readable image ({type(exc).__name__}: {str(exc)[:120]})") from None
    return width, height


def open_image(ref: str):
    """The image as a PIL RGB picture (checked first)."""
    from PIL import Image

    check_image(ref)
    with Image.open(io.BytesIO(image_bytes(ref))) as im:
        return im.convert("RGB")


def mime_type(data: bytes) -> str:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        return MIME.get(im.format or "", "image/png")


def to_data_url(ref: str) -> str:
    """The image as a ``data:image/...;base64,...`` URL, the form OpenAI-compatible servers take."""
    if ref.startswith("data:"):
        return ref
    data = image_bytes(ref)
    return f"data:{mime_type(data)};base64,{base64.b64encode(data).decode('ascii')}"


def stored_name(data: bytes) -> str:
    """A content-addressed file name for an image (sha256 prefix + extension): the same picture, one file."""
    return hashlib.sha256(data).hexdigest()[:32] + EXTENSIONS.get(mime_type(data), ".png")


def _decode_data_url(url: str) -> bytes:
    m = _DATA_URL.fullmatch(url)
    if m is None:
        raise ImageError(f"a data URL must look like data:image/png;base64,..., got {url[:40]!r}")
    try:
        return base64.b64decode(m.group(3), validate=True)
    except (binascii.Error, ValueError):
        raise ImageError("the data URL's base64 payload is not valid base64") from None


def _name(ref: str) -> str:
    return "the data URL's image" if ref.startswith("data:") else ref


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
