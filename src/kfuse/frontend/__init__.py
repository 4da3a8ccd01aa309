"""The user-facing layer: FusionDefinition (definition), its `fd.ops` namespace (ops) and
what runs a definition (execute: fd.execute, manual_execute, the schedule queries)."""

from kfuse.dtypes import DataType
from kfuse.frontend.definition import FusionDefinition

__all__ = ["FusionDefinition", "DataType"]
