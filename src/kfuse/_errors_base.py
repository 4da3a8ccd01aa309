"""The root of kfuse's exception hierarchy.

It lives in its own pure-Python module so that the C++ extension (``kfuse._C``) can derive
its exception types (``CudaError``, ``CompileError``) from it while it is being imported.
"""


class KfuseError(Exception):
    """Base class of every error kfuse raises on purpose."""
