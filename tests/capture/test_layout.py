"""What real models emit, lowered: views of intermediates kept as shapes (prism.capture.views), rows for 3-D
activations, torch's attention ops, layer norm, GELU's tanh form. Each captured program runs in the reference
executor against torch; what cannot be lowered names its reason."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

import prism
from prism.capture import capture
from prism.capture.views import broadcast_form, groups, refinement
from prism.errors import UnsupportedOp


def _run(fn, *inputs):
    """`fn` captured, run by the reference executor, viewed back to torch's output shape; and torch's output."""
    cap = capture(fn, *inputs)
    (got,) = prism.interp.run(cap.graph, [t.float() for t in cap.arguments(*inputs)])
    (shape,) = cap.output_shapes
    return got.reshape(shape), fn(*inputs), cap


def test_groups_find_which_logical_dims_each_prism_dim_merges():
    assert groups((16, 64), (2, 8, 64)) == [[0, 1], [2]]
    assert groups((2, 8, 64), (16, 64)) is None            # a split of a Prism dim: no grouping
    assert groups((16, 1), (2, 8, 1)) == [[0, 1], []]      # size-1 dims belong nowhere
    assert groups((4, 2, 16, 16), (4, 4, 8, 16)) is None   # GQA's grouped rows split the head dim
    assert broadcast_form((64,), (2, 8, 64), [[0, 1], [2]]) == (1, 64)
    assert broadcast_form((2, 8, 1), (2, 8, 64), [[0, 1], [2]]) == (16, 1)
    assert broadcast_form((1, 8, 64), (2, 8, 64), [[0, 1], [2]]) is None  # half a group: no Prism broadcast


def test_a_refinement_is_the_pieces_both_shapes_group():
    assert refinement((2, 4, 8, 16), (2, 2, 16, 16)) == (2, 2, 2, 8, 16)   # GQA's grouped rows
    assert refinement((2, 4, 1, 16), (2, 2, 2, 16)) == (2, 2, 2, 16)       # the same at a decode step
    assert refinement((16, 1), (2, 8)) == (2, 8)
    assert refinement((2, 3), (3, 2)) is None and refinement((4,), (2, 3)) is None


def test_a_linear_on_a_3d_activation_is_multiplied_as_rows():
    torch.manual_seed(0)
    lin = torch.nn.Linear(16, 8)
    x = torch.randn(2, 3, 16)
    got, want, cap = _run(lin, x)
    assert cap.graph.output_tensors[0].shape == (6, 8) and cap.output_shapes == [(2, 3, 8)]
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_a_norm_on_a_3d_activation_before_a_view_to_rows():
    """HF's RMSNorm then `Linear`: the norm runs on [batch·seq, hidden] rows, the view is layout."""
    torch.manual_seed(0)
    x, w, wq = torch.randn(2, 5, 16), torch.rand(16) + 0.5, torch.randn(8, 16)

    def norm_linear(x, w, wq):
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return (w * h).view(10, 16) @ wq.t()

    got, want, _ = _run(norm_linear, x, w, wq)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_a_view_that_splits_a_reduced_dim_is_refused_by_name():
    def split_then_sum(x, w):
        return (x @ w).view(4, 2, 4).sum(-1, keepdim=True)

    with pytest.raises(UnsupportedOp, match="merged into dim"):
        capture(split_then_sum, torch.randn(4, 8), torch.randn(8, 8))


@pytest.mark.parametrize("s", [1, 4])
def test_a_transpose_of_an_intermediate_is_a_view_where_it_keeps_the_order_of_elements(s):
    """A normed projection viewed as heads and transposed for attention (OLMo-2's Q): at one token ([b, 1, h, d] to
    [b, h, 1, d]) the elements keep their order, so the transpose is a reshape; at four it reorders them, and
    Prism, which views inputs only, refuses it by name."""
    torch.manual_seed(0)

    def head_norm(x, w):
        q = x @ w
        q = q * torch.rsqrt(q.pow(2).mean(-1, keepdim=True) + 1e-6)
        return q.view(2, s, 4, 8).transpose(1, 2)

    x, w = torch.randn(2 * s, 16), torch.randn(16, 32)
    if s == 1:
        got, want, _ = _run(head_norm, x, w)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    else:
        with pytest.raises(UnsupportedOp, match="permute of an intermediate"):
            capture(head_norm, x, w)


def test_an_input_broadcast_over_part_of_a_merged_group_is_expanded_by_torch():
    """GPT-2's learned positions, [1, seq, hidden], added to a [batch, seq, hidden] activation that the Linear after it
    reads as [batch·seq, hidden] rows: row r needs position r mod seq, which no Prism broadcast reads, so torch
    expands the positions over the batch (an input step, a copy no larger than the activation: what torch's own add
    would read and write) and the cone reads it as rows. An intermediate is never expanded: refused by name."""
    def positions_then_linear(x, pos, w):
        return (x + pos) @ w

    cap = capture(positions_then_linear, torch.randn(2, 8, 16), torch.randn(1, 8, 16), torch.randn(16, 4))
    assert [tuple(t.shape) for t in cap.graph.inputs][:2] == [(16, 16), (16, 16)]
    for x, pos in ((torch.randn(2, 8, 16), torch.randn(1, 8, 16)), (torch.randn(1, 8, 16), torch.randn(1, 8, 16)),
                   (torch.randn(2, 1, 16), torch.randn(1, 1, 16))):
        got, want, _ = _run(positions_then_linear, x, pos, torch.randn(16, 4))
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)

    def computed_positions(x, pos, w):
        return (x + pos.relu()) @ w

    with pytest.raises(UnsupportedOp, match="no Prism broadcast reads that"):
        capture(computed_positions, torch.randn(2, 8, 16), torch.randn(1, 8, 16), torch.randn(16, 4))


def test_eager_attention_with_an_alibi_bias_and_batch_and_heads_merged_for_bmm():
    """Eager attention as MPT and BLOOM write it: scores from a `bmm` over batch and heads merged, viewed
    [b, h, s, t], plus a bias [h, 1, t] (ALiBi: an input expanded over the batch, since the scores hold batch and
    heads in one dim), softmax, and the probabilities viewed [b·h, s, t] again for the `bmm` with V: one graph,
    eager's values. The second `bmm` multiplies over the unmerged batch dims where its operand is held so."""
    b, h, s, t, d = 2, 4, 8, 8, 16

    def attention(q, k, bias, v):
        scores = torch.bmm(q, k).view(b, h, s, t) + bias
        return torch.bmm(torch.softmax(scores, -1).view(b * h, s, t), v)

    def held_apart(p, v):
        return torch.bmm(torch.softmax(p * 2.0, -1).view(b * h, s, t), v.view(b * h, t, d))

    q, k, bias, v = torch.randn(b * h, s, d), torch.randn(b * h, d, t), torch.randn(h, 1, t), torch.randn(b * h, t, d)
    got, want, _ = _run(attention, q, k, bias, v)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    p, v4 = torch.randn(b, h, s, t), torch.randn(b, h, t, d)
    got, want, cap = _run(held_apart, p, v4)
    assert [n.op for n in cap.graph.nodes].count("matmul") == 1
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("heads,kv_heads,s,t,causal", [(4, 4, 5, 5, True), (4, 2, 5, 5, True), (4, 1, 1, 9, False),
                                                       (4, 2, 3, 7, True)])
def test_scaled_dot_product_attention_with_gqa_and_a_causal_mask(heads, kv_heads, s, t, causal):
    """torch's is_causal is top-left aligned (query i sees keys j <= i, also when s < t): a mask aligned at the
    bottom right, as a KV cache would suggest, fails the case s=3, t=7."""
    torch.manual_seed(0)
    q, k, v = torch.randn(2, heads, s, 8), torch.randn(2, kv_heads, t, 8), torch.randn(2, kv_heads, t, 8)

    def attn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=kv_heads != heads)

    got, want, cap = _run(attn, q, k, v)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert len(cap.graph.inputs) == 3 + causal


@pytest.mark.parametrize("s,t", [(5, 5), (1, 9)])
def test_the_query_grouped_attention_reads_is_computed_at_the_grouped_shape(s, t):
    """Llama's query after RoPE, q·cos + rotate_half(q)·sin (the rotation is torch's, a concatenation):
    grouped-query attention reads it as [b, kv heads, group·s, e], so its products and their sum are made again
    at that shape from the inputs. cos and sin vary along s but not along the heads: at a prefill a group mixes
    the two, and torch expands them first; at a decode step (s = 1) they are read as they are."""
    torch.manual_seed(0)
    q, rq = torch.randn(2, 4, s, 8), torch.randn(2, 4, s, 8)
    k, v = torch.randn(2, 2, t, 8), torch.randn(2, 2, t, 8)
    cos, sin = torch.randn(2, 1, s, 8), torch.randn(2, 1, s, 8)

    def attn(q, rq, k, v, cos, sin):
        return F.scaled_dot_product_attention(q * cos + rq * sin, k, v, is_causal=s > 1, enable_gqa=True)

    got, want, cap = _run(attn, q, rq, k, v, cos, sin)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    grouped = (2, 2, 2 * s, 8)
    rope = [grouped] * 4 if s > 1 else [grouped] * 2 + [(2, 1, 1, 8)] * 2    # q, rq, cos, sin
    attention = [(2, 2, 8, t), (2, 2, t, 8)] + [(1, 1, 2 * s, t)] * (s > 1)  # kᵀ, v, the causal mask
    assert sorted(tuple(x.shape) for x in cap.graph.inputs) == sorted(rope + attention)


@pytest.mark.parametrize("query,why", [
    (lambda q: q * torch.rsqrt(q.pow(2).mean(-1, keepdim=True) + 1e-6), "computed by sum"),  # a norm of each head
    (lambda q: torch.softmax(q, dim=2), "broadcasts against [2, 4, 5, 8]"),                  # its max over the rows
])
def test_a_query_that_is_not_element_wise_in_its_inputs_is_not_regrouped_for_attention(query, why):
    """Such a query is cut from attention's cone by the backend (it enters as an input, which can be viewed)."""
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 4, 5, 8), torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8)

    def attn(q, k, v):
        return F.scaled_dot_product_attention(query(q), k, v, enable_gqa=True)

    with pytest.raises(UnsupportedOp, match=r"as \[2, 2, 10, 8\], and it is an intermediate: .*" + re.escape(why)):
        capture(attn, q, k, v)


def test_an_additive_attention_mask_is_expanded_over_a_group_of_query_heads():
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 4, 3, 8), torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8)
    mask = torch.randn(1, 1, 3, 6)

    def attn(q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True, scale=0.3)

    got, want, _ = _run(attn, q, k, v, mask)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_a_boolean_attention_mask_is_read_as_zero_where_true_and_minus_infinity_where_not():
    """A padded batch's mask (True: attend), over a group of query heads: the same as torch's."""
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 4, 3, 8), torch.randn(2, 2, 6, 8), torch.randn(2, 2, 6, 8)
    mask = torch.ones(2, 1, 3, 6, dtype=torch.bool)
    mask[0, :, :, :2] = False                    # the first sequence's two padding positions
    mask[1, :, 0, 3:] = False

    def attn(q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)

    got, want, cap = _run(attn, q, k, v, mask)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert len(cap.graph.inputs) == 4


def test_layer_norm_with_bias_and_gelu_tanh():
    """GPT-2's MLP input: layer_norm (weight and bias), a projection, GELU's tanh form with x ** 3."""
    torch.manual_seed(0)
    x, w, b, wf = torch.randn(2, 4, 16), torch.rand(16) + 0.5, torch.randn(16), torch.randn(16, 32) / 4

    def mlp_in(x, w, b, wf):
        return F.gelu(F.layer_norm(x, (16,), w, b) @ wf, approximate="tanh")

    got, want, _ = _run(mlp_in, x, w, b, wf)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_a_chunked_fused_projection_is_the_projections_of_its_weight_halves():
    """Phi3's gate_up_proj: one matmul chunked in torch; Prism multiplies by each half of the weight, and the
    unsliced product is not computed."""
    torch.manual_seed(0)
    x, w = torch.randn(2, 5, 16), torch.randn(64, 16)

    def swiglu(x, w):
        gate, up = F.linear(x, w).chunk(2, dim=-1)
        return F.silu(gate) * up

    got, want, cap = _run(swiglu, x, w)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    matmuls = [n for n in cap.graph.nodes if n.op == "matmul"]
    assert [n.outputs[0].shape for n in matmuls] == [(10, 32), (10, 32)]
    assert [t.shape for t in cap.graph.inputs] == [(10, 16), (16, 32), (16, 32)]


@pytest.mark.parametrize("name,fn", [
    ("rows of a product", lambda x, w, b: (x @ w)[1:4]),
    ("columns through a bias and a relu", lambda x, w, b: F.relu(x @ w + b)[:, 3:-2]),
    ("split into unequal pieces", lambda x, w, b: torch.split(x @ w + b, [5, 7], dim=1)[1] * 2),
    ("a reduction over another dim", lambda x, w, b: (x @ w).sum(0, keepdim=True)[:, 2:9]),
    ("a norm over the columns, then rows", lambda x, w, b: F.rms_norm(x @ w, (12,), eps=1e-6)[2:]),
    ("bounds past the end", lambda x, w, b: (x @ w)[-3:100]),
    ("columns of a softmax", lambda x, w, b: torch.softmax(x @ w, dim=-1)[:, :4]),
])
def test_a_slice_of_a_computed_value_is_computed_from_slices(name, fn):
    torch.manual_seed(0)
    x, w, b = torch.randn(6, 8), torch.randn(8, 12), torch.randn(12)
    got, want, _ = _run(fn, x, w, b)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_a_slice_across_a_norms_row_is_refused():
    """A slice of the columns a norm reduces over would change what is reduced: refused by name, never computed
    on the slice (a softmax's columns can be sliced: its max and sum are size-1 columns, read whole)."""
    torch.manual_seed(0)
    with pytest.raises(UnsupportedOp, match="does not commute"):
        capture(lambda x, w: F.rms_norm(x @ w, (12,), eps=1e-6)[:, 2:], torch.randn(6, 8), torch.randn(8, 12))
