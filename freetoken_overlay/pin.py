"""The pinned upstream releases the patch series is written against.

A pin records, for one FreeToken release, everything needed to rebuild the
exact upstream base the series applies to, and to refuse anything else:

* ``wheels``: every official wheel accepted, by file name, with its sha256;
* ``tree_id``: the git tree id of the pure-source tree: the wheel's
  ``freetoken/`` package without compiled extension modules (``*.so``) and
  without ``.dist-info``, laid out as ``python/freetoken/...`` (the upstream
  repository's layout), every file mode 100644.  All accepted wheels give the
  same tree (tests/test_overlay.py checks it);
* ``base_commit``: the id of the deterministic commit of that tree that
  ``apply`` makes (fixed author, committer, dates and message, below) and tags
  ``upstream-<version>``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .util import OverlayError

#: The release the series targets; ``apply``/``export``/``build`` default to it.
DEFAULT_VERSION = "0.2.1"

#: Platform tag of the accepted wheels (upstream publishes manylinux x86_64 only).
PLATFORM_TAG = "manylinux_2_27_x86_64"

# Identity and date of the base commit: constants, so its commit id is stable.
BASE_AUTHOR_NAME = "FreeToken upstream (PyPI wheel)"
BASE_AUTHOR_EMAIL = "freetoken-overlay@invalid"
BASE_DATE = "946684800 +0000"  # 2000-01-01T00:00:00Z, git's raw date format


@dataclass(frozen=True)
class Pin:
    version: str
    wheels: Mapping[str, str]  # wheel file name -> sha256
    tree_id: str
    base_commit: str

    @property
    def tag(self) -> str:
        """The git tag of the base commit."""
        return f"upstream-{self.version}"

    @property
    def base_message(self) -> str:
        return (f"FreeToken {self.version}: pure-source tree of the PyPI wheels\n\nThe freetoken/ package of freetoken-"
                f"{self.version} wheels without compiled\nextension modules (*.so) and without .dist-info, laid out "
                "as\npython/freetoken/ as in the upstream repository.\n")  # fmt: skip

    def wheel_name(self, py_tag: str) -> str:
        """File name of the accepted wheel for interpreter tag ``py_tag`` (``cp311``)."""
        name = f"freetoken-{self.version}-{py_tag}-{py_tag}-{PLATFORM_TAG}.whl"
        if name not in self.wheels:
            tags = ", ".join(sorted(w.split("-")[2] for w in self.wheels))
            raise OverlayError(f"FreeToken {self.version} is pinned for Python tags {tags} only; this interpreter is "
                               f"{py_tag}")  # fmt: skip
        return name


def _pin(version: str, sha311: str, sha312: str, tree_id: str, base_commit: str) -> Pin:
    wheels = {
        f"freetoken-{version}-cp311-cp311-{PLATFORM_TAG}.whl": sha311,
        f"freetoken-{version}-cp312-cp312-{PLATFORM_TAG}.whl": sha312,
    }
    return Pin(version=version, wheels=wheels, tree_id=tree_id, base_commit=base_commit)


PINS: Mapping[str, Pin] = {
    pin.version: pin
    for pin in (
        _pin(
            "0.2.1",
            sha311="6a837cd00f177a071c5e41091c0143d51ee97d44ee8ca656a8ea79151bf2fa55",
            sha312="b3bb49da1db367f69a6ab7eef0154c57330ed4c7a167ee9dfb8fbd798a3265fd",
            tree_id="3be1b9b56e75c9a72ca9a7ff53ae4bcd454f0f5f",
            base_commit="655b485066474509b6dd567067351b571e364d98",
        ),
        _pin(
            "0.2.0",
            sha311="3ecd7f77547614448887c630f6126f7d5d57bbf7c3c738498cf1b70f8c0a0f69",
            sha312="f03997340013d9b8758650a454d12115607e14e9c4facaf0261b1a9e11688669",
            tree_id="1090536877bdc4596fa1499bc94b7cdc3cbad53a",
            base_commit="e3d32d92d42f03c558924c0d5bf238da3899c56f",
        ),
    )
}


def get_pin(version: str | None = None) -> Pin:
    """The pin for ``version`` (default :data:`DEFAULT_VERSION`)."""
    version = version or DEFAULT_VERSION
    try:
        return PINS[version]
    except KeyError:
        allowed = ", ".join(sorted(PINS))
        raise OverlayError(f"upstream version {version!r} is not pinned; allowed values: {allowed}") from None
