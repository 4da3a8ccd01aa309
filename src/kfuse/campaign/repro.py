"""Repro scripts: a failing campaign example as a standalone script and its saved inputs.

`write` puts two files side by side: `<name>.py`, the printed definition (repr(fd), which
rebuilds it) followed by a call of `replay`, and `<name>.npz`, every input exactly: framework,
device, dtype, shape, strides, the data pointer's 16-byte alignment class and the values of
every element the view spans (bf16 widened to float32, which holds it exactly); the
example's other inputs too, where it has them. Running the
script checks the example again with kfuse.campaign.property.check and exits 0 when it
passes, 1 when it fails.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kfuse.campaign.property import Example, check, outcome_of
from kfuse.dtypes import ML_DTYPES_NAME, DataType
from kfuse.ir.values import TensorView

_SCRIPT = '''#!/usr/bin/env python3
"""kfuse campaign: {outcome} in a {kind} fusion.

Found by: {command}
{where}
Inputs: {inputs}

{message}
"""
import sys
from pathlib import Path

from kfuse import DataType, FusionDefinition  # noqa: F401 (the definition uses both)
from kfuse.campaign.repro import replay
{switches}
{definition}
if __name__ == "__main__":
    sys.exit(replay(fd, Path(__file__).with_suffix(".npz"), sys.argv[1:]))
'''


def write(
    folder: Path, name: str, example: Example, outcome: str, message: str, command: str, where: str
) -> Path:
    """Write `<name>.py` and `<name>.npz` for `example`, which ended in `outcome` (an
    OUTCOMES entry, or "crash") with `message`; the script's path. `command` is the command
    line that found it, `where` says when in the run."""
    import numpy as np

    fusion = example.fd.fusion
    arrays: dict[str, Any] = {}
    meta = _save_inputs(fusion, example.inputs, "input", arrays)
    header = {
        "kind": example.kind,
        "special_values": example.special_values,
        "refill_seeds": list(example.refill_seeds),
        "inputs": meta,
    }
    other = None
    if example.other_inputs is not None:
        header["other_inputs"] = other = _save_inputs(fusion, example.other_inputs, "other", arrays)
    folder.mkdir(parents=True, exist_ok=True)
    np.savez(folder / f"{name}.npz", header=np.array(json.dumps(header)), **arrays)
    described = _describe(fusion, meta)
    if other is not None:
        described += f"\nOther inputs (calls 4 and 5): {_describe(fusion, other)}"
    text = _SCRIPT.format(
        outcome=outcome.replace("_", " "),
        kind=example.kind,
        command=command,
        where=where,
        inputs=described,
        message=_docstring_safe(message),
        switches=_switch_lines(),
        definition=repr(example.fd),
    )
    script = folder / f"{name}.py"
    script.write_text(text)
    script.chmod(0o755)
    return script


def _switch_lines() -> str:
    """The script's settings of the kfuse.switches the campaign changed (KFUSE_SWITCHES), so
    that it replays the paths the example took; nothing where none was changed."""
    from kfuse import switches

    changed = switches.changed()
    if not changed:
        return ""
    lines = ["from kfuse import switches  # the campaign ran with KFUSE_SWITCHES", ""]
    lines += [f"switches.{name} = {value!r}" for name, value in sorted(changed.items())]
    return "\n".join(lines) + "\n"


def _describe(fusion: Any, meta: list[dict[str, Any]]) -> str:
    return "; ".join(
        f"{v.name} = {_scalar(m)!r}"
        if _is_scalar(m)
        else f"{v.name} {m['framework']} {m['dtype']} {tuple(m['shape'])} strides "
        f"{tuple(m['strides'])} on {m['device']}"
        for v, m in zip(fusion.inputs, meta)
    )


def _docstring_safe(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"""', "'''")


def _save_inputs(
    fusion: Any, inputs: list[Any], prefix: str, arrays: dict[str, Any]
) -> list[dict[str, Any]]:
    """Each input's layout (or scalar value); the arrays' values go to `arrays` as
    `<prefix><position>`."""
    meta: list[dict[str, Any]] = []
    for k, (v, a) in enumerate(zip(fusion.inputs, inputs, strict=True)):
        if isinstance(v, TensorView):
            values, entry = _save_array(a)
            arrays[f"{prefix}{k}"] = values
            meta.append(entry)
        elif isinstance(a, complex):  # JSON has no complex number: its two parts
            meta.append({"complex": [a.real, a.imag]})
        else:
            meta.append({"scalar": a})
    return meta


def _is_scalar(entry: dict[str, Any]) -> bool:
    return "scalar" in entry or "complex" in entry


def _scalar(entry: dict[str, Any]) -> Any:
    """A saved scalar input's value (_is_scalar)."""
    return complex(*entry["complex"]) if "complex" in entry else entry["scalar"]


def _save_array(a: Any) -> tuple[Any, dict[str, Any]]:
    """(the values of every element the view spans, as a 1-D NumPy array; its layout)."""
    from kfuse.runtime.arrays import framework_of, layout_of
    from kfuse.testing.compare import to_numpy

    lay = layout_of(a, "input")
    span = 1 + sum((n - 1) * s for n, s in zip(lay.shape, lay.strides)) if all(lay.shape) else 0
    framework = framework_of(a)
    if framework == "torch":
        import torch

        flat = torch.as_strided(a, (span,), (1,))
        values = to_numpy(flat)
        device = str(a.device)
    elif framework == "cupy":
        import cupy

        values = cupy.lib.stride_tricks.as_strided(a, (span,), (a.itemsize,)).get()
        device = f"cuda:{a.device.id}"
    else:
        import numpy as np

        from kfuse.runtime.arrays import numpy_strided

        values = numpy_strided(a, (span,), (a.itemsize,)).copy()
        if lay.dtype in ML_DTYPES_NAME:  # np.load cannot read ml_dtypes' types back
            values = values.astype(np.float64)  # exact
        device = "cpu"
    entry = {
        "framework": framework,
        "device": device,
        "dtype": lay.dtype.value,
        "shape": list(lay.shape),
        "strides": list(lay.strides),
        "alignment": lay.data_ptr % 16,
    }
    return values, entry


def load(path: Path, device: str | None = None) -> tuple[dict[str, Any], list[Any]]:
    """The header and the inputs saved in `path`, rebuilt exactly (on `device` instead of
    the saved one when given)."""
    header, inputs, _ = load_all(path, device)
    return header, inputs


def load_all(
    path: Path, device: str | None = None
) -> tuple[dict[str, Any], list[Any], list[Any] | None]:
    """As load, and the example's other inputs (None where it has none)."""
    import numpy as np

    def rebuilt(saved: Any, entries: list[dict[str, Any]], prefix: str) -> list[Any]:
        return [
            _scalar(entry) if _is_scalar(entry) else _rebuild(saved[f"{prefix}{k}"], entry, device)
            for k, entry in enumerate(entries)
        ]

    with np.load(path) as saved:
        header = json.loads(str(saved["header"]))
        inputs = rebuilt(saved, header["inputs"], "input")
        other = header.get("other_inputs")
        other_inputs = None if other is None else rebuilt(saved, other, "other")
    return header, inputs, other_inputs


def _rebuild(values: Any, entry: dict[str, Any], device: str | None) -> Any:
    """The saved array: `values` at the saved strides, starting on the saved alignment."""
    import numpy as np

    from kfuse.testing.input_arrays import aligned_start

    dtype = DataType(entry["dtype"])
    shape, strides, n = tuple(entry["shape"]), tuple(entry["strides"]), len(values)
    if entry["framework"] == "torch":
        import torch

        from kfuse.dtypes import to_torch_dtype

        buf = torch.zeros(n + 16, dtype=to_torch_dtype(dtype), device=device or entry["device"])
        start = aligned_start(entry["alignment"], buf.data_ptr(), buf.element_size())
        buf[start : start + n] = torch.from_numpy(values).to(buf.dtype)
        return torch.as_strided(buf, shape, strides, start)
    if entry["framework"] == "cupy":
        import cupy

        from kfuse.dtypes import to_numpy_dtype

        dev = cupy.zeros(n + 16, to_numpy_dtype(dtype))
        start = aligned_start(entry["alignment"], dev.data.ptr, dev.itemsize)
        dev[start : start + n] = cupy.asarray(values.astype(dev.dtype))
        return cupy.lib.stride_tricks.as_strided(
            dev[start:], shape, [s * dev.itemsize for s in strides]
        )
    from kfuse.dtypes import to_numpy_dtype
    from kfuse.runtime.arrays import numpy_strided

    host = np.zeros(n + 16, to_numpy_dtype(dtype))
    start = aligned_start(entry["alignment"], host.ctypes.data, host.itemsize)
    host[start : start + n] = values.astype(host.dtype)
    return numpy_strided(host[start:], shape, [s * host.itemsize for s in strides])


def replay(fd: Any, npz: Path, argv: list[str]) -> int:
    """Check `fd` on the inputs saved in `npz` as the campaign did; 0 when it passes, 1 when
    it fails. argv: `--device DEVICE` moves the inputs (e.g. cuda:1, or cpu for the host
    emulator)."""
    import argparse

    parser = argparse.ArgumentParser(description="Replay a kfuse campaign failure.")
    parser.add_argument(
        "--device",
        help="run on this torch device instead of the saved one (cpu or emulator: the host "
        "emulator, as kfuse campaign --device emulator names it)",
    )
    args = parser.parse_args(argv)
    header, inputs, other = load_all(npz, "cpu" if args.device == "emulator" else args.device)
    example = Example(
        header["kind"], fd, inputs, header["special_values"], tuple(header["refill_seeds"]), other
    )
    try:
        check(example)
    except Exception as exc:  # noqa: BLE001 - every failure is reported the same way
        print(f"FAILED ({outcome_of(exc).replace('_', ' ')}): {type(exc).__name__}: {exc}")
        return 1
    print("passed: kfuse matches the reference on every call")
    return 0
