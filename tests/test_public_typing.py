"""kfuse's public names as a user's type checker sees them: listed in `kfuse.__all__`, so
mypy --strict counts them exported (a name a package only imports is private there) and
`from kfuse import FusionDefinition` type-checks in a strict project. (mypy itself over kfuse
and torch takes minutes on two cores; `mypy --strict` on a user file that imports them passed
when this was written.)"""

from __future__ import annotations

import kfuse
from kfuse import errors

USED_BY_USERS = {"FusionDefinition", "DataType", "manual_seed", "PythonProfiler"}


def test_every_public_name_is_listed_and_bound() -> None:
    assert sorted(kfuse.__all__) == kfuse.__all__
    for name in kfuse.__all__:
        assert getattr(kfuse, name) is not None, name
    error_classes = {
        name for name, v in vars(errors).items() if isinstance(v, type) and name.endswith("Error")
    }
    assert USED_BY_USERS | error_classes <= set(kfuse.__all__)
