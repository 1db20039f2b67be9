"""globalpool: the mean over the tokens of a token tensor (a transformer's head) is a global pool."""
import io

import torch

from estimator.onnx_import import load_network


def test_token_mean_is_a_global_pool():
    class Head(torch.nn.Module):
        def forward(self, x):
            return x.mean(1)

    buf = io.BytesIO()
    torch.onnx.export(Head().eval(), torch.randn(1, 49, 448), buf, opset_version=17, dynamo=False)
    (gp,) = load_network(buf.getvalue()).layers
    assert gp.type == "globalpool" and (gp.params["h"], gp.params["w"], gp.params["c"]) == (1, 49, 448)
    assert gp.params["mode"] == "avg"


def test_a_mean_over_channels_stays_unknown():
    class ChannelMean(torch.nn.Module):
        def forward(self, x):
            return x.mean(2)

    buf = io.BytesIO()
    torch.onnx.export(ChannelMean().eval(), torch.randn(1, 49, 448), buf, opset_version=17, dynamo=False)
    (l,) = load_network(buf.getvalue()).layers
    assert l.type == "other" and l.op_type == "ReduceMean"
