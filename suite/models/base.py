"""The base of the result documents' typed models: one field per key of the JSON, nested models named in
``NESTED``, the keys no field names kept in ``extra`` (a document reads back whole). ``from_doc`` is the one
place a model's older shapes are normalised (:meth:`Model.normalise`); ``to_doc`` is what a writer saves (the
header ``schema``, ``generated_at``, ``provenance``, ``machine`` only where set: :func:`suite.results.document`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Mapping

HEADER = ("schema", "generated_at", "provenance", "machine")


def _load(spec: Any, value: Any) -> Any:
    if spec is None or value is None:
        return value
    if isinstance(spec, tuple):
        kind, cls = spec
        if kind is list:
            return [cls.from_doc(x) for x in value]
        return {k: cls.from_doc(x) for k, x in value.items()}
    return spec.from_doc(value)


def _dump(value: Any) -> Any:
    if hasattr(value, "to_doc"):  # a Model, or a suite.stats.Comparison
        return value.to_doc()
    if isinstance(value, list):
        return [_dump(x) for x in value]
    if isinstance(value, dict):
        return {k: _dump(x) for k, x in value.items()}
    return value


class Model:
    """Mixin of the result models (each a dataclass): ``from_doc`` / ``to_doc``."""

    #: {field: a Model class, (list, class) or (dict, class)}: the nested documents
    NESTED: ClassVar[dict[str, Any]] = {}
    #: fields left out of ``to_doc`` while None (besides the header)
    OPTIONAL: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def normalise(cls, doc: dict[str, Any]) -> dict[str, Any]:
        """``doc`` (a copy) in the current shape and names: older documents' differences, here only."""
        return doc

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any] | None):
        """The model of ``doc`` (None: None)."""
        if doc is None:
            return None
        if isinstance(doc, cls):
            return doc
        rest = cls.normalise(dict(doc))
        names = [f.name for f in dataclasses.fields(cls)]
        kw = {k: _load(cls.NESTED.get(k), rest.pop(k)) for k in names if k != "extra" and k in rest}
        if "extra" in names:
            kw["extra"] = rest
        return cls(**kw)

    def to_doc(self) -> dict[str, Any]:
        """The JSON a writer saves (the header only where set)."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"}
        out = {k: _dump(v) for k, v in values.items() if v is not None or k not in (*HEADER, *self.OPTIONAL)}
        out.update(_dump(getattr(self, "extra", {})))
        return out

    @property
    def tree(self) -> str | None:
        """The patched tree the document was measured on (its provenance's)."""
        return (getattr(self, "provenance", None) or {}).get("tree")


def field(default: Any = None) -> Any:
    """A dataclass field defaulting to ``default`` (a fresh copy of a dict or list)."""
    if isinstance(default, (dict, list)):
        return dataclasses.field(default_factory=lambda: type(default)(default))
    return dataclasses.field(default=default)


@dataclasses.dataclass
class Document(Model):
    """A result document's header (:func:`suite.results.document`); the kinds' models add their fields."""

    schema: str | None = None
    generated_at: str | None = None
    provenance: dict[str, Any] | None = None
    machine: dict[str, Any] | None = None
    extra: dict[str, Any] = field({})
