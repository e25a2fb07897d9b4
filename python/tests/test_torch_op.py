"""spattn.attention as the torch operator torch.ops.spattn.attention (torch 2.1 or newer): the
same bits as the plain call, a fake implementation torch's own checks accept, and a module under
torch.compile with no graph break and eager's output. Skipped without torch 2.1."""
import numpy as np
import pytest

import spattn
from spattn import _torch_op

torch = pytest.importorskip("torch")
if not _torch_op.supported(torch):
    pytest.skip(f"torch {torch.__version__} < 2.1: spattn.attention is the plain call",
                allow_module_level=True)

ARGS = ("blasst:lambda=1e-3", True, None, "bshd", True, None)  # method ... threads


@pytest.fixture(scope="module")
def tq():
    w = spattn.workload("text", seq=256, heads=4, kv_heads=2, dim=64, seed=9, as_torch=True)
    return w.q, w.k, w.v


def test_registered_at_import_and_called():
    assert _torch_op.register() is torch.ops.spattn.attention.default
    assert _torch_op.operator_for(torch.zeros(1), torch.zeros(1), torch.zeros(1)) is not None
    assert _torch_op.operator_for(np.zeros(1), np.zeros(1), np.zeros(1)) is None


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_operator_gives_the_plain_calls_bits(tq, dtype):
    x = [t.to(getattr(torch, dtype)) for t in tq]
    out, lse = torch.ops.spattn.attention(*x, *ARGS)
    plain_out, plain_lse, _ = spattn._attention.run(*x, *ARGS[:-1], False, None)
    assert out.dtype == x[0].dtype and out.shape == x[0].shape and lse.shape == (4, 256)
    assert torch.equal(out, plain_out) and torch.equal(lse, plain_lse)
    # spattn.attention goes through it and returns what it did.
    assert torch.equal(spattn.attention(*x, method=ARGS[0]), out)


def test_fake_implementation_passes_torchs_checks(tq):
    if not hasattr(torch.library, "opcheck"):  # torch 2.4
        pytest.skip("torch.library.opcheck needs torch 2.4")
    for layout, x in (("bshd", tq), ("bhsd", [t.permute(1, 0, 2).unsqueeze(0) for t in tq])):
        for lse in (True, False):
            torch.library.opcheck(torch.ops.spattn.attention.default,
                                  (*x, "a_shape", True, None, layout, lse, None),
                                  test_utils=("test_schema", "test_faketensor"))


class Block(torch.nn.Module):
    """A small attention block: projections around spattn.attention."""

    def __init__(self, dim=64):
        super().__init__()
        self.proj = torch.nn.Linear(dim, dim)

    def forward(self, q, k, v):
        out, lse = spattn.attention(q * 1.0, k, v, method="blasst:lambda=1e-3", return_lse=True)
        return self.proj(out), lse.sum()


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_compiles_without_graph_break(tq, device):
    if device == "cuda":
        if not torch.cuda.is_available():
            pytest.skip("no CUDA device")
        tq = [t.to(device, torch.bfloat16) for t in tq]
    m = Block().to(device, tq[0].dtype).eval()
    with torch.no_grad():
        eager = m(*tq)
        explained = torch._dynamo.explain(m)(*tq)
        assert explained.graph_break_count == 0, explained.break_reasons
        compiled = torch.compile(m, backend="aot_eager", fullgraph=True)(*tq)
    for got, want in zip(compiled, eager):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
