"""kfuse has no autograd: a torch input that requires grad is run, and the user is told once
per process that the outputs are outside torch's graph (kfuse.errors.NoAutogradWarning)."""

from __future__ import annotations

import warnings

import pytest
import torch

from gpu_support import cuda_torch
from kfuse.errors import KfuseWarning, NoAutogradWarning
from kfuse.frontend import FusionDefinition
from kfuse.runtime import autograd_note


@pytest.fixture
def fresh_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """As in a new process: the warning not shown yet."""
    monkeypatch.setattr(autograd_note, "_warned", False)


def _exp() -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1], dtype=torch.float32)
        fd.add_output(fd.ops.exp(x))
    return fd


def test_a_tensor_that_requires_grad_warns_once(fresh_process: None) -> None:
    fd = _exp()
    w = torch.zeros(3, requires_grad=True)
    with pytest.warns(NoAutogradWarning) as caught:
        (out,) = fd.execute([w])
    assert len(caught) == 1
    message = str(caught[0].message)
    assert "input 0 (T0) requires grad" in message and "kfuse has no autograd" in message
    assert "outputs do not require grad" in message
    assert caught[0].filename == __file__  # points at the user's execute call
    assert not out.requires_grad and out.tolist() == [1.0, 1.0, 1.0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second time, in any fusion, is silent
        fd.execute([w])
        _exp().execute([torch.nn.Parameter(torch.ones(2))])


def test_the_warning_is_a_kfuse_user_warning() -> None:
    assert issubclass(NoAutogradWarning, KfuseWarning)
    assert issubclass(KfuseWarning, UserWarning)


def test_no_warning_without_grad(fresh_process: None) -> None:
    fd = _exp()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fd.execute([torch.zeros(3)])
        fd.execute([torch.zeros(3, requires_grad=True).detach()])
        with torch.no_grad():  # the user said no graph is wanted
            fd.execute([torch.zeros(3, requires_grad=True)])
    with pytest.warns(NoAutogradWarning):  # still to be shown: none of those warned
        fd.execute([torch.zeros(3, requires_grad=True)])


@pytest.mark.gpu
def test_a_cuda_tensor_that_requires_grad_warns(fresh_process: None) -> None:
    """On the GPU too, after calls with plain tensors of the same layout: a Parameter (a
    weight, of another type than those tensors) is a new layout to the fast path, so the
    checked path sees it. (A plain tensor that requires grad, of a layout the fast path has
    cached, is not looked at: docs/INTERFACES.md, Warnings.)"""
    cuda = cuda_torch()
    fd = _exp()
    x = cuda.zeros(1024, device="cuda")
    for _ in range(3):
        fd.execute([x])
    with pytest.warns(NoAutogradWarning):
        (out,) = fd.execute([cuda.nn.Parameter(cuda.zeros(1024, device="cuda"))])
    assert not out.requires_grad
