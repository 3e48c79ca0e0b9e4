"""nn.MultiheadAttention and the Transformer family against PyTorch's: PyTorch's state_dict
loaded into kiln's module, the same float64 inputs, then outputs, attention weights and
the gradients of every input and parameter; masks of each kind; PyTorch's error words."""
import numpy as np
import pytest

import eager
from eager import nn
from nn_parity import check_same, pair, quietly

torch = pytest.importorskip("torch", reason="PyTorch (the 'compare' extra) is not installed")

E, HEADS, L, S, N = 6, 3, 5, 7, 2  # odd sizes: 3 heads of 2, 5 queries, 7 keys


def _masks(lib, kind, tgt_len, src_len, batch, heads=HEADS):
    """attn_mask and key_padding_mask of `kind`, as `lib` tensors (no query sees no key)."""
    rng = np.random.default_rng(11)
    causal = np.triu(np.ones((tgt_len, src_len), bool), 1)
    padding = np.zeros((batch, src_len), bool)
    padding[0, -2:] = True  # the first sequence's last two keys are padding
    as_float = lambda m: np.where(m, -np.inf, 0.0)  # noqa: E731
    masks = {
        "none": (None, None),
        "bool-2d": (causal, None),
        "float-2d": (rng.standard_normal((tgt_len, src_len)), None),
        "float-3d": (rng.standard_normal((batch * heads, tgt_len, src_len)), None),
        "bool-3d": (np.broadcast_to(causal, (batch * heads, tgt_len, src_len)).copy(), None),
        "padding-bool": (None, padding),
        "padding-float": (None, as_float(padding)),
        "both-bool": (causal, padding),
        "both-float": (as_float(causal), as_float(padding)),
    }[kind]
    return tuple(None if m is None else lib.tensor(m) for m in masks)


MHA_CASES = {
    "defaults": (dict(), dict()),
    "no-bias": (dict(bias=False), dict()),
    "kdim-vdim": (dict(kdim=4, vdim=3), dict()),
    "bias-kv": (dict(add_bias_kv=True), dict()),
    "zero-attn": (dict(add_zero_attn=True), dict()),
    "bias-kv-zero-attn": (dict(add_bias_kv=True, add_zero_attn=True), dict()),
    "no-weights": (dict(), dict(need_weights=False)),
    "per-head-weights": (dict(), dict(average_attn_weights=False)),
}


@pytest.mark.parametrize("mask", ["none", "bool-2d", "float-2d", "float-3d", "bool-3d",
                                  "padding-bool", "padding-float", "both-bool", "both-float"])
@pytest.mark.parametrize("case", list(MHA_CASES))
@pytest.mark.parametrize("batch_first", [False, True])
def test_multihead_attention_equals_pytorch_with_its_gradients(case, mask, batch_first):
    options, call = MHA_CASES[case]
    theirs, ours = pair("MultiheadAttention", E, HEADS, batch_first=batch_first, **options)
    rng = np.random.default_rng(12)
    lead = (lambda n: (N, n)) if batch_first else (lambda n: (n, N))
    arrays = [rng.standard_normal(lead(L) + (E,)),
              rng.standard_normal(lead(S) + (options.get("kdim", E),)),
              rng.standard_normal(lead(S) + (options.get("vdim", E),))]

    def pack_with(lib):
        attn_mask, padding = _masks(lib, mask, L, S, N)
        return lambda ts: (*ts, padding, call.get("need_weights", True), attn_mask,
                           call.get("average_attn_weights", True))
    check_same(theirs, ours, arrays, pack=pack_with(torch), pack_ours=pack_with(eager))


@pytest.mark.parametrize("sizes", [(1, 1, 1), (1, 4, 1), (3, 1, 2)],
                         ids=["all-one", "one-query", "one-key"])
def test_multihead_attention_with_one_query_key_or_batch_equals_pytorch(sizes):
    tgt_len, src_len, batch = sizes
    theirs, ours = pair("MultiheadAttention", E, HEADS)
    rng = np.random.default_rng(13)
    arrays = [rng.standard_normal((n, batch, E)) for n in (tgt_len, src_len, src_len)]
    check_same(theirs, ours, arrays)


@pytest.mark.parametrize("need_weights", [True, False])
def test_unbatched_self_attention_with_a_causal_hint_equals_pytorch(need_weights):
    theirs, ours = pair("MultiheadAttention", E, 2)
    x = np.random.default_rng(14).standard_normal((L, E))

    def pack_with(lib):
        mask = lib.tensor(np.triu(np.ones((L, L), bool), 1))
        padding = lib.tensor(np.eye(1, L, L - 1, dtype=bool)[0])
        return lambda ts: (ts[0], ts[0], ts[0], padding, need_weights, mask, True, True)
    check_same(theirs, ours, [x], pack=pack_with(torch), pack_ours=pack_with(eager))


def test_multihead_attention_initialisation_is_pytorchs():
    mha = nn.MultiheadAttention(8, 2, add_bias_kv=True)
    assert not mha.in_proj_bias.detach().numpy().any()
    assert not mha.out_proj.bias.detach().numpy().any()
    bound = np.sqrt(6 / (8 + 24))  # xavier_uniform_ of (24, 8)
    weights = mha.in_proj_weight.detach().numpy()
    assert np.abs(weights).max() <= bound and weights.std() > bound / 4
    assert tuple(mha.bias_k.shape) == (1, 1, 8)
    separate = nn.MultiheadAttention(8, 2, kdim=3, vdim=5, bias=False)
    assert {k: tuple(v.shape) for k, v in separate.state_dict().items()} == {
        "q_proj_weight": (8, 8), "k_proj_weight": (8, 3), "v_proj_weight": (8, 5),
        "out_proj.weight": (8, 8)}


def test_attention_dropout_acts_only_in_training():
    mha = nn.MultiheadAttention(E, HEADS, dropout=0.5)
    x = eager.randn(L, N, E)
    eager.manual_seed(0)
    trained = mha(x, x, x)[0].detach().numpy()
    evaluated = mha.eval()(x, x, x)[0].detach().numpy()
    assert not np.allclose(trained, evaluated)
    np.testing.assert_array_equal(mha(x, x, x)[0].detach().numpy(), evaluated)


LAYER_CASES = {
    "post-norm-relu": dict(),
    "pre-norm-gelu": dict(norm_first=True, activation="gelu"),
    "batch-first-no-bias": dict(batch_first=True, bias=False, layer_norm_eps=1e-3),
    "callable-activation": dict(activation=lambda x: x.tanh()),
}


@pytest.mark.parametrize("masked", [False, True], ids=["unmasked", "masked"])
@pytest.mark.parametrize("case", list(LAYER_CASES))
def test_an_encoder_layer_equals_pytorch(case, masked):
    options = LAYER_CASES[case]
    theirs, ours = pair("TransformerEncoderLayer", E, HEADS, 10, 0.0, **options)
    shape = (N, L, E) if options.get("batch_first") else (L, N, E)
    x = np.random.default_rng(15).standard_normal(shape)

    def pack_with(lib):
        mask, padding = _masks(lib, "both-bool" if masked else "none", L, L, N)
        return lambda ts: (ts[0], mask, padding)
    check_same(theirs, ours, [x], pack=pack_with(torch), pack_ours=pack_with(eager))


@pytest.mark.parametrize("masked", [False, True], ids=["unmasked", "masked"])
@pytest.mark.parametrize("case", list(LAYER_CASES))
def test_a_decoder_layer_equals_pytorch(case, masked):
    options = LAYER_CASES[case]
    theirs, ours = pair("TransformerDecoderLayer", E, HEADS, 10, 0.0, **options)
    first = options.get("batch_first")
    rng = np.random.default_rng(16)
    arrays = [rng.standard_normal((N, n, E) if first else (n, N, E)) for n in (L, S)]

    def pack_with(lib):
        tgt_mask, tgt_padding = _masks(lib, "both-bool" if masked else "none", L, L, N)
        memory_mask, memory_padding = _masks(lib, "both-float" if masked else "none", L, S, N)
        return lambda ts: (ts[0], ts[1], tgt_mask, memory_mask, tgt_padding, memory_padding)
    check_same(theirs, ours, arrays, pack=pack_with(torch), pack_ours=pack_with(eager))


def _stack_pair(kind, num_layers, **options):
    """TransformerEncoder or Decoder of num_layers copies, with a final LayerNorm, both sides."""
    def build(lib):
        lib.manual_seed(0)
        layer = getattr(lib.nn, f"Transformer{kind}Layer")(E, HEADS, 10, 0.0, **options)
        return getattr(lib.nn, f"Transformer{kind}")(layer, num_layers, lib.nn.LayerNorm(E))
    with quietly():
        theirs = build(torch).double()
    ours = build(eager).double()
    assert list(ours.state_dict()) == list(theirs.state_dict())
    ours.load_state_dict({k: eager.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    return theirs, ours


def test_encoder_and_decoder_stacks_equal_pytorch_and_hold_independent_copies():
    theirs, ours = _stack_pair("Encoder", 3, norm_first=True)
    x = np.random.default_rng(17).standard_normal((L, N, E))

    def pack_encoder(lib):
        mask = lib.nn.Transformer.generate_square_subsequent_mask(L, dtype=lib.float64)
        return lambda ts: (ts[0], mask, None, True)
    check_same(theirs, ours, [x], pack=pack_encoder(torch), pack_ours=pack_encoder(eager))
    first, second = ours.layers[0].linear1.weight, ours.layers[1].linear1.weight
    assert first is not second
    with eager.no_grad():
        first.add_(1.0)
    assert not np.allclose(first.detach().numpy(), second.detach().numpy())

    theirs, ours = _stack_pair("Decoder", 2, batch_first=True)
    rng = np.random.default_rng(18)
    arrays = [rng.standard_normal((N, n, E)) for n in (L, S)]

    def pack_decoder(lib):
        mask = lib.nn.Transformer.generate_square_subsequent_mask(L, dtype=lib.float64)
        return lambda ts: (ts[0], ts[1], mask)
    check_same(theirs, ours, arrays, pack=pack_decoder(torch), pack_ours=pack_decoder(eager))


@pytest.mark.parametrize("options", [dict(), dict(batch_first=True, norm_first=True),
                                     dict(activation="gelu", bias=False)],
                         ids=["defaults", "batch-first-pre-norm", "gelu-no-bias"])
def test_a_transformer_with_masks_equals_pytorch(options):
    theirs, ours = pair("Transformer", E, HEADS, 2, 2, 10, 0.0, **options)
    first = options.get("batch_first")
    rng = np.random.default_rng(19)
    arrays = [rng.standard_normal((N, n, E) if first else (n, N, E)) for n in (S, L)]

    def pack_with(lib):
        tgt_mask = lib.nn.Transformer.generate_square_subsequent_mask(L, dtype=lib.float64)
        _, src_padding = _masks(lib, "padding-bool", S, S, N)
        _, tgt_padding = _masks(lib, "padding-bool", L, L, N)
        return lambda ts: (ts[0], ts[1], None, tgt_mask, None, src_padding, tgt_padding,
                           src_padding)
    check_same(theirs, ours, arrays, pack=pack_with(torch), pack_ours=pack_with(eager))


def test_a_transformers_parameters_have_pytorchs_names_shapes_and_xavier_range():
    with quietly():
        theirs = torch.nn.Transformer(8, 2, 1, 2, 16)
    ours = nn.Transformer(8, 2, 1, 2, 16)
    assert {k: tuple(v.shape) for k, v in ours.state_dict().items()} == \
        {k: tuple(v.shape) for k, v in theirs.state_dict().items()}
    w = ours.encoder.layers[0].linear1.weight.detach().numpy()  # xavier_uniform_ of (16, 8)
    assert np.abs(w).max() <= np.sqrt(6 / 24) and w.std() > np.sqrt(6 / 24) / 4


def test_the_square_subsequent_mask_equals_pytorchs():
    for size in (1, 4):
        ours = nn.Transformer.generate_square_subsequent_mask(size)
        theirs = torch.nn.Transformer.generate_square_subsequent_mask(size)
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
        assert ours.dtype is eager.float32


def _same_error(make_theirs, make_ours, kind):
    with pytest.raises(kind) as want:
        make_theirs()
    with pytest.raises(kind) as got:
        make_ours()
    assert str(got.value) == str(want.value).replace("torch.", "eager.")


@pytest.mark.parametrize("call", [
    lambda lib, m: m(lib.zeros(5, 2, 4), lib.zeros(5, 2, 4), lib.zeros(5, 2, 4)),
    lambda lib, m: m(lib.zeros(5, 2, 6), lib.zeros(5, 6), lib.zeros(5, 6)),
    lambda lib, m: m(lib.zeros(5, 2, 6), lib.zeros(5, 2, 6), lib.zeros(5, 2, 6),
                     attn_mask=lib.zeros(4, 5)),
    lambda lib, m: m(lib.zeros(5, 2, 6), lib.zeros(5, 2, 6), lib.zeros(5, 2, 6),
                     attn_mask=lib.zeros(2, 5, 5)),
    lambda lib, m: m(lib.zeros(5, 2, 6), lib.zeros(5, 2, 6), lib.zeros(5, 2, 6),
                     key_padding_mask=lib.zeros(2, 4, dtype=lib.bool)),
    lambda lib, m: m(lib.zeros(5, 2, 6), lib.zeros(5, 2, 6), lib.zeros(5, 2, 6),
                     attn_mask=lib.zeros(5, 5, dtype=lib.int64)),
    lambda lib, m: m(lib.zeros(5, 2, 6), lib.zeros(5, 2, 6), lib.zeros(5, 2, 6), is_causal=True),
    lambda lib, m: m(lib.zeros(2, 5, 2, 6), lib.zeros(5, 2, 6), lib.zeros(5, 2, 6)),
], ids=["embed-dim", "key-dims", "mask-2d", "mask-3d", "padding", "int-mask", "causal-hint",
        "4d-query"])
def test_multihead_attention_errors_are_pytorchs(call):
    theirs, ours = torch.nn.MultiheadAttention(6, 3), nn.MultiheadAttention(6, 3)
    _same_error(lambda: call(torch, theirs), lambda: call(eager, ours),
                (AssertionError, RuntimeError))


def test_constructor_and_transformer_errors_are_pytorchs():
    _same_error(lambda: torch.nn.MultiheadAttention(6, 4), lambda: nn.MultiheadAttention(6, 4),
                AssertionError)
    _same_error(lambda: torch.nn.MultiheadAttention(0, 1), lambda: nn.MultiheadAttention(0, 1),
                ValueError)
    _same_error(lambda: torch.nn.TransformerEncoderLayer(6, 3, activation="tanh"),
                lambda: nn.TransformerEncoderLayer(6, 3, activation="tanh"), RuntimeError)
    with quietly():
        theirs = torch.nn.Transformer(6, 3, 1, 1, 8)
    ours = nn.Transformer(6, 3, 1, 1, 8)
    for src, tgt in [((5, 2, 6), (4, 3, 6)), ((5, 2, 6), (4, 2, 5))]:
        _same_error(lambda: theirs(torch.zeros(src), torch.zeros(tgt)),
                    lambda: ours(eager.zeros(src), eager.zeros(tgt)), RuntimeError)


def test_a_compiled_encoder_layer_forward_and_backward_equal_eager():
    eager.manual_seed(3)
    layer = nn.TransformerEncoderLayer(E, HEADS, 10, 0.0, batch_first=True).double()
    x = eager.randn(N, L, E, dtype=eager.float64, requires_grad=True)
    w = eager.randn(N, L, E, dtype=eager.float64)
    mask = nn.Transformer.generate_square_subsequent_mask(L, dtype=eager.float64)
    compiled = eager.compile(layer)
    results = []
    for fn in (layer, compiled, compiled):
        out = fn(x, mask)
        (out * w).sum().backward()
        results.append([out] + [x.grad] + [p.grad for p in layer.parameters()])
        x.grad = None
        layer.zero_grad()
    for got in results[1:]:
        for g, want in zip(got, results[0]):
            np.testing.assert_allclose(g.detach().numpy(), want.detach().numpy(),
                                       rtol=1e-9, atol=1e-9)
    assert type(compiled(x, mask).grad_fn).__name__ == "CompiledFunctionBackward"
    assert "graph breaks: none" in compiled.explain()


def test_an_unbatched_transformer_equals_pytorch():
    theirs, ours = pair("Transformer", E, HEADS, 1, 2, 10, 0.0, norm_first=True)
    rng = np.random.default_rng(20)

    def pack_with(lib):
        tgt_mask = lib.nn.Transformer.generate_square_subsequent_mask(L, dtype=lib.float64)
        return lambda ts: (ts[0], ts[1], None, tgt_mask)
    check_same(theirs, ours, [rng.standard_normal((S, E)), rng.standard_normal((L, E))],
               pack=pack_with(torch), pack_ours=pack_with(eager))
