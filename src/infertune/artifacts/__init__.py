"""A run folder's files, typed, and their one reader: ``RunDir`` (run_dir.py), the ``Artifact``
base of a typed file with a schema id and version (base.py), and the files that had no type
of their own, serving.json and extras.json (files.py).

Where it sits (tests/unit/test_import_graph.py's LAYERS): after config, hardware, measure and
models, whose types it returns (Scenario, HardwareInfo, Profile and ServiceCurve, a variant's
Manifest), and before serve/, the lowest layer that reads a run folder. That cut keeps the
graph acyclic: the types of report.json (report.schema.Report) and run.json
(optimize.record.RunRecord) live above serve/, so RunDir does not import them; ``report`` and
``record`` take the type from their caller, and serve/ reads the one report.json figure it
needs by key through ``RunDir.read``. Moving a file's type into this package would give serve/
the typed form too; Report could move (it imports only pydantic and the ground floor), RunRecord
cannot (it is built from optimize's types).
"""

from infertune.artifacts.base import RERUN, Artifact, read_object, schema_version
from infertune.artifacts.files import ExtrasFile, ServingFile
from infertune.artifacts.run_dir import RunDir, RunPaths, VariantDir

__all__ = ["RERUN", "Artifact", "ExtrasFile", "RunDir", "RunPaths", "ServingFile", "VariantDir",
           "read_object", "schema_version"]
