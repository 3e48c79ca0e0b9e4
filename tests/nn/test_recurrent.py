"""nn.RNN, LSTM, GRU and their cells against PyTorch's: PyTorch's state_dict loaded into
kiln's module, the same float64 inputs on both sides, then outputs, final states and the
gradients of sum(out * w) (w random) for the input, the initial states and every
parameter; PyTorch's words for wrong sizes; gradcheck; compile() against eager."""
import copy

import numpy as np
import pytest

import eager
from eager import nn
from eager.autograd import gradcheck
from nn_parity import check_same, flat, pair

torch = pytest.importorskip("torch", reason="PyTorch (the 'compare' extra) is not installed")

def _state_shape(num_layers, bidirectional, batch, hidden):
    return ((num_layers * (2 if bidirectional else 1),) + ((batch,) if batch else ()) +
            (hidden,))


MODULE_OPTIONS = [
    dict(),
    dict(num_layers=2),
    dict(bidirectional=True),
    dict(num_layers=3, bidirectional=True),
    dict(batch_first=True),
    dict(bias=False, num_layers=2),
    dict(batch_first=True, bidirectional=True, bias=False),
]
NAMES = ["RNN", "LSTM", "GRU"]


@pytest.mark.parametrize("options", MODULE_OPTIONS, ids=lambda o: "-".join(
    f"{k}={v}" for k, v in o.items()) or "defaults")
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("given_state", [False, True], ids=["zero-state", "given-state"])
def test_a_recurrent_module_equals_pytorch_with_its_gradients(name, options, given_state):
    theirs, ours = pair(name, 3, 5, **options)
    rng = np.random.default_rng(2)
    seq, batch = 4, 2
    x = rng.standard_normal((batch, seq, 3) if options.get("batch_first") else (seq, batch, 3))
    arrays = [x]
    shape = _state_shape(options.get("num_layers", 1), options.get("bidirectional", False),
                         batch, 5)
    if not given_state:
        check_same(theirs, ours, arrays)
    elif name == "LSTM":
        arrays += [rng.standard_normal(shape), rng.standard_normal(shape)]
        check_same(theirs, ours, arrays, pack=lambda ts: (ts[0], (ts[1], ts[2])))
    else:
        check_same(theirs, ours, arrays + [rng.standard_normal(shape)])


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("sizes", [(1, 1), (1, 3), (5, 1)], ids=lambda s: f"seq{s[0]}-batch{s[1]}")
def test_sequence_length_one_and_batch_of_one_equal_pytorch(name, sizes):
    theirs, ours = pair(name, 7, 3, num_layers=2, bidirectional=True)
    x = np.random.default_rng(3).standard_normal(sizes + (7,))
    check_same(theirs, ours, [x])


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("batch_first", [False, True])
def test_unbatched_two_dim_input_and_state_equal_pytorch(name, batch_first):
    theirs, ours = pair(name, 3, 4, num_layers=2, bidirectional=True, batch_first=batch_first)
    rng = np.random.default_rng(4)
    x, h, c = rng.standard_normal((5, 3)), rng.standard_normal((4, 4)), rng.standard_normal((4, 4))
    check_same(theirs, ours, [x])
    if name == "LSTM":
        check_same(theirs, ours, [x, h, c], pack=lambda ts: (ts[0], (ts[1], ts[2])))
    else:
        check_same(theirs, ours, [x, h])


def test_relu_rnn_and_lstm_projections_equal_pytorch():
    rng = np.random.default_rng(5)
    theirs, ours = pair("RNN", 3, 6, num_layers=2, nonlinearity="relu", bidirectional=True)
    check_same(theirs, ours, [rng.standard_normal((4, 2, 3))])
    theirs, ours = pair("LSTM", 3, 6, num_layers=2, proj_size=2, bidirectional=True)
    check_same(theirs, ours, [rng.standard_normal((4, 2, 3))])
    assert tuple(ours.weight_hr_l1_reverse.shape) == (2, 6)


@pytest.mark.parametrize("name", NAMES)
def test_dropout_between_layers_acts_only_in_training(name):
    theirs, ours = pair(name, 3, 4, num_layers=2, dropout=0.5)
    x = np.random.default_rng(6).standard_normal((5, 2, 3))
    theirs.eval(), ours.eval()
    check_same(theirs, ours, [x])  # evaluation: no dropout
    ours.train()
    eager.manual_seed(0)
    trained = flat(ours(eager.tensor(x)))[0].detach().numpy()
    assert not np.allclose(trained, flat(ours.eval()(eager.tensor(x)))[0].detach().numpy())


@pytest.mark.parametrize("name", NAMES)
def test_dropout_of_one_zeroes_the_second_layers_input_as_pytorch_does(name):
    theirs, ours = pair(name, 3, 4, num_layers=2, dropout=1.0)
    check_same(theirs, ours, [np.random.default_rng(7).standard_normal((3, 2, 3))])


@pytest.mark.parametrize("name", ["RNNCell", "LSTMCell", "GRUCell"])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("batch", [1, 3, None], ids=["batch1", "batch3", "unbatched"])
def test_a_cell_equals_pytorch_with_and_without_a_state(name, bias, batch):
    theirs, ours = pair(name, 5, 4, bias=bias)
    rng = np.random.default_rng(8)
    lead = (batch,) if batch else ()
    x, h, c = (rng.standard_normal(lead + (n,)) for n in (5, 4, 4))
    check_same(theirs, ours, [x])
    if name == "LSTMCell":
        check_same(theirs, ours, [x, h, c], pack=lambda ts: (ts[0], (ts[1], ts[2])))
    else:
        check_same(theirs, ours, [x, h])


def test_relu_cell_equals_pytorch():
    theirs, ours = pair("RNNCell", 3, 4, nonlinearity="relu")
    rng = np.random.default_rng(9)
    check_same(theirs, ours, [rng.standard_normal((2, 3)), rng.standard_normal((2, 4))])


@pytest.mark.parametrize("name", NAMES + ["RNNCell", "LSTMCell", "GRUCell"])
def test_parameters_have_pytorchs_names_shapes_and_initial_range(name):
    args = (6, 9) if "Cell" in name else (6, 9, 2)
    kwargs = {} if "Cell" in name else dict(bidirectional=True)
    theirs = getattr(torch.nn, name)(*args, **kwargs)
    ours = getattr(nn, name)(*args, **kwargs)
    shapes = {k: tuple(v.shape) for k, v in theirs.state_dict().items()}
    assert {k: tuple(v.shape) for k, v in ours.state_dict().items()} == shapes
    bound = 1 / 3  # 1 / sqrt(hidden_size)
    for p in ours.parameters():
        values = p.detach().numpy()
        assert np.abs(values).max() <= bound and values.std() > bound / 4


@pytest.mark.parametrize("name", NAMES)
def test_wrong_sizes_raise_pytorchs_errors(name):
    ours = getattr(nn, name)(4, 5, num_layers=2).double()
    theirs = getattr(torch.nn, name)(4, 5, num_layers=2).double()
    torch.set_default_dtype(torch.float64)
    bad_state = (torch.zeros(2, 3, 6),) * 2 if name == "LSTM" else torch.zeros(2, 3, 6)
    flat_state = (torch.zeros(2, 5),) * 2 if name == "LSTM" else torch.zeros(2, 5)
    calls = [((torch.zeros(6, 3, 3),), RuntimeError),
             ((torch.zeros(6, 3, 4), bad_state), RuntimeError),
             ((torch.zeros(6, 3, 4), flat_state), RuntimeError),
             ((torch.zeros(6),), ValueError),
             ((torch.zeros(6, 3, 4).float(),), ValueError)]
    torch.set_default_dtype(torch.float32)
    for args, kind in calls:
        with pytest.raises(kind) as want:
            theirs(*args)
        ours_args = [eager.tensor(a.numpy()) if isinstance(a, torch.Tensor) else
                     tuple(eager.tensor(t.numpy()) for t in a) for a in args]
        with pytest.raises(kind) as got:
            ours(*ours_args)
        assert str(got.value) == str(want.value).replace("torch.", "eager.")
    with pytest.raises(RuntimeError, match="input.size\\(-1\\) must be equal to input_size. "
                                           "Expected 4, got 3"):
        ours(eager.zeros(6, 3, 3, dtype=eager.float64))


@pytest.mark.parametrize("name", ["RNNCell", "LSTMCell", "GRUCell"])
def test_cells_raise_pytorchs_errors(name):
    ours, theirs = getattr(nn, name)(4, 5), getattr(torch.nn, name)(4, 5)
    state = (lambda *s: (torch.zeros(*s),) * 2) if name == "LSTMCell" else torch.zeros
    calls = [(torch.zeros(2, 3),), (torch.zeros(2, 4), state(3, 5)),
             (torch.zeros(2, 4), state(2, 6)), (torch.zeros(1, 2, 4),)]
    for args in calls:
        with pytest.raises((RuntimeError, ValueError)) as want:
            theirs(*args)
        ours_args = [eager.tensor(a.numpy()) if isinstance(a, torch.Tensor) else
                     tuple(eager.tensor(t.numpy()) for t in a) for a in args]
        with pytest.raises(want.type) as got:
            ours(*ours_args)
        assert str(got.value) == str(want.value)


def test_constructor_errors_are_pytorchs():
    for kwargs, kind in [(dict(dropout=2), ValueError), (dict(num_layers=0), ValueError),
                         (dict(bias=1), TypeError), (dict(proj_size=9), ValueError)]:
        with pytest.raises(kind) as want:
            torch.nn.LSTM(4, 5, **kwargs)
        with pytest.raises(kind) as got:
            nn.LSTM(4, 5, **kwargs)
        assert str(got.value) == str(want.value)
    with pytest.raises(ValueError, match="Unknown nonlinearity 'sin'"):
        nn.RNN(4, 5, nonlinearity="sin")
    with pytest.raises(ValueError, match="only supported for LSTM"):
        nn.GRU(4, 5, proj_size=2)
    with pytest.warns(UserWarning, match="non-zero dropout expects num_layers greater than 1"):
        nn.GRU(4, 5, dropout=0.5)


def test_a_small_lstm_passes_gradcheck_in_float64():
    eager.manual_seed(0)
    lstm = nn.LSTM(2, 2, num_layers=2, bidirectional=True).double()  # (~250 inputs to
    x = eager.randn(3, 2, 2, dtype=eager.float64, requires_grad=True)  # perturb: small)
    h = eager.randn(4, 2, 2, dtype=eager.float64, requires_grad=True)
    c = eager.randn(4, 2, 2, dtype=eager.float64, requires_grad=True)

    def run(x, h, c, *params):  # params are the module's own: gradcheck perturbs them
        out, (h_n, c_n) = lstm(x, (h, c))
        return out, h_n, c_n
    assert gradcheck(run, (x, h, c, *lstm.parameters()))


def test_a_small_gru_cell_passes_gradcheck_in_float64():
    eager.manual_seed(1)
    cell = nn.GRUCell(3, 2).double()
    x = eager.randn(2, 3, dtype=eager.float64, requires_grad=True)
    h = eager.randn(2, 2, dtype=eager.float64, requires_grad=True)
    assert gradcheck(lambda x, h, *params: cell(x, h), (x, h, *cell.parameters()))


def _lstm_gradients(fn, lstm, x):
    out, (h_n, c_n) = fn(x)
    (out.pow(2).sum() + h_n.sum() + c_n.tanh().sum()).backward()
    grads = [x.grad] + [p.grad for p in lstm.parameters()]
    x.grad = None
    lstm.zero_grad()
    return [out, h_n, c_n], grads


def test_a_compiled_lstm_forward_and_backward_equal_eager():
    eager.manual_seed(2)
    lstm = nn.LSTM(3, 4, num_layers=2, bidirectional=True, batch_first=True)
    x = eager.randn(2, 5, 3, requires_grad=True)
    compiled = eager.compile(lstm)
    want_outs, want_grads = _lstm_gradients(lstm, lstm, x)
    for _ in range(2):
        got_outs, got_grads = _lstm_gradients(compiled, lstm, x)
        for got, want in zip(got_outs + got_grads, want_outs + want_grads):
            assert got is not None
            np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(),
                                       rtol=1e-5, atol=1e-6)
    assert type(compiled(x)[0].grad_fn).__name__ == "CompiledFunctionBackward"
    assert "graph breaks: none" in compiled.explain()


def test_a_deep_copy_has_its_own_equal_parameters():
    lstm = nn.LSTM(2, 3)
    twin = copy.deepcopy(lstm)
    for (name, p), q in zip(lstm.named_parameters(), twin.parameters()):
        assert type(q) is type(p) and q.requires_grad and q is not p
        np.testing.assert_array_equal(q.detach().numpy(), p.detach().numpy(), err_msg=name)
    with eager.no_grad():
        twin.weight_ih_l0.add_(1.0)
    assert not np.allclose(twin.weight_ih_l0.detach().numpy(), lstm.weight_ih_l0.detach().numpy())


def test_repr_and_all_weights_read_as_pytorchs():
    for args, kwargs in [((3, 4), dict(num_layers=2, bidirectional=True, batch_first=True)),
                         ((3, 4), dict(bias=False, dropout=0.5, num_layers=2))]:
        assert repr(nn.LSTM(*args, **kwargs)) == repr(torch.nn.LSTM(*args, **kwargs))
    assert repr(nn.RNNCell(3, 4, nonlinearity="relu")) == \
        repr(torch.nn.RNNCell(3, 4, nonlinearity="relu"))
    gru = nn.GRU(3, 4, num_layers=2)
    gru.flatten_parameters()
    assert [[tuple(w.shape) for w in ws] for ws in gru.all_weights] == \
        [[tuple(w.shape) for w in ws] for ws in torch.nn.GRU(3, 4, num_layers=2).all_weights]
