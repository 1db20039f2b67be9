"""torch module -> simplified ONNX, the way every NAS candidate is sent to the service.

Pipeline (:func:`to_onnx`):

1. the module, in ``eval()`` mode, has every ``Conv2d`` directly followed by a
   ``BatchNorm2d`` (inside one ``nn.Sequential``) folded into the conv for the duration of
   the export (:func:`folded`; the module is restored afterwards, nothing is deep-copied).
   Numerically the same network; the exporter then neither traces the BNs nor runs its
   own BN-folding pass, which cuts the export time of a MobileNet by about 40 %;
2. ``torch.onnx.export`` with the TorchScript exporter (``dynamo=False``: the dynamo
   exporter needs ``onnxscript``), fixed input shape, opset 17, constant folding;
3. onnxsim (constant folding, BN folding of anything left, dead-code removal), no
   numeric check (``check_n=0``).

The result keeps its weights: :func:`estimator.onnx_strip.strip_initializers` removes them
before the query, and the best architecture is written with them.
"""
from __future__ import annotations

import contextlib
import copy
import io
import warnings
from typing import Iterator, Sequence

import onnx
import torch
from torch import nn

from estimator.errors import UserError

__all__ = ["ExportError", "fold_batchnorm", "export_onnx", "simplify", "to_onnx", "OPSET"]

#: ONNX opset of every export (HardSwish needs >= 14).
OPSET = 17
#: options of onnxsim.simplify: BN folding on, no numeric check (weights are random anyway)
ONNXSIM_OPTIONS = {"check_n": 0, "skip_fuse_bn": False}


class ExportError(UserError):
    """The candidate could not be exported or simplified (the trial fails, the search goes on)."""


def _fused(conv: nn.Conv2d, bn: nn.BatchNorm2d) -> nn.Conv2d:
    """A shallow copy of ``conv`` with ``bn`` folded into its weight and bias (nothing else copied)."""
    assert bn.running_mean is not None and bn.running_var is not None
    w, b = torch.nn.utils.fusion.fuse_conv_bn_weights(conv.weight, conv.bias, bn.running_mean, bn.running_var,
                                                      bn.eps, bn.weight, bn.bias)
    fused = copy.copy(conv)
    fused._parameters = dict(conv._parameters)  # type: ignore[assignment]
    fused._parameters["weight"] = w
    fused._parameters["bias"] = b
    fused.training = False
    return fused


def _foldable(parent: nn.Module) -> list[tuple[nn.Module, str, str]]:
    out: list[tuple[nn.Module, str, str]] = []
    if isinstance(parent, nn.Sequential):
        names = list(parent._modules)
        for a, b in zip(names, names[1:]):
            conv, bn = parent._modules[a], parent._modules[b]
            if (isinstance(conv, nn.Conv2d) and isinstance(bn, nn.BatchNorm2d) and bn.track_running_stats
                    and bn.running_mean is not None and bn.running_var is not None
                    and conv.out_channels == bn.num_features):
                out.append((parent, a, b))
    for child in parent.children():
        out += _foldable(child)
    return out


@contextlib.contextmanager
def folded(module: nn.Module) -> Iterator[nn.Module]:
    """``module`` in eval mode with each Conv2d -> BatchNorm2d pair folded into the conv, for
    the duration of the ``with`` block; afterwards the original children and the training
    mode are back. Only pairs that are consecutive children of one ``nn.Sequential`` are
    folded (the pattern every built-in space uses); other BatchNorms stay (the exporter and
    onnxsim fold what they can). Nothing is deep-copied: the folded convs are shallow copies
    with new weight and bias tensors."""
    was_training = module.training
    swaps: list[tuple[nn.Module, str, nn.Module, str, nn.Module]] = []
    try:
        module.eval()
        with torch.no_grad():
            for parent, a, b in _foldable(module):
                conv, bn = parent._modules[a], parent._modules[b]
                parent._modules[a] = _fused(conv, bn)  # type: ignore[arg-type]
                parent._modules[b] = nn.Identity()
                swaps.append((parent, a, conv, b, bn))  # type: ignore[arg-type]
        yield module
    finally:
        for parent, a, conv, b, bn in reversed(swaps):
            parent._modules[a] = conv
            parent._modules[b] = bn
        module.train(was_training)


def fold_batchnorm(module: nn.Module) -> nn.Module:
    """An eval-mode deep copy of ``module`` with its Conv2d -> BatchNorm2d pairs folded
    (see :func:`folded`, which does the same without copying, for the duration of a block)."""
    m = copy.deepcopy(module)
    for parent, a, b in _foldable(m.eval()):
        parent._modules[a] = _fused(parent._modules[a], parent._modules[b])  # type: ignore[arg-type]
        parent._modules[b] = nn.Identity()
    return m.eval()


def export_onnx(module: nn.Module, input_shape: Sequence[int], *, opset: int = OPSET, fold_bn: bool = True) -> bytes:
    """ONNX bytes of ``module`` (in eval mode, BN folded) for a fixed ``input_shape``.

    The module is left as it was (children, weights, training mode)."""
    example = torch.zeros(tuple(int(d) for d in input_shape))
    buf = io.BytesIO()
    try:
        with contextlib.ExitStack() as stack:
            if fold_bn:
                m = stack.enter_context(folded(module))
            else:
                was = module.training
                stack.callback(module.train, was)
                m = module.eval()
            stack.enter_context(warnings.catch_warnings())
            stack.enter_context(torch.no_grad())
            warnings.simplefilter("ignore")
            torch.onnx.export(m, (example,), buf,  # type: ignore[arg-type]
                              dynamo=False, opset_version=int(opset), do_constant_folding=True,
                              input_names=["input"], output_names=["output"])
    except Exception as e:  # noqa: BLE001 - one candidate's failure, reported on its trial
        raise ExportError(f"torch.onnx.export failed: {type(e).__name__}: {str(e).strip().splitlines()[0][:400]}") \
            from None
    return buf.getvalue()


def simplify(model: bytes | onnx.ModelProto) -> onnx.ModelProto:
    """onnxsim-simplified model (weights kept)."""
    import onnxsim  # noqa: PLC0415 - heavy, only when needed

    m = model if isinstance(model, onnx.ModelProto) else onnx.load_from_string(bytes(model))
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            out, _ = onnxsim.simplify(m, **ONNXSIM_OPTIONS)
    except Exception as e:  # noqa: BLE001
        raise ExportError(f"onnxsim failed: {type(e).__name__}: {str(e).strip().splitlines()[0][:400]}") from None
    return out


def to_onnx(module: nn.Module, input_shape: Sequence[int]) -> onnx.ModelProto:
    """Export and simplify: the model a NAS candidate is estimated on (weights kept)."""
    return simplify(export_onnx(module, input_shape))
