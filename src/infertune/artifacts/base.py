"""``Artifact``: a file of a run folder as a typed dataclass with a schema id and a version.

    @dataclass
    class ServingFile(Artifact):
        SCHEMA = "infertune.serving"
        VERSION = 1
        curve: ServiceCurve | None = None

    ServingFile(curve).save(path)      # {"schema": "infertune.serving/v1", "curve": {...}}
    ServingFile.load(path)             # ConfigError in one line when it cannot be read

Built on ``Serial`` (the fields are the JSON keys, written once in the class; the schema key is
a DERIVED property, so it is written last and never read as a field). Reading checks
the ``schema`` key, ``<SCHEMA>/v<VERSION>``: another schema id, or a version newer than this
infertune's, is refused in one line that names the file, the schema found and the fix; an older
version goes through ``migrate`` (the default refuses it the same way). A file without a
``schema`` key was written before its schema was named: it is read as version ``UNNAMED``
when the class sets one (the files whose keys have not changed since), and refused otherwise.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from infertune.errors import ConfigError, DataError
from infertune.jsonfile import read_json, write_json
from infertune.serial import Serial

A = TypeVar("A", bound="Artifact")

RERUN = "rerun infertune optimize"  # the fix for a missing or damaged run file
# the fix for a file of another schema or version
_WITH_THIS = "re-run infertune optimize with this version"
_NEWER = f"{_WITH_THIS}, or install the infertune release that wrote it"
_SCHEMA = re.compile(r"^(?P<id>[\w.-]+)/v(?P<version>\d+)$")


def read_object(path: Path, fix: str = RERUN) -> dict[str, Any]:
    """The JSON object in ``path``; ConfigError naming the file when it is missing, damaged or
    not an object (jsonfile's wording)."""
    data = read_json(path, fix=fix)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be an object; {fix}")
    return data


def schema_version(data: dict[str, Any], path: Path, expected: str, *,
                   unnamed: int | None = None) -> int:
    """The version that ``data`` (read from ``path``) names in its ``schema`` key, for the
    schema ``expected`` (``<id>/v<N>``, e.g. "infertune.run/v2"); ConfigError in one line for
    another schema id or a version newer than N. Artifact checks its files with it, and so can
    a typed file that keeps its own reader (optimize's run.json)."""
    want = _SCHEMA.match(expected)
    assert want is not None, f"{expected!r} is not <id>/v<N>"
    found = data.get("schema")
    if found is None and unnamed is not None:
        return unnamed
    match = _SCHEMA.match(found) if isinstance(found, str) else None
    if match is None or match["id"] != want["id"]:
        raise ConfigError(f"{path}: schema {found!r} is not {expected!r}; {_WITH_THIS}, or "
                          "pass the file it wrote")
    if int(match["version"]) > int(want["version"]):
        raise ConfigError(f"{path}: schema {found!r} is newer than this infertune reads "
                          f"({expected}); {_NEWER}")
    return int(match["version"])

@dataclass
class Artifact(Serial):
    """Base of the typed run files: set ``SCHEMA`` and ``VERSION`` (and ``UNNAMED``, the
    version a file without a schema key is read as, for files older than their schema id)."""

    SCHEMA: ClassVar[str]
    VERSION: ClassVar[int]
    UNNAMED: ClassVar[int | None] = None
    DERIVED: ClassVar[tuple[str, ...]] = ("schema",)  # a subclass adds its own to this

    @classmethod
    def schema_id(cls) -> str:
        return f"{cls.SCHEMA}/v{cls.VERSION}"

    @property
    def schema(self) -> str:
        """``<SCHEMA>/v<VERSION>``, written as the file's ``schema`` key (after the fields)."""
        return self.schema_id()

    def save(self, path: str | Path) -> Path:
        return write_json(path, self.to_dict())

    @classmethod
    def load(cls: type[A], path: str | Path) -> A:
        path = Path(path)
        data = read_object(path)
        version = cls.version_of(data, path)
        if version < cls.VERSION:
            data = cls.migrate(data, version, path)
        try:
            return cls.from_dict(data)
        except (DataError, KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{path}: {exc}; {RERUN}") from exc

    @classmethod
    def version_of(cls, data: dict[str, Any], path: Path) -> int:
        """The schema version ``data`` was written with; ConfigError for another schema or a
        newer version than this class reads."""
        return schema_version(data, path, cls.schema_id(), unnamed=cls.UNNAMED)

    @classmethod
    def migrate(cls, data: dict[str, Any], version: int, path: Path) -> dict[str, Any]:
        """``data`` of an older ``version`` as this version's keys; the default refuses it (a
        class whose keys changed overrides this)."""
        raise ConfigError(f"{path}: schema {data.get('schema')!r} is older than this infertune "
                          f"reads ({cls.schema_id()}); {_NEWER}")
