"""transpose: what it costs depends on whether the last axis moves; both kinds are
benchmarked as rank-4 transposes of the same elements, numerically what torch computes."""
import io

import numpy as np
import onnxruntime as ort
import pytest
import torch

from bench.modelgen import make_inputs, padded_model, single_layer_model, to_onnx
from estimator.layers import describe
from estimator.layers.transpose import reduced_transpose
from estimator.onnx_import import load_network


def test_moves_last_is_a_feature_and_picks_the_benchmarked_perm():
    kept = describe("transpose", dict(h=3, w=64, c=197, rank=4, moves_last=0))
    moved = describe("transpose", dict(h=197, w=64, c=3, rank=4, moves_last=1))
    assert kept.features["moves_last"] == 0 and moved.features["moves_last"] == 1
    assert kept.output_shape == (1, 3, 197, 64) and moved.output_shape == (1, 3, 64, 197)
    for p, perm in ((dict(h=3, w=8, c=5, rank=4, moves_last=0), (0, 2, 1, 3)),
                    (dict(h=3, w=8, c=5, rank=4, moves_last=1), (0, 1, 3, 2))):
        ir = single_layer_model("transpose", p)
        x = make_inputs(ir)["x0"]
        y = ort.InferenceSession(to_onnx(ir), providers=["CPUExecutionProvider"]).run(None, {"x0": x})[0]
        np.testing.assert_array_equal(y, np.transpose(x, perm))
        out = ort.InferenceSession(to_onnx(padded_model("transpose", p)),
                                   providers=["CPUExecutionProvider"]).run(None, make_inputs(padded_model("transpose", p)))[0]
        assert out.shape[:2] == (1, 1)


def test_attention_transposes_import_with_their_kind():
    class Heads(torch.nn.Module):
        def forward(self, x):
            q = x.reshape(1, 50, 4, 16).permute(0, 2, 1, 3)  # last axis kept
            return q @ q.transpose(-2, -1)  # k^T: last axis moved

    buf = io.BytesIO()
    torch.onnx.export(Heads().eval(), torch.randn(1, 50, 64), buf, opset_version=17, dynamo=False)
    tr = [l for l in load_network(buf.getvalue()).layers if l.type == "transpose"]
    assert sorted(l.params["moves_last"] for l in tr) == [0, 1]
    for l in tr:
        padded_model("transpose", {k: v for k, v in l.params.items() if k != "n"})


@pytest.mark.parametrize("shape,perm,want", [
    ((1, 197, 3, 3, 64), (2, 0, 3, 1, 4), (197, 9, 64, 0)),  # DeiT's qkv: rows of 64 copied
    ((1, 3, 197, 64), (0, 1, 3, 2), (3, 197, 64, 1)),        # k^T
    ((1, 3, 197, 64), (0, 2, 1, 3), (3, 197, 64, 0)),        # heads <-> tokens
    ((1, 2, 58, 28, 28), (0, 2, 1, 3, 4), (2, 58, 784, 0)),  # ShuffleNet's channel shuffle
    ((1, 3, 85, 20, 20), (0, 1, 3, 4, 2), (3, 85, 400, 1)),  # YOLO's detect head
    ((1, 192, 196), (0, 2, 1), (1, 192, 196, 1)),            # a patch embedding's flatten to tokens
    ((5, 4, 6, 7), (1, 0, 2, 3), (5, 4, 42, 0)),             # (a, b, w) once 6 x 7 merge: exact
])
def test_a_transpose_is_the_rank_4_transpose_that_moves_its_elements(shape, perm, want):
    """Rank 3 and below after dropping 1s and merging what moves together: the benchmarked
    rank-4 transpose of ``(1, c, h, w)`` puts every element where the network's does."""
    c, h, w, moves_last = reduced_transpose(shape, perm)
    assert (c, h, w, moves_last) == want
    x = np.arange(int(np.prod(shape)))
    four = (0, 1, 3, 2) if moves_last else (0, 2, 1, 3)
    np.testing.assert_array_equal(np.transpose(x.reshape(shape), perm).ravel(),
                                  np.transpose(x.reshape(1, c, h, w), four).ravel())


def test_higher_ranks_keep_the_innermost_move():
    # MobileViT's unfolding into 2x2 patches, written as a rank-6 permutation (the hybrid space):
    # (1, d, h/2, 2, w/2, 2) -> (1, 2, 2, h/2, w/2, d): the last axis (2) moves, d becomes last
    assert reduced_transpose((1, 96, 12, 2, 12, 2), (0, 3, 5, 2, 4, 1)) == (288, 96, 2, 1)
    # leading axes that stay in place are a batch: (n, a, b, w) -> (n, b, a, w)
    assert reduced_transpose((8, 3, 16, 2), (0, 2, 1, 3)) == (24, 16, 2, 0)
    assert reduced_transpose((1, 1, 5), (0, 2, 1)) == (1, 1, 5, 0)  # only 1s move: a copy


def test_the_hybrid_space_s_attention_imports_as_benchable_rows():
    """A MobileViT block of the `hybrid` NAS space (its tokens ``(b, patches, tokens, dim)``, so
    rank-5 and rank-6 tensors): every transpose and softmax is a configuration smart padding
    can measure, with the softmax's rows as long as its axis."""
    from nas.spaces import MobileViTBlock

    buf = io.BytesIO()
    torch.onnx.export(MobileViTBlock(32, 48, layers=1, heads=2, mlp_ratio=2, mlp_act="gelu", act="silu").eval(),
                      torch.randn(1, 32, 12, 12), buf, opset_version=17, dynamo=False)
    layers = load_network(buf.getvalue()).layers
    (sm,) = [l for l in layers if l.type == "softmax"]
    # (1, 4 patches, 2 heads, 36 tokens, 36 tokens) over the last axis
    assert (sm.params["c"], sm.params["h"], sm.params["w"], sm.params["axis_len"]) == (8, 36, 36, 36)
    # the scale before it, a scalar multiply of the same tensor: its rows too
    (scale,) = [l for l in layers if l.type == "mul" and l.name.endswith("attn/Mul")]
    assert (scale.params["c"], scale.params["h"], scale.params["w"], scale.params["elems_b"]) == (8, 36, 36, 1)
    tr = [l for l in layers if l.type == "transpose"]
    assert len(tr) >= 3
    for l in [sm, scale, *tr]:
        padded_model(l.type, {k: v for k, v in l.params.items() if k != "n"})
